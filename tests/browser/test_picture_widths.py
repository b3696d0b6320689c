"""Every picture the course draws fits a notebook's output column in a 1280-pixel window with
JupyterLab's file browser open (848 pixels, as tests/browser/test_learner_workspace.py finds it):
measured in chromium, not estimated.

Wide pictures switch to lane numbers (the rest on hover) and then to compact cells; none is
cut. Skips, with the reason, when Playwright or Debian's chromium is missing.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ptxlab import layouts, render
from ptxlab.teach import widgets

CHROMIUM = Path(os.environ.get("PTXLAB_CHROMIUM", "/usr/bin/chromium"))
COLUMN_PX = 848

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)


def _pictures() -> dict[str, str]:
    """Every fragment the course shows (each .num/.trans, each mma operand of every variant,
    and the three operands side by side), movmatrix before and after, the row flow, the bank
    table of a full warp, and shared memory drawn with the widest rows."""
    found = {}
    for num in (1, 2, 4):
        for trans in (False, True):
            found[f"ldmatrix .x{num}{' .trans' if trans else ''}"] = render.fragment_map_html(
                layouts.ldmatrix_fragment(num, trans), selected_lane=5)
    for variant in layouts.MMA_VARIANTS:
        form = layouts.mma_form(*variant)
        for op in ("a", "b", "c", "d"):
            lay = getattr(form, op)
            wrong = np.zeros((lay.matrices, lay.rows, lay.cols), dtype=bool)
            wrong[..., 0] = True
            found[f"mma {' '.join(variant)} {op.upper()}"] = render.fragment_map_html(lay,
                                                                                    wrong=wrong)
    found["bank table, 32 lanes"] = render.bank_table_html([16 * i for i in range(32)])
    smem = np.arange(4096, dtype=np.uint16).view(np.uint8)
    found["shared memory, 128-byte rows"] = render.smem_rows_html(smem, 128, {0: [0], 128: [1]})
    found["address table widget"] = widgets.AddressTable("base + lane * stride", num=4,
                                                         stride=128).html()
    found["movmatrix before/after, lane 5"] = render.movmatrix_svg(5)
    for variant in layouts.MMA_VARIANTS:
        found[f"mma fragments {' '.join(variant)}"] = render.mma_fragments_svg(variant, lane=7)
    found["row flow .x4, row 9"] = render.row_flow_svg(4, row=9)
    return found


def test_every_picture_fits_the_notebook_column():
    pictures = _pictures()
    page_html = "".join(f'<section data-name="{render.escape(name)}" style="width:{COLUMN_PX}px;'
                        f'overflow:hidden">{html}</section>' for name, html in pictures.items())
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_content(f"<html><body style='margin:0'>{page_html}</body></html>")
            widths = page.evaluate("""() => Array.from(document.querySelectorAll('section')).map(
                s => [s.dataset.name, Math.max(...Array.from(s.querySelectorAll('table, svg')).map(
                    t => t.getBoundingClientRect().right - s.getBoundingClientRect().left))])""")
        finally:
            browser.close()
    too_wide = {name: round(w) for name, w in widths if w > COLUMN_PX}
    assert not too_wide, f"pictures wider than {COLUMN_PX} px: {too_wide}"
    assert len(widths) == len(pictures)
