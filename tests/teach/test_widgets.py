"""The widgets redraw when a control or the formula changes, and mark wrong lanes."""
from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets", reason="ipywidgets is not installed (pip install 'ptxlab[course]')")

from ptxlab import widgets  # noqa: E402

SIDE = "matrices side by side (cols 8i..8i+7)"


def test_address_table_follows_controls_and_formula():
    t = widgets.AddressTable("base + (lane % 8) * stride", num=4, stride=64, arrangement=SIDE)
    assert t.wrong_lanes() == list(range(8, 32))
    before = t.html()
    t.num.value = 2
    assert t.html() != before and t.wrong_lanes() == list(range(8, 16))
    t.formula.value = "base + (lane % 8) * stride + (lane // 8) * 16"
    assert t.wrong_lanes() == [] and "matches" in t.status.value
    t.base.value = 512
    assert t.wrong_lanes() == [] and "512" in t.html()


def test_address_table_rows_say_who_receives_each_row():
    t = widgets.AddressTable(num=1, stride=16)
    rows = t.rows()
    assert rows[1]["role"] == "matrix 0, row 1" and rows[1]["receivers"] == "4-7"
    assert rows[8].get("ignored")
    t.trans.value = True
    assert t.rows()[1]["receivers"] == "0, 4, 8, 12, 16, 20, 24, 28"


def test_address_table_survives_bad_formulas():
    t = widgets.AddressTable("base + (lane % 8 * stride")
    assert "syntax error" in t.status.value
    t.formula.value = "lane / 0"
    assert "ZeroDivisionError" in t.status.value
    t.formula.value = "lane / 3"
    assert "not a whole number" in t.status.value
    t.formula.value = "__import__('os')"
    assert "NameError" in t.status.value


def test_address_table_fixed_arrangements_set_num_and_trans():
    t = widgets.AddressTable(arrangement="B of m16n8k16 stored row-major (.trans)", stride=32)
    assert t.num.value == 2 and t.num.disabled and t.trans.value


def test_address_table_takes_a_python_function():
    def rows(lane, base, stride):
        raise NotImplementedError()
    t = widgets.AddressTable(rows, arrangement="A of m16n8k16 (16x16, row-major)", stride=48)
    assert "not implemented yet" in t.status.value
    t2 = widgets.AddressTable(lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 16,
                              arrangement="A of m16n8k16 (16x16, row-major)", stride=48)
    assert t2.wrong_lanes() == []


def test_fragment_map_marks_wrong_cells_live():
    f = widgets.FragmentMap(num=4, formula="(lane // 4, 2 * (lane % 4) + half)")
    assert "matches every element" in f.status.value
    f.trans.value = True
    assert "wrong" in f.status.value
    f.formula.value = "(2 * (lane % 4) + half, lane // 4)"
    assert "matches every element" in f.status.value
    f.kind.value = "mma operand C"
    f.mma.value = ("m16n8k16", "f16", "f16", "f32", "f32")
    f.formula.value = "(lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2)"
    assert "matches every element" in f.status.value


def test_fragment_map_lane_selection_and_errors():
    f = widgets.FragmentMap(kind="mma operand A", lane=-1)
    assert "slider" in f.lane_view.value
    f.lane.value = 6
    assert "lane 6 holds" in f.lane_view.value
    f.formula.value = "lane"
    assert "expected a tuple" in f.status.value
    f.kind.value = "movmatrix output"
    f.formula.value = "(2 * (lane % 4) + half, lane // 4)"
    assert "matches every element" in f.status.value


def test_bank_view_counts_wavefronts_and_swizzle_fixes_them():
    b = widgets.BankView(row_bytes=128, num=4)
    assert "28 extra" in b.status.value
    b.formula.value = "chunk ^ (row % 8)"
    assert "0 extra" in b.status.value
    b.formula.value = "chunk + 99"
    assert "outside the row" in b.status.value


def test_a_formula_that_does_not_compile_is_one_problem_not_32_wrong_lanes():
    t = widgets.AddressTable("base + (lane % 8 * stride")
    assert t.status.value.count("syntax error") == 1
    assert t.wrong_lanes() == []
    assert not any("wrong" in r.get("status", "") for r in t.rows())
    f = widgets.FragmentMap(num=4, formula="(reg, lane // 4")
    assert "syntax error" in f.status.value and "elements wrong" not in f.status.value


def test_fragment_map_asks_for_the_values_the_fragment_has():
    """The formula box names what the chosen fragment needs; a formula with the wrong number
    of values is told so once, instead of scoring every element wrong."""
    f = widgets.FragmentMap(num=4, formula="(reg, lane // 4, 2 * (lane % 4) + half)")
    assert f.formula.description == "(matrix, row, col) ="
    assert "matches every element" in f.status.value
    f.kind.value = "mma operand A"                   # one 16x16 matrix: (row, col)
    assert f.formula.description == "(row, col) ="
    assert "one matrix" in f.status.value and "yours gives 3" in f.status.value
    assert "elements wrong" not in f.status.value and "#b00000" not in f.output.value
    f.kind.value = "mma operand B"
    assert f.formula.description == "(k, n) ="
    f.kind.value = "ldmatrix / stmatrix m8n8"
    f.num.value = 1
    assert f.formula.description == "(row, col) ="


def test_lane_player_redraws_its_picture_for_each_step(monkeypatch):
    """The play button and the slider drive one picture: each step redraws it in place (the
    picture is an HTML output of its own, so an export without widgets still shows it)."""
    import IPython.display

    shown, handles = [], []

    class Handle:
        def __init__(self):
            self.updates = []

        def update(self, obj):
            self.updates.append(obj.data)

    def fake_display(obj, *, raw=False, display_id=None):
        shown.append(obj)
        if display_id:
            handles.append(Handle())
            return handles[-1]
        return None

    monkeypatch.setattr(IPython.display, "display", fake_display)
    p = widgets.LanePlayer.movmatrix()
    assert p.step() is None and "solid arrows" not in p.html()
    p._ipython_display_()
    controls, picture = shown
    assert "application/vnd.jupyter.widget-view+json" in controls
    assert "JupyterLab" in controls["text/plain"]
    assert picture.data.startswith("<svg") and picture.data == p.html()
    p.play.value = 3                       # linked in the browser; here the slider moves too
    p.slider.value = 3
    assert handles[0].updates[-1] == p.html() and "lane 3 gives A[0][6]" in p.html()
    assert "lane 3" in p.caption.value


def test_lane_player_steps_rows_and_mma_variants():
    r = widgets.LanePlayer.rows(num=2, instruction="stmatrix")
    assert r.slider.max == 15 and r.slider.min == -1
    r.slider.value = 15
    assert "matrix 1 row 7: its address from lane 15; it comes from lanes 28-31" in r.html()
    m = widgets.LanePlayer.mma(lane=2)
    assert "m16n8k16.row.col.f32.f16.f16.f32" in m.html() and "lane 2: group g = 0" in m.html()
    m.choice.value = next(k for k in m.options if k.startswith("m16n8k32"))
    assert "m16n8k32.row.col.s32.s8.s8.s32" in m.html() and "a0 = A[0][8..11]" in m.html()


def test_lane_player_picture_survives_a_static_export(tmp_path):
    """nbconvert's HTML of an executed notebook (no widget state saved) holds the picture."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    from ptxlab.authoring import course_notebooks as nt

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("from ptxlab import widgets\n"
                                          "widgets.LanePlayer.movmatrix(lane=6)")]
    path = tmp_path / "player.ipynb"
    nbformat.write(nb, str(path))
    report = nt.execute(path, cwd=tmp_path, timeout=120)
    assert report.ok, report.error
    body, _ = nbconvert.HTMLExporter().from_notebook_node(report.outputs)
    assert "<svg" in body and "lane 6 gives A[1][4] and A[1][5]" in body
