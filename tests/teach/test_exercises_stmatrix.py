"""The stmatrix notebook's exercises: right answers pass (hidden cases too), each classic
mistake is caught with its own advice, and a stored tile is reported cell by cell."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import checks, emulator, layouts
from ptxlab.authoring.course_cases import solution_kernels
from ptxlab.exercises import stmatrix as ex
from ptxlab.exercises import tiles


def right_d_fragment(lane, reg, half):
    return lane // 4 + 8 * reg, 2 * (lane % 4) + half


def right_d_rows(lane, base, stride):
    return base + (lane % 16) * stride


def right_d_trans_rows(lane, base, stride):
    return base + (lane % 8) * stride + (lane // 8 % 2) * 16


@pytest.fixture(scope="module")
def store_d_source() -> str:
    """The notebook's own solution of the kernel exercise."""
    return next(src for _, exercise, src in solution_kernels() if exercise is ex.store_d_kernel)


# ---------------------------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exercise, answer", [
    (ex.d_fragment, right_d_fragment),
    (ex.d_rows, right_d_rows),
    (ex.d_trans_rows, right_d_trans_rows),
])
def test_right_formulas_pass_the_hidden_cases(exercise, answer):
    res = exercise.evaluate(answer, hidden=True)
    assert res.passed and res.score == 1.0, res.report()


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, reg, half: (lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2), "f32"),
    (lambda lane, reg, half: (lane // 4, 2 * (lane % 4) + half + 8 * reg), "rows 8-15"),
    (lambda lane, reg, half: (2 * (lane % 4) + half, lane // 4 + 8 * reg), "swapped"),
])
def test_d_fragment_mistakes_are_named(bad, phrase):
    res = ex.d_fragment.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, base, stride: base + (lane // 4) * stride, "*address*"),
    (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8) * 16, "side by side"),
    (lambda lane, base, stride: base + (lane % 8) * stride, "overwrite"),
    (lambda lane, base, stride: (lane % 16) * stride, "base"),
])
def test_d_rows_mistakes_are_named(bad, phrase):
    res = ex.d_rows.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


def test_d_rows_names_the_wrong_lane_and_row():
    res = ex.d_rows.evaluate(lambda lane, base, stride: base + (lane // 4) * stride)
    lane5 = next(d for d in res.diffs if d.lane == 5)
    assert "row 1 of matrix 0" in lane5.got and "row 5 of matrix 0" in lane5.expected


@pytest.mark.parametrize("bad, phrase", [
    (right_d_rows, "row-major recipe"),
    (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8 % 2) * 8, "bytes"),
])
def test_d_trans_rows_mistakes_are_named(bad, phrase):
    res = ex.d_trans_rows.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


def test_column_major_placement_is_the_transposed_store():
    """.x2.trans through d_trans_rows' addresses writes D^T: checked against numpy."""
    form = layouts.mma_form(*ex.MMA_F16)
    d = np.arange(128, dtype=np.uint16).reshape(16, 8)
    regs = emulator.matrices_to_fragment(d[None], form.d)
    assert np.array_equal(ex.emulated_store(regs, ex.d_column_major(), 16, trans=True), d.T)
    assert np.array_equal(ex.emulated_store(regs, tiles.mma_cd_f16(), 8), d)


def test_spot_the_bug_answer_and_explanations():
    assert ex.holder_row_bug.evaluate("b").passed
    for wrong in "acd":
        res = ex.holder_row_bug.evaluate(wrong)
        assert not res.passed and res.message
    assert ex.holder_row_bug.evaluate("e").status == "invalid"


def test_the_bug_really_is_refused_by_the_emulator():
    lanes = np.arange(32)
    regs = np.zeros((32, 2), np.uint32)
    with pytest.raises(emulator.MisalignedAddress):
        emulator.stmatrix(np.zeros(256, np.uint8), 2 * (lanes // 4), regs, num=2)
    with pytest.raises(emulator.UndefinedResult):
        emulator.stmatrix(np.zeros(256, np.uint8), 16 * (lanes // 4), regs, num=2)


# ---------------------------------------------------------------------------------------------
# The stored-tile check
# ---------------------------------------------------------------------------------------------

def _tile() -> np.ndarray:
    return np.arange(128, dtype=np.uint16).reshape(16, 8)


def test_tile_check_passes_equal_tiles_and_names_wrong_cells():
    exp = _tile()
    assert checks.check_tile_outputs("t", exp.copy(), exp).passed
    got = exp.copy()
    got[3, 2] = exp[5, 2]
    res = checks.check_tile_outputs("t", got, exp, describe_value=ex.value_names(exp, "D"))
    assert not res.passed and res.details["wrong_rows"] == [3]
    assert res.diffs[0].line() == "tile[3][2] gave D[5][2], expected D[3][2]"


def test_tile_check_sees_unwritten_and_moved_rows():
    exp = _tile()
    got = exp.copy()
    got[8:] = ex.FILL
    res = checks.check_tile_outputs("t", got, exp, unwritten=ex.FILL)
    assert any("rows 8-15" in a and "never written" in a for a in res.advice), res.advice
    got = np.roll(exp, 1, axis=0)
    res = checks.check_tile_outputs("t", got, exp, row_names=lambda r: f"lane {r}'s row")
    assert any("row 0 of the tile holds row 15 (lane 15's row)" in a for a in res.advice)


def test_tile_check_prefers_a_known_mistake_and_sees_a_transpose():
    exp = np.arange(256, dtype=np.uint16).reshape(16, 16)
    res = checks.check_tile_outputs("t", exp.T, exp)
    assert any("transposed" in a for a in res.advice)
    res = checks.check_tile_outputs("t", exp.T, exp, mistakes=[(None, "x"), (exp.T, "known")])
    assert res.advice == ["known (tile[0][1] holds 0x0010 where 0x0001 belongs)"]


def test_emulated_store_refuses_duplicate_rows():
    regs = np.zeros((32, 2), np.uint32)
    place = tiles.mma_cd_f16()
    assert ex.emulated_store(regs, place, 8, addrs=np.zeros(32, np.int64)) is None
    assert ex.addressing_lane(place, 11) == 11


# ---------------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------------

def test_expected_store_is_the_product_in_the_tile():
    """What the exercise expects is A * B (numpy), written row-major: not a copy of itself."""
    perm = np.random.default_rng(3).permutation(16)
    run = ex.store_d_run(24, perm)
    a, b = (x.view(np.float16).astype(np.float32) for x in ex.mma_inputs(perm))
    product = (a.reshape(16, 16) @ b.reshape(16, 8)).astype(np.float16)
    assert np.array_equal(run.expected.view(np.float16), product)
    assert run.shared_mem == 16 * 24 * 2


def test_solution_kernel_passes_visible_and_hidden(store_d_source):
    res = ex.store_d_kernel.evaluate(store_d_source, hidden=True)
    assert res.passed, res.report()


def _variant(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new)


@pytest.mark.parametrize("old, new, phrase", [
    ("m8n8.x2.shared.b16 [%0]", "m8n8.x2.trans.shared.b16 [%0]", "turned around"),
    ('"r"(addr), "r"(d0), "r"(d1)', '"r"(addr), "r"(d1), "r"(d0)', "traded places"),
    ("(lane % 16) * sld * 2", "((lane + 3) % 16) * sld * 2", "hold another row"),
    ("(lane % 16) * sld * 2", "(lane % 16) * sld", "not 16-byte aligned"),
    ("(lane % 16) * sld * 2", "(lane / 4) * sld * 2", "leaves undefined"),
])
def test_wrong_kernels_fail_with_advice(store_d_source, old, new, phrase):
    res = ex.store_d_kernel.evaluate(_variant(store_d_source, old, new))
    assert not res.passed
    assert phrase in res.message or any(phrase in a for a in res.advice), res.report()


def test_a_kernel_storing_one_matrix_leaves_rows_unwritten(store_d_source):
    src = _variant(store_d_source, "x2.shared.b16 [%0], {%1, %2};", "x1.shared.b16 [%0], {%1};")
    src = _variant(src, '"r"(addr), "r"(d0), "r"(d1)', '"r"(addr), "r"(d0)')
    res = ex.store_d_kernel.evaluate(src)
    assert not res.passed and res.details["wrong_rows"] == list(range(8, 16))
    assert len(res.advice) == 1 and "only d0 was stored" in res.advice[0], res.report()
    assert "use .x2 with {d0, d1}" in res.advice[0]


def test_unfinished_and_foreign_sources():
    stub = ('extern "C" __global__ void store_d() {\n    # YOUR CODE HERE\n'
            '    raise NotImplementedError()\n}')
    assert ex.store_d_kernel.evaluate(stub).status == "not_implemented"
    assert ex.store_d_kernel.evaluate("__global__ void other() {}").status == "invalid"
    assert ex.store_d_kernel.evaluate(42).status == "invalid"


def test_compile_errors_become_a_result(store_d_source):
    res = ex.store_d_kernel.evaluate(_variant(store_d_source, "const unsigned addr =",
                                              "const unsigned addr = undeclared +"))
    assert not res.passed and res.status == "error" and "compile" in res.message


# ---------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------

def test_address_tables_for_stores():
    widgets = pytest.importorskip("ptxlab.widgets")
    pytest.importorskip("ipywidgets")
    t = widgets.AddressTable(right_d_rows, stride=32, instruction="stmatrix",
                             arrangement="C/D f16 of m16n8k16 (stmatrix)")
    assert t.wrong_lanes() == [] and "row comes from lanes" in t.html()
    column_major = "C/D f16 of m16n8k16 stored column-major (stmatrix .trans)"
    t = widgets.AddressTable(right_d_trans_rows, stride=32, instruction="stmatrix",
                             arrangement=column_major)
    assert t.wrong_lanes() == [] and t.trans.value and t.num.value == 2
    # without a formula: the picture (the lane table comes with a formula to judge)
    assert "lanes receive it" in widgets.AddressTable(num=1).html()
    assert "lanes it comes from" in widgets.AddressTable(num=1, instruction="stmatrix").html()


def test_ignored_lanes_get_no_sm75_note_for_stmatrix():
    """The `.target sm_75` rule for ignored lanes is ldmatrix's: stmatrix needs sm_90."""
    def only_active(lane, base, stride):
        return right_d_rows(lane, base, stride) if lane < 16 else 3
    res = ex.d_rows.evaluate(only_active)
    assert res.passed and not any("sm_75" in a for a in res.advice)
