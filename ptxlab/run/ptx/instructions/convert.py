"""mov (with vector pack/unpack), cvt (every integer/float combination), cvta and isspacep."""
from __future__ import annotations

import numpy as np

from .. import floats, memory
from ..decode_context import Unsupported, types_of
from ..memory import LaneFault
from ..parser import Sym, Vec
from ..values import FLOAT_TYPES, SIGNED_TYPES, VIEW_DTYPE, type_bytes
from .registry import handles

_FMT = {"f16": floats.F16, "bf16": floats.BF16, "f32": floats.F32, "f64": floats.F64,
        "tf32": floats.TF32}


# ---------------------------------------------------------------------------------------------
# mov
# ---------------------------------------------------------------------------------------------

@handles("mov")
def mov(ins, cx):
    tys = types_of(ins.mods)
    if len(tys) != 1:
        raise cx.error("mov needs one type")
    t = tys[0]
    d, a = ins.operands[:2]
    if isinstance(d, Vec):            # unpack: mov.b32 {lo, hi}, r
        parts = d.items
        n = len(parts)
        width = type_bytes(t) * 8 // n
        sub = {8: "b8", 16: "b16", 32: "b32"}[width]
        get = cx.src(a, t)
        sets = [cx.dst(p, sub) for p in parts]
        ud = np.dtype(VIEW_DTYPE[{16: "b16", 32: "b32", 64: "b64"}[type_bytes(t) * 8]])
        sd = np.dtype(VIEW_DTYPE[sub])
        mask = (1 << width) - 1

        def unpack(w, m):
            v = get(w).view(ud)
            for i, s in enumerate(sets):
                s(w, ((v >> ud.type(i * width)) & ud.type(mask)).astype(sd), m)
        return unpack
    if isinstance(a, Vec):            # pack: mov.b32 r, {lo, hi}
        parts = a.items
        n = len(parts)
        width = type_bytes(t) * 8 // n
        sub = {8: "b8", 16: "b16", 32: "b32"}[width]
        gets = [cx.src(p, sub) for p in parts]
        ud = np.dtype(VIEW_DTYPE[{16: "b16", 32: "b32", 64: "b64"}[type_bytes(t) * 8]])
        set_ = cx.dst(d, {16: "b16", 32: "b32", 64: "b64"}[type_bytes(t) * 8])

        def pack(w, m):
            acc = np.zeros(w.width, dtype=ud)
            for i, g in enumerate(gets):
                acc = acc | (g(w).astype(ud) << ud.type(i * width))
            set_(w, acc, m)
        return pack
    if isinstance(a, Sym) and a.name not in cx.program.function_names:
        # the address of a variable (in its own space, e.g. the .shared address)
        get = cx.src(a, t)
    else:
        get = cx.src(a, t)
    set_ = cx.dst(d, t)
    return lambda w, m: set_(w, get(w), m)


# ---------------------------------------------------------------------------------------------
# cvta / isspacep
# ---------------------------------------------------------------------------------------------

_WINDOWS = {"shared": memory.SHARED_WINDOW, "local": memory.LOCAL_WINDOW,
            "param": memory.PARAM_WINDOW, "global": 0, "const": 0}


@handles("cvta")
def cvta(ins, cx):
    mods = [m.split("::")[0] for m in ins.mods]
    to = "to" in mods
    space = next((m for m in mods if m in _WINDOWS), None)
    if space is None:
        raise Unsupported(f"{ins.full_opcode}: unknown state space")
    t = types_of(ins.mods)[0]
    get = cx.src(ins.operands[1], t)
    set_ = cx.dst(ins.operands[0], t)
    base = _WINDOWS[space]
    dt = np.dtype(VIEW_DTYPE[t])
    if base == 0:
        return lambda w, m: set_(w, get(w), m)
    if to:
        if dt.itemsize == 4:
            raise Unsupported("cvta.to with 32-bit generic addresses is not modelled")
        b = np.uint64(base)

        def to_space(w, m):
            v = get(w)
            active = v if m is None else v[m]
            bad = (active < b) | (active >= b + np.uint64(memory.WINDOW_SIZE))
            if bad.any():
                lanes = np.nonzero(m)[0] if m is not None else np.arange(w.width)
                i = int(np.argmax(bad))
                raise LaneFault(f"cvta.to.{space}: generic address 0x{int(active[i]):x} is not a "
                                f".{space} address", [lanes[i]])
            set_(w, v - b, m)
        return to_space
    b = np.uint64(base)
    return lambda w, m: set_(w, get(w).astype(np.uint64) + b, m)


@handles("isspacep")
def isspacep(ins, cx):
    space = next((m.split("::")[0] for m in ins.mods if m.split("::")[0] in _WINDOWS), None)
    get = cx.src(ins.operands[1], "u64")
    set_ = cx.dst(ins.operands[0], "pred")
    lo = np.uint64(_WINDOWS[space])

    def fn(w, m):
        a = get(w)
        if space in ("global", "const"):
            r = a < np.uint64(memory.SHARED_WINDOW)
        else:
            r = (a >= lo) & (a < lo + np.uint64(memory.WINDOW_SIZE))
        set_(w, r, m)
    return fn


# ---------------------------------------------------------------------------------------------
# cvt
# ---------------------------------------------------------------------------------------------

_INT_RANGE = {"u8": (0, 255), "s8": (-128, 127), "u16": (0, 65535), "s16": (-32768, 32767),
              "u32": (0, 2**32 - 1), "s32": (-2**31, 2**31 - 1), "u64": (0, 2**64 - 1),
              "s64": (-2**63, 2**63 - 1), "b8": (0, 255), "b16": (0, 65535),
              "b32": (0, 2**32 - 1), "b64": (0, 2**64 - 1)}
_INT_ROUND = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_FLOAT_MODES = {"rn", "rz", "rm", "rp", "rna"}


@handles("cvt")
def cvt(ins, cx):
    mods = ins.mods
    tys = types_of(mods)
    flags = set(mods) - set(tys)
    if "f16x2" in tys or "bf16x2" in tys:
        return _cvt_pack_x2(ins, cx, tys, flags)
    if len(tys) != 2:
        raise Unsupported(f"{ins.full_opcode}: this form of cvt is not modelled")
    dt, st = tys
    known = {"rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi", "ftz", "sat", "relu",
             "satfinite"}
    if flags - known:
        raise Unsupported(f"{ins.full_opcode}: modifier(s) {sorted(flags - known)} not modelled")
    get = cx.src(ins.operands[1], st)
    set_ = cx.dst(ins.operands[0], dt)
    s_float = st in FLOAT_TYPES
    d_float = dt in FLOAT_TYPES
    if not s_float and not d_float:
        return _cvt_int_int(get, set_, dt, st, "sat" in flags)
    if s_float and not d_float:
        return _cvt_float_int(ins, cx, get, set_, dt, st, flags)
    if not s_float and d_float:
        return _cvt_int_float(ins, cx, get, set_, dt, st, flags)
    return _cvt_float_float(ins, cx, get, set_, dt, st, flags)


def _float_mode(flags: set):
    """The float rounding modifier (.rn/.rz/.rm/.rp/.rna) among ``flags``, or None."""
    return next((f for f in flags if f in _FLOAT_MODES), None)


def _int_mode(flags: set):
    """The integer rounding modifier (.rni/.rzi/.rmi/.rpi) among ``flags``, or None."""
    return next((f for f in flags if f in _INT_ROUND), None)


def _cvt_float_int(ins, cx, get, set_, dt: str, st: str, flags: set):
    """cvt.{rni,rzi,rmi,rpi}{.ftz}.<int>.<float>: rounded, NaN to 0, saturated to the range."""
    ftz = "ftz" in flags
    fmode, imode = _float_mode(flags), _int_mode(flags)
    if imode is None and not fmode:
        raise cx.error(f"{ins.full_opcode}: float-to-integer conversion needs .rni/.rzi/"
                       ".rmi/.rpi")
    rnd = _INT_ROUND[imode or "rni"]
    lo, hi = _INT_RANGE[dt]
    sfmt = _FMT[st]
    out_dt = np.dtype(VIEW_DTYPE[dt])

    def f2i(w, m):
        x = floats.decode(get(w).view(_raw(st)), sfmt)
        if ftz:
            x = floats.flush_subnormal(x, sfmt)
        r = rnd(x)
        r = np.where(np.isnan(r), 0.0, r)
        set_(w, _clamp_to_int(r, lo, hi, out_dt), m)
    return f2i


def _cvt_int_float(ins, cx, get, set_, dt: str, st: str, flags: set):
    """cvt.<rounding>{.ftz}{.sat}.<float>.<int>: exact for 64-bit integers beyond 2**53 too."""
    ftz, sat = "ftz" in flags, "sat" in flags
    fmode = _float_mode(flags)
    dfmt = _FMT[dt]
    mode = fmode or "rn"
    if fmode is None and dt != "f64" and st not in ("u8", "s8", "u16", "s16"):
        raise cx.error(f"{ins.full_opcode}: integer-to-float conversion needs a rounding "
                       "modifier")
    signed = st in SIGNED_TYPES

    def i2f(w, m):
        v = get(w)
        if v.dtype.itemsize == 8 and (np.abs(v.astype(np.float64)) >= 2.0**53).any():
            x = _big_ints_to_f64(v, signed, dfmt, mode)
        else:
            x = v.astype(np.float64)
        r = floats.round_to_format(x, dfmt, mode)
        if ftz:
            r = floats.flush_subnormal(r, dfmt)
        if sat:
            r = floats.saturate(r)
        set_(w, floats.encode(r, dfmt).view(_view(dt)), m)
    return i2f


def _cvt_float_float(ins, cx, get, set_, dt: str, st: str, flags: set):
    """Float to float: to an integral value in the same type (.rni ...), or rounded to the
    destination format (a rounding modifier is needed when it narrows)."""
    sfmt, dfmt = _FMT[st], _FMT[dt]
    fmode, imode = _float_mode(flags), _int_mode(flags)
    if dt == "tf32":
        mode = fmode or "rna"
    else:
        mode = fmode
    if imode is not None:
        if st != dt:
            raise cx.error(f"{ins.full_opcode}: integer rounding needs equal float types")
        return _cvt_float_integral(get, set_, dt, st, sfmt, dfmt, imode, flags)
    widening = dfmt.precision >= sfmt.precision and dfmt.emax >= sfmt.emax \
        and dfmt.emin <= sfmt.emin
    if mode is None:
        if not widening and st != dt:
            raise cx.error(f"{ins.full_opcode}: a narrowing float conversion needs a rounding "
                           "modifier (.rn/.rz/.rm/.rp)")
        mode = "rn"
    ftz, sat = "ftz" in flags, "sat" in flags
    relu, satfinite = "relu" in flags, "satfinite" in flags

    def f2f(w, m):
        x = floats.decode(get(w).view(_raw(st)), sfmt)
        if ftz and st == "f32":
            x = floats.flush_subnormal(x, sfmt)
        r = floats.round_to_format(x, dfmt, mode)
        if satfinite:
            r = np.where(np.isnan(r), r, np.clip(r, -dfmt.max_finite, dfmt.max_finite))
        if ftz and dt == "f32":
            r = floats.flush_subnormal(r, dfmt)
        if sat:
            r = floats.saturate(r)
        if relu:
            r = floats.relu(r)
        set_(w, floats.encode(r, dfmt).view(_view(dt)), m)
    return f2f


def _cvt_float_integral(get, set_, dt: str, st: str, sfmt, dfmt, imode: str, flags: set):
    """cvt.{rni,rzi,rmi,rpi}.<f>.<f>: round to an integral value, keeping the sign (-0.0)."""
    ftz, sat = "ftz" in flags, "sat" in flags
    rnd = _INT_ROUND[imode]

    def f2f_int(w, m):
        x = floats.decode(get(w).view(_raw(st)), sfmt)
        if ftz:
            x = floats.flush_subnormal(x, sfmt)
        r = rnd(x)
        r = np.where(np.isfinite(x), np.copysign(r, x), x)
        if ftz:
            r = floats.flush_subnormal(r, dfmt)
        if sat:
            r = floats.saturate(r)
        set_(w, floats.encode(r, dfmt).view(_view(dt)), m)
    return f2f_int


def _raw(t: str):
    return {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64,
            "tf32": np.uint32}[t]


def _view(t: str):
    return VIEW_DTYPE[t]


def _clamp_to_int(r: np.ndarray, lo: int, hi: int, out_dt: np.dtype) -> np.ndarray:
    """Rounded float64 values -> integers saturated to [lo, hi] (NaN already 0)."""
    if out_dt.itemsize < 8:
        c = np.clip(r, lo, hi)
        return c.astype(np.int64).astype(out_dt)
    # 64-bit: beware of values that do not survive float64 -> int64
    if lo == 0:
        out = np.zeros(r.shape, dtype=np.uint64)
        big = r >= 2.0**64
        small = r <= 0
        mid = ~(big | small)
        hi_half = mid & (r >= 2.0**63)
        out[mid & ~hi_half] = r[mid & ~hi_half].astype(np.int64).astype(np.uint64)
        out[hi_half] = (r[hi_half] - 2.0**63).astype(np.int64).astype(np.uint64) + np.uint64(2**63)
        out[big] = np.uint64(2**64 - 1)
        return out.view(out_dt)
    out = np.zeros(r.shape, dtype=np.int64)
    big = r >= 2.0**63
    small = r < -2.0**63
    mid = ~(big | small)
    out[mid] = r[mid].astype(np.int64)
    out[big] = np.int64(2**63 - 1)
    out[small] = np.int64(-2**63)
    return out.view(out_dt)


def _big_ints_to_f64(v: np.ndarray, signed: bool, dfmt, mode: str) -> np.ndarray:
    """64-bit integers beyond 2**53: round-to-odd into float64 so the final rounding is exact."""
    out = np.empty(v.shape, dtype=np.float64)
    for i, x in enumerate(v.tolist()):
        x = int(x)
        if abs(x) < 2**53:
            out[i] = float(x)
            continue
        nbits = abs(x).bit_length()
        shift = nbits - 53
        q = abs(x) >> shift
        if abs(x) & ((1 << shift) - 1):
            q |= 1            # sticky bit: round to odd
        out[i] = float(q) * 2.0**shift * (1 if x > 0 else -1)
    return out


def _cvt_int_int(get, set_, dt, st, sat):
    out_dt = np.dtype(VIEW_DTYPE[dt])
    lo, hi = _INT_RANGE[dt]
    signed_src = st in SIGNED_TYPES
    from ..values import convert_bits
    if not sat:
        def i2i(w, m):
            set_(w, convert_bits(get(w), out_dt, signed_src), m)
        return i2i

    def i2i_sat(w, m):
        v = get(w)
        if v.dtype.itemsize == 8 or out_dt.itemsize == 8:
            vals = [min(max(int(x), lo), hi) for x in v.tolist()]
            arr = np.array([x & ((1 << (8 * out_dt.itemsize)) - 1) for x in vals],
                           dtype=np.uint64).astype(
                {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[out_dt.itemsize])
            set_(w, arr.view(out_dt), m)
            return
        c = np.clip(v.astype(np.int64), lo, hi)
        set_(w, c.astype(out_dt), m)
    return i2i_sat


def _cvt_pack_x2(ins, cx, tys, flags):
    """cvt.rn{.relu}{.satfinite}.f16x2.f32 d, a, b: a -> upper half, b -> lower half."""
    dt = tys[0]
    if dt not in ("f16x2", "bf16x2") or len(tys) != 2 or tys[1] != "f32":
        raise Unsupported(f"{ins.full_opcode}: this packing conversion is not modelled")
    mode = next((f for f in flags if f in _FLOAT_MODES), None)
    if mode is None:
        raise cx.error(f"{ins.full_opcode} needs a rounding modifier")
    if flags - {"rn", "rz", "rm", "rp", "relu", "satfinite"}:
        raise Unsupported(f"{ins.full_opcode}: modifier(s) not modelled")
    fmt = floats.F16 if dt == "f16x2" else floats.BF16
    ga = cx.src(ins.operands[1], "f32")
    gb = cx.src(ins.operands[2], "f32")
    set_ = cx.dst(ins.operands[0], "b32")
    relu = "relu" in flags
    satfinite = "satfinite" in flags

    def one(x):
        r = floats.round_to_format(x.astype(np.float64), fmt, mode)
        if satfinite:
            r = np.where(np.isnan(r), r, np.clip(r, -fmt.max_finite, fmt.max_finite))
        if relu:
            r = floats.relu(r)
        return floats.encode(r, fmt).astype(np.uint32)

    def fn(w, m):
        hi = one(ga(w))
        lo = one(gb(w))
        set_(w, (hi << np.uint32(16)) | lo, m)
    return fn
