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

import os
from functools import lru_cache

import numpy as np

__all__ = ["ALIGN_BITS", "mma_sum", "mma_bits", "general_bits", "few_warps_bits", "is_few",
           "stacked_inputs", "step_powers", "exponents", "round_f32_toward_zero"]

#: Bits kept below the largest product exponent when the terms are aligned.
ALIGN_BITS = 25
#: Smallest normal exponent of each input format (subnormals count as this exponent).
_EMIN = {"f16": -14, "bf16": -126, "tf32": -126, "f32": -126}
#: The canonical NaN the GPU writes.
CANONICAL_NAN = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}


def exponents(values: np.ndarray, fmt: str) -> np.ndarray:
    """Exponent field of each value as the hardware sees it (``-inf`` for zeros), as float64.

    Read from the float64 bits (every input value is a normal float64). An infinity or NaN
    gets -1: its output is decided by IEEE rules whatever its alignment."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    field = ((values.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.float64)
    e = np.maximum(field - 1023.0, _EMIN[fmt])
    e[field == 0x7FF] = -1.0
    e[values == 0] = -np.inf
    return e


def round_f32_toward_zero(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, truncating the significand; a sum of 2**128 or more is infinite
    (the exponent overflows), as the tensor core does, rather than the largest finite value.

    In the f32 normal range, clearing the 29 significand bits float32 lacks is the truncation,
    and the conversion after it is exact; below it, the f32 subnormal grid of 2**-149 is."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    kept = (x.view(np.uint64) & np.uint64(~((1 << 29) - 1) & (2**64 - 1))).view(np.float64)
    size = np.abs(x)
    with np.errstate(over="ignore", invalid="ignore"):
        if (size < 2.0**-126).any():
            kept = np.where(size < 2.0**-126, np.trunc(x * 2.0**149) * 2.0**-149, kept)
        f = kept.astype(np.float32)
        if not (size < 2.0**128).all():                    # infinities, NaNs, overflow
            f = np.where(size >= 2.0**128, np.copysign(np.float32(np.inf), x), f)
            f = np.where(np.isnan(x), x.astype(np.float32), f).astype(np.float32)
    return f


#: Warps per piece of :func:`mma_sum`'s work: each ``(M, N, warps)`` temporary stays cache-sized.
_CHUNK = 256
#: Up to this many warps, all K terms go into one numpy call (few calls matter more than cache).
_WHOLE_K_WARPS = 16
_pools: dict = {}


def _workers():
    """Threads for the pieces of a large batch (numpy lets go of the GIL in its loops); one
    pool per process, as a pool does not survive a fork. (Imported here: a one-warp check in
    a new process never needs it.)"""
    from concurrent.futures import ThreadPoolExecutor
    pid = os.getpid()
    if pid not in _pools:
        _pools.clear()
        _pools[pid] = ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0))),
                                         thread_name_prefix="ptxlab-mma")
    return _pools[pid]


def _power_of_two(e: np.ndarray) -> np.ndarray:
    """``2.0 ** e`` for whole ``e`` within float64's normal exponents, built from its bits."""
    return ((e.astype(np.int64) + 1023) << 52).view(np.float64)


def _clear_specials(terms: np.ndarray, flags: tuple) -> None:
    """Note which outputs an infinite or NaN product decides, and make those products 0."""
    for flag, hit in zip(flags, (np.isnan(terms), terms == np.inf, terms == -np.inf)):
        flag |= hit.reshape(-1, *flag.shape).any(axis=0)
    terms[~np.isfinite(terms)] = 0.0


def _aligned_sums(At: np.ndarray, Bt: np.ndarray, Ct: np.ndarray, in_fmt: str,
                  c_fmt: str) -> tuple[np.ndarray, tuple | None]:
    """Steps 1-3 for one piece: the exact sums ``(M, N, W)``, and where any input is infinite
    or NaN, the masks ``(nan, +inf, -inf)`` of the outputs IEEE rules decide.

    The warps are the last, contiguous axis, so every numpy call runs over whole rows of
    warps. For many warps, K is a Python loop of 16 or 8 over cache-sized ``(M, N, W)``
    arrays; for a few, all K go into one call. The truncated terms are integers below 2**27,
    so adding them in any order is exact."""
    with np.errstate(invalid="ignore", over="ignore"):
        ea, eb = exponents(At, in_fmt), exponents(Bt, in_fmt)       # (K, M, W), (K, N, W)
        emax = exponents(Ct, c_fmt)                                 # (M, N, W)
        whole = At.shape[-1] <= _WHOLE_K_WARPS              # all K in one call, else a loop
        term = np.empty_like(emax)
        if whole:
            np.maximum(emax, (ea[:, :, None, :] + eb[:, None, :, :]).max(axis=0), out=emax)
        else:
            for k in range(At.shape[0]):
                np.maximum(emax, np.add(ea[k][:, None, :], eb[k][None, :, :], out=term),
                           out=emax)
        emax[np.isinf(emax)] = 0.0                                  # all terms zero
        # scaling by a power of two is exact here (the scaled terms lie within 2**27, and a term
        # that would underflow truncates to zero either way), so a multiplication does it
        up = _power_of_two(ALIGN_BITS - emax)                       # (M, N, W)
        special = not (np.isfinite(At).all() and np.isfinite(Bt).all()
                       and np.isfinite(Ct).all())
        flags = None
        if special:
            flags = (np.isnan(Ct), Ct == np.inf, Ct == -np.inf)
            Ct = np.where(np.isfinite(Ct), Ct, 0.0)
        S = np.trunc(Ct * up)
        if whole:
            terms = At[:, :, None, :] * Bt[:, None, :, :]                 # exact, (K, M, N, W)
            if special:
                _clear_specials(terms, flags)
            terms *= up
            S += np.trunc(terms, out=terms).sum(axis=0)
        else:
            for k in range(At.shape[0]):
                np.multiply(At[k][:, None, :], Bt[k][None, :, :], out=term)   # exact
                if special:
                    _clear_specials(term, flags)
                term *= up
                np.trunc(term, out=term)
                S += term
        S *= _power_of_two(emax - ALIGN_BITS)
    return S, flags


def mma_sum(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
            out_fmt: str) -> np.ndarray:
    """Bits of ``D = A @ B + C`` for ``W`` warps, the warps last: ``A (K, M, W)`` (the first
    operand with k first), ``B (K, N, W)``, ``C (M, N, W)``.

    Inputs are exact float64 values of the operands (tf32 already reduced to 19 bits).
    Returns ``(M, N, W)`` uint32 holding f32 or f16 bit patterns. A batch of more than
    ``_CHUNK`` warps is summed in pieces, on as many threads as this process may use.
    """
    return mma_bits(A, B, C, in_fmt, c_fmt, out_fmt).astype(np.uint32, copy=False)


def mma_bits(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
             out_fmt: str) -> np.ndarray:
    """:func:`mma_sum` with the bits in the output format's own width: uint16 for f16 (as a
    fragment packs them), uint32 for f32.

    A few warps (one piece, at most ``_WHOLE_K_WARPS``) go through :func:`few_warps_bits`,
    which needs a fraction of the numpy calls; it hands back the sums with an infinity or NaN."""
    if out_fmt not in ("f32", "f16"):
        raise ValueError(f"accumulator type {out_fmt} is not a floating-point format")
    if is_few(A.shape[-1]):
        with np.errstate(invalid="ignore", over="ignore"):   # inf*0 and the like: see None
            bits = few_warps_bits(stacked_inputs(A, in_fmt), stacked_inputs(B, in_fmt),
                                  np.asarray(C, np.float64).transpose(1, 0, 2), in_fmt, c_fmt,
                                  out_fmt)
        if bits is not None:
            return bits.transpose(1, 0, 2)
    return general_bits(A, B, C, in_fmt, c_fmt, out_fmt)


def general_bits(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
                 out_fmt: str) -> np.ndarray:
    """:func:`mma_bits` by the general sum alone (infinities, NaNs, any number of warps): for
    a caller whose :func:`few_warps_bits` has already declined."""
    bits = _general_sum(A, B, C, in_fmt, c_fmt, out_fmt)
    return bits.astype(np.uint16) if out_fmt == "f16" else bits


def stacked_inputs(values: np.ndarray, fmt: str) -> np.ndarray:
    """``(2, ...)``: the float64 values of an operand (0 for an infinity or NaN) over step 1's
    powers (:func:`step_powers`), as :func:`few_warps_bits` takes each operand."""
    v = np.asarray(values, np.float64)
    return np.stack([np.where(np.isfinite(v), v, 0.0), step_powers(v, fmt)])


def is_few(warps: int) -> bool:
    """Whether :func:`few_warps_bits` takes a batch of ``warps`` (one piece, all K at once)."""
    return warps <= min(_WHOLE_K_WARPS, _CHUNK)


def _general_sum(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
                 out_fmt: str) -> np.ndarray:
    """Every case, infinities, NaNs and any number of warps included: ``(M, N, W)`` uint32."""
    pieces = [slice(i, i + _CHUNK) for i in range(0, A.shape[-1], _CHUNK)]
    if len(pieces) == 1:
        done = [_aligned_sums(A, B, C, in_fmt, c_fmt)]
    else:
        done = list(_workers().map(
            lambda p: _aligned_sums(*(np.ascontiguousarray(x[..., p]) for x in (A, B, C)),
                                    in_fmt, c_fmt), pieces))
    S = np.concatenate([s for s, _ in done], axis=-1)               # (M, N, W)
    special = any(f is not None for _, f in done)
    if special:   # IEEE: a NaN or inf*0 gives NaN; +inf and -inf together give NaN
        nan, pos, neg = (np.concatenate([f[i] if f is not None else np.zeros(s.shape, bool)
                                         for s, f in done], axis=-1)
                         for i in range(3))
        nan = nan | (pos & neg)
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


# ---------------------------------------------------------------------------------------------
# A few warps, finite inputs: the same four steps in about half as many numpy calls
# ---------------------------------------------------------------------------------------------

#: Step 1's ``2**e`` of a zero input: times the largest input (``2**127``) still far below every
#: real product (at least ``2**-252``), so it never decides ``emax``; squared, still normal.
_ZERO_POWER = 2.0 ** -500
#: Largest ``2**emax`` that leaves an f32 sum in range (a sum lies below ``2**(emax + 7)``),
#: and the smallest (a non-zero sum is at least ``2**(emax - 25)``).
_F32_SAFE = (2.0 ** (-126 + ALIGN_BITS), 2.0 ** (127 - 7))


@lru_cache(maxsize=None)
def _power_table(fmt: str, zero_power: float) -> np.ndarray:
    """Step 1's ``2**e`` of a float64 value, looked up by ``value.view(int64) >> 52`` (sign and
    exponent field; a negative value gives a negative index, which wraps to the same field).

    Every value of an input format is a normal float64 (or zero, or special), so the field
    alone decides: ``2**max(field - 1023, emin)``, ``zero_power`` for a zero, ``inf`` for an
    infinity or NaN (so that any product with one shows). Read-only float64 ``(4096,)``."""
    field = np.arange(4096, dtype=np.int64) & 0x7FF
    table = np.ldexp(1.0, np.clip(field - 1023, _EMIN[fmt], 1023))
    table[field == 0] = zero_power
    table[field == 0x7FF] = np.inf
    table.setflags(write=False)
    return table


def step_powers(values: np.ndarray, fmt: str, zero_power: float = _ZERO_POWER) -> np.ndarray:
    """``2**e`` of step 1 for each float64 value of format ``fmt`` (``zero_power`` for a zero,
    ``inf`` for an infinity or NaN): what :func:`few_warps_bits` takes beside the values."""
    return _power_table(fmt, zero_power)[np.asarray(values, np.float64).view(np.int64) >> 52]


#: The reductions, called as ufuncs (the ndarray methods add a Python layer per call).
_MAX, _SUM = np.maximum.reduce, np.add.reduce
#: Bits float32 lacks below a float64's significand (cleared to truncate into f32).
_KEEP_F32 = np.uint64(~((1 << 29) - 1) & (2**64 - 1))


def few_warps_bits(A: np.ndarray, B: np.ndarray, C: np.ndarray, in_fmt: str, c_fmt: str,
                   out_fmt: str) -> np.ndarray | None:
    """Steps 1-4 for a few warps, as :func:`mma_bits` but transposed: ``C`` and the result are
    ``(N, M, W)`` (M, the longer, innermost makes numpy's broadcast loops longer); ``None``
    where an input is infinite or NaN (the general sum applies IEEE rules).

    ``A (2, K, M, W)`` and ``B (2, K, N, W)`` stack each operand's values (an infinity or NaN
    may read 0) on step 1's powers ``2**e`` (:func:`step_powers`), so that one broadcast
    multiplication gives both the exact products and ``2**(e(a) + e(b))``; ``C`` is values
    only. A zero ``c`` counts as ``2**(2 * emin)`` of the inputs, at or below every real
    product: it never decides ``emax``, and where every term is zero it keeps ``emax`` finite
    (the sum is 0 whatever its scale). From ``emax`` alone follows whether a sum may leave
    f32's normal range; only then the general truncation runs."""
    prods = A[:, :, None, :, :] * B[:, :, :, None, :]          # exact, (2, K, N, M, W)
    emax = _MAX(prods[1], axis=0)                                # 2**emax, (N, M, W)
    np.maximum(emax, step_powers(C, c_fmt, 2.0 ** (2 * _EMIN[in_fmt])), out=emax)
    hi = float(_MAX(emax, axis=None))
    if hi == np.inf:                                             # an infinity or NaN
        return None
    scale = np.divide(2.0 ** ALIGN_BITS, emax, out=emax)        # 2**(25 - emax), exact
    S = np.multiply(C, scale)
    np.trunc(S, out=S)
    terms = prods[0]
    terms *= scale
    S += _SUM(np.trunc(terms, out=terms), axis=0)
    S /= scale                                                   # exact: a power of two
    if out_fmt == "f16":
        if hi <= 2.0 ** 8:                                       # |sum| < 2**15: no overflow
            h = S.astype(np.float16)
        else:
            with np.errstate(over="ignore"):
                h = S.astype(np.float16)
        h += np.float16(0)                                       # -0 -> +0: the GPU writes +0
        return h.view(np.uint16)
    if hi <= _F32_SAFE[1] and 2.0 ** ALIGN_BITS / float(_MAX(scale, axis=None)) >= _F32_SAFE[0]:
        S += 0.0                                                 # -0 -> +0
        return (S.view(np.uint64) & _KEEP_F32).view(np.float64).astype(np.float32).view(np.uint32)
    bits = round_f32_toward_zero(S).view(np.uint32)
    bits[(bits & np.uint32(0x7FFFFFFF)) == 0] = 0
    return bits
