"""Loads, stores, atomics and asynchronous copies (cp.async) through the checked address spaces.

Cache hints (``.ca``, ``.nc``, ``.L2::128B`` ...) and memory-order qualifiers change speed, not
results, when warps run one at a time, so they are accepted and ignored.
"""
from __future__ import annotations

import numpy as np

from .. import floats
from ..decode_context import K_OP, CodeEntry, Unsupported, types_of
from ..errors import NeedsWarpByWarp
from ..memory import WarpAccess, check_alignment
from ..parser import Addr, Imm, Reg, Sym, Vec
from ..racecheck import Site
from ..values import VIEW_DTYPE, WARP
from .registry import handles

_SPACES = {"global", "shared", "local", "param", "const"}
#: spaces whose access a whole warp may make at once (see ``Spaces.load_warp``)
_WHOLE_WARP_SPACES = ("shared", "global", "param")
_ALL = {WARP: np.arange(WARP)}


def _space(ins) -> str:
    for m in ins.mods:
        base = m.split("::")[0]
        if base in _SPACES:
            return base
    return "generic"


def _vec(ins) -> int:
    for m in ins.mods:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


def _lanes(w, m) -> np.ndarray:
    """Indices of the active lanes (every lane of ``w`` when ``m`` is None)."""
    if m is not None:
        return np.nonzero(m)[0]
    every = _ALL.get(w.width)
    if every is None:
        every = _ALL[w.width] = np.arange(w.width)
    return every


def _callparam_size(cx, name: str) -> int:
    for d in cx.fn.locals:
        if d.name == name:
            return d.size
    for p in list(cx.fn.params) + list(cx.fn.returns):
        if p.name == name:
            return p.size
    raise cx.error(f"unknown parameter {name}")


def _pvar(w, name: str, size: int) -> np.ndarray:
    pv = w.flow.pvars
    arr = pv.get(name)
    if arr is None or arr.shape[1] < size:
        new = np.zeros((w.width, size), dtype=np.uint8)
        if arr is not None:
            new[:, : arr.shape[1]] = arr
        pv[name] = arr = new
    return arr


def _access(ins, cx, value_at: int, addr_at: int, values: str):
    """What ld and st share: ``(type, vector width, numpy dtype, value operands, space, address
    getter, param)``, ``param`` being ``(name, offset, size)`` for a call parameter, else None."""
    tys = types_of(ins.mods)
    if not tys:
        raise cx.error(f"{ins.full_opcode} has no type")
    t = tys[-1]
    if t == "b128":
        raise Unsupported(f"{ins.full_opcode}: 128-bit accesses are not modelled")
    n = _vec(ins)
    op, addr = ins.operands[value_at], ins.operands[addr_at]
    regs = list(op.items) if isinstance(op, Vec) else [op]
    if len(regs) != n:
        raise cx.error(f"{ins.full_opcode} needs {n} {values}")
    vd = np.dtype(VIEW_DTYPE[t])
    sp, get_addr = cx.address(addr, _space(ins))
    param = None
    if sp == "callparam":
        param = (get_addr, addr.offset,
                 max(_callparam_size(cx, get_addr), addr.offset + vd.itemsize * n))
    return t, n, vd, regs, sp, get_addr, param


@handles("ld", "ldu")
def ld(ins, cx):
    t, n, vd, dsts, sp, get_addr, param = _access(ins, cx, value_at=0, addr_at=1,
                                                  values="destination register(s)")
    sets = [cx.dst(d, t) for d in dsts]
    what = Site(ins)           # the opcode, carrying its line for racecheck
    if param is not None:
        name, off, size = param

        def ld_param(w, m):
            raw = _pvar(w, name, size)[:, off:off + vd.itemsize * n]
            # a copy, always: the parameter's bytes are written again by the next call that
            # uses it, and a register must not change with them
            vals = np.array(raw, order="C").view(vd)
            for i, s in enumerate(sets):
                s(w, vals[:, i], m)
        return ld_param
    lanewise = _ld_lanes(sets, sp, get_addr, vd, n, what)
    if sp not in _WHOLE_WARP_SPACES:
        return lanewise
    access = WarpAccess(vd, n)
    whole = _ld_whole_warp(sets, sp, get_addr, access, what, lanewise)
    if sp == "param" and _constant_address(ins.operands[1]):
        return _ld_param_kept(sets, get_addr, access, what, whole)
    return whole


def _constant_address(addr) -> bool:
    """Whether an address operand is the same in every lane for the whole launch."""
    return isinstance(addr, Addr) and (addr.base is None or isinstance(addr.base, Sym))


def _ld_whole_warp(sets, sp: str, get_addr, access: WarpAccess, what, lanewise):
    """``ld`` with every lane active: one check and one index for the warp where every lane is
    aligned and inside one buffer, else the lane-by-lane ``lanewise``."""
    if access.count == 1:
        s0 = sets[0]

        def ld_warp1(w, m):
            if m is None:
                items = w.spaces.load_warp(sp, get_addr(w), access, what)
                if items is not None:
                    s0(w, items, None)
                    return
            lanewise(w, m)
        return ld_warp1

    def ld_warp(w, m):
        if m is None:
            items = w.spaces.load_warp(sp, get_addr(w), access, what)
            if items is not None:
                vals = access.unpack(items)
                for i, s in enumerate(sets):
                    s(w, vals[:, i], None)
                return
        lanewise(w, m)
    return ld_warp


def _ld_param_kept(sets, get_addr, access: WarpAccess, what, load):
    """``ld.param`` at a constant address: a kernel parameter is one value in every lane for
    the whole launch, a function of its bytes alone, so the values are kept with the bytes
    they came from and handed out again (the same read-only arrays: registers are replaced,
    never written in place) while the parameter holds those bytes, in this launch or a later
    one. Until one whole-warp load succeeds, and whenever it cannot, ``load`` does the work."""
    # (parameter bytes, lanes, first byte, those bytes, values): one tuple, replaced whole, so
    # a reader never mixes two launches' parts
    kept: list = [None]

    def ld_param(w, m):
        sp = w.spaces
        values = _kept_values(kept[0], sp.params, w.width)
        if values is None:
            if m is not None:
                load(w, m)
                return
            a = get_addr(w)
            items = sp.load_warp("param", a, access, what)
            if items is None:
                load(w, m)
                return
            start = int(a[0])
            values = _read_only_columns(access.unpack(items))
            kept[0] = (sp.params, w.width, start,
                       sp.params[start:start + access.total].tobytes(), values)
        for s, v in zip(sets, values):
            s(w, v, m)
    return ld_param


def _kept_values(kept, params: np.ndarray, width: int):
    """The values ``kept`` holds if they are those of ``params`` (the same array, or the same
    bytes at the address) for ``width`` lanes, else ``None``."""
    if kept is None or width != kept[1]:
        return None
    if params is kept[0] or params[kept[2]:kept[2] + len(kept[3])].tobytes() == kept[3]:
        return kept[4]
    return None


def _read_only_columns(vals: np.ndarray) -> tuple:
    """Each column of ``vals`` as its own read-only array, to be handed out many times."""
    cols = []
    for i in range(vals.shape[1]):
        c = np.ascontiguousarray(vals[:, i])
        c.flags.writeable = False
        cols.append(c)
    return tuple(cols)


def _ld_lanes(sets, sp: str, get_addr, vd, n: int, what):
    """``ld`` lane by lane: the active lanes' addresses, each checked."""
    if n == 1:
        s0 = sets[0]

        def ld1(w, m):
            lanes = _lanes(w, m)
            a = get_addr(w)
            vals = w.spaces.load(sp, a if m is None else a[lanes], lanes, vd, 1, what)
            if m is None:
                s0(w, vals[:, 0], None)
            else:
                full = np.zeros(w.width, dtype=vd)
                full[lanes] = vals[:, 0]
                s0(w, full, m)
        return ld1

    def ldv(w, m):
        lanes = _lanes(w, m)
        a = get_addr(w)
        vals = w.spaces.load(sp, a if m is None else a[lanes], lanes, vd, n, what)
        if m is not None:
            full = np.zeros((w.width, n), dtype=vd)
            full[lanes] = vals
            vals = full
        for i, s in enumerate(sets):
            s(w, vals[:, i], m)
    return ldv


@handles("st")
def st(ins, cx):
    t, n, vd, srcs, sp, get_addr, param = _access(ins, cx, value_at=1, addr_at=0,
                                                  values="source value(s)")
    gets = [cx.src(x, t) for x in srcs]
    what = Site(ins)           # the opcode, carrying its line for racecheck
    if param is not None:
        name, off, size = param

        def st_param(w, m):
            arr = _pvar(w, name, size)
            vals = np.stack([g(w) for g in gets], axis=1).astype(vd)
            raw = np.ascontiguousarray(vals).view(np.uint8).reshape(w.width, -1)
            if m is None:
                arr[:, off:off + raw.shape[1]] = raw
            else:
                arr[m, off:off + raw.shape[1]] = raw[m]
        return st_param
    if sp == "param":
        raise cx.error("kernel parameters are read-only")
    lanewise = _st_lanes(gets, sp, get_addr, vd, n, what)
    if sp not in _WHOLE_WARP_SPACES:
        return lanewise
    return _st_whole_warp(gets, sp, get_addr, WarpAccess(vd, n), what, lanewise)


def _st_whole_warp(gets, sp: str, get_addr, access: WarpAccess, what, lanewise):
    """``st`` with every lane active: one check and one index for the warp where every lane is
    aligned and inside one writable buffer, else the lane-by-lane ``lanewise``."""
    vd = access.dtype
    if access.count == 1:
        g0 = gets[0]

        def st_warp1(w, m):
            if m is None:
                v = g0(w)
                if v.dtype != vd:
                    v = v.astype(vd)
                if w.spaces.store_warp(sp, get_addr(w), access, v, what):
                    return
            lanewise(w, m)
        return st_warp1

    def st_warp(w, m):
        if m is None:
            items = access.pack_columns([g(w) for g in gets], w.width)
            if w.spaces.store_warp(sp, get_addr(w), access, items, what):
                return
        lanewise(w, m)
    return st_warp


def _st_lanes(gets, sp: str, get_addr, vd, n: int, what):
    """``st`` lane by lane: the active lanes' addresses, each checked."""
    def st_(w, m):
        lanes = _lanes(w, m)
        a = get_addr(w)
        if n == 1:
            vals = gets[0](w)[:, None]
        else:
            vals = np.stack([g(w) for g in gets], axis=1)
        if vals.dtype != vd:
            vals = vals.astype(vd)
        if m is not None:
            a = a[lanes]
            vals = vals[lanes]
        w.spaces.store(sp, a, lanes, np.ascontiguousarray(vals), what)
    return st_


# ---------------------------------------------------------------------------------------------
# atomics
# ---------------------------------------------------------------------------------------------

_ATOM_OPS = {"and", "or", "xor", "exch", "add", "inc", "dec", "min", "max", "cas"}


def _atom_update(op: str, t: str, old, b, c, noftz: bool):
    """New memory value for one lane (Python scalars of numpy types)."""
    if op == "add":
        if t in ("f16", "bf16"):
            fmt = floats.F16 if t == "f16" else floats.BF16
            x = floats.decode(np.array([old]), fmt) + floats.decode(np.array([b]), fmt)
            return floats.fp_result(x, fmt, "rn")[0]
        if t == "f32":
            x = np.float32(old) + np.float32(b) if noftz else _ftz1(_ftz1(np.float32(old))
                                                                     + _ftz1(np.float32(b)))
            if x != x:
                return np.uint32(0x7FFFFFFF).view(np.float32)
            return np.float32(x)
        if t == "f64":
            return np.float64(old) + np.float64(b)
        return old + b
    if op == "exch":
        return b
    if op == "cas":
        return c if old == b else old
    if op == "and":
        return old & b
    if op == "or":
        return old | b
    if op == "xor":
        return old ^ b
    if op == "min":
        return min(old, b)
    if op == "max":
        return max(old, b)
    if op == "inc":
        return type(old)(0) if old >= b else old + type(old)(1)
    if op == "dec":
        return b if (old == 0 or old > b) else old - type(old)(1)
    raise ValueError(op)


def _ftz1(x):
    return np.float32(0.0) * np.sign(x) if x != 0 and abs(x) < 1.1754943508222875e-38 else x


@handles("atom", "red")
def atom(ins, cx):
    tys = types_of(ins.mods)
    op = next((m for m in ins.mods if m in _ATOM_OPS), None)
    if op is None or not tys:
        raise Unsupported(f"{ins.full_opcode}: this atomic is not modelled")
    if _vec(ins) != 1:
        raise Unsupported(f"{ins.full_opcode}: vector atomics are not modelled")
    t = tys[-1]
    if t in ("f16x2", "bf16x2"):
        raise Unsupported(f"{ins.full_opcode}: packed atomics are not modelled")
    space = _space(ins)
    ops = list(ins.operands)
    is_red = ins.opcode == "red"
    d = None if is_red else ops.pop(0)
    addr = ops[0]
    gb = cx.src(ops[1], t)
    gc = cx.src(ops[2], t) if op == "cas" else None
    s = cx.dst(d, t) if d is not None else None
    vd = np.dtype(VIEW_DTYPE[t])
    sp, get_addr = cx.address(addr, space)
    what = ins.full_opcode
    noftz = "noftz" in ins.mods

    def fn(w, m):
        lanes = _lanes(w, m)
        a = get_addr(w)[lanes]
        old_vals = w.spaces.load(sp, a, lanes, vd, 1, what)[:, 0]
        bv = gb(w)[lanes]
        cv = gc(w)[lanes] if gc is not None else [None] * len(lanes)
        current: dict = {}
        olds = np.zeros(w.width, dtype=vd)
        for j in range(len(lanes)):
            key = int(a[j])
            old = current.get(key, old_vals[j])
            olds[lanes[j]] = old
            current[key] = _atom_update(op, t, old, bv[j], cv[j], noftz)
        keys = np.array(list(current.keys()), dtype=np.uint64)
        first_lane = {int(a[j]): lanes[j] for j in range(len(lanes) - 1, -1, -1)}
        klanes = np.array([first_lane[int(k)] for k in keys])
        new = np.array([current[int(k)] for k in keys], dtype=vd)[:, None]
        w.spaces.store(sp, keys, klanes, new, what)
        if s is not None:
            s(w, olds, m)
    return fn


# ---------------------------------------------------------------------------------------------
# cp.async
# ---------------------------------------------------------------------------------------------

@handles("cp")
def cp(ins, cx):
    mods = ins.mods
    if not mods or mods[0] != "async":
        raise Unsupported(f"{ins.full_opcode} is not supported by the CPU model")
    rest = mods[1:]
    if "bulk" in rest or "mbarrier" in rest[:1] or any(m.startswith("mbarrier") for m in rest):
        raise Unsupported(f"{ins.full_opcode} (bulk/tensor copies and mbarrier completion) is "
                          "not supported by the CPU model")
    if rest and rest[0] == "commit_group":
        def commit(w, m):
            w.cp_groups.append(w.cp_open)
            w.cp_open = []
        return CodeEntry(K_OP, commit, wide=_all_lanes(commit))
    if rest and rest[0] in ("wait_group", "wait_all"):
        return _cp_wait(ins, cx, rest)
    return _cp_issue(ins, cx, rest)


def _cp_wait(ins, cx, rest):
    """``cp.async.wait_group N`` / ``wait_all``: the copies of every group but the last ``N``
    are made now (``wait_all`` commits the open group first)."""
    if rest[0] == "wait_all":
        keep = 0
        commit_first = True
    else:
        op = ins.operands[0]
        if not isinstance(op, Imm):
            raise cx.error("cp.async.wait_group needs an immediate count")
        keep = op.value
        commit_first = False

    def wait(w, m):
        if commit_first and w.cp_open:
            w.cp_groups.append(w.cp_open)
            w.cp_open = []
        while len(w.cp_groups) > keep:
            for copy in w.cp_groups.pop(0):
                _perform_copy(w, copy)
    return CodeEntry(K_OP, wait, wide=_all_lanes(wait))


def _cp_issue(ins, cx, rest):
    """``cp.async.ca``/``.cg``: each lane's copy is checked now (so a fault names this
    instruction) and queued in the open group."""
    if "ca" not in rest and "cg" not in rest:
        raise Unsupported(f"{ins.full_opcode} is not supported by the CPU model")
    ops = list(ins.operands)
    dst_addr, src_addr, size_op = ops[0], ops[1], ops[2]
    if not isinstance(size_op, Imm) or size_op.value not in (4, 8, 16):
        raise cx.error("cp.async copy size must be 4, 8 or 16")
    size = size_op.value
    if "cg" in rest and size != 16:
        raise cx.error("cp.async.cg copies 16 bytes")
    src_size = None
    ignore_src = None
    if len(ops) > 3:
        extra = ops[3]
        if isinstance(extra, Reg) and cx.reg_dtype(extra.name) == np.bool_:
            ignore_src = cx.src(extra, "pred")
        elif not (len(ops) == 4 and "L2" in " ".join(rest) and "cache_hint" in " ".join(rest)):
            src_size = cx.src(extra, "u32")
    _, gdst = cx.address(dst_addr, "shared")
    _, gsrc = cx.address(src_addr, "global")
    what = Site(ins)           # the opcode, carrying its line for racecheck

    whole = src_size is None and ignore_src is None     # every lane copies all its bytes
    access = WarpAccess(np.uint8, size)

    def issue(w, m):
        if m is None and whole:
            plan = w.spaces.plan_copy(gdst(w), gsrc(w), access)
            if plan is not None:        # both ends checked for the whole warp
                w.cp_open.append(_PlannedCopy(plan, what))
                return
        lanes = _lanes(w, m)
        d = gdst(w)[lanes]
        sa = gsrc(w)[lanes]
        n = np.full(len(lanes), size, dtype=np.int64)
        if src_size is not None:
            n = np.minimum(src_size(w)[lanes].astype(np.int64), size)
        if ignore_src is not None:
            n = np.where(ignore_src(w)[lanes], 0, n)
        d, sa = d.astype(np.uint64, copy=False), sa.astype(np.uint64, copy=False)
        reading = n > 0
        sp = w.spaces
        # check both ends now, so a fault names the cp.async that caused it: the whole warp at
        # once where every lane reads and both ends fit, else lane by lane
        if not (whole and sp.plan_copy(d, sa, access) is not None):
            check_alignment(d, size, lanes, what)
            check_alignment(sa, size, lanes, what)
            sp._shared_offsets(d, lanes, size, what)
            if reading.any():
                sp.glob.locate(sa[reading], size, lanes[reading], what)
        w.cp_open.append((lanes, d, sa, n, size, what))
    return issue


def _all_lanes(fn):
    """``fn`` in a vector run of many warps, which keeps one list of copy groups for all of
    them: right only while every lane commits and waits together."""
    def wide(w, m):
        if m is not None and not (m == w.live).all():
            raise NeedsWarpByWarp("cp.async groups committed or awaited by part of the lanes")
        fn(w, m)
    return wide


class _PlannedCopy:
    """A whole warp's copy checked at its issue (``Spaces.plan_copy``), made at the wait."""

    __slots__ = ("plan", "what")

    def __init__(self, plan, what):
        self.plan, self.what = plan, what


def _perform_copy(w, copy) -> None:
    if type(copy) is _PlannedCopy:
        w.spaces.copy_planned(copy.plan, copy.what)
        return
    lanes, dst, src, n, size, what = copy
    if lanes.size and (n == size).all():    # every lane copies all its bytes
        w.spaces.store("shared", dst, lanes,
                       w.spaces.load("global", src, lanes, np.uint8, size, what), what)
        return
    data = np.zeros((len(lanes), size), dtype=np.uint8)
    reading = n > 0
    if reading.any():
        data[reading] = w.spaces.load("global", src[reading], lanes[reading], np.uint8, size, what)
        cols = np.arange(size)
        data[cols[None, :] >= n[:, None]] = 0
    w.spaces.store("shared", dst, lanes, data, what)
