"""Causes named from evidence (``ptxlab.teach.diagnosis``): a wrong answer is compared with what
each plausible mistake gives, computed with the emulator from the layouts; the cause is said with
the lane and register that show it, and nothing is said where nothing matches."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.model import emulator
from ptxlab.run.ptx.errors import lanes_text, number_runs
from ptxlab.teach import diagnosis
from ptxlab.teach.exercises import banks, ldmatrix, ldmatrix_trans, mma, stmatrix, tiles


def _a_registers(sld: int = 16) -> tuple[np.ndarray, np.ndarray]:
    smem = np.zeros((16, sld), dtype=np.uint16)
    smem[:, :16] = np.arange(256, dtype=np.uint16).reshape(16, 16)
    mem = smem.reshape(-1).view(np.uint8)
    return mem, emulator.ldmatrix(mem, diagnosis.row_addresses(tiles.mma_a(), 0, 2 * sld), num=4)


def test_one_wording_of_lane_runs():
    assert number_runs([9, 0, 1, 4, 5, 6, 7]) == "0, 1, 4-7, 9"
    assert lanes_text([3]) == "lane 3" and lanes_text(range(8)) == "lanes 0-7"


def test_row_addresses_are_the_placements():
    place = tiles.mma_a()
    assert np.array_equal(diagnosis.row_addresses(place, 64, 80),
                          place.expected_addresses(place.tile(64, 80)))
    shifted = diagnosis.row_addresses(place, 0, 32, shift=1)
    assert shifted[15] == 0 and shifted[0] == 32          # (lane + 1) % 16 wraps at row 16
    within = diagnosis.row_addresses(place, 0, 32, shift=1, within=True)
    assert within[7] == 0 and within[15] == 8 * 32        # wraps at each matrix's row 8


def test_registers_in_another_order_are_named_with_the_lane():
    mem, right = _a_registers()
    cause = diagnosis.register_cause(right[:, [1, 0, 2, 3]], right,
                                     describe=ldmatrix.describe_a_value, loaded_from=tiles.mma_a())
    assert "reg 0 holds what reg 1 must hold" in cause
    assert "lane 0 reg 0 holds A[8][0], A[8][1], which belong in lane 0's reg 1" in cause
    reading = diagnosis.register_cause(right[:, [0, 2, 1, 3]], right, loaded_from=tiles.mma_a())
    assert "reading order" in reading


def test_a_matching_suspect_is_the_cause_and_nothing_else_is_claimed():
    mem, right = _a_registers(32)
    suspects = diagnosis.load_suspects(mem, tiles.mma_a(), 0, 64, trans=False)
    trans = emulator.ldmatrix(mem, diagnosis.row_addresses(tiles.mma_a(), 0, 64), num=4, trans=True)
    assert ".trans where it must not" in diagnosis.register_cause(trans, right, suspects)
    half = emulator.ldmatrix(mem, diagnosis.row_addresses(tiles.mma_a(), 0, 32), num=4)
    assert "half the row stride" in diagnosis.register_cause(half, right, suspects)
    garbage = np.random.default_rng(1).integers(0, 1 << 32, right.shape, dtype=np.uint64)
    assert diagnosis.register_cause(garbage.astype(np.uint32), right, suspects) is None
    assert diagnosis.first_match(right, [diagnosis.Suspect(None, "x")]) is None


def test_a_cause_is_short():
    text = diagnosis.with_proof("x" * 500 + " {proof}", "lane 0")
    assert len(text) == diagnosis.MAX_CAUSE and text.endswith("...")
    assert diagnosis.with_proof("cause {proof}", "lane 3 reg 1") == "cause (lane 3 reg 1)"


def test_stores_of_swapped_registers_blame_the_order_not_only_the_addresses():
    d = stmatrix.mma_d_registers(*stmatrix.mma_inputs(range(16)))
    place = tiles.mma_cd_f16()
    suspects = diagnosis.store_suspects(d, place, 8, trans=False, fill=stmatrix.FILL,
                                        reg_names=("d0", "d1"))
    got = diagnosis.stored_tile(d[:, [1, 0]], place, 8, diagnosis.row_addresses(place, 0, 16),
                                trans=False, fill=stmatrix.FILL)
    hit = diagnosis.first_match(got, suspects)
    assert hit and "d1 and d0 traded places" in hit.cause and "register list {d0, d1}" in hit.cause


def test_never_written_rows_are_said_even_past_the_shown_lines():
    run = mma.tile_run(3, 16, 8, "tile 3")
    got = np.full((16, 8), mma.UNWRITTEN, dtype=np.uint32)
    got[:8] = np.asarray(run.expected)[:8]
    got[0, 0] ^= 1
    res = mma.compare_tile(got, run, "t")
    report = res.report()
    assert "rows 8-15 never written" in report.splitlines()[-2] or \
        any("rows 8-15 of D were never written" in a for a in res.advice), report


@pytest.mark.parametrize("exercise, bad, phrase", [
    (ldmatrix.a_operand_rows,
     lambda lane, base, stride: base + ((lane + 1) % 16) * stride + (lane // 16) * 16,
     "lane 15 points at row 0 where row 15 belongs"),
    (ldmatrix.a_operand_rows,
     lambda lane, base, stride: base + ((lane + 15) % 16) * stride + (lane // 16) * 16,
     "1 tile row higher up"),
    (stmatrix.d_rows, lambda lane, base, stride: base + ((lane + 2) % 16) * stride,
     "2 tile rows further down"),
    (ldmatrix_trans.b_col_major_rows,
     lambda lane, base, stride: base + ((lane + 1) % 8) * stride + (lane // 8 % 2) * 16,
     "wrapping at row 8: lane 7 points at row 0"),
])
def test_a_row_off_by_one_is_named_in_an_address_exercise(exercise, bad, phrase):
    res = exercise.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()
    assert len(res.advice) == 1


@pytest.mark.parametrize("bad, phrase", [
    (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 128
     + ((col0 // 8 + lane // 16) ^ ((row0 + lane % 16) // 2 % 8)) * 16,
     "wrong key: lane 1 (row 1) XORs it with 0, the key is row % 8 = 1"),
    (lambda lane, base, row0, col0: (base + (row0 + lane % 16) * 128
                                     + (col0 // 8 + lane // 16) * 16) ^ ((row0 + lane % 16) % 8 << 7),
     "XORs address bits 7-9"),
    (lambda lane, base, row0, col0: (base + (row0 + lane % 16) * 128
                                     + (col0 // 8 + lane // 16) * 16) ^ ((row0 + lane % 16) % 8 << 3),
     "XORs address bits 3-5"),
])
def test_a_swizzle_in_the_wrong_bits_is_named(bad, phrase):
    res = banks.swizzled_a_rows.evaluate(bad)
    assert not res.passed and any(phrase in a for a in res.advice), res.report()


def _d_registers() -> np.ndarray:
    a_bits, b_bits = stmatrix.mma_inputs(tuple(range(16)))
    return stmatrix.mma_d_registers(a_bits, b_bits)


def test_a_register_stored_twice_is_named_before_any_address_cause():
    # {d1, d1}: the addresses are right, so the cause is the register list, not a row address
    d = _d_registers()
    place = tiles.mma_cd_f16()
    got = diagnosis.stored_tile(d[:, [1, 1]], place, 8, diagnosis.row_addresses(place, 0, 16),
                                trans=False, fill=stmatrix.FILL)
    hit = diagnosis.first_match(got, diagnosis.store_suspects(d, place, 8, trans=False,
                                                              fill=stmatrix.FILL,
                                                              reg_names=("d0", "d1")))
    assert hit is not None and hit.cause.startswith("d1 is stored twice and d0 never")
    assert "addresses are right" in hit.cause


def test_a_store_of_fewer_matrices_is_named():
    d = _d_registers()
    place = tiles.mma_cd_f16()
    smem = np.full(16 * 8, stmatrix.FILL, dtype=np.uint16)
    emulator.stmatrix(smem.view(np.uint8), diagnosis.row_addresses(place, 0, 16), d[:, :1],
                      num=1)
    hit = diagnosis.first_match(smem.reshape(16, 8), diagnosis.store_suspects(
        d, place, 8, trans=False, fill=stmatrix.FILL, reg_names=("d0", "d1")))
    assert hit is not None and "only d0 was stored" in hit.cause and ".x2" in hit.cause


def test_a_stride_written_as_the_tile_width_and_lanes_on_another_matrix():
    place = tiles.mma_a()
    causes = dict((tuple(a), c) for a, c in diagnosis.address_suspects(place, 0, 2 * 56))
    hard = tuple(diagnosis.row_addresses(place, 0, 2 * 16))
    assert "use sld, not 16" in causes[hard]
    b = tiles.mma_b_row_major()
    again = tuple(diagnosis.row_addresses(b, 0, 16, order=[0, 0]))
    b_causes = dict((tuple(a), c) for a, c in diagnosis.address_suspects(b, 0, 16))
    assert b_causes[again].startswith("lanes 8-15 point at the rows of matrix 0")
    # a packed tile: no "padded" cause to confuse with the right one
    assert not any("padded" in c for _, c in diagnosis.address_suspects(place, 0, 32))


def _suspects_made(monkeypatch) -> list[str]:
    """Count every call that builds suspects, through the names the exercises use."""
    made: list[str] = []
    for name in ("load_suspects", "store_suspects", "address_suspects"):
        real = getattr(diagnosis, name)

        def counted(*args, _real=real, _name=name, **kw):
            made.append(_name)
            return _real(*args, **kw)
        monkeypatch.setattr(diagnosis, name, counted)
    return made


def test_a_right_kernel_costs_no_suspects_and_a_wrong_one_still_gets_its_cause(monkeypatch):
    """Suspects are emulated only for a wrong output: every course kernel's solution passes its
    check (hidden runs too) without building one, and a wrong kernel still has its cause named
    from them."""
    from ptxlab.authoring.course_cases import solution_kernels
    made = _suspects_made(monkeypatch)
    solutions = solution_kernels()
    assert solutions
    for exercise in {id(e): e for _, e, _ in solutions}.values():
        # visible launches built afresh, so their suspects are counted when first made
        monkeypatch.setattr(exercise, "_visible_runs", None)
    for _, exercise, source in solutions:
        for hidden in (False, True):
            result = exercise.evaluate(source, hidden=hidden)
            assert result.passed, (exercise.key, result.message)
    assert made == []
    source = dict((e.key, s) for _, e, s in solutions)["ldmatrix.a_operand_kernel"]
    wrong = source.replace("lane % 16", "(lane + 1) % 16")
    assert wrong != source
    result = ldmatrix.a_operand_kernel.evaluate(wrong)
    assert not result.passed and "load_suspects" in made
    assert any("row" in a for a in result.advice), result.advice
