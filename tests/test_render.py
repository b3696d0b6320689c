"""Pictures are drawn from the layout data: every element appears once, coloured by its lane."""
from __future__ import annotations

import re

import numpy as np

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
