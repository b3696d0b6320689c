"""The views outside JupyterLab and on a small screen: an exported notebook (nbconvert HTML,
as nbgrader's feedback is made) shows every widget's picture instead of ``VBox(...)``, the
address view stays about a screen tall, the row picture's labels fit inside it, and the map of
an mma operand says which register holds each 8x8 block."""
from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("ipywidgets", reason="ipywidgets is not installed (pip install 'ptxlab[course]')")

from ptxlab.model import layouts  # noqa: E402
from ptxlab.teach import render, widgets  # noqa: E402

VIEWS = {
    "AddressTable": 'widgets.AddressTable("base + lane * stride", num=1, stride=16)',
    "FragmentMap": 'widgets.FragmentMap("mma operand A", lane=5)',
    "BankView": "widgets.BankView(row_bytes=128, num=1)",
    "LanePlayer": "widgets.LanePlayer.rows(num=2)",
}


def test_exported_notebook_shows_every_widget_as_a_picture(tmp_path, monkeypatch):
    """Run a notebook of the views in a kernel and export it the way nbgrader's feedback is."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cells = [nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {root!r})\n"
                                       "from ptxlab import widgets")]
    cells += [nbformat.v4.new_code_cell(src) for src in VIEWS.values()]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep
                       + os.environ.get("PATH", ""))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    pictures = {}
    for name, cell in zip(VIEWS, nb.cells[1:]):
        kinds = [set(o.get("data", {})) for o in cell.outputs]
        assert any("application/vnd.jupyter.widget-view+json" in k for k in kinds), name
        html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
        assert len(html) == 1 and ("<svg" in html[0] or "<table" in html[0]), name
        pictures[name] = html[0]
    # with the widget state saved (as an executed notebook has it) and without (as JupyterLab
    # saves a notebook by default): the pictures are in the page either way
    with_state, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    nb.metadata.pop("widgets", None)
    without_state, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    for page in (with_state, without_state):
        # nbconvert rewrites the markup (attribute order and case), so compare the words
        words = " ".join(re.sub(r"<[^>]+>", " ", page).split())
        for name, picture in pictures.items():
            drawn = " ".join(re.sub(r"<[^>]+>", " ", picture).split())
            assert drawn[:300] in words and drawn[-300:] in words, \
                f"{name}'s picture is not in the exported page"
        assert "8x8 blocks: register" in page
        assert "VBox(" not in page and "HBox(" not in page
    assert without_state.count("its controls run in JupyterLab") == 3


def _svg_texts(svg: str):
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    _, _, w, h = (float(v) for v in root.get("viewBox").split())
    for t in root.iter(f"{ns}text"):
        text = "".join(t.itertext())
        size = float(t.get("font-size", root.get("font-size", "11")))
        bold = t.get("font-weight") in ("600", "700", "bold")
        x, y = float(t.get("x")), float(t.get("y"))
        anchor = t.get("text-anchor", "start")
        # 0.62 em a character (bold 0.68): digits and lower-case letters of a sans-serif
        # font stay within it
        width = len(text) * size * (0.68 if bold else 0.62)
        left = x - width / 2 if anchor == "middle" else x - width if anchor == "end" else x
        yield text, left, left + width, y, w, h


ROW_FLOWS = [dict(num=n, trans=t, instruction=i, **extra)
             for n in (1, 2, 4) for t in (False, True) for i in ("ldmatrix", "stmatrix")
             for extra in ({}, {"lane": 5}, {"row": 7 if n > 1 else 3},
                           {"addresses": [65520 - 16 * k for k in range(32)]})]


@pytest.mark.parametrize("kw", ROW_FLOWS, ids=[str(sorted(k.items()))[:60] for k in ROW_FLOWS])
def test_row_picture_labels_fit_inside_it(kw):
    svg = str(render.row_flow_svg(**kw))
    for text, left, right, y, w, h in _svg_texts(svg):
        assert left >= 0 and right <= w, f"{text!r} runs to x = {right:.0f} of {w:.0f}"
        assert y <= h, f"{text!r} sits at y = {y} below the picture's {h}"


def test_address_view_is_about_one_screen_tall():
    """What shows without a click: the row picture and the wrong lanes; every lane's table and
    shared memory fold away."""
    t = widgets.AddressTable("base + (lane % 8) * stride", stride=48,
                             arrangement="A of m16n8k16 (16x16, row-major)")
    out = t.html()
    shown = re.sub(r"<details.*?</details>", "", out, flags=re.S)
    svg_h = [float(h) for h in re.findall(r'<svg[^>]* height="([\d.]+)"', shown)]
    table_rows = shown.count("<tr>")
    assert len(svg_h) == 1 and svg_h[0] < 600
    assert table_rows == 1 + len(t.wrong_lanes())         # the wrong lanes only
    assert sum(svg_h) + 22 * table_rows < 1200
    assert out.count("<details") == 2 and "shared memory" in out
    right = widgets.AddressTable("base + (lane % 16) * stride + (lane // 16) * 16", stride=48,
                                 arrangement="A of m16n8k16 (16x16, row-major)")
    assert right.wrong_lanes() == [] and "<table" not in re.sub(r"<details.*?</details>", "",
                                                                right.html(), flags=re.S)


def test_mma_operand_maps_say_which_register_holds_each_block():
    a = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32").a
    key = str(render.register_blocks_html(a))
    cells = re.findall(r"<td[^>]*>(a\d)</td>", key)
    # the PTX ISA's order: a0 upper left, a1 lower left, a2 upper right, a3 lower right
    assert cells == ["a0", "a2", "a1", "a3"]
    picture = str(render.fragment_map_html(a))
    assert "8x8 blocks: register" in picture
    assert picture.count("border-left:3px") == 16 and picture.count("border-top:3px") == 16
    b = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32").b
    assert re.findall(r"<td[^>]*>(b\d)</td>", str(render.register_blocks_html(b))) == ["b0", "b1"]
    one = layouts.ldmatrix_fragment(1, False)
    assert "8x8 blocks" not in str(render.fragment_map_html(one))


def test_fragment_map_widget_shows_the_block_key_for_operand_a():
    m = widgets.FragmentMap("mma operand A")
    assert "8x8 blocks: register" in m.html()
    assert np.array_equal(layouts.mma_form(*m.mma.value).a.owners[0, :8, :8, 1], np.zeros((8, 8)))
