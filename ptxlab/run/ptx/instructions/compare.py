"""setp, set, selp, slct: comparisons and selections, ordered and unordered for floats."""
from __future__ import annotations

import numpy as np

from .. import floats
from ..decode_context import Unsupported, types_of
from ..parser import Pair
from ..values import FLOAT_TYPES, SIGNED_TYPES, VIEW_DTYPE
from .registry import handles

_FMT = {"f16": floats.F16, "bf16": floats.BF16}
_CMPS = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu",
         "gtu", "geu", "num", "nan"}
_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


#: Each integer comparison as one numpy function (``lo``/``ls``/``hi``/``hs`` are the unsigned
#: names of ``lt``/``le``/``gt``/``ge``; the operands' type already says how they compare).
_ORDER = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
          "hi": np.greater, "hs": np.greater_equal}


def comparison(cmp: str, is_float: bool):
    """``f(a, b) -> bool array`` for the comparison ``cmp``, chosen once when the instruction is
    decoded. For floats, an ordered comparison is false where either operand is NaN and an
    unordered one (``ltu``...) true there; ``num`` and ``nan`` test for NaN only."""
    if not is_float:
        return _ORDER[cmp]
    if cmp == "num":
        return lambda a, b: ~(np.isnan(a) | np.isnan(b))
    if cmp == "nan":
        return lambda a, b: np.isnan(a) | np.isnan(b)
    unordered = cmp.endswith("u")
    order = _ORDER[cmp[:-1] if unordered else cmp]
    if unordered:
        return lambda a, b: order(a, b) | (np.isnan(a) | np.isnan(b))
    return lambda a, b: order(a, b) & ~(np.isnan(a) | np.isnan(b))


def _values(get, t):
    """A getter returning comparable numpy values of type t (16-bit floats decoded)."""
    if t in _FMT:
        fmt = _FMT[t]
        return lambda w: floats.decode(get(w), fmt)
    return get


@handles("setp", "set")
def setp(ins, cx):
    tys = types_of(ins.mods)
    cmp = next((m for m in ins.mods if m in _CMPS), None)
    if cmp is None:
        raise cx.error(f"{ins.full_opcode}: no comparison operator")
    boolop = next((m for m in ins.mods if m in _BOOL), None)
    ftz = "ftz" in ins.mods
    if ins.opcode == "set":
        return _set(ins, cx, tys, cmp, boolop)
    t = tys[-1]
    is_float = t in FLOAT_TYPES
    if cmp in ("lo", "ls", "hi", "hs") and t in SIGNED_TYPES:
        raise cx.error(f"{ins.full_opcode}: unsigned comparison on a signed type")
    ops = ins.operands
    dst = ops[0]
    pd, qd = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    if t in ("f16x2", "bf16x2"):
        return _setp_x2(ins, cx, t, cmp, boolop, pd, qd)
    ga = _values(cx.src(ops[1], t), t)
    gb = _values(cx.src(ops[2], t), t)
    gc = cx.src(ops[3], "pred") if boolop else None
    sp = cx.dst(pd, "pred")
    sq = cx.dst(qd, "pred") if qd is not None else None
    compare = comparison(cmp, is_float)
    if not (boolop or sq is not None or (ftz and t == "f32")):
        return lambda w, m: sp(w, compare(ga(w), gb(w)), m)      # the usual setp

    def fn(w, m):
        a, b = ga(w), gb(w)
        if ftz and t == "f32":
            a = _ftz(a)
            b = _ftz(b)
        r = compare(a, b)
        if boolop:
            c = gc(w)
            p = _BOOL[boolop](r, c)
            sp(w, p, m)
            if sq is not None:
                sq(w, _BOOL[boolop](~r, c), m)
        else:
            sp(w, r, m)
            if sq is not None:
                sq(w, ~r, m)
    return fn


def _ftz(x):
    sub = (x != 0) & (np.abs(x) < np.float32(1.1754943508222875e-38))
    return np.where(sub, np.copysign(np.float32(0), x), x) if sub.any() else x


def _setp_x2(ins, cx, t, cmp, boolop, pd, qd):
    fmt = floats.F16 if t == "f16x2" else floats.BF16
    ga, gb = cx.src(ins.operands[1], "b32"), cx.src(ins.operands[2], "b32")
    gc = cx.src(ins.operands[3], "pred") if boolop else None
    sp = cx.dst(pd, "pred")
    sq = cx.dst(qd, "pred") if qd is not None else None
    compare = comparison(cmp, True)

    def fn(w, m):
        a, b = ga(w), gb(w)
        lo = compare(floats.decode(a & np.uint32(0xFFFF), fmt),
                     floats.decode(b & np.uint32(0xFFFF), fmt))
        hi = compare(floats.decode(a >> np.uint32(16), fmt),
                     floats.decode(b >> np.uint32(16), fmt))
        if boolop:
            c = gc(w)
            lo, hi = _BOOL[boolop](lo, c), _BOOL[boolop](hi, c)
        sp(w, lo, m)
        if sq is not None:
            sq(w, hi, m)
    return fn


def _set(ins, cx, tys, cmp, boolop):
    if len(tys) != 2:
        raise Unsupported(f"{ins.full_opcode} is not modelled")
    dt, st = tys
    is_float = st in FLOAT_TYPES
    ga = _values(cx.src(ins.operands[1], st), st)
    gb = _values(cx.src(ins.operands[2], st), st)
    gc = cx.src(ins.operands[3], "pred") if boolop else None
    s = cx.dst(ins.operands[0], dt)
    vd = np.dtype(VIEW_DTYPE[dt])
    if dt == "f32":
        true, false = np.float32(1.0), np.float32(0.0)
    elif dt in ("u32", "s32", "b32"):
        true, false = vd.type(-1 if vd.kind == "i" else 0xFFFFFFFF), vd.type(0)
    else:
        raise Unsupported(f"{ins.full_opcode}: destination .{dt} is not modelled")
    compare = comparison(cmp, is_float)

    def fn(w, m):
        r = compare(ga(w), gb(w))
        if boolop:
            r = _BOOL[boolop](r, gc(w))
        s(w, np.where(r, true, false).astype(vd), m)
    return fn


@handles("selp")
def selp(ins, cx):
    t = types_of(ins.mods)[-1]
    d, a, b, c = ins.operands[:4]
    ga, gb = cx.src(a, t), cx.src(b, t)
    gc = cx.src(c, "pred")
    s = cx.dst(d, t)
    return lambda w, m: s(w, np.where(gc(w), ga(w), gb(w)), m)


@handles("slct")
def slct(ins, cx):
    tys = types_of(ins.mods)
    if len(tys) != 2:
        raise cx.error("slct needs two types")
    t, ct = tys
    d, a, b, c = ins.operands[:4]
    ga, gb = cx.src(a, t), cx.src(b, t)
    gc = cx.src(c, ct)
    s = cx.dst(d, t)
    return lambda w, m: s(w, np.where(gc(w) >= 0, ga(w), gb(w)), m)
