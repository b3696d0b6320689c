"""The exercises and helpers of the mma notebook: right answers pass (hidden cases too), each
known mistake is caught with its own advice, and the helpers agree with the emulator."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import emulator, layouts
from ptxlab.exercises import mma as ex
from ptxlab.exercises import tiles


def right_accumulator(lane, reg):
    return lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2


def right_b_fragment(lane, reg, elem, bits):
    per = 32 // bits
    return per * (lane % 4) + elem + 4 * per * reg, lane // 4


def right_b_pair(lane, j, base, stride):
    return base + (lane % 16) * stride + (j + lane // 16) * 16


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("typ, values", [
    ("f16", [0.5, -3.0, 65504.0]), ("bf16", [1.0, -2.5, 2.0**100]), ("f32", [0.1, -7.25]),
    ("tf32", [1.5, -0.125]), ("s8", [-128, 0, 127]), ("s32", [-(2**31), 2**31 - 1]),
])
def test_element_bits_round_trip_representable_values(typ, values):
    v = np.array(values)
    assert np.array_equal(ex.element_values(ex.element_bits(v, typ), typ), v.astype(np.float32)
                          if typ in ("f32", "tf32") else v)


def test_bf16_rounds_to_nearest_even():
    # 1 + 2**-8 lies halfway between bf16 neighbours 1 and 1 + 2**-7: ties go to even (1)
    assert ex.round_to(1 + 2**-8, "bf16") == 1.0
    assert ex.round_to(1 + 3 * 2**-8, "bf16") == 1 + 2**-6
    assert ex.round_to(300.7, "bf16") == 300.0


def test_fragments_round_trip_through_the_layouts():
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    rng = np.random.default_rng(0)
    A = rng.integers(-9, 10, (16, 16)).astype(np.float16)
    B = rng.integers(-9, 10, (16, 8)).astype(np.float16)
    C = rng.integers(-9, 10, (16, 8)).astype(np.float32)
    a, b, c = ex.fragments(form, A, B, C)
    assert a.shape == (32, 4) and b.shape == (32, 2) and c.shape == (32, 4)
    # lane 5 = group 1, t 1: a0 holds A[1][2] (low half) and A[1][3]
    lo, hi = int(a[5, 0]) & 0xFFFF, int(a[5, 0]) >> 16
    assert lo == A.view(np.uint16)[1, 2] and hi == A.view(np.uint16)[1, 3]
    assert np.array_equal(ex.result_matrix(form, c), C)


@pytest.mark.parametrize("variant", layouts.MMA_VARIANTS)
def test_live_reference_kernel_agrees_with_the_emulator_and_numpy(variant):
    form = layouts.mma_form(*variant)
    rng = np.random.default_rng(1)
    A = rng.integers(-4, 5, (form.m, form.k))
    B = rng.integers(-4, 5, (form.k, form.n))
    C = rng.integers(-50, 51, (form.m, form.n))
    run = ex.run_mma(form, A, B, C)
    assert np.array_equal(run.D, ex.emulate_mma(form, A, B, C))
    assert np.array_equal(run.D, A @ B + C)          # small integers: every sum is exact


def test_ulp_distance():
    one = np.float32(1.0)
    assert ex.ulp_distance(one, one) == 0
    assert ex.ulp_distance(one, np.nextafter(one, np.float32(2))) == 1
    assert ex.ulp_distance(np.float32(-0.0), np.float32(0.0)) == 0
    tiny = np.nextafter(np.float32(0), np.float32(1))
    assert ex.ulp_distance(-tiny, tiny) == 2


def test_variants_html_lists_every_variant():
    html = ex.variants_html()
    for form in layouts.mma_forms():
        assert form.ptx in html


def test_formats_table_shows_the_tf32_truncation():
    text = ex.formats_table([1 + 2**-11 + 2**-12])
    row = text.splitlines()[1].split()
    assert float(row[3]) == 1.0            # tf32 as read: the low 13 bits dropped
    assert float(row[1]) == pytest.approx(1 + 2**-10, abs=1e-7)   # f16 rounds to nearest


# ---------------------------------------------------------------------------------------------
# 1. accumulator
# ---------------------------------------------------------------------------------------------

def test_accumulator_right_answer_passes_hidden_cases():
    res = ex.accumulator.evaluate(right_accumulator, hidden=True)
    assert res.passed and res.details["cases"] >= 5


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, reg: (lane // 4 + 8 * (reg % 2), 2 * (lane % 4) + reg // 2), "swapped"),
    (lambda lane, reg: (lane // 4, 4 * (lane % 4) + reg), "8 columns wide"),
    (lambda lane, reg: (lane % 8 + 8 * (reg // 2), 2 * (lane // 8) + reg % 2), "four consecutive"),
])
def test_accumulator_mistakes_get_their_advice(bad, phrase):
    res = ex.accumulator.evaluate(bad)
    assert not res.passed and res.status == "checked"
    assert any(phrase in a for a in res.advice), res.advice


def test_accumulator_names_lane_and_register():
    res = ex.accumulator.evaluate(lambda lane, reg: (lane // 4 + 8 * (reg // 2), 2 * (lane % 4)))
    assert not res.passed
    d = res.diffs[0]
    assert d.lane == 0 and d.where == "reg 1" and "col 1" in d.expected


def test_accumulator_unfinished():
    def todo(lane, reg):
        raise NotImplementedError()
    assert ex.accumulator.evaluate(todo).status == "not_implemented"


# ---------------------------------------------------------------------------------------------
# 2. B fragment of any width
# ---------------------------------------------------------------------------------------------

def test_b_fragment_right_answer_passes_every_width():
    assert ex.b_fragment.evaluate(right_b_fragment, hidden=True).passed
    widths = {layout.elem_bits for layout, _, _ in ex.b_fragment.hidden_cases()}
    assert widths == {8, 16}


def test_b_fragment_hidden_cases_catch_a_formula_without_8_bit():
    def no_s8(lane, reg, elem, bits):
        per = 2 if bits == 16 else 1
        return per * (lane % 4) + elem + 4 * per * reg, lane // 4
    assert ex.b_fragment.evaluate(no_s8).passed
    res = ex.b_fragment.evaluate(no_s8, hidden=True)
    assert not res.passed and "bits=8" in res.message


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, reg, elem, bits: (2 * (lane % 4) + elem + 8 * reg, lane // 4), "every width"),
    (lambda lane, reg, elem, bits: ((32 // bits) * (lane % 4) + elem + 8 * reg, lane // 4),
     "does not always move k by 8"),
    (lambda lane, reg, elem, bits: (lane // 4, (32 // bits) * (lane % 4) + elem
                                    + 4 * (32 // bits) * reg), "swapped"),
])
def test_b_fragment_mistakes_get_their_advice(bad, phrase):
    res = ex.b_fragment.evaluate(bad)
    assert not res.passed
    assert any(phrase in a for a in res.advice), res.advice


# ---------------------------------------------------------------------------------------------
# 3. tf32 operand
# ---------------------------------------------------------------------------------------------

def test_tf32_reference_comes_from_the_emulator_and_masks_13_bits():
    rng = np.random.default_rng(3)
    for bits in rng.integers(0, 1 << 32, 50, dtype=np.uint64):
        bits = int(bits)
        if (bits >> 23) & 0xFF == 0xFF or bits == 0x80000000:
            continue
        assert ex.tf32_read(bits) == bits & 0xFFFFE000


def test_tf32_right_answer_passes_hidden_cases():
    res = ex.tf32_operand.evaluate(lambda bits: bits & 0xFFFFE000, hidden=True)
    assert res.passed and "inputs right" in res.message


@pytest.mark.parametrize("bad, phrase", [
    (lambda bits: bits, "unchanged"),
    (lambda bits: bits & 0xFFFF0000, "bf16"),
    (lambda bits: (bits + 0x1000) & 0xFFFFE000, "cvt.rna"),
    (lambda bits: bits >> 13, "stay where they are"),
    (lambda bits: bits & 0x1FFF, "drops"),
    (lambda bits: bits & 0xFFFFF000, "one bit too many"),
])
def test_tf32_mistakes_get_their_advice_and_hex(bad, phrase):
    res = ex.tf32_operand.evaluate(bad)
    assert not res.passed
    assert any(phrase in a for a in res.advice), res.advice
    assert res.diffs[0].expected.startswith("0x")


# ---------------------------------------------------------------------------------------------
# 4. s8 wraparound
# ---------------------------------------------------------------------------------------------

def test_s8_answer_is_what_the_emulator_computes():
    form = layouts.mma_form("m16n8k32", "s8", "s8", "s32", "s32")
    A = np.full((16, 32), -128)
    B = np.full((32, 8), -128)
    C = np.zeros((16, 8), dtype=np.int64)
    C[0, 0] = ex.S8_C00
    D = ex.emulate_mma(form, A, B, C)
    assert D[0, 0] == -2147443008
    assert str(int(D[0, 0])) in ex.s8_wraparound.explanations[ex.s8_wraparound.correct]
    assert ex.s8_wraparound.evaluate("b").passed
    res = ex.s8_wraparound.evaluate("a")
    assert not res.passed and "satfinite" in res.message


# ---------------------------------------------------------------------------------------------
# 5. two n-blocks with ldmatrix.x4.trans
# ---------------------------------------------------------------------------------------------

def test_b_pair_placement_follows_the_b_layout():
    place = ex.b_pair_placement(2, 64)
    assert place.origins == ((0, 16), (8, 16), (0, 24), (8, 24))
    assert place.origins[:2] == tuple((r, c + 16) for r, c in tiles.mma_b_row_major().origins)
    with pytest.raises(ValueError):
        ex.b_pair_placement(3, 32)
    with pytest.raises(ValueError):
        ex.b_pair_placement(-1, 32)


def test_b_pair_right_answer_passes_hidden_cases():
    res = ex.b_pair_rows.evaluate(right_b_pair, hidden=True)
    assert res.passed and res.details["cases"] >= 15


def test_b_pair_emulated_load_gives_the_two_b_fragments():
    """The addresses the exercise expects really load mma's B fragments of both n-blocks."""
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    j, n_cols, stride = 1, 32, 80
    B = np.arange(16 * n_cols, dtype=np.uint16).reshape(16, n_cols)
    smem = np.zeros((16, stride // 2), dtype=np.uint16)
    smem[:, :n_cols] = B
    addrs = np.array([right_b_pair(lane, j, 0, stride) for lane in range(32)])
    regs = emulator.ldmatrix(smem.reshape(-1).view(np.uint8), addrs, num=4, trans=True)
    for p in (0, 1):
        block = B[:, 8 * (j + p): 8 * (j + p) + 8]
        assert np.array_equal(regs[:, 2 * p: 2 * p + 2],
                              emulator.matrices_to_fragment(block[None], form.b))


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, j, base, stride: base + (lane % 16) * stride + (lane // 16) * 16, "ignore j"),
    (lambda lane, j, base, stride: base + (lane % 16) * stride + (j + lane // 16) * 8, "bytes"),
    (lambda lane, j, base, stride: base + (lane % 8) * stride + (j + lane // 8) * 16,
     "side by side"),
    (lambda lane, j, base, stride: base + (lane % 16) * stride + (2 * j + lane // 16) * 16,
     "not 32 * j"),
])
def test_b_pair_mistakes_get_their_advice(bad, phrase):
    res = ex.b_pair_rows.evaluate(bad)
    assert not res.passed
    assert any(phrase in a for a in res.advice), res.advice


def test_b_pair_table_marks_wrong_lanes_and_tolerates_unfinished_answers():
    def todo(lane, j, base, stride):
        raise NotImplementedError()
    plain = ex.b_pair_table(todo)
    assert "your formula" not in plain and plain.count("<tr>") == 33
    good = ex.b_pair_table(right_b_pair)
    assert "wrong" not in good
    bad = ex.b_pair_table(lambda lane, j, base, stride: base + (lane % 16) * stride, j=0,
                          n_cols=16, stride=32)
    assert bad.count(">wrong<") == 16           # lanes 16-31 miss the second n-block


# ---------------------------------------------------------------------------------------------
# 6. the tile kernel
# ---------------------------------------------------------------------------------------------

GOOD_TILE = r"""
#include "ldmatrix.cuh"
#include "mma.cuh"

extern "C" __global__ void tile_mma(const unsigned short* a, const unsigned short* b,
                                    const float* c, int lda, int ldb, float* d)
{
    extern __shared__ __align__(16) unsigned short smem[];
    unsigned short* sa = smem;
    unsigned short* sb = smem + 16 * lda;
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) sa[(i / 16) * lda + i % 16] = a[i];
    for (unsigned i = lane; i < 128; i += 32) sb[(i / 8) * ldb + i % 8] = b[i];
    __syncwarp();
    unsigned ra[4], rb[2];
    float rc[4], rd[4];
    const unsigned g = lane / 4, t = lane % 4;
    ptxlab::ldmatrix_x4(ra, &sa[(lane % 16) * lda + (lane / 16) * 8]);
    ptxlab::ldmatrix_x2_trans(rb, &sb[(lane % 16) * ldb]);
    for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = rd[i];
}
"""


def test_tile_expected_is_numpy_for_small_integers():
    for lda, ldb in ((16, 8), (40, 24)):
        A, B, C = ex.tile_inputs(5)
        want = A.astype(np.float32) @ B.astype(np.float32) + C
        assert np.array_equal(ex.tile_expected(A, B, C, lda, ldb).view(np.float32), want)


def test_tile_kernel_right_answer_passes_hidden_cases():
    res = ex.tile_kernel.evaluate(GOOD_TILE, hidden=True)
    assert res.passed, res.report()
    assert res.details["cases"] == 4


@pytest.mark.parametrize("old, new, phrase", [
    ("ldmatrix_x2_trans", "ldmatrix_x2", "without .trans"),
    ("&sa[(lane % 16) * lda + (lane / 16) * 8]",
     "&sa[((lane / 16) * 8 + lane % 8) * lda + ((lane / 8) % 2) * 8]", "registers 1 and 2"),
    ("rc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2]", "rc[i] = 0.f", "C was never added"),
    ("d[(g + 8 * (i / 2))", "d[(g + 8 * (1 - i / 2))", "exchanged"),
    ("d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = rd[i]",
     "d[(2 * t + i % 2) * 16 + g + 8 * (i / 2)] = rd[i]", "column-major"),
    ("= rd[i];", "= rd[i % 2];", "only cells held in d2, d3"),
    ("for (int i = 0; i < 4; ++i) d[", "if (lane > 99) for (int i = 0; i < 4; ++i) d[",
     "nothing was written"),
])
def test_tile_kernel_mistakes_are_recognised(old, new, phrase):
    assert old in GOOD_TILE
    res = ex.tile_kernel.evaluate(GOOD_TILE.replace(old, new))
    assert not res.passed and res.status == "checked"
    assert any(phrase in a for a in res.advice), res.report()
    assert res.diffs and res.diffs[0].where.startswith("D[")


def test_tile_kernel_names_the_wrong_cell_and_its_lane():
    res = ex.tile_kernel.evaluate(GOOD_TILE.replace("= rd[i];", "= rd[i % 2];"))
    d = res.diffs[0]
    # the cell, and the lane and register its right value comes from: no label that could be
    # read as where the wrong value came from
    assert d.where == "D[8][0]" and d.expected.endswith("(from lane 0's d2)")
    assert "lane" not in d.got
    assert 0 in res.wrong_lanes


def test_tile_kernel_labels_a_moved_value_by_where_it_came_from():
    # d2, d3 stored to row g: D[0][0] holds lane 0's d2, and the line says so
    res = ex.tile_kernel.evaluate(GOOD_TILE.replace("d[(g + 8 * (i / 2)) * 8", "d[g * 8"))
    d = res.diffs[0]
    assert d.where == "D[0][0]" and d.got.endswith("(from lane 0's d2)"), d.line()
    assert d.expected.endswith("(from lane 0's d0)")


def test_tile_kernel_visible_runs_catch_a_hard_coded_stride():
    # the visible runs include a padded tile (lda 56), so the notebook's check says so
    src = GOOD_TILE.replace("(lane % 16) * lda", "(lane % 16) * 16")
    res = ex.tile_kernel.evaluate(src)
    assert not res.passed and "A row stride 56" in res.message
    assert any("lda" in a for a in res.advice)


def test_tile_kernel_unfinished_invalid_and_broken_sources():
    assert ex.tile_kernel.evaluate("# YOUR CODE HERE\nraise NotImplementedError()").status \
        == "not_implemented"
    assert ex.tile_kernel.evaluate(GOOD_TILE.replace("tile_mma(", "other(")).status == "invalid"
    broken = ex.tile_kernel.evaluate(GOOD_TILE.replace("rd, ra, rb, rc);", "rd, ra, rb);"))
    assert broken.status == "error" and "compile" in broken.message
    fault = ex.tile_kernel.evaluate(GOOD_TILE.replace("&sb[(lane % 16) * ldb]",
                                                      "&sb[(lane % 16) * ldb + 1]"))
    assert fault.status == "error" and "fault" in fault.message


def test_show_tile():
    assert "not written" in ex.show_tile("raise NotImplementedError()")
    assert "did not run" in ex.show_tile(GOOD_TILE.replace("rd, ra, rb, rc);", "rd, ra, rb);"))
    html = ex.show_tile(GOOD_TILE)
    assert "equal to numpy" in html


# ---------------------------------------------------------------------------------------------
# 7. spot the bug: A's blocks in reading order
# ---------------------------------------------------------------------------------------------

def test_reading_order_load_multiplies_a_with_exchanged_blocks():
    """What option b claims, computed with the emulator."""
    A, B, C = ex.tile_inputs(9)
    smem = A.view(np.uint16).reshape(-1).view(np.uint8)
    lane = np.arange(32)
    addrs = (((lane // 16) * 8 + lane % 8) * 16 + (lane // 8 % 2) * 8) * 2
    ra = emulator.ldmatrix(smem, addrs, num=4)
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
    _, rb, rc = ex.fragments(form, A, B, C)
    D = ex.result_matrix(form, emulator.mma("m16n8k16", ra, rb, rc))
    swapped = A.copy()
    swapped[:8, 8:], swapped[8:, :8] = A[8:, :8], A[:8, 8:]
    assert np.array_equal(D, swapped.astype(np.float64) @ B.astype(np.float64) + C)
    assert not np.array_equal(D, A.astype(np.float64) @ B.astype(np.float64) + C)
    assert ex.swapped_a_blocks.evaluate("b").passed
    assert not ex.swapped_a_blocks.evaluate("c").passed
