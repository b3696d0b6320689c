"""The arithmetic of a tensor core's floating-point ``mma``, as measured on the H100.

Round-to-nearest after every addition is not what the hardware does, and a learner who compares
a GPU result with ``numpy`` deserves to know why the last bits differ. Fitted to 1.9 million
output elements recorded on an H100 and checked on as many fresh ones
(``measure/gpu/collect_mma_rounding.py``; 0 mismatches, see ``reports/hardware/MMA_ROUNDING.md``), one output element ``d = sum_k a_k * b_k + c`` is computed as:

1. every product ``a_k * b_k`` is exact; its exponent is taken as ``e(a_k) + e(b_k)`` (the
   exponents of the two inputs, before normalising the product, so a product in [2, 4) keeps
   the smaller exponent);
2. all K products and ``c`` are aligned to the largest of those exponents, ``emax``, and each is
   truncated toward zero to a multiple of ``2**(emax - 25)``;
3. the truncated terms are added exactly, in one step for the whole K (16 for m16n8k16, 8 for
   m16n8k8);
4. the sum is rounded once: toward zero into an f32 accumulator, to nearest-even into f16.

Infinities and NaNs follow IEEE rules (a NaN, ``inf * 0`` or ``inf - inf`` gives the canonical
NaN); a result that rounds to zero is ``+0``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ALIGN_BITS", "mma_sum", "exponents", "round_f32_toward_zero"]

#: Bits kept below the largest product exponent when the terms are aligned.
ALIGN_BITS = 25
#: Smallest normal exponent of each input format (subnormals count as this exponent).
_EMIN = {"f16": -14, "bf16": -126, "tf32": -126, "f32": -126}
#: The canonical NaN the GPU writes.
CANONICAL_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}


def exponents(values: np.ndarray, fmt: str) -> np.ndarray:
    """Exponent field of each value as the hardware sees it (``-inf`` for zeros), as float64."""
    _, e = np.frexp(values)                           # values = m * 2**e with 0.5 <= |m| < 1
    e = np.maximum(e.astype(np.float64) - 1, _EMIN[fmt])
    return np.where(values == 0, -np.inf, e)


def round_f32_toward_zero(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, truncating the significand; a sum of 2**128 or more is infinite
    (the exponent overflows), as the tensor core does, rather than the largest finite value."""
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    too_far = np.abs(f.astype(np.float64)) > np.abs(x)
    f = np.where(too_far, np.nextafter(f, np.float32(0)), f).astype(np.float32)
    return np.where(np.abs(x) >= 2.0**128, np.copysign(np.float32(np.inf), x), f).astype(np.float32)


def _largest_exponent_sums(ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """``max_k ea[w, m, k] + eb[w, k, n]`` for exponents that are whole numbers or ``-inf``.

    As a matrix product where that is exact: with ``32**ea`` and ``32**eb`` (powers of two),
    ``sum_k 32**(ea+eb)`` lies between ``32**emax`` and ``K * 32**emax < 32**(emax+1)`` for
    K up to 16, rounding of a sum of positive terms keeps it there, and the exponent of the sum
    divided by 5 is ``emax``. Formats whose exponents reach past 2**±150 take the direct max.
    """
    small = ea.shape[-1] <= 16 and all(
        e.max() <= 30 and np.min(e, where=np.isfinite(e), initial=0.0) >= -30 for e in (ea, eb))
    if not small:
        return (ea[:, :, :, None] + eb[:, None, :, :]).max(axis=2)
    s = np.matmul(np.exp2(5 * ea), np.exp2(5 * eb))
    _, x = np.frexp(s)                                               # s = f * 2**x, 1/2 <= f < 1
    return np.where(s == 0, -np.inf, np.floor_divide(x - 1, 5).astype(np.float64))


#: Warps per chunk in :func:`mma_sum`: keeps the (chunk, M, K, N) temporaries cache-sized.
_CHUNK = 256


def mma_sum(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
            out_fmt: str) -> np.ndarray:
    """Bits of ``D = A @ B + C`` for batches ``A (W, M, K)``, ``B (W, K, N)``, ``C (W, M, N)``.

    Inputs are exact float64 values of the operands (tf32 already reduced to 19 bits).
    Returns ``(W, M, N)`` uint32 holding f32 or f16 bit patterns.
    """
    if A.shape[0] > _CHUNK:
        return np.concatenate([mma_sum(A[i:i + _CHUNK], B[i:i + _CHUNK], C[i:i + _CHUNK],
                                       in_fmt, c_fmt, out_fmt)
                               for i in range(0, A.shape[0], _CHUNK)])
    # contiguous operands: the broadcast products below run a quarter faster on them
    A, C = np.ascontiguousarray(A), np.ascontiguousarray(C)
    with np.errstate(invalid="ignore", over="ignore"):
        B = np.ascontiguousarray(B)
        # (W, M, K, N): K in the middle, so the sums over K add whole rows of N at a time
        P = A[:, :, :, None] * B[:, None, :, :]                      # exact
        ea, eb, ce = exponents(A, in_fmt), exponents(B, in_fmt), exponents(C, c_fmt)
        special = not (np.isfinite(A).all() and np.isfinite(B).all() and np.isfinite(C).all())
        emax = np.maximum(_largest_exponent_sums(ea, eb), ce)
        emax = np.where(np.isfinite(emax), emax, 0.0)                # all terms zero
        shift = (ALIGN_BITS - emax).astype(np.int64)                # scale to the truncation grid
        if special:
            finite_p, finite_c = np.isfinite(P), np.isfinite(C)
            Pf, Cf = np.where(finite_p, P, 0.0), np.where(finite_c, C, 0.0)
        else:
            Pf, Cf = P, C
        # scaling by a power of two is exact here (the scaled terms lie within 2**26, and a
        # term that would underflow truncates to zero either way), so a multiplication does
        # what ``np.ldexp`` does, for less
        up = np.ldexp(1.0, shift)
        scaled = np.multiply(Pf, up[:, :, None, :], out=P if Pf is P else None)
        T = np.trunc(scaled, out=scaled).sum(axis=2)
        S = (T + np.trunc(Cf * up)) * np.ldexp(1.0, -shift)
        if special:   # IEEE: a NaN or inf*0 gives NaN; +inf and -inf together give NaN
            nan = np.isnan(P).any(axis=2) | np.isnan(C)
            pos = (P == np.inf).any(axis=2) | (C == np.inf)
            neg = (P == -np.inf).any(axis=2) | (C == -np.inf)
            nan |= pos & neg
    if out_fmt == "f32":
        bits = round_f32_toward_zero(S).view(np.uint32)
        inf_bits = (0x7F800000, 0xFF800000)
    elif out_fmt == "f16":
        with np.errstate(over="ignore"):
            bits = S.astype(np.float16).view(np.uint16)
        inf_bits = (0x7C00, 0xFC00)
    else:
        raise ValueError(f"accumulator type {out_fmt} is not a floating-point format")
    bits = bits.astype(np.uint32)
    zero_mask = np.uint32(0x7FFFFFFF if out_fmt == "f32" else 0x7FFF)
    bits[(bits & zero_mask) == 0] = 0                                # +0, never -0
    if special:
        bits = np.where(pos & ~nan, np.uint32(inf_bits[0]), bits)
        bits = np.where(neg & ~nan, np.uint32(inf_bits[1]), bits)
        bits = np.where(nan, np.uint32(CANONICAL_NAN[out_fmt]), bits)
    return bits.astype(np.uint32)
