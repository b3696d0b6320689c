"""The tensor-core sum (``ptxlab.model.tensorcore.mma_sum``) against a plain reference written
from its four stated steps, one output element at a time in exact rational arithmetic.

The fast sum runs the warps as one vector and splits large batches across threads; this
reference does neither, so any slip of the vector form (an axis, a piece boundary, an infinity
or NaN flag, the final truncation) shows up as an element that differs.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ptxlab.model import emulator, tensorcore

EMIN = {"f16": -14, "bf16": -126, "tf32": -126, "f32": -126}
NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}
INF = {"f32": (0x7F800000, 0xFF800000), "f16": (0x7C00, 0xFC00)}


def _exponent(x: float, fmt: str) -> float:
    if x == 0:
        return -math.inf
    if not math.isfinite(x):
        return -1.0                       # an infinity or NaN decides its output by IEEE rules
    return float(max(math.frexp(x)[1] - 1, EMIN[fmt]))


def _round(total: Fraction, out_fmt: str) -> int:
    x = float(total)                                          # exact: the sum fits a float64
    if out_fmt == "f16":
        bits = int(np.array(x).astype(np.float16).view(np.uint16))
        return 0 if bits & 0x7FFF == 0 else bits
    if abs(x) >= 2.0 ** 128:
        return INF["f32"][x < 0]
    f = np.float32(x)
    if abs(float(f)) > abs(x):                                # nearest went away from zero
        f = np.nextafter(f, np.float32(0))
    bits = int(np.array(f, np.float32).view(np.uint32))
    return 0 if bits & 0x7FFFFFFF == 0 else bits


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, in_fmt: str, c_fmt: str,
              out_fmt: str) -> np.ndarray:
    """``a (W, M, K)``, ``b (W, K, N)``, ``c (W, M, N)`` exact values -> bits ``(W, M, N)``."""
    W, M, K = a.shape
    N = b.shape[2]
    out = np.zeros((W, M, N), np.uint32)
    for w, m, n in np.ndindex(W, M, N):
        prods = [float(a[w, m, k]) * float(b[w, k, n]) for k in range(K)]
        cv = float(c[w, m, n])
        every = prods + [cv]
        if any(math.isnan(p) for p in every) or (math.inf in every and -math.inf in every):
            out[w, m, n] = NAN[out_fmt]
            continue
        if math.inf in every or -math.inf in every:
            out[w, m, n] = INF[out_fmt][-math.inf in every]
            continue
        exps = [_exponent(float(a[w, m, k]), in_fmt) + _exponent(float(b[w, k, n]), in_fmt)
                for k in range(K)] + [_exponent(cv, c_fmt)]
        emax = max(exps)
        if emax == -math.inf:
            continue                                          # every term zero: +0
        grid = Fraction(2) ** int(emax - 25)          # 25 bits kept below the largest exponent
        terms = [Fraction(a[w, m, k]) * Fraction(b[w, k, n]) for k in range(K)] + [Fraction(cv)]
        total = sum(math.trunc(t / grid) * grid for t in terms)
        out[w, m, n] = _round(total, out_fmt)
    return out


def _values(rng, shape, fmt: str, spread: int, specials: bool) -> np.ndarray:
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    x[rng.random(shape) < 0.15] = 0
    if specials:
        x.flat[rng.integers(0, x.size, 4)] = [np.inf, -np.inf, np.nan, np.inf]
    with np.errstate(all="ignore"):
        bits = emulator.element_bits(x, "f32" if fmt == "tf32" else fmt)
    return emulator._decode(bits, fmt)


FORMS = [("f16", 16, "f32", "f32"), ("f16", 16, "f16", "f16"), ("f16", 8, "f32", "f32"),
         ("bf16", 16, "f32", "f32"), ("tf32", 8, "f32", "f32")]


@pytest.mark.parametrize("in_fmt,K,c_fmt,out_fmt", FORMS)
@pytest.mark.parametrize("spread,specials", [(2, False), (12, False), (40, True)])
@pytest.mark.parametrize("whole_k", [True, False], ids=["all-K-at-once", "K-loop"])
def test_the_vector_sum_matches_the_stated_steps(in_fmt, K, c_fmt, out_fmt, spread, specials,
                                                  whole_k, monkeypatch):
    """Three warps split into pieces of two (so two pieces, on the thread pool), with zeros,
    wide exponent ranges and, in one set, infinities and NaNs; summed both ways the sum has
    (all K terms in one call for a few warps, a loop over K for many)."""
    monkeypatch.setattr(tensorcore, "_CHUNK", 2)
    monkeypatch.setattr(tensorcore, "_WHOLE_K_WARPS", 16 if whole_k else 0)
    rng = np.random.default_rng(hash((in_fmt, K, c_fmt, spread)) % 2**32)
    a = _values(rng, (3, 16, K), in_fmt, spread, specials)
    b = _values(rng, (3, K, 8), in_fmt, spread, specials)
    c = _values(rng, (3, 16, 8), c_fmt, spread, specials)
    with np.errstate(all="ignore"):
        got = tensorcore.mma_sum(a.transpose(2, 1, 0), b.transpose(1, 2, 0),
                                 c.transpose(1, 2, 0), in_fmt, c_fmt, out_fmt)
    want = reference(a, b, c, in_fmt, c_fmt, out_fmt)
    bad = np.argwhere(got.transpose(2, 0, 1) != want)
    assert bad.size == 0, (f"{len(bad)} of {want.size} differ; first (warp, m, n) "
                           f"{tuple(bad[0])}: reference 0x{int(want[tuple(bad[0])]):x}, "
                           f"vector 0x{int(got.transpose(2, 0, 1)[tuple(bad[0])]):x}")


def test_f32_truncation_matches_nearest_then_step_toward_zero():
    """The bit-clearing truncation against rounding to nearest and stepping back, over normal,
    subnormal, overflowing and special sums."""
    rng = np.random.default_rng(5)
    x = np.concatenate([np.ldexp(rng.uniform(-2, 2, 20000), rng.integers(-160, 140, 20000)),
                        [0.0, -0.0, 2.0**128, -2.0**128, 2.0**128 - 2.0**100, 2.0**-149,
                         2.0**-150, -3 * 2.0**-150, 2.0**-126 * (1 - 2.0**-30)]])
    with np.errstate(all="ignore"):
        got = tensorcore.round_f32_toward_zero(x)
    for v, g in zip(x, got):
        if abs(v) >= 2.0**128:
            assert np.isinf(g) and np.sign(g) == np.sign(v)
            continue
        with np.errstate(over="ignore"):
            f = np.float32(v)
        if abs(float(f)) > abs(v):
            f = np.nextafter(f, np.float32(0))
        assert np.array(g).view(np.uint32) == np.array(f).view(np.uint32), v
    assert np.isnan(tensorcore.round_f32_toward_zero(np.array([np.nan]))).all()


@pytest.mark.parametrize("in_fmt,K,c_fmt,out_fmt", FORMS)
@pytest.mark.parametrize("spread,specials", [(2, False), (12, False), (40, False), (40, True),
                                             (70, False)])
@pytest.mark.parametrize("warps", [1, 3])
def test_the_few_warps_sum_matches_the_stated_steps(in_fmt, K, c_fmt, out_fmt, spread,
                                                    specials, warps):
    """One warp and a few, as the CPU backend sums them (its table-driven path): zeros, sums
    near f32's subnormal and overflow bounds, f16 overflow, and infinities and NaNs, which it
    hands to the general sum."""
    rng = np.random.default_rng(hash((in_fmt, K, c_fmt, spread, warps, 1)) % 2**32)
    a = _values(rng, (warps, 16, K), in_fmt, spread, specials)
    b = _values(rng, (warps, K, 8), in_fmt, spread, specials)
    c = _values(rng, (warps, 16, 8), c_fmt, spread, specials)
    a[0, 3] = -0.0                                # a row of zeros meets a zero c: every term 0
    c[0, 3, :4] = 0
    b[0, :, 5] = np.abs(b[0, :, 5])               # ... and a sum of -0 terms only, in f32: +0
    c[0, 3, 5] = -0.0
    with np.errstate(all="ignore"):
        got = tensorcore.mma_sum(np.ascontiguousarray(a.transpose(2, 1, 0)),
                                 np.ascontiguousarray(b.transpose(1, 2, 0)),
                                 np.ascontiguousarray(c.transpose(1, 2, 0)),
                                 in_fmt, c_fmt, out_fmt)
    want = reference(a, b, c, in_fmt, c_fmt, out_fmt)
    bad = np.argwhere(got.transpose(2, 0, 1) != want)
    assert got.dtype == np.uint32 and bad.size == 0, (
        f"{len(bad)} of {want.size} differ; first (warp, m, n) {tuple(bad[0])}")


def test_the_few_warps_sum_takes_finite_sums_and_leaves_specials():
    """The table-driven sum decides every finite case itself, and leaves infinities and NaNs
    to the general sum (which applies IEEE rules)."""
    def few(x, c, y=None):
        y = x[:, :8] if y is None else y
        a, b = (np.stack([v, tensorcore.step_powers(v, "f16")]) for v in (x, y))
        with np.errstate(invalid="ignore"):
            return tensorcore.few_warps_bits(a, b, c, "f16", "f32", "f32")
    x = np.ones((16, 16, 1))
    c = np.zeros((8, 16, 1))                            # (N, M, W): the few-warps order
    assert few(x, c) is not None
    c[3, 2, 0] = np.inf
    assert few(x, c) is None
    c[3, 2, 0] = 0
    x[1, 1, 0] = np.nan
    assert few(x, c) is None
    x[1, 1, 0] = 0
    x[:, 2] = -np.inf                                   # an infinity times only zeros
    assert few(x, c, np.zeros((16, 8, 1))) is None


@pytest.mark.parametrize("out_fmt", ["f32", "f16"])
@pytest.mark.parametrize("edge", ["subnormal", "overflow"])
def test_the_few_warps_sum_at_the_edges_of_f32(edge, out_fmt):
    """bf16 sums of one warp that end in f32's subnormals (truncated to the 2**-149 grid), or
    at and past 2**128 (infinite): the table-driven sum must pass them to the general
    truncation."""
    rng = np.random.default_rng(11)
    sig = lambda shape: 1 + rng.integers(0, 128, shape) / 128          # 8-bit significands
    a = sig((1, 16, 16)) * np.where(rng.random((1, 16, 16)) < 0.5, -1, 1)
    b = sig((1, 16, 8))
    c = np.zeros((1, 16, 8))
    if edge == "subnormal":                                # products near 2**-140
        a *= 2.0 ** -70
        b *= 2.0 ** -70
    else:                                                  # near 2**126, some with a huge c
        a = np.abs(a) * 2.0 ** 63
        b *= 2.0 ** 63
        b[0, 8:] *= 2.0 ** -20
        c[0, :8] = (2 - 2.0 ** -23) * 2.0 ** 127
    got = tensorcore.mma_sum(np.ascontiguousarray(a.transpose(2, 1, 0)),
                             np.ascontiguousarray(b.transpose(1, 2, 0)),
                             np.ascontiguousarray(c.transpose(1, 2, 0)), "bf16", "f32", out_fmt)
    want = reference(a, b, c, "bf16", "f32", out_fmt)
    assert (got.transpose(2, 0, 1) == want).all()
    if out_fmt == "f32" and edge == "subnormal":
        assert (want & 0x7F800000 == 0).all()
    elif out_fmt == "f32":
        assert (want[0, :8] & 0x7FFFFFFF == 0x7F800000).all()
