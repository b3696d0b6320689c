"""Pictures are drawn from the layout data: every element appears once, coloured by its lane."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ptxlab import layouts, render


def test_lane_colours_group_by_four_and_are_distinct():
    colours = [render.lane_color(l) for l in range(32)]
    assert len(set(colours)) == 32
    hue = lambda c: c.split("(")[1].split(",")[0]  # noqa: E731
    assert {hue(colours[l]) for l in range(4)} == {hue(colours[0])}
    assert hue(colours[4]) != hue(colours[0])


def test_no_lane_looks_wrong():
    """A wrong cell is red stripes, and no lane colour is red: in a picture a wrong cell and
    a lane's cell cannot be confused; the legend shows both."""
    hues = [int(render.lane_color(l).split("(")[1].split(",")[0]) for l in range(32)]
    assert all(25 <= h <= 320 for h in hues), hues          # red (320..25 degrees) is not a lane's
    assert render.WRONG_BG not in {render.lane_color(l) for l in range(32)}
    assert "gradient" in render.WRONG_BG                     # a pattern, not only a hue
    legend = render.legend_html()
    assert "wrong" in legend and render.WRONG_BG in legend and legend.count("<td") == 33


def test_fragment_map_names_every_lane_register_and_element_once():
    lay = layouts.ldmatrix_fragment(2)
    html = render.fragment_map_html(lay)
    cells = re.findall(r">T(\d+):(\d+)\.(\d+)<", html)
    assert len(cells) == 2 * 64
    assert len(set(cells)) == len(cells)
    # matrix 1, row 3, col 5 is lane 13, register 1, element 1
    assert ("13", "1", "1") in cells
    assert isinstance(html, render.Html) and html._repr_html_() == str(html)


def test_fragment_map_marks_wrong_cells_and_the_selected_lane():
    lay = layouts.ldmatrix_fragment(1)
    wrong = np.zeros((1, 8, 8), bool)
    wrong[0, 0, 0] = True
    html = render.fragment_map_html(lay, wrong=wrong, selected_lane=9)
    assert html.count(render.WRONG_BG) == 1
    assert html.count("outline:2px solid #000") == 2     # lane 9 holds two elements


def test_matrix_html_shows_values_and_expected_tooltips():
    vals = np.arange(64).reshape(8, 8)
    wrong = np.zeros((8, 8), bool)
    wrong[1, 1] = True
    html = render.matrix_html(vals, layouts.ldmatrix_fragment(1).owners[0, ..., 0], wrong=wrong,
                              expected=vals + 100, title="t")
    assert ">63<" in html and "expected 109" in html and render.WRONG_BG in html


def test_lane_registers_lists_each_register():
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    html = render.lane_registers_html(form.a, 5)
    assert "row 9, col 2" in html and "row 1, col 11" in html     # a1 low half, a2 high half


def test_address_table_colours_wrong_and_ignored_rows():
    rows = [{"lane": 0, "address": 0, "yours": "0", "status": "ok"},
            {"lane": 1, "address": 16, "yours": "8", "status": "wrong", "wrong": True},
            {"lane": 9, "address": "-", "ignored": True}]
    html = render.address_table_html(rows)
    assert render.WRONG_BG in html and render.IGNORED_BG in html and "your formula" in html


def test_registers_html_splits_halves():
    regs = np.array([[0x00050004]] * 32, dtype=np.uint32)
    assert "    5 |     4" in render.registers_html(regs)


def test_bank_table_marks_conflicts_per_phase():
    same_bank = [0, 128]                     # one phase: two words of bank 0 -> conflict
    assert render.WRONG_BG in render.bank_table_html(same_bank)
    assert render.WRONG_BG not in render.bank_table_html(same_bank, phases=[0, 1])


def test_smem_rows_colours_row_starts():
    smem = np.arange(64, dtype=np.uint16).view(np.uint8)
    html = render.smem_rows_html(smem, 16, {16: [1]})
    assert render.lane_color(1) in html


def test_row_flow_draws_each_row_from_its_lane_to_its_receivers():
    """The picture of ldmatrix: every row once, one arrow from the lane that gives its address,
    one to each lane that receives part of it (the layout's own answer), wrong lanes striped."""
    for num, trans in ((1, False), (2, True), (4, False), (4, True)):
        frag = layouts.ldmatrix_fragment(num, trans)
        svg = render.row_flow_svg(num, trans, addresses=[16 * i for i in range(32)],
                                  wrong_lanes=[2])
        receivers = sum(len(frag.lanes_holding_row(m, r)) for m in range(num) for r in range(8))
        assert svg.count("<line") == 8 * num + receivers
        for m in range(num):
            for r in range(8):
                assert svg.count(f">matrix {m} row {r} @ {16 * (8 * m + r)}<") == 1
        assert 'fill="url(#wrong)"' in svg and "wrong address" in svg
    assert svg.count("(its address is ignored)") == 0
    assert render.row_flow_svg(1).count("(its address is ignored)") == 24
    assert "lanes it comes from" in render.row_flow_svg(4, instruction="stmatrix")


def test_row_flow_picks_out_one_lane():
    svg = render.row_flow_svg(4, lane=5)
    strong = re.findall(r'stroke-width="2"', svg)
    # lane 5 gives row 5 of matrix 0 (1 + its 4 receivers) and receives row 1 of each matrix
    # (4 rows, 1 + 4 arrows each)
    assert len(strong) == 5 + 4 * 5


def test_a_wrong_formula_is_drawn_as_its_wrong_arrows():
    from ptxlab.teach import widgets

    t = widgets.AddressTable("base + (lane % 8) * stride", num=4, stride=16)
    svg = t.html()
    # lanes 8-31 point at rows 0-7 of matrix 0 instead of their own rows: 24 dashed arrows
    assert svg.count('stroke-dasharray="5,3"') == 24
    assert "lane 9: your address points at matrix 0 row 1" in svg
    t.formula.value = "base + lane * stride"
    assert 'stroke-dasharray' not in t.html()


def _cells(svg: str, **match) -> list:
    """The ``<g data-...>`` cells of a picture whose data attributes equal ``match``."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{ns}g")
            if all(g.get(f"data-{k}") == str(v) for k, v in match.items())]


def _rect(g):
    return next(iter(g))


def test_movmatrix_picture_puts_each_element_where_the_emulator_moves_it():
    """Before: lane L's half h holds A at the layout's place; after: the value the emulator's
    movmatrix leaves in that half. Every element keeps the colour of the lane that held it."""
    from ptxlab import emulator

    lay = layouts.movmatrix_fragment()
    ids = np.arange(64, dtype=np.uint16).reshape(1, 8, 8)          # A[r][c] = 8r + c
    a = emulator.matrices_to_fragment(ids, lay)[:, 0]
    d = emulator.movmatrix(a)
    svg = render.movmatrix_svg()
    grid_x = {}
    for lane in range(32):
        for half in range(2):
            _, r, c = lay.element(lane, 0, half)
            (before,) = _cells(svg, grid="before", lane=lane, half=half)
            assert (before.get("data-row"), before.get("data-col")) == (str(r), str(c))
            assert before.get("data-elem") == f"{r},{c}"
            (after,) = _cells(svg, grid="after", lane=lane, half=half)
            er, ec = divmod(int(d[lane]) >> (16 * half) & 0xFFFF, 8)
            assert after.get("data-elem") == f"{er},{ec}", (lane, half)
            giver = lay.owner(0, er, ec)[0]
            assert _rect(after).get("fill") == render.lane_color(giver)
            assert _rect(before).get("fill") == render.lane_color(lane)
            # drawn at the place the layout says: x grows with the column, y with the row
            for g in (before, after):
                x, y = float(_rect(g).get("x")), float(_rect(g).get("y"))
                grid_x.setdefault((g.get("data-grid"), c), set()).add(x)
                grid_x.setdefault((g.get("data-grid"), "row", r), set()).add(y)
    assert all(len(xs) == 1 for xs in grid_x.values())        # one x per column, one y per row
    xs = [grid_x[("after", c)].pop() for c in range(8)]
    assert xs == sorted(xs)


def test_movmatrix_picture_shows_a_kernels_registers_and_one_lanes_moves():
    from ptxlab import emulator

    a = np.arange(32, dtype=np.uint32) * 0x00020002 + 0x00010000     # halves 2t (lo), 2t+1 (hi)
    d = emulator.movmatrix(a)
    svg = render.movmatrix_svg(values=(a, d))
    for lane in range(32):
        for half, grid, regs in ((0, "before", a), (1, "after", d)):
            (cell,) = _cells(svg, grid=grid, lane=lane, half=half)
            label = cell.find("{http://www.w3.org/2000/svg}text").text
            assert label == str(int(regs[lane]) >> (16 * half) & 0xFFFF)
    svg = render.movmatrix_svg(5)
    assert svg.count('data-arrow="gives"') == 2 and svg.count('data-arrow="receives"') == 2
    # lane 5 holds A[1][2], A[1][3]; it receives A[2][1] (from lane 8) and A[3][1] (lane 12)
    assert "lane 5 receives A[2][1] from lane 8 (high half) and A[3][1] from lane 12" in svg
    assert len([g for g in _cells(svg) if g.get("opacity") == "1"]) == 4 + 4
    with pytest.raises(ValueError):
        render.movmatrix_svg(32)


@pytest.mark.parametrize("variant", layouts.MMA_VARIANTS)
def test_mma_picture_draws_every_operand_element_in_its_lanes_colour(variant):
    form = layouts.mma_form(*variant)
    svg = render.mma_fragments_svg(form)
    assert svg.startswith("<svg") and form.ptx in svg
    width = int(re.search(r'width="(\d+)"', svg).group(1))
    assert width <= render.FIT_PX
    tops = {}
    for op in ("a", "b", "c"):
        lay = getattr(form, op)
        cells = _cells(svg, op=op)
        assert len(cells) == lay.rows * lay.cols
        for g in cells:
            r, c = int(g.get("data-row")), int(g.get("data-col"))
            lane, reg, elem = lay.owner(0, r, c)
            assert (g.get("data-lane"), g.get("data-reg"), g.get("data-elem")) == (
                str(lane), str(reg), str(elem))
            assert _rect(g).get("fill") == render.lane_color(lane)    # one hue per lane, A B C
        tops[op] = min(float(_rect(g).get("y")) for g in cells)
    if form.k == 32:          # A is 32 wide: B and C/D go to a second row
        assert tops["b"] > tops["a"] and tops["c"] == tops["b"]
    else:
        assert tops["a"] == tops["b"] == tops["c"]


def test_mma_picture_picks_out_one_lane():
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    svg = render.mma_fragments_svg(form, lane=5)
    shown = [g for g in _cells(svg) if g.get("opacity") == "1"]
    assert len(shown) == 8 + 4 + 4 and {g.get("data-lane") for g in shown} == {"5"}
    assert "a1 = A[9][2..3]" in svg and "b1 = B[10..11][1]" in svg and "c2 = C[9][2]" in svg
    assert ">a2.1<" in svg


def test_row_flow_picks_out_one_row():
    svg = render.row_flow_svg(2, row=9)
    # matrix 1 row 1: one arrow from lane 9, four to lanes 4-7, drawn dark over the rest
    assert svg.count('stroke="#333" stroke-width="2"') == 5
    assert "matrix 1 row 1: its address from lane 9; it lands in lanes 4-7" in svg
    # .trans: row 0 is column 0 of the registers, lanes 0, 4, ..., 28
    assert "it lands in lanes 0, 4, 8, 12, 16, 20, 24, 28" in render.row_flow_svg(1, True, row=0)
    with pytest.raises(ValueError):
        render.row_flow_svg(1, row=8)


def test_fragment_map_names_the_cute_atom_of_a_form():
    """Under a map of an sm_100a-class form: CuTe's atom, the instruction it issues, its
    layouts and its byte reorder; a line saying so where CuTe has none."""
    from ptxlab.model import cute_atoms, matrix_forms
    for text, name in (("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", "SM100_U8x8_LDSM_T"),
                       ("ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.b4x16_p64",
                        "SM100_SU4_DU8x16_x1_LDSM_N"),
                       ("ldmatrix.sync.aligned.m8n16.x4.shared.b8x16.b6x16_p32",
                        "SM100_SU6_DU8x16_x4_LDSM_N"),
                       ("stmatrix.sync.aligned.m16n8.x1.trans.shared.b8", "SM100_U8x4_STSM_T"),
                       ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "SM75_U32x4_LDSM_N")):
        form = matrix_forms.parse_form(text)
        atom = cute_atoms.copy_atom_for(form)
        html = render.fragment_map_html(form.fragment, form=form)
        assert html.startswith(render.fragment_map_html(form.fragment))
        for part in (name, form.ptx, atom.register_side, atom.shared_side):
            assert render.escape(part) in html, (text, part)
        assert ("then reorders bytes" in html) == bool(atom.reorder)
    assert "then reorders bytes: r0 = {r0.b0, r0.b1, r1.b0, r1.b1}" in render.fragment_map_html(
        matrix_forms.form(shape="m16n16", num=1, trans=True, dtype="b8").fragment,
        form=matrix_forms.form(shape="m16n16", num=1, trans=True, dtype="b8"))
    packed = matrix_forms.parse_form("ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8x16.b6x16_p32")
    assert "CuTe has no copy atom for " + packed.ptx in render.cute_atom_html(packed)
