"""The learner-facing checks: right answers pass, each classic mistake gets its own advice,
and garbage never escapes as a traceback."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ptxlab import checks, emulator, layouts
from ptxlab.exercises import basics, ldmatrix, ldmatrix_trans, tiles


def right_side_by_side(lane, num, base, stride):
    return base + (lane % 8) * stride + (lane // 8) * 16


def test_address_check_passes_right_formula_on_hidden_cases():
    res = ldmatrix.side_by_side_rows.evaluate(right_side_by_side, hidden=True)
    assert res.passed and res.score == 1.0
    assert res.details["cases"] >= 9          # every .num, random bases and strides


def test_address_check_names_lane_matrix_and_the_missing_lane_over_8():
    res = ldmatrix.side_by_side_rows.evaluate(lambda lane, num, base, stride: base + (lane % 8) * stride)
    assert not res.passed and res.status == "checked"
    assert 8 in res.wrong_lanes and 0 not in res.wrong_lanes
    lane9 = next(d for d in res.diffs if d.lane == 9)
    assert "row 1 of matrix 0" in lane9.got and "row 1 of matrix 1" in lane9.expected
    assert any("ignores lane // 8" in a for a in res.advice)
    assert 0 < res.score < 1


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, num, base, stride: (lane % 8) * stride + (lane // 8) * 16, "base"),
    (lambda lane, num, base, stride: base + (lane % 8) * stride + (lane // 8) * 8, "bytes"),
    (lambda lane, num, base, stride: base + lane * stride, "side by side"),
])
def test_address_check_recognises_classic_mistakes(bad, phrase):
    res = ldmatrix.side_by_side_rows.evaluate(bad)
    assert not res.passed
    assert any(phrase in a for a in res.advice), res.advice


_RIGHT = {
    "d_rows": (lambda lane, base, stride: base + (lane % 16) * stride, 16),
    "a_rows": (lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 16, 32),
}


@pytest.mark.parametrize("bad, phrases", [
    # the row a lane holds (lane // 4), in elements, in bytes and in rows: never "just" alignment
    (lambda r, n, lane, base, stride: base + (lane // 4) * 2, ["row whose *elements* a lane"]),
    (lambda r, n, lane, base, stride: base + (lane // 4) * 16, ["row whose *elements* a lane"]),
    (lambda r, n, lane, base, stride: base + (lane // 4) * stride, ["row whose *elements* a lane"]),
    (lambda r, n, lane, base, stride: r(lane, base, stride) + stride, ["1 row further down"]),
    (lambda r, n, lane, base, stride: r(lane, base, stride) - 2 * stride, ["2 rows higher up"]),
    (lambda r, n, lane, base, stride: r((lane + 1) % n, base, stride),
     ["lane r points at row r + 1"]),
    (lambda r, n, lane, base, stride: r((lane - 1) % n, base, stride),
     ["lane r points at row r - 1"]),
    (lambda r, n, lane, base, stride: r(lane, base, stride) + 16,
     ["off by +16 bytes", "16 bytes (8 elements) too far to the right"]),
])
@pytest.mark.parametrize("exercise", sorted(_RIGHT))
def test_whole_answer_patterns_are_named(bad, phrases, exercise):
    """Shapes of a wrong answer, recognised on any exercise and tile from the answer itself,
    not from a list of expected wrong formulas."""
    from ptxlab.exercises import stmatrix

    ex = stmatrix.d_rows if exercise == "d_rows" else ldmatrix.a_operand_rows
    right, lanes = _RIGHT[exercise]
    assert ex.evaluate(right).passed
    res = ex.evaluate(lambda lane, base, stride: bad(right, lanes, lane, base, stride))
    assert not res.passed
    assert any(p in a for p in phrases for a in res.advice), res.advice


def test_a_operand_wrong_block_order_is_explained():
    res = ldmatrix.a_operand_rows.evaluate(
        lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8) * 16)
    assert not res.passed and any("lower-left" in a for a in res.advice)


@pytest.mark.parametrize("value, phrase", [
    (float("nan"), "NaN"), (math.inf, "inf"), (3.5, "//"), (None, "return"), ("16", "str"),
    (True, "boolean"), ([1, 2], "list"),
])
def test_garbage_return_values_become_messages(value, phrase):
    res = ldmatrix.side_by_side_rows.evaluate(lambda lane, num, base, stride: value)
    assert not res.passed and res.status == "checked"
    assert phrase in res.diffs[0].got, res.diffs[0].got


def test_exceptions_are_reported_per_lane_with_the_line():
    def boom(lane, num, base, stride):
        return base // (lane - 3)
    res = ldmatrix.side_by_side_rows.evaluate(boom)
    d = next(d for d in res.diffs if d.lane == 3)
    assert "ZeroDivisionError" in d.got and "line" in d.got


def test_not_implemented_and_non_callables():
    def todo(lane, num, base, stride):
        raise NotImplementedError()
    assert ldmatrix.side_by_side_rows.evaluate(todo).status == "not_implemented"
    assert ldmatrix.side_by_side_rows.evaluate(None).status == "not_implemented"
    assert ldmatrix.side_by_side_rows.evaluate(42).status == "invalid"
    assert ldmatrix.receive.evaluate("x").status == "invalid"


def test_integral_floats_pass_with_a_note():
    res = ldmatrix.side_by_side_rows.evaluate(lambda l, n, b, s: float(right_side_by_side(l, n, b, s)))
    assert res.passed


def test_ignored_lanes_with_invalid_addresses_get_an_sm75_note():
    def only_active(lane, num, base, stride):
        return right_side_by_side(lane, num, base, stride) if lane < 8 * num else 3
    res = checks.check_addresses(only_active, ldmatrix.side_by_side_rows.tasks(False)[1:],
                                 name="x2")
    assert res.passed and any("sm_75" in a for a in res.advice)


def test_fragment_check_passes_layout_formulas_everywhere():
    assert ldmatrix.receive.evaluate(lambda l, r, h: (r, l // 4, 2 * (l % 4) + h), True).passed
    assert ldmatrix.a_fragment.evaluate(
        lambda l, r, h: (l // 4 + 8 * (r % 2), 2 * (l % 4) + h + 8 * (r // 2)), True).passed
    assert ldmatrix_trans.b_fragment.evaluate(lambda l, r, h: (2 * (l % 4) + h + 8 * r, l // 4),
                                              True).passed


def test_fragment_check_spots_transposition_duplicates_and_register_patterns():
    res = checks.check_fragment(lambda l, r, h: (2 * (l % 4) + h, l // 4),
                                layouts.ldmatrix_fragment(1))
    assert not res.passed and "swapped" in res.advice[0]
    res = ldmatrix.receive.evaluate(lambda l, r, h: (0, l // 4, 2 * (l % 4) + h))
    assert any("registers [1, 2, 3]" in a for a in res.advice)
    assert any("same element" in a for a in res.advice)
    assert "reg 1 half 0" in res.diffs[0].line()


def test_fragment_check_rejects_wrong_tuple_lengths():
    res = ldmatrix.a_fragment.evaluate(lambda l, r, h: (1, 2, 3))
    assert not res.passed and "tuple of 2" in res.diffs[0].got


def test_choice_check():
    ex = ldmatrix.x2_wrapper_bug
    assert ex.evaluate("c").passed and ex.evaluate(" C ").passed
    wrong = ex.evaluate("a")
    assert not wrong.passed and "name" in wrong.message
    assert ex.evaluate("q").status == "invalid"
    assert ex.evaluate(lambda: "c").passed
    def todo():
        raise NotImplementedError()
    assert ex.evaluate(todo).status == "not_implemented"


def test_function_exercise_mistakes():
    res = basics.bank_of.evaluate(lambda a: a % 32)
    assert not res.passed and "divide the address by 4" in res.advice[0]
    assert basics.bank_of.evaluate(lambda a: (a // 4) % 32, hidden=True).passed


def test_grade_raises_with_the_report_and_hint_progresses(capsys):
    with pytest.raises(AssertionError, match="not implemented yet"):
        ldmatrix.receive.grade(None)
    ex = basics.bank_of
    ex._hints_shown = 0
    ex.hint()
    ex.hint()
    ex.hint()
    out = capsys.readouterr().out
    assert "Hint 1 of 2" in out and out.count("Hint 2 of 2") == 2


def test_report_is_short_and_actionable():
    res = ldmatrix.side_by_side_rows.evaluate(lambda lane, num, base, stride: base + (lane % 8) * stride)
    text = res.report()
    assert text.startswith("[FAILED]") and "... and" in text and "=>" in text
    assert len(text.splitlines()) <= 8
    assert res.as_dict()["wrong_lanes"] == res.wrong_lanes


def test_unfinished_kernel_source_is_not_implemented():
    stub = 'extern "C" __global__ void load_a_operand() {\n    # YOUR CODE HERE\n    raise NotImplementedError()\n}'
    assert ldmatrix.a_operand_kernel.evaluate(stub).status == "not_implemented"
    assert ldmatrix.a_operand_kernel.evaluate("__global__ void other() {}").status == "invalid"


def test_kernel_outputs_name_the_element_each_lane_got():
    exp = ldmatrix.a_operand_expected(16)
    got = exp.copy()
    got[9, 1] = exp[9, 0]                      # lane 9 got register 0's elements in register 1
    res = checks.check_kernel_outputs("k", got, exp, describe_value=ldmatrix.describe_a_value)
    assert not res.passed and res.wrong_lanes == [9]
    assert "A[2][2]" in res.diffs[0].got and "A[10][2]" in res.diffs[0].expected


def test_expected_kernel_outputs_are_the_mma_fragments():
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    a = np.arange(256, dtype=np.uint16).reshape(1, 16, 16)
    assert np.array_equal(ldmatrix.a_operand_expected(40), emulator.matrices_to_fragment(a, form.a))
    b = np.arange(128, dtype=np.uint16).reshape(1, 16, 8)
    assert np.array_equal(ldmatrix_trans.b_operand_expected(24),
                          emulator.matrices_to_fragment(b, form.b))


def test_placements_come_from_the_layouts():
    assert tiles.mma_a().origins == ((0, 0), (8, 0), (0, 8), (8, 8))
    assert tiles.mma_b_row_major().origins == ((0, 0), (8, 0))
    assert tiles.mma_b_col_major().origins == ((0, 0), (0, 8))
    t = tiles.Tile(16, 16, 256, 48)
    assert t.locate(256 + 48 * 3 + 10) == (3, 5) and t.locate(255) is None
    with pytest.raises(ValueError, match="shorter than a row"):
        tiles.Tile(16, 16, 0, 16)


def test_a_kernel_diff_counts_in_one_unit():
    """Words in the verdict, halves in the lines: the report says which it counts."""
    import numpy as np

    from ptxlab.teach import checks as ch

    exp = np.arange(32 * 4, dtype=np.uint64).reshape(32, 4) * 0x00010001
    got = exp.copy()
    got[:, :3] ^= 0x00010001                    # both halves of 96 words wrong
    result = ch.check_kernel_outputs("k", got, exp, describe_value=lambda v: f"id {v}")
    assert result.message.startswith("96 of 128 output words (192 of 256 16-bit halves)")
    report = result.report()
    shown = report.count("\n  - ")
    assert f"... and {192 - shown} more wrong halves" in report
    plain = ch.check_kernel_outputs("k", got, exp)
    assert "halves" not in plain.message and "more wrong words" in plain.report()
