"""Floating-point arithmetic: f32/f64/f16/bf16 and the packed f16x2/bf16x2 forms.

Results are rounded once, in the mode the instruction names (see :mod:`ptxlab.run.ptx.floats`).
The approximate hardware functions (``sin``, ``ex2.approx``, ``rcp.approx`` ...) have no
published bit-exact definition, so they are refused rather than guessed.
"""
from __future__ import annotations

import math

import numpy as np

from .. import floats
from ..decode_context import Unsupported, types_of
from ..values import VIEW_DTYPE
from .registry import handles

_FMT = {"f16": floats.F16, "bf16": floats.BF16, "f32": floats.F32, "f64": floats.F64,
        "f16x2": floats.F16, "bf16x2": floats.BF16}
_MODES = ("rn", "rz", "rm", "rp")
_RAW = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}


def _ftype(ins, cx) -> str:
    tys = types_of(ins.mods)
    t = tys[-1]
    if t not in _FMT:
        raise Unsupported(f"{ins.full_opcode}: type .{t} is not modelled")
    return t


def _mode(ins) -> str | None:
    return next((m for m in ins.mods if m in _MODES), None)


def _check_flags(ins, allowed: set) -> None:
    extra = set(ins.mods) - allowed - set(types_of(ins.mods))
    if extra:
        raise Unsupported(f"{ins.full_opcode}: modifier(s) {sorted(extra)} not modelled")


# ---------------------------------------------------------------------------------------------
# helpers on raw bits
# ---------------------------------------------------------------------------------------------

def _lanes_x2(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = v.view(np.uint32) if v.dtype != np.uint32 else v
    return (u & np.uint32(0xFFFF)).astype(np.uint16), (u >> np.uint32(16)).astype(np.uint16)


def _join_x2(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.uint32) | (hi.astype(np.uint32) << np.uint32(16))


def _decode(v: np.ndarray, t: str) -> np.ndarray:
    if t == "f32":
        return v.astype(np.float64)
    if t == "f64":
        return v
    return floats.decode(v, _FMT[t])


# ---------------------------------------------------------------------------------------------
# add / sub / mul / fma / mad
# ---------------------------------------------------------------------------------------------

def compile_arith(ins, cx):
    """add/sub/mul/fma/mad for float types."""
    t = _ftype(ins, cx)
    op = ins.opcode
    if op == "mad":
        op = "fma"
    _check_flags(ins, {"rn", "rz", "rm", "rp", "ftz", "sat", "relu", "oob", "noftz"})
    mode = _mode(ins) or "rn"
    ftz = "ftz" in ins.mods
    sat = "sat" in ins.mods
    relu = "relu" in ins.mods
    if "oob" in ins.mods:
        raise Unsupported(f"{ins.full_opcode}: .oob is not modelled")
    n = 3 if op == "fma" else 2
    d = ins.operands[0]
    vt = t
    gets = [cx.src(x, vt) for x in ins.operands[1:1 + n]]
    s = cx.dst(d, vt)
    if t in ("f16x2", "bf16x2"):
        base = "f16" if t == "f16x2" else "bf16"
        fmt = _FMT[base]

        def fn_x2(w, m):
            halves = [_lanes_x2(g(w)) for g in gets]
            res = []
            for k in (0, 1):
                xs = [floats.decode(h[k], fmt) for h in halves]
                if ftz and base == "f16":
                    xs = [floats.flush_subnormal(x, fmt) for x in xs]
                r = floats.exact_op(op, *xs)
                res.append(floats.fp_result(r, fmt, mode, ftz=ftz and base == "f16", sat=sat,
                                            relu_=relu))
            s(w, _join_x2(res[0], res[1]), m)
        return fn_x2
    fmt = _FMT[t]
    if t == "f64":
        if ftz or sat or relu:
            raise Unsupported(f"{ins.full_opcode}: modifiers on .f64 are not modelled")
        if mode == "rn" and op != "fma":
            npop = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
            return lambda w, m: s(w, _canon64(npop(gets[0](w), gets[1](w))), m)

        def fn64(w, m):
            vals = [g(w) for g in gets]
            if op == "fma" and mode == "rn" and hasattr(math, "fma"):
                r = np.array([math.fma(a, b, c) for a, b, c in zip(*[v.tolist() for v in vals])])
            else:
                r = floats.f64_exact_op(op, mode, *vals)
            s(w, _canon64(r), m)
        return fn64
    if t == "f32" and mode == "rn" and op in ("add", "sub", "mul") and not (sat or relu):
        npop = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
        canon = np.uint32(floats.F32.canonical_nan)
        if ftz:
            def fn_fast_ftz(w, m):
                a = _ftz32(gets[0](w))
                b = _ftz32(gets[1](w))
                r = _ftz32(npop(a, b))
                s(w, _canon32(r, canon), m)
            return fn_fast_ftz

        def fn_fast(w, m):
            r = npop(gets[0](w), gets[1](w))
            s(w, _canon32(r, canon), m)
        return fn_fast

    def fn(w, m):
        xs = [_decode(g(w), t) for g in gets]
        if ftz and t == "f32":
            xs = [floats.flush_subnormal(x, fmt) for x in xs]
        r = floats.exact_op(op, *xs)
        bits = floats.fp_result(r, fmt, mode, ftz=ftz and t == "f32", sat=sat, relu_=relu)
        s(w, bits.view(VIEW_DTYPE[t]), m)
    return fn


def _canon32(r: np.ndarray, canon) -> np.ndarray:
    nan = r != r
    if nan.any():
        return np.where(nan, canon, r.view(np.uint32)).view(np.float32)
    return r


def _canon64(r: np.ndarray) -> np.ndarray:
    nan = r != r
    if nan.any():
        return np.where(nan, np.uint64(floats.F64.canonical_nan), r.view(np.uint64)).view(np.float64)
    return r


def _ftz32(x: np.ndarray) -> np.ndarray:
    sub = (x != 0) & (np.abs(x) < np.float32(1.1754943508222875e-38))
    if sub.any():
        return np.where(sub, np.copysign(np.float32(0), x), x)
    return x


@handles("fma")
def fma(ins, cx):
    return compile_arith(ins, cx)


# ---------------------------------------------------------------------------------------------
# div / rcp / sqrt and the approximate functions
# ---------------------------------------------------------------------------------------------

def compile_div(ins, cx):
    t = _ftype(ins, cx)
    if "approx" in ins.mods or "full" in ins.mods:
        raise Unsupported(f"{ins.full_opcode} is an approximate division whose exact bits are "
                          "the GPU's own (compile without fast-math, or use div.rn)")
    _check_flags(ins, {"rn", "rz", "rm", "rp", "ftz"})
    mode = _mode(ins)
    if mode is None:
        raise cx.error(f"{ins.full_opcode} needs a rounding modifier")
    ftz = "ftz" in ins.mods
    ga, gb = cx.src(ins.operands[1], t), cx.src(ins.operands[2], t)
    s = cx.dst(ins.operands[0], t)
    if t == "f32":
        canon = np.uint32(floats.F32.canonical_nan)

        def fn32(w, m):
            a, b = ga(w), gb(w)
            if ftz:
                a, b = _ftz32(a), _ftz32(b)
            if mode == "rn":
                r = a / b
            else:
                r = floats.round_to_format(_exact_div_to(a, b, floats.F32, mode), floats.F32,
                                           mode).astype(np.float32)
            if ftz:
                r = _ftz32(r)
            s(w, _canon32(r, canon), m)
        return fn32
    if t == "f64":
        def fn64(w, m):
            a, b = ga(w), gb(w)
            r = a / b if mode == "rn" else floats.f64_exact_op("div", mode, a, b)
            s(w, _canon64(r), m)
        return fn64
    raise Unsupported(f"{ins.full_opcode} is not modelled")


def _exact_div_to(a: np.ndarray, b: np.ndarray, fmt, mode: str) -> np.ndarray:
    """a/b for f32 inputs, rounded to odd at 53 bits (enough for any later rounding)."""
    from fractions import Fraction
    out = np.empty(a.shape, dtype=np.float64)
    for i, (x, y) in enumerate(zip(a.astype(np.float64).tolist(), b.astype(np.float64).tolist())):
        if not (math.isfinite(x) and math.isfinite(y)) or y == 0.0:
            with np.errstate(all="ignore"):
                out[i] = np.float64(x) / y
            continue
        q = Fraction(x) / Fraction(y)
        near = float(q)
        if Fraction(near) != q and (np.float64(near).view(np.uint64) & np.uint64(1)) == 0:
            near = math.nextafter(near, math.inf if Fraction(near) < q else -math.inf)
        out[i] = near if q != 0 else math.copysign(0.0, x) * math.copysign(1.0, y)
    return out


@handles("rcp")
def rcp(ins, cx):
    t = _ftype(ins, cx)
    if "approx" in ins.mods:
        raise Unsupported(f"{ins.full_opcode} is an approximate reciprocal whose exact bits are "
                          "the GPU's own")
    _check_flags(ins, {"rn", "rz", "rm", "rp", "ftz"})
    mode = _mode(ins) or "rn"
    ftz = "ftz" in ins.mods
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], t)
    if t == "f32":
        canon = np.uint32(floats.F32.canonical_nan)

        def fn32(w, m):
            a = ga(w)
            if ftz:
                a = _ftz32(a)
            if mode == "rn":
                r = np.float32(1.0) / a
            else:
                r = floats.round_to_format(_exact_div_to(np.ones_like(a), a, floats.F32, mode),
                                           floats.F32, mode).astype(np.float32)
            if ftz:
                r = _ftz32(r)
            s(w, _canon32(r, canon), m)
        return fn32
    if t == "f64":
        def fn64(w, m):
            a = ga(w)
            r = 1.0 / a if mode == "rn" else floats.f64_exact_op("div", mode, np.ones_like(a), a)
            s(w, _canon64(r), m)
        return fn64
    raise Unsupported(f"{ins.full_opcode} is not modelled")


@handles("sqrt")
def sqrt(ins, cx):
    t = _ftype(ins, cx)
    if "approx" in ins.mods:
        raise Unsupported(f"{ins.full_opcode} is an approximate square root whose exact bits "
                          "are the GPU's own")
    mode = _mode(ins)
    if mode != "rn":
        raise Unsupported(f"{ins.full_opcode}: only sqrt.rn is modelled")
    _check_flags(ins, {"rn", "ftz"})
    ftz = "ftz" in ins.mods
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], t)
    if t == "f32":
        canon = np.uint32(floats.F32.canonical_nan)

        def fn32(w, m):
            a = ga(w)
            if ftz:
                a = _ftz32(a)
            r = np.sqrt(a)
            s(w, _canon32(r, canon), m)
        return fn32
    if t == "f64":
        return lambda w, m: s(w, _canon64(np.sqrt(ga(w))), m)
    raise Unsupported(f"{ins.full_opcode} is not modelled")


@handles("rsqrt", "sin", "cos", "lg2", "ex2", "tanh")
def approximate(ins, cx):
    raise Unsupported(f"{ins.full_opcode} is an approximate hardware function; its exact bits "
                      "are the GPU's own (math functions such as expf/sinf compile to it)")


# ---------------------------------------------------------------------------------------------
# abs / neg / min / max / copysign / testp
# ---------------------------------------------------------------------------------------------

_SIGN = {"f16": 0x8000, "bf16": 0x8000, "f32": 0x80000000, "f64": 0x8000000000000000,
         "f16x2": 0x80008000, "bf16x2": 0x80008000}


def compile_sign(ins, cx):
    t = _ftype(ins, cx)
    _check_flags(ins, {"ftz"})
    ftz = "ftz" in ins.mods
    raw = {"f16x2": np.uint32, "bf16x2": np.uint32}.get(t) or _RAW[t]
    sign = raw(_SIGN[t])
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], t)
    neg = ins.opcode == "neg"
    vt = VIEW_DTYPE[t]

    def fn(w, m):
        v = ga(w)
        if ftz and t == "f32":
            v = _ftz32(v)
        u = v.view(raw)
        r = (u ^ sign) if neg else (u & ~sign)
        s(w, r.view(vt), m)
    return fn


def compile_minmax(ins, cx):
    t = _ftype(ins, cx)
    _check_flags(ins, {"ftz", "NaN"})
    if "xorsign" in ins.mods or "abs" in ins.mods:
        raise Unsupported(f"{ins.full_opcode} is not modelled")
    nan_prop = "NaN" in ins.mods
    ftz = "ftz" in ins.mods
    is_min = ins.opcode == "min"
    ops = ins.operands[1:]
    gets = [cx.src(x, t) for x in ops]
    s = cx.dst(ins.operands[0], t)

    def pick(xs_bits, base):
        fmt = _FMT[base]
        xs = [floats.decode(x, fmt) for x in xs_bits]
        if ftz and base == "f32":
            xs = [floats.flush_subnormal(x, fmt) for x in xs]
        r = xs[0]
        for x in xs[1:]:
            a, b = r, x
            an, bn = np.isnan(a), np.isnan(b)
            # -0.0 is below +0.0 for min/max
            lt = (a < b) | ((a == b) & np.signbit(a) & ~np.signbit(b))
            if is_min:
                best = np.where(lt, a, b)
            else:
                best = np.where(lt, b, a)
            if nan_prop:
                best = np.where(an | bn, np.nan, best)
            else:
                best = np.where(an & ~bn, b, np.where(bn & ~an, a, best))
                best = np.where(an & bn, np.nan, best)
            r = best
        return floats.encode(r, fmt)

    if t in ("f16x2", "bf16x2"):
        base = t[:-2]

        def fn_x2(w, m):
            halves = [_lanes_x2(g(w)) for g in gets]
            lo = pick([h[0] for h in halves], base)
            hi = pick([h[1] for h in halves], base)
            s(w, _join_x2(lo, hi), m)
        return fn_x2

    def fn(w, m):
        vals = [g(w).view(_RAW[t]) for g in gets]
        s(w, pick(vals, t).view(VIEW_DTYPE[t]), m)
    return fn


@handles("copysign")
def copysign(ins, cx):
    t = _ftype(ins, cx)
    ga, gb = cx.src(ins.operands[1], t), cx.src(ins.operands[2], t)
    s = cx.dst(ins.operands[0], t)
    raw = _RAW[t]
    sign = raw(_SIGN[t])
    return lambda w, m: s(w, ((gb(w).view(raw) & ~sign) | (ga(w).view(raw) & sign)).view(
        VIEW_DTYPE[t]), m)


@handles("testp")
def testp(ins, cx):
    t = _ftype(ins, cx)
    test = next(m for m in ins.mods if m in ("finite", "infinite", "number", "notanumber",
                                             "normal", "subnormal"))
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], "pred")
    fmt = _FMT[t]

    def fn(w, m):
        x = _decode(ga(w), t)
        r = {"finite": np.isfinite(x), "infinite": np.isinf(x), "number": ~np.isnan(x),
             "notanumber": np.isnan(x),
             "normal": np.isfinite(x) & (np.abs(x) >= fmt.min_normal),
             "subnormal": (x != 0) & (np.abs(x) < fmt.min_normal)}[test]
        s(w, r, m)
    return fn
