"""A real browser: JupyterLab (headless) runs the ldmatrix notebook, a widget control is changed
and the address table is seen to change; the bank view redraws when a swizzle is typed.

Skips, with the reason, when Playwright, Debian's chromium or JupyterLab is missing (install:
``pip install playwright jupyterlab`` and ``apt-get install -y chromium``). The whole course,
as a learner gets it, is driven by test_learner_workspace.py.
"""
from __future__ import annotations

import shutil

import pytest

from lab_driver import (BROWSER_ARGS, CHROMIUM, ROOT, lab_server, open_notebook, output_text,
                        outputs, run_all, screenshot)

NOTEBOOK = "02_ldmatrix"
#: wide enough for the fragment map's four matrices two by two beside one lane's registers
VIEWPORT = {"width": 1800, "height": 1000}

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install jupyterlab)")
if not CHROMIUM.exists():
    pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True)

pytestmark = pytest.mark.timeout(180)  # each test runs in ~15 s on 2 cores


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a scratch copy of two notebooks; yields its base URL and token."""
    work = tmp_path_factory.mktemp("lab")
    root = work / "notebooks"
    root.mkdir()
    for name in (NOTEBOOK, "01_warps_lanes_smem"):
        shutil.copy(ROOT / "course" / "source" / name / f"{name}.ipynb", root)
    with lab_server(root, work) as (url, token):
        yield url, token


def _open_and_run(page, url: str, token: str, name: str) -> None:
    """Open ``name``.ipynb, Run All, and fail with the traceback if a cell raises."""
    open_notebook(page, url, token, f"{name}.ipynb", collapse_left=True)
    run_all(page, stop_on_error=True)
    errors = [output_text([o]) + "\n" + "\n".join(o.get("traceback", []))
              for cell in outputs(page) for o in cell if o.get("output_type") == "error"]
    assert not errors, f"{name}: a cell failed in the browser:\n{errors[0][-1500:]}"


def _widget_output(page, text: str):
    """The output area of the cell whose widget shows ``text``, in view: the widget's controls
    and the picture they redraw (a display of its own, so exported notebooks keep it)."""
    loc = page.locator(".jp-OutputArea", has_text=text).first
    loc.wait_for(timeout=60_000)
    loc.scroll_into_view_if_needed()
    return loc


def test_ldmatrix_notebook_widgets_update_live(lab):
    url, token = lab
    expect = sync_api.expect
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        try:
            _open_and_run(page, url, token, NOTEBOOK)

            # the first address table: matrices side by side, .x4, a formula wrong past lane 7
            table = _widget_output(page, "matrices side by side")
            expect(table.locator("caption").first).to_contain_text(
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16")
            expect(table).to_contain_text("lane(s) wrong: 8-31")

            # a control changes: .x2 redraws the table (lanes 16-31 now ignored)
            table.get_by_role("button", name=".x2").first.click()
            expect(table.locator("caption").first).to_contain_text(
                "ldmatrix.sync.aligned.m8n8.x2.shared.b16", timeout=30_000)
            expect(table).to_contain_text("lane(s) wrong: 8-15")
            expect(table).to_contain_text("ignored (.x2)")

            # the learner types the right formula: every lane turns green
            formula = table.locator("input[type='text']").first
            formula.fill("base + (lane % 8) * stride + (lane // 8) * 16")
            expect(table).to_contain_text("every address lane matches", timeout=30_000)
            expect(table).not_to_contain_text("lane(s) wrong")
            formula.blur()
            screenshot(page, table, "address_table_formula.png", crop=True)

            fmap = _widget_output(page, "lane 9 holds")
            expect(fmap).to_contain_text("your formula matches every element")
        finally:
            browser.close()


def test_bank_view_redraws_for_a_swizzle(lab):
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        try:
            _open_and_run(page, url, token, "01_warps_lanes_smem")
            view = _widget_output(page, "wavefront")
            sync_api.expect(view).to_contain_text("7 extra from bank conflicts")
            # an XOR swizzle spreads the eight rows over all 32 banks: the count redraws
            view.locator("input[type='text']").first.fill("chunk ^ (row % 8)")
            sync_api.expect(view).to_contain_text("1 wavefront(s) for 1 matrices "
                                                  "(conflict-free: 1); 0 extra", timeout=30_000)
        finally:
            browser.close()
