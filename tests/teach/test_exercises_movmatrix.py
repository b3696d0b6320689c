"""The movmatrix notebook's exercises: right answers pass (hidden cases too), each classic
mistake is caught with its own advice, and the transpose kernel is checked cell by cell."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import emulator, layouts
from ptxlab.authoring.course_cases import solution_kernels
from ptxlab.exercises import movmatrix as ex
from ptxlab.exercises import tiles


def right_transposed_fragment(lane, reg, half):
    return reg, 2 * (lane % 4) + half, lane // 4


def right_sender(lane, reg, half):
    return 4 * (2 * (lane % 4) + half) + lane // 8, (lane // 4) % 2


def right_transposed_rows(lane, base, stride):
    return base + (lane % 8 + 8 * (lane // 16)) * stride + (lane // 8 % 2) * 16


LOAD_ROWS = "(lane % 16) * sld * 2 + (lane / 16) * 16"
STORE_ROWS = "(lane % 8 + 8 * (lane / 16)) * sld * 2 + (lane / 8 % 2) * 16"


@pytest.fixture(scope="module")
def transpose_source() -> str:
    """The notebook's own solution of the kernel exercise."""
    return next(src for _, exercise, src in solution_kernels()
                if exercise is ex.transpose_kernel)


def _without_movmatrix(source: str) -> str:
    lines = [l for l in source.splitlines() if "movmatrix.sync" not in l]
    assert len(lines) == len(source.splitlines()) - 4
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# What movmatrix does
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("num", [1, 2, 4])
def test_movmatrix_after_ldmatrix_is_the_trans_layout(num):
    trans_layout = layouts.ldmatrix_fragment(num, trans=True)
    assert np.array_equal(ex.after_movmatrix(num).coords, trans_layout.coords)


def test_movmatrix_turns_an_f16_accumulator_into_a_b_operand():
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
    d = np.random.default_rng(0).integers(0, 1 << 16, (1, 16, 8), dtype=np.uint16)
    moved = ex.movmatrix_each(emulator.matrices_to_fragment(d, form.d))
    assert np.array_equal(moved, emulator.matrices_to_fragment(d, form.b))


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise, answer", [
    (ex.transposed_fragment, right_transposed_fragment),
    (ex.sender, right_sender),
    (ex.transposed_rows, right_transposed_rows),
])
def test_right_formulas_pass_the_hidden_cases(exercise, answer):
    res = exercise.evaluate(answer, hidden=True)
    assert res.passed and res.score == 1.0, res.report()


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, reg, half: (reg, lane // 4, 2 * (lane % 4) + half), "before the movmatrix"),
    (lambda lane, reg, half: (reg, 2 * (lane % 4), lane // 4 + half), "neighbouring *rows*"),
    (lambda lane, reg, half: (lane // 8, 2 * (lane % 4) + half, lane // 4 % 8), "never mixes"),
])
def test_transposed_fragment_mistakes_are_named(bad, phrase):
    res = ex.transposed_fragment.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


def test_sender_hidden_cases_reach_the_other_registers():
    # right while reg is 0 (the visible case), wrong once other registers are asked about
    uses_reg = lambda l, r, h: (4 * (2 * (l % 4) + h) + l // 8 + r, (l // 4) % 2)  # noqa: E731
    assert ex.sender.evaluate(uses_reg).passed
    assert not ex.sender.evaluate(uses_reg, hidden=True).passed


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, reg, half: (lane, half), "does move data"),
    (lambda lane, reg, half: (4 * (2 * (lane % 4) + half) + lane // 8, half), "the lane is right"),
])
def test_sender_mistakes_are_named(bad, phrase):
    res = ex.sender.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 16, "trade places"),
    (lambda lane, base, stride: base + (lane % 8 + 8 * (lane // 16)) * stride
     + (lane // 8 % 2) * 8, "bytes"),
    (lambda lane, base, stride: (lane % 8 + 8 * (lane // 16)) * stride + (lane // 8 % 2) * 16,
     "base"),
])
def test_transposed_rows_mistakes_are_named(bad, phrase):
    res = ex.transposed_rows.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


def test_mirrored_placement_swaps_the_off_diagonal_blocks():
    mirrored = ex.transposed_tile()
    assert mirrored.origins == ((0, 0), (0, 8), (8, 0), (8, 8))
    assert tiles.mirrored(mirrored).origins == tiles.mma_a().origins


def test_spot_the_bug_answer_and_the_fix():
    assert ex.a_blocks_bug.evaluate("b").passed
    assert all(not ex.a_blocks_bug.evaluate(w).passed for w in "acd")
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    a = np.random.default_rng(1).integers(0, 1 << 16, (16, 16), dtype=np.uint16)
    moved = ex.movmatrix_each(emulator.matrices_to_fragment(a[None], form.a))
    a_t = emulator.matrices_to_fragment(a.T[None], form.a)
    assert not np.array_equal(moved, a_t)
    assert np.array_equal(moved[:, [0, 2, 1, 3]], a_t)


# ---------------------------------------------------------------------------------------------
# The transpose kernel
# ---------------------------------------------------------------------------------------------

def test_expected_tile_is_the_transpose():
    values = np.random.default_rng(2).permutation(256)
    run = ex.transpose_run(40, values)
    assert np.array_equal(run.expected, values.reshape(16, 16).T)
    assert run.shared_mem == 2 * 16 * 40 * 2


def test_solution_kernel_passes_visible_and_hidden(transpose_source):
    res = ex.transpose_kernel.evaluate(transpose_source, hidden=True)
    assert res.passed, res.report()


def test_other_correct_transposes_pass(transpose_source):
    # a .trans store instead of movmatrix turns the blocks around just as well
    src = _without_movmatrix(transpose_source).replace("x4.shared.b16 [%0]",
                                                        "x4.trans.shared.b16 [%0]")
    assert ex.transpose_kernel.evaluate(src).passed
    # exchanging r1 and r2 in the store, with the load's addresses, is the other fix
    src = transpose_source.replace(STORE_ROWS, LOAD_ROWS).replace(
        '"r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory"',
        '"r"(r0), "r"(r2), "r"(r1), "r"(r3) : "memory"')
    assert ex.transpose_kernel.evaluate(src, hidden=True).passed


@pytest.mark.parametrize("change, phrase", [
    (lambda s: s.replace(STORE_ROWS, LOAD_ROWS), "still in its old place"),
    (_without_movmatrix, "not turned around"),
    (lambda s: _without_movmatrix(s).replace(STORE_ROWS, LOAD_ROWS), "plain copy"),
    (lambda s: s.replace("sld * 2 + (lane / 8 % 2)", "sld + (lane / 8 % 2)"), "leaves undefined"),
])
def test_wrong_kernels_fail_with_advice(transpose_source, change, phrase):
    src = change(transpose_source)
    assert src != transpose_source
    res = ex.transpose_kernel.evaluate(src)
    assert not res.passed
    assert phrase in res.message or any(phrase in a for a in res.advice), res.report()


def test_wrong_cells_name_the_input_element(transpose_source):
    res = ex.transpose_kernel.evaluate(_without_movmatrix(transpose_source))
    # each value says which register held it: the wrong one as loaded, the right one stored
    assert res.diffs[0].line() == ("tile[0][1] gave in[0][1] (loaded into lane 0's r0), "
                                   "expected in[1][0] (from lane 0's r0)")


def test_address_table_for_the_mirrored_store():
    widgets = pytest.importorskip("ptxlab.widgets")
    pytest.importorskip("ipywidgets")
    t = widgets.AddressTable(right_transposed_rows, stride=32, instruction="stmatrix",
                             arrangement="16x16 tile transposed (A's blocks mirrored)")
    assert t.wrong_lanes() == [] and t.num.value == 4
    t.formula.value = "base + (lane % 16) * stride + (lane // 16) * 16"
    assert t.wrong_lanes() == list(range(8, 24))
