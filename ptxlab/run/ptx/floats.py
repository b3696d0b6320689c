"""Floating-point arithmetic the way PTX defines it, bit for bit, on numpy arrays.

Every result is computed exactly (or as float64 rounded *to odd*, which keeps enough information
for any later rounding to 24 bits or fewer), then rounded once to the target format with the
rounding mode the instruction names: ``rn`` (nearest even), ``rz`` (toward zero), ``rm`` (toward
-inf), ``rp`` (toward +inf), ``rna`` (nearest, ties away). This avoids the double-rounding errors
of "compute in float64, cast to float32" for fma and for the directed modes.

NaN results are written as the canonical NaN of each format, as the GPU does; sign flips
(``neg``, ``abs``) are bit operations and keep NaN payloads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROUNDING_MODES = ("rn", "rz", "rm", "rp", "rna")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: precision (with the hidden bit) and exponent range."""
    name: str
    bits: int           # storage bits
    precision: int      # significand bits including the hidden one
    emin: int           # exponent of the smallest normal number
    emax: int           # exponent of the largest finite number
    canonical_nan: int

    @property
    def max_finite(self) -> float:
        return float((2.0 - 2.0 ** (1 - self.precision)) * 2.0 ** self.emax)

    @property
    def min_normal(self) -> float:
        return float(2.0 ** self.emin)


F16 = Format("f16", 16, 11, -14, 15, 0x7FFF)
BF16 = Format("bf16", 16, 8, -126, 127, 0x7FFF)
F32 = Format("f32", 32, 24, -126, 127, 0x7FFFFFFF)
TF32 = Format("tf32", 32, 11, -126, 127, 0x7FFFFFFF)
F64 = Format("f64", 64, 53, -1022, 1023, 0x7FFFFFFFFFFFFFFF)
FORMATS = {f.name: f for f in (F16, BF16, F32, TF32, F64)}

_UINT = {16: np.uint16, 32: np.uint32, 64: np.uint64}


# ---------------------------------------------------------------------------------------------
# Bits <-> values
# ---------------------------------------------------------------------------------------------

def decode(bits: np.ndarray, fmt: Format) -> np.ndarray:
    """Raw bits -> exact float64 values (NaN payloads are not kept)."""
    b = np.asarray(bits)
    if fmt is F16:
        return b.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt is BF16:
        return (b.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if fmt is F32:
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt is TF32:
        return (b.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if fmt is F64:
        return b.astype(np.uint64).view(np.float64)
    raise ValueError(fmt)


def encode(values: np.ndarray, fmt: Format) -> np.ndarray:
    """Values already representable in ``fmt`` (or +-inf/NaN) -> raw bits, NaN canonical."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt is F16:
            bits = v.astype(np.float16).view(np.uint16)
        elif fmt is BF16:
            bits = (v.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
        elif fmt is F32 or fmt is TF32:
            bits = v.astype(np.float32).view(np.uint32)
        else:
            bits = v.view(np.uint64)
    nan = np.isnan(v)
    if nan.any():
        bits = np.where(nan, _UINT[fmt.bits](fmt.canonical_nan), bits)
    return bits


# ---------------------------------------------------------------------------------------------
# Rounding
# ---------------------------------------------------------------------------------------------

def round_to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """``s`` = float64 nearest to an exact value ``s + err``: return that value rounded to odd.

    Rounding to odd at 53 bits and then once more to p <= 51 bits gives the correctly rounded
    p-bit result in every rounding mode, so later roundings need not know ``err``.
    """
    inexact = (err != 0) & np.isfinite(s)
    if not inexact.any():
        return s
    bits = s.view(np.uint64)
    even = (bits & np.uint64(1)) == 0
    fix = inexact & even
    if not fix.any():
        return s
    toward = np.where(err > 0, np.inf, -np.inf)
    return np.where(fix, np.nextafter(s, toward), s)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = fl(a + b) and the exact error e, with a + b = s + e (Knuth)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        bb = s - a
        e = (a - (s - bb)) + (b - bb)
    e = np.where(np.isfinite(s), e, 0.0)
    return s, e


def round_to_format(x: np.ndarray, fmt: Format, mode: str = "rn") -> np.ndarray:
    """Round float64 values to the nearest ``fmt`` values in ``mode`` (results as float64).

    Overflow follows IEEE: to infinity in ``rn``/``rna`` and toward it in the directed modes
    only when the rounding direction points that way; else the largest finite value.
    """
    x = np.asarray(x, dtype=np.float64)
    if fmt is F64:
        return x.copy()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ax = np.abs(x)
        finite = np.isfinite(x) & (ax > 0)
        # Exponent of each value (floor(log2|x|)), clamped below at the subnormal ulp.
        _, e = np.frexp(np.where(finite, ax, 1.0))
        e = e.astype(np.int64) - 1
        e = np.maximum(e, fmt.emin)
        ulp_exp = e - (fmt.precision - 1)
        q = np.ldexp(np.where(finite, x, 0.0), (-ulp_exp).astype(np.int32))
        if mode == "rn":
            r = np.rint(q)
        elif mode == "rz":
            r = np.trunc(q)
        elif mode == "rm":
            r = np.floor(q)
        elif mode == "rp":
            r = np.ceil(q)
        elif mode == "rna":
            r = np.sign(q) * np.floor(np.abs(q) + 0.5)
        else:
            raise ValueError(f"unknown rounding mode {mode}")
        out = np.ldexp(r, ulp_exp.astype(np.int32))
        big = np.abs(out) > fmt.max_finite
        if big.any():
            mf = fmt.max_finite
            pos = out > 0
            if mode in ("rn", "rna"):
                ov = np.where(pos, np.inf, -np.inf)
            elif mode == "rz":
                ov = np.where(pos, mf, -mf)
            elif mode == "rm":
                ov = np.where(pos, mf, -np.inf)
            else:
                ov = np.where(pos, np.inf, -mf)
            out = np.where(big, ov, out)
        # keep the sign of zero results (e.g. -tiny rounded to zero is -0.0)
        out = np.where(finite, np.copysign(out, x), x)
    return out


def flush_subnormal(x: np.ndarray, fmt: Format) -> np.ndarray:
    """``.ftz``: subnormal values become zero of the same sign."""
    sub = (x != 0) & (np.abs(x) < fmt.min_normal)
    if sub.any():
        return np.where(sub, np.copysign(0.0, x), x)
    return x


def saturate(x: np.ndarray) -> np.ndarray:
    """``.sat``: clamp to [0, 1]; NaN becomes +0."""
    with np.errstate(invalid="ignore"):
        y = np.clip(x, 0.0, 1.0)
    return np.where(np.isnan(x), 0.0, y)


def relu(x: np.ndarray) -> np.ndarray:
    """``.relu``: negative results become +0; NaN stays NaN (canonical once encoded)."""
    with np.errstate(invalid="ignore"):
        return np.where(x < 0, 0.0, x)


# ---------------------------------------------------------------------------------------------
# Arithmetic, correctly rounded
# ---------------------------------------------------------------------------------------------

def exact_op(op: str, a: np.ndarray, b: np.ndarray | None = None,
             c: np.ndarray | None = None) -> np.ndarray:
    """``a op b`` (or ``a*b + c`` for ``fma``) on float64 inputs that hold values of at most
    24 significant bits, rounded to odd at 53 bits (see :func:`round_to_odd`)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if op == "add":
            s, e = two_sum(a, b)
            return round_to_odd(s, e)
        if op == "sub":
            s, e = two_sum(a, -b)
            return round_to_odd(s, e)
        if op == "mul":
            return a * b          # exact: 24 + 24 bits fit in 53
        if op == "fma":
            p = a * b             # exact
            s, e = two_sum(p, c)
            return round_to_odd(s, e)
    raise ValueError(op)


def fp_result(x: np.ndarray, fmt: Format, mode: str, *, ftz: bool = False, sat: bool = False,
              relu_: bool = False) -> np.ndarray:
    """Round an exact (or rounded-to-odd) float64 result to ``fmt`` and return its raw bits."""
    r = round_to_format(x, fmt, mode)
    if ftz:
        r = flush_subnormal(r, fmt)
    if sat:
        r = saturate(r)
    if relu_:
        r = relu(r)
    return encode(r, fmt)


# ---------------------------------------------------------------------------------------------
# float64 arithmetic in the directed modes (rare): exact rationals per lane
# ---------------------------------------------------------------------------------------------

def f64_exact_op(op: str, mode: str, a: np.ndarray, b: np.ndarray,
                 c: np.ndarray | None = None) -> np.ndarray:
    """float64 add/sub/mul/div/fma with any rounding mode, exactly (lane by lane)."""
    from fractions import Fraction
    out = np.empty(a.shape, dtype=np.float64)
    for i in range(a.size):
        x, y = float(a.flat[i]), float(b.flat[i])
        z = float(c.flat[i]) if c is not None else 0.0
        vals = (x, y, z)
        if not all(np.isfinite(v) for v in vals) or (op == "div" and y == 0.0):
            with np.errstate(all="ignore"):
                out.flat[i] = {"add": lambda: np.float64(x) + y, "sub": lambda: np.float64(x) - y,
                               "mul": lambda: np.float64(x) * y,
                               "div": lambda: np.float64(x) / y,
                               "fma": lambda: np.float64(x) * y + z}[op]()
            continue
        fx, fy, fz = Fraction(x), Fraction(y), Fraction(z)
        exact = {"add": lambda: fx + fy, "sub": lambda: fx - fy, "mul": lambda: fx * fy,
                 "div": lambda: fx / fy, "fma": lambda: fx * fy + fz}[op]()
        out.flat[i] = _round_fraction_f64(exact, mode, zero_sign=_zero_sign(op, x, y, z, mode))
    return out


def _zero_sign(op: str, x: float, y: float, z: float, mode: str) -> float:
    import math
    if op in ("mul", "div"):
        return math.copysign(1.0, x) * math.copysign(1.0, y)
    if op == "fma":
        p = math.copysign(1.0, x) * math.copysign(1.0, y)
        if (x == 0 or y == 0) and z == 0:
            if p == math.copysign(1.0, z):
                return p
        return -1.0 if mode == "rm" else 1.0
    if op in ("add", "sub"):
        yy = y if op == "add" else -y
        if x == 0 and yy == 0 and math.copysign(1.0, x) == math.copysign(1.0, yy):
            return math.copysign(1.0, x)
        return -1.0 if mode == "rm" else 1.0
    return 1.0


def _round_fraction_f64(q, mode: str, zero_sign: float = 1.0) -> float:
    """A rational number -> float64 in the given rounding mode."""
    import math
    from fractions import Fraction
    if q == 0:
        return math.copysign(0.0, zero_sign)
    near = float(q)           # correctly rounded to nearest (ties even) by Python
    if mode == "rn" or Fraction(near) == q:
        return near
    if mode == "rna":
        lo, hi = (near, math.nextafter(near, math.inf)) if Fraction(near) < q else \
                 (math.nextafter(near, -math.inf), near)
        dlo, dhi = q - Fraction(lo), Fraction(hi) - q
        if dlo == dhi:
            return hi if q > 0 else lo
        return lo if dlo < dhi else hi
    above = Fraction(near) > q
    if mode == "rz":
        too_far = above if q > 0 else not above
        return math.nextafter(near, 0.0) if too_far else near
    if mode == "rm":
        return math.nextafter(near, -math.inf) if above else near
    if mode == "rp":
        return near if above else math.nextafter(near, math.inf)
    raise ValueError(mode)
