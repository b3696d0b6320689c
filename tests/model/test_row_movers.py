"""The one-warp loaders and storers the CPU backend builds per instruction
(:func:`ptxlab.model.emulator.row_loader`, :func:`~ptxlab.model.emulator.row_storer`), the
register-major mma (:func:`~ptxlab.model.emulator.mma_warp`) and movmatrix's one gather,
against the general functions: the same registers, bytes, faults and messages."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.model import emulator, layouts, matrix_forms

MOVERS = [f for f in matrix_forms.all_forms() if f.op != "movmatrix"]


def _outcome(fn):
    try:
        return fn(), None
    except emulator.EmulatorError as exc:
        return None, (type(exc), str(exc), exc.lanes, exc.warp, exc.address)


@pytest.mark.parametrize("f", MOVERS, ids=lambda f: f.ptx)
@pytest.mark.parametrize("case", ["fine", "misaligned", "past the end", "negative",
                                  "one row twice", "at the end"])
def test_row_movers_match_the_general_functions(f, case):
    rng = np.random.default_rng(abs(hash((f.ptx, case))) % 2**32)
    n = f.address_lane_count
    smem = rng.integers(0, 256, 1024 + 7).astype(np.uint8)    # a size no unit divides
    rows = (rng.permutation(64)[:n] * 16).astype(np.int64)
    rows[n - 1] = {"misaligned": rows[n - 1] + 4, "past the end": 1024 - 8, "negative": -16,
                   "one row twice": rows[0], "at the end": 1024 - 16}.get(case, rows[n - 1])
    addrs = np.zeros(32, np.int64)
    addrs[:n] = rows
    if f.op == "ldmatrix":
        want, want_err = _outcome(lambda: emulator.ldmatrix_form(smem, addrs, f))
        got, got_err = _outcome(lambda: emulator.row_loader(f)(smem, rows))
        assert got_err == want_err
        if want is not None:
            assert got.shape == (f.regs, 32) and np.array_equal(got, want.T)
    else:
        regs = rng.integers(0, 2**32, (f.regs, 32)).astype(np.uint32)
        want_mem, got_mem = smem.copy(), smem.copy()
        _, want_err = _outcome(lambda: emulator.stmatrix_form(want_mem, addrs, regs.T, f))
        _, got_err = _outcome(lambda: emulator.row_storer(f)(got_mem, rows, regs))
        assert got_err == want_err and np.array_equal(got_mem, want_mem)


@pytest.mark.parametrize("key", layouts.MMA_VARIANTS, ids=lambda k: ".".join(k))
def test_mma_warp_matches_mma(key):
    form = layouts.mma_form(*key)
    rng = np.random.default_rng(7)
    a, b, c = (rng.integers(0, 2**32, (32, lay.regs)).astype(np.uint32)
               for lay in (form.a, form.b, form.c))
    a[3, 0] = 0x7C007C00 if form.atype == "f16" else a[3, 0]        # an infinity: IEEE path
    with np.errstate(all="ignore"):
        want = emulator.mma(form.shape, a, b, c, atype=form.atype, btype=form.btype,
                            ctype=form.ctype, dtype=form.dtype)
        got = emulator.mma_warp(form, a.T.copy(), b.T.copy(), c.T.copy())
    assert np.array_equal(got, want.T)
    with pytest.raises(emulator.BadOperand):
        emulator.mma_warp(form, a, b.T.copy(), c.T.copy())


def test_movmatrix_is_the_transpose_of_the_fragment():
    rng = np.random.default_rng(3)
    regs = rng.integers(0, 2**32, (3, 32)).astype(np.uint32)
    lay = layouts.movmatrix_fragment()
    mats = emulator.fragment_to_matrices(regs[..., None], lay)
    want = emulator.matrices_to_fragment(np.swapaxes(mats, -1, -2), lay)[..., 0]
    assert np.array_equal(emulator.movmatrix(regs), want)
    assert np.array_equal(emulator.movmatrix(regs[1]), want[1])
