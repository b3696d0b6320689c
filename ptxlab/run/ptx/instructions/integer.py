"""Integer and bitwise instructions (and the opcodes shared with floats, dispatched by type)."""
from __future__ import annotations

import numpy as np

from ..decode_context import Unsupported, types_of
from ..parser import Imm, Reg
from ..values import (FLOAT_TYPES, INT_TYPES, SIGNED_BY_SIZE, SIGNED_TYPES, UNSIGNED_BY_SIZE,
                      VIEW_DTYPE)
from . import floating
from .registry import handles

_U = UNSIGNED_BY_SIZE
_S = SIGNED_BY_SIZE


def _type(ins, cx, allowed=None) -> str:
    tys = types_of(ins.mods)
    if not tys:
        raise cx.error(f"{ins.full_opcode} has no type")
    t = tys[-1]
    if allowed is not None and t not in allowed:
        raise Unsupported(f"{ins.full_opcode}: type .{t} is not modelled")
    return t


def _is_float(ins) -> bool:
    tys = types_of(ins.mods)
    return bool(tys) and tys[-1] in FLOAT_TYPES


def _bits(t: str) -> int:
    return np.dtype(VIEW_DTYPE[t]).itemsize * 8


def _unsigned_view(v: np.ndarray) -> np.ndarray:
    return v.view(_U[v.dtype.itemsize])


def _register_type(ins, cx, t: str) -> str:
    """The type a sign-agnostic instruction (``add``, ``sub``, ``mul.lo``, ``mad.lo``, ``and``,
    ``or``, ``xor``) computes in: the destination register's own type where every operand is a
    register of ``t``'s width or an immediate, so that no operand and no result is viewed as
    another type each time it runs (two's complement gives the same bits in either); ``t``
    otherwise (a narrower or wider register is extended by ``t``'s sign)."""
    if t not in INT_TYPES:
        return t
    size = np.dtype(VIEW_DTYPE[t]).itemsize
    own = None
    for k, op in enumerate(ins.operands):
        if isinstance(op, Imm) and k:
            continue
        if not isinstance(op, Reg) or op.neg or op.name not in cx.fcode.reg_ids:
            return t
        dt = np.dtype(cx.fcode.reg_dtypes[cx.fcode.reg_ids[op.name]])
        if dt.kind not in "iu" or dt.itemsize != size:
            return t
        if k == 0:
            own = dt
    return ("s" if own.kind == "i" else "u") + str(size * 8)


def _binary(ins, cx, t, op):
    d, a, b = ins.operands[:3]
    ga, gb = cx.src(a, t), cx.src(b, t)
    s = cx.dst(d, t)
    own = _own_registers(cx, t, d, a)
    if own is not None:                     # the usual case, without getter and setter calls
        i, j = own
        other = _own_registers(cx, t, b)
        if other is not None:
            k = other[0]
            return lambda w, m: _set(w.R, i, op(w.R[j], w.R[k]), m)
        if isinstance(b, Imm):
            c = gb(None)
            return lambda w, m: _set(w.R, i, op(w.R[j], c), m)
    return lambda w, m: s(w, op(ga(w), gb(w)), m)


def _own_registers(cx, t: str, *ops) -> tuple | None:
    """The indices of registers ``ops`` where each is a plain register held as ``t``'s own
    dtype (read and written with no view), else ``None``."""
    vd = np.dtype(VIEW_DTYPE[t])
    out = []
    for op in ops:
        if not isinstance(op, Reg) or op.neg or op.name not in cx.fcode.reg_ids:
            return None
        i = cx.fcode.reg_ids[op.name]
        if np.dtype(cx.fcode.reg_dtypes[i]) != vd:
            return None
        out.append(i)
    return tuple(out)


def _set(R: list, i: int, v: np.ndarray, m) -> None:
    """Register ``i`` takes ``v`` in the lanes of ``m`` (all lanes: ``None``)."""
    R[i] = v if m is None else np.where(m, v, R[i])


# ---------------------------------------------------------------------------------------------
# add / sub / mul / mad (integer side; floats go to floating.py)
# ---------------------------------------------------------------------------------------------

@handles("add", "sub")
def add_sub(ins, cx):
    if _is_float(ins):
        return floating.compile_arith(ins, cx)
    t = _type(ins, cx)
    mods = set(ins.mods)
    if "cc" in mods:
        return _add_cc(ins, cx, t, carry_in=False)
    sub = ins.opcode == "sub"
    if "sat" in mods:
        if t != "s32":
            raise Unsupported(f"{ins.full_opcode}: .sat is defined for .s32 only")

        def sat(a, b):
            r = a.astype(np.int64) - b if sub else a.astype(np.int64) + b
            return np.clip(r, -2**31, 2**31 - 1).astype(np.int32)
        return _binary(ins, cx, t, sat)
    if t in ("u16x2", "s16x2"):
        raise Unsupported(f"{ins.full_opcode} is not modelled")
    return _binary(ins, cx, _register_type(ins, cx, t), np.subtract if sub else np.add)


def _add_cc(ins, cx, t, carry_in: bool):
    """add.cc / addc{.cc} / sub.cc / subc{.cc}: 32/64-bit adds with the carry flag."""
    sub = ins.opcode in ("sub", "subc")
    write_cc = "cc" in ins.mods
    d, a, b = ins.operands[:3]
    bits = _bits(t)
    ga, gb = cx.src(a, t), cx.src(b, t)
    s = cx.dst(d, t)
    mask = (1 << bits) - 1

    def fn(w, m):
        x = _unsigned_view(ga(w)).astype(object)
        y = _unsigned_view(gb(w)).astype(object)
        cin = w.block.carry.get(w.index, np.zeros(w.width, dtype=np.int64)) if carry_in else 0
        if sub:
            full = x - y - (cin if carry_in else 0)
            cout = (full < 0).astype(np.int64) if hasattr(full, "astype") else None
            cout = np.array([1 if v < 0 else 0 for v in full], dtype=np.int64)
        else:
            full = x + y + (cin if carry_in else 0)
            cout = np.array([1 if v > mask else 0 for v in full], dtype=np.int64)
        res = np.array([int(v) & mask for v in full], dtype=_U[bits // 8])
        s(w, res.view(VIEW_DTYPE[t]), m)
        if write_cc:
            old = w.block.carry.get(w.index, np.zeros(w.width, dtype=np.int64))
            w.block.carry[w.index] = cout if m is None else np.where(m, cout, old)
    return fn


@handles("addc", "subc")
def addc(ins, cx):
    return _add_cc(ins, cx, _type(ins, cx), carry_in=True)


def _widen(t: str) -> str:
    return {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}[t]


def _mul_parts(x: np.ndarray, y: np.ndarray, bits: int, signed: bool, part: str) -> np.ndarray:
    """The lo/hi/wide part of the exact product of two ``bits``-wide integers."""
    if bits <= 32:
        big = np.int64 if signed else np.uint64
        p = np.multiply(x, y, dtype=big)            # widened first: exact
        if part == "wide":
            return p.astype(_S[bits // 4] if signed else _U[bits // 4]) if bits < 32 else p
        if part == "hi":
            return (p >> bits).astype(_S[bits // 8] if signed else _U[bits // 8])
        return p.astype(x.dtype)
    # 64-bit: exact through Python integers
    xs, ys = x.tolist(), y.tolist()
    prods = [int(a) * int(b) for a, b in zip(xs, ys)]
    if part == "lo":
        return np.array([p & (2**64 - 1) for p in prods], dtype=np.uint64).view(x.dtype)
    if part == "hi":
        return np.array([(p >> 64) & (2**64 - 1) for p in prods], dtype=np.uint64).view(x.dtype)
    raise Unsupported("mul.wide of 64-bit operands does not exist")


@handles("mul")
def mul(ins, cx):
    if _is_float(ins):
        return floating.compile_arith(ins, cx)
    t = _type(ins, cx)
    part = "lo" if "lo" in ins.mods else "hi" if "hi" in ins.mods else "wide" if "wide" in ins.mods \
        else "lo"
    d, a, b = ins.operands[:3]
    if part == "lo":
        t = _register_type(ins, cx, t)
    ga, gb = cx.src(a, t), cx.src(b, t)
    signed = t in SIGNED_TYPES
    bits = _bits(t)
    s = cx.dst(d, _widen(t) if part == "wide" else t)
    if part == "lo" and bits <= 64:
        return lambda w, m: s(w, ga(w) * gb(w), m)
    return lambda w, m: s(w, _mul_parts(ga(w), gb(w), bits, signed, part), m)


@handles("mad")
def mad(ins, cx):
    if _is_float(ins):
        return floating.compile_arith(ins, cx)
    t = _type(ins, cx)
    mods = set(ins.mods)
    if "cc" in mods:
        raise Unsupported(f"{ins.full_opcode}: mad with carry is not modelled")
    part = "hi" if "hi" in mods else "wide" if "wide" in mods else "lo"
    if part == "lo" and "sat" not in mods:
        t = _register_type(ins, cx, t)
    d, a, b, c = ins.operands[:4]
    signed = t in SIGNED_TYPES
    bits = _bits(t)
    ga, gb = cx.src(a, t), cx.src(b, t)
    wt = _widen(t) if part == "wide" else t
    gc = cx.src(c, wt)
    s = cx.dst(d, wt)
    if "sat" in mods:
        if t != "s32" or part != "hi":
            raise Unsupported(f"{ins.full_opcode}: .sat is defined for mad.hi.sat.s32 only")

        def fn_sat(w, m):
            hi = _mul_parts(ga(w), gb(w), bits, signed, "hi").astype(np.int64)
            r = np.clip(hi + gc(w).astype(np.int64), -2**31, 2**31 - 1).astype(np.int32)
            s(w, r, m)
        return fn_sat
    if part == "lo":
        return lambda w, m: s(w, ga(w) * gb(w) + gc(w), m)
    return lambda w, m: s(w, _mul_parts(ga(w), gb(w), bits, signed, part) + gc(w), m)


@handles("mul24", "mad24")
def mul24(ins, cx):
    t = _type(ins, cx, {"u32", "s32"})
    hi = "hi" in ins.mods
    d, a, b = ins.operands[:3]
    ga, gb = cx.src(a, t), cx.src(b, t)
    gc = cx.src(ins.operands[3], t) if ins.opcode == "mad24" else None
    s = cx.dst(d, t)
    signed = t == "s32"

    def fn(w, m):
        x, y = ga(w).astype(np.int64), gb(w).astype(np.int64)
        if signed:
            x = ((x & 0xFFFFFF) ^ 0x800000) - 0x800000
            y = ((y & 0xFFFFFF) ^ 0x800000) - 0x800000
        else:
            x, y = x & 0xFFFFFF, y & 0xFFFFFF
        p = x * y
        r = (p >> 16) if hi else p
        r = (r & 0xFFFFFFFF).astype(np.uint32)
        if gc is not None:
            r = r + gc(w).view(np.uint32)
        s(w, r.view(VIEW_DTYPE[t]), m)
    return fn


@handles("sad")
def sad(ins, cx):
    t = _type(ins, cx)
    d, a, b, c = ins.operands[:4]
    ga, gb, gc = cx.src(a, t), cx.src(b, t), cx.src(c, t)
    s = cx.dst(d, t)

    def fn(w, m):
        x, y = ga(w), gb(w)
        diff = np.where(x < y, y - x, x - y)
        s(w, (_unsigned_view(diff) + _unsigned_view(gc(w))).view(VIEW_DTYPE[t]), m)
    return fn


# ---------------------------------------------------------------------------------------------
# div / rem
# ---------------------------------------------------------------------------------------------

def _divmod_trunc(x: np.ndarray, y: np.ndarray, signed: bool):
    """Quotient and remainder rounded toward zero; by zero: q = all ones, r = x."""
    bits = x.dtype.itemsize * 8
    if int(y.min()) > 0 and (not signed or int(x.min()) >= 0):
        return np.divmod(x, y)       # the usual case: no zero divisor, no negative operand
    ux = _unsigned_view(x)
    uy = _unsigned_view(y)
    if not signed:
        zero = uy == 0
        safe = np.where(zero, 1, uy).astype(uy.dtype)
        q = ux // safe
        r = ux % safe
        q = np.where(zero, uy.dtype.type(-1 & ((1 << bits) - 1)), q)
        r = np.where(zero, ux, r)
        return q.view(x.dtype), r.view(x.dtype)
    neg_x = x < 0
    neg_y = y < 0
    ax = np.where(neg_x, (~ux) + ux.dtype.type(1), ux)       # |x| as unsigned
    ay = np.where(neg_y, (~uy) + uy.dtype.type(1), uy)
    zero = ay == 0
    safe = np.where(zero, 1, ay).astype(ay.dtype)
    q = ax // safe
    r = ax % safe
    q = np.where(neg_x ^ neg_y, (~q) + q.dtype.type(1), q)
    r = np.where(neg_x, (~r) + r.dtype.type(1), r)
    q = np.where(zero, q.dtype.type(-1 & ((1 << bits) - 1)), q)
    r = np.where(zero, ux, r)
    return q.view(x.dtype), r.view(x.dtype)


@handles("div", "rem")
def div_rem(ins, cx):
    if _is_float(ins):
        return floating.compile_div(ins, cx)
    t = _type(ins, cx)
    signed = t in SIGNED_TYPES
    want_q = ins.opcode == "div"
    return _binary(ins, cx, t, lambda x, y: _divmod_trunc(x, y, signed)[0 if want_q else 1])


# ---------------------------------------------------------------------------------------------
# abs / neg / min / max
# ---------------------------------------------------------------------------------------------

@handles("abs", "neg")
def abs_neg(ins, cx):
    if _is_float(ins):
        return floating.compile_sign(ins, cx)
    t = _type(ins, cx)
    d, a = ins.operands[:2]
    ga = cx.src(a, t)
    s = cx.dst(d, t)
    if ins.opcode == "neg":
        return lambda w, m: s(w, (~_unsigned_view(ga(w)) + _U[_bits(t) // 8](1)).view(
            VIEW_DTYPE[t]), m)

    def fn(w, m):
        v = ga(w)
        u = _unsigned_view(v)
        s(w, np.where(v < 0, ~u + u.dtype.type(1), u).view(VIEW_DTYPE[t]), m)
    return fn


@handles("min", "max")
def min_max(ins, cx):
    if _is_float(ins):
        return floating.compile_minmax(ins, cx)
    t = _type(ins, cx)
    if t.endswith("x2"):
        raise Unsupported(f"{ins.full_opcode} is not modelled")
    op = np.minimum if ins.opcode == "min" else np.maximum
    if "relu" in ins.mods:
        zero = np.zeros((), dtype=VIEW_DTYPE[t])
        return _binary(ins, cx, t, lambda x, y: np.maximum(op(x, y), zero))
    return _binary(ins, cx, t, op)


# ---------------------------------------------------------------------------------------------
# bit manipulation
# ---------------------------------------------------------------------------------------------

def popcount(u: np.ndarray) -> np.ndarray:
    """Number of set bits of unsigned integers, as uint32."""
    bc = getattr(np, "bitwise_count", None)
    if bc is not None:
        return bc(u).astype(np.uint32)
    v = u.astype(np.uint64)
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((v * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.uint32)


def _significant_bits(u: np.ndarray) -> np.ndarray:
    v = u.astype(np.uint64)
    for sh in (1, 2, 4, 8, 16, 32):
        v = v | (v >> np.uint64(sh))
    return popcount(v)


@handles("popc")
def popc(ins, cx):
    t = _type(ins, cx, {"b32", "b64"})
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], "u32")
    return lambda w, m: s(w, popcount(ga(w)), m)


@handles("clz")
def clz(ins, cx):
    t = _type(ins, cx, {"b32", "b64"})
    bits = _bits(t)
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], "u32")
    return lambda w, m: s(w, (np.uint32(bits) - _significant_bits(ga(w))).astype(np.uint32), m)


@handles("bfind")
def bfind(ins, cx):
    t = _type(ins, cx, {"u32", "s32", "u64", "s64"})
    shiftamt = "shiftamt" in ins.mods
    bits = _bits(t)
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], "u32")
    signed = t in SIGNED_TYPES

    def fn(w, m):
        v = ga(w)
        u = _unsigned_view(v)
        if signed:
            u = np.where(v < 0, ~u, u)
        nb = _significant_bits(u).astype(np.int64)
        pos = nb - 1
        if shiftamt:
            r = np.where(nb == 0, 0xFFFFFFFF, bits - 1 - pos)
        else:
            r = np.where(nb == 0, 0xFFFFFFFF, pos)
        s(w, r.astype(np.uint64).astype(np.uint32), m)
    return fn


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint8)


@handles("brev")
def brev(ins, cx):
    t = _type(ins, cx, {"b32", "b64"})
    ga = cx.src(ins.operands[1], t)
    s = cx.dst(ins.operands[0], t)

    def fn(w, m):
        v = np.ascontiguousarray(ga(w))
        b = v.view(np.uint8).reshape(w.width, -1)
        r = _REV8[b[:, ::-1]]
        s(w, np.ascontiguousarray(r).view(v.dtype).reshape(w.width), m)
    return fn


@handles("bfe")
def bfe(ins, cx):
    t = _type(ins, cx, {"u32", "s32", "u64", "s64"})
    bits = _bits(t)
    signed = t in SIGNED_TYPES
    d, a, b, c = ins.operands[:4]
    ga = cx.src(a, t)
    gb, gc = cx.src(b, "u32"), cx.src(c, "u32")
    s = cx.dst(d, t)
    U = _U[bits // 8]

    def fn(w, m):
        v = _unsigned_view(ga(w)).astype(object)
        pos = (gb(w) & np.uint32(0xFF)).astype(np.int64)
        ln = (gc(w) & np.uint32(0xFF)).astype(np.int64)
        out = []
        for x, p, n in zip(v.tolist(), pos.tolist(), ln.tolist()):
            x = int(x)
            if signed and n:
                sbit = (x >> min(p + n - 1, bits - 1)) & 1
            else:
                sbit = 0
            r = 0
            for i in range(bits):
                if i < n and p + i <= bits - 1:
                    bit = (x >> (p + i)) & 1
                else:
                    bit = sbit
                r |= bit << i
            out.append(r)
        s(w, np.array(out, dtype=U).view(VIEW_DTYPE[t]), m)
    return fn


@handles("bfi")
def bfi(ins, cx):
    t = _type(ins, cx, {"b32", "b64"})
    bits = _bits(t)
    d, f, b, c, l = ins.operands[:5]
    gf, gb = cx.src(f, t), cx.src(b, t)
    gc, gl = cx.src(c, "u32"), cx.src(l, "u32")
    s = cx.dst(d, t)
    U = _U[bits // 8]

    def fn(w, m):
        a_ = gf(w).astype(np.uint64) if bits == 32 else gf(w)
        base = gb(w).astype(np.uint64) if bits == 32 else gb(w)
        pos = (gc(w) & np.uint32(0xFF)).astype(np.uint64)
        ln = (gl(w) & np.uint32(0xFF)).astype(np.uint64)
        end = np.minimum(pos + ln, np.uint64(bits))
        width = np.where(end > pos, end - pos, np.uint64(0))
        # mask of `width` ones (width <= 64)
        ones = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                        (np.uint64(1) << np.minimum(width, np.uint64(63))) - np.uint64(1))
        shift = np.minimum(pos, np.uint64(63))
        field = np.where(width > 0, (ones << shift), np.uint64(0))
        r = (base & ~field) | ((a_ << shift) & field)
        s(w, r.astype(U), m)
    return fn


@handles("prmt")
def prmt(ins, cx):
    modes = [m for m in ins.mods if m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")]
    mode = modes[0] if modes else None
    d, a, b, c = ins.operands[:4]
    ga, gb, gc = cx.src(a, "b32"), cx.src(b, "b32"), cx.src(c, "b32")
    s = cx.dst(d, "b32")
    shifts = np.arange(4, dtype=np.uint64) * np.uint64(8)

    def fn(w, m):
        x = ga(w).astype(np.uint64) | (gb(w).astype(np.uint64) << np.uint64(32))
        by = ((x[:, None] >> (np.arange(8, dtype=np.uint64) * np.uint64(8))) & np.uint64(0xFF))
        sel = gc(w).astype(np.uint64)
        if mode is None:
            idx = (sel[:, None] >> (np.arange(4, dtype=np.uint64) * np.uint64(4))) & np.uint64(0xF)
            src = np.take_along_axis(by, (idx & np.uint64(7)).astype(np.int64), axis=1)
            sign = (src >> np.uint64(7)) & np.uint64(1)
            out = np.where((idx & np.uint64(8)) != 0, sign * np.uint64(0xFF), src)
        else:
            s2 = (sel & np.uint64(3)).astype(np.int64)
            table = {
                "f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
                "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
                "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
                "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
                "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
                "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]],
            }[mode]
            idx = np.array(table, dtype=np.int64)[s2]
            out = np.take_along_axis(by, idx, axis=1)
        r = (out << shifts).sum(axis=1, dtype=np.uint64) if False else np.bitwise_or.reduce(
            out << shifts, axis=1)
        s(w, r.astype(np.uint32), m)
    return fn


@handles("shl", "shr")
def shifts(ins, cx):
    t = _type(ins, cx)
    bits = _bits(t)
    d, a, b = ins.operands[:3]
    ga = cx.src(a, t)
    gb = cx.src(b, "u32")
    s = cx.dst(d, t)
    if isinstance(b, Imm):
        return _shift_by_constant(ins.opcode == "shl", t, b.value & 0xFFFFFFFF, ga, s)
    maxs = np.uint32(bits)
    if ins.opcode == "shl":
        def shl(w, m):
            v = ga(w)
            n = gb(w)
            u = _unsigned_view(v)
            r = np.where(n >= maxs, u.dtype.type(0), u << np.minimum(n, maxs - 1).astype(u.dtype))
            s(w, r.view(v.dtype), m)
        return shl
    arith = t in SIGNED_TYPES

    def shr(w, m):
        v = ga(w)
        n = np.minimum(gb(w), maxs - 1).astype(np.uint32)
        big = gb(w) >= maxs
        if arith:
            r = v >> n.astype(v.dtype)
            r = np.where(big, np.where(v < 0, v.dtype.type(-1), v.dtype.type(0)), r)
        else:
            u = _unsigned_view(v)
            r = np.where(big, u.dtype.type(0), u >> n.astype(u.dtype)).view(v.dtype)
        s(w, r, m)
    return shr


def _shift_by_constant(left: bool, t: str, k: int, ga, s):
    """``shl``/``shr`` by an immediate (the common case: index arithmetic): the amount is
    clamped once, when the instruction is decoded. A shift by the width or more gives 0, or
    for ``shr`` of a signed type the sign in every bit, which is a shift by width - 1."""
    vd = np.dtype(VIEW_DTYPE[t])
    bits = vd.itemsize * 8
    ud = np.dtype(_U[vd.itemsize])
    if not left and t in SIGNED_TYPES:
        by_signed = vd.type(min(k, bits - 1))
        return lambda w, m: s(w, ga(w) >> by_signed, m)
    if k >= bits:
        return lambda w, m: s(w, np.zeros_like(ga(w)), m)
    by = ud.type(k)
    if vd == ud:                                     # no views of an unsigned register
        if left:
            return lambda w, m: s(w, ga(w) << by, m)
        return lambda w, m: s(w, ga(w) >> by, m)
    if left:
        return lambda w, m: s(w, (ga(w).view(ud) << by).view(vd), m)
    return lambda w, m: s(w, (ga(w).view(ud) >> by).view(vd), m)


@handles("shf")
def shf(ins, cx):
    left = "l" in ins.mods
    clamp = "clamp" in ins.mods
    d, a, b, c = ins.operands[:4]
    ga, gb, gc = cx.src(a, "b32"), cx.src(b, "b32"), cx.src(c, "u32")
    s = cx.dst(d, "b32")

    def fn(w, m):
        n = gc(w)
        n = np.minimum(n, np.uint32(32)) if clamp else (n & np.uint32(31))
        x = ga(w).astype(np.uint64) | (gb(w).astype(np.uint64) << np.uint64(32))
        n64 = n.astype(np.uint64)
        if left:
            r = (x << n64) >> np.uint64(32)
        else:
            r = x >> n64
        s(w, (r & np.uint64(0xFFFFFFFF)).astype(np.uint32), m)
    return fn


@handles("and", "or", "xor")
def logic(ins, cx):
    t = _type(ins, cx)
    op = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[ins.opcode]
    return _binary(ins, cx, _register_type(ins, cx, t), op)


@handles("not", "cnot")
def not_(ins, cx):
    t = _type(ins, cx)
    d, a = ins.operands[:2]
    ga = cx.src(a, t)
    s = cx.dst(d, t)
    if ins.opcode == "cnot":
        dt = VIEW_DTYPE[t]
        return lambda w, m: s(w, (ga(w) == 0).astype(dt), m)
    if t == "pred":
        return lambda w, m: s(w, ~ga(w), m)
    return lambda w, m: s(w, ~ga(w), m)


@handles("lop3")
def lop3(ins, cx):
    if len(ins.operands) != 5 or "b32" not in ins.mods:
        raise Unsupported(f"{ins.full_opcode}: this form of lop3 is not modelled")
    d, a, b, c, lut = ins.operands
    ga, gb, gc = cx.src(a, "b32"), cx.src(b, "b32"), cx.src(c, "b32")
    table = int(getattr(lut, "value", -1))
    if table < 0:
        raise cx.error("lop3 needs an immediate truth table")
    s = cx.dst(d, "b32")

    def fn(w, m):
        x, y, z = ga(w), gb(w), gc(w)
        r = np.zeros(w.width, dtype=np.uint32)
        for i in range(8):
            if (table >> i) & 1:
                r |= (x if i & 4 else ~x) & (y if i & 2 else ~y) & (z if i & 1 else ~z)
        s(w, r, m)
    return fn


@handles("dp4a", "dp2a")
def dp4a(ins, cx):
    tys = types_of(ins.mods)
    if len(tys) != 2:
        raise cx.error(f"{ins.full_opcode} needs two types")
    d, a, b, c = ins.operands[:4]
    ga, gb = cx.src(a, "b32"), cx.src(b, "b32")
    out_t = "s32" if "s32" in tys else "u32"
    gc = cx.src(c, out_t)
    s = cx.dst(d, out_t)
    sa, sb = tys[0] == "s32", tys[1] == "s32"
    four = ins.opcode == "dp4a"
    hi = "hi" in ins.mods

    def parts(v, n, signed, width):
        sh = np.arange(n, dtype=np.uint64) * np.uint64(width)
        p = (v.astype(np.uint64)[:, None] >> sh) & np.uint64((1 << width) - 1)
        p = p.astype(np.int64)
        if signed:
            p = np.where(p >= (1 << (width - 1)), p - (1 << width), p)
        return p

    def fn(w, m):
        if four:
            pa, pb = parts(ga(w), 4, sa, 8), parts(gb(w), 4, sb, 8)
        else:
            pa = parts(ga(w), 2, sa, 16)
            pb = parts(gb(w), 4, sb, 8)[:, 2:4] if hi else parts(gb(w), 4, sb, 8)[:, 0:2]
        acc = (pa * pb).sum(axis=1) + gc(w).astype(np.int64)
        s(w, (acc & 0xFFFFFFFF).astype(np.uint32).view(VIEW_DTYPE[out_t]), m)
    return fn
