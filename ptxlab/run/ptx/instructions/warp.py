"""Warp-collective instructions: the matrix instructions of the course, and the shuffles and votes
that ordinary CUDA code compiles to (``__shfl_sync``, ``__ballot_sync``, ``__activemask`` ...).

``ldmatrix``, ``stmatrix``, ``movmatrix`` and ``mma`` hand the whole warp's registers to
:mod:`ptxlab.model.emulator`: the CPU backend has no layout knowledge of its own. The interpreter
runs these entries only when every lane the instruction needs has arrived (``K_COLL``), so a
divergent call is reported instead of executed.
"""
from __future__ import annotations

import numpy as np

from ....model import emulator, layouts, matrix_forms
from ..decode_context import K_COLL, K_OP, CodeEntry, Unsupported
from ..lanes import lanes_of, mask_bits
from ..memory import SHARED_START, SHARED_WINDOW, WINDOW_SIZE, LaneFault
from ..parser import Pair, Reg, Vec
from ..racecheck import Site
from ..values import WARP
from .registry import handles

_LANE_BITS = (np.uint64(1) << np.arange(WARP, dtype=np.uint64))


def _regs(op) -> list:
    return list(op.items) if isinstance(op, Vec) else [op]


# ---------------------------------------------------------------------------------------------
# ldmatrix / stmatrix: row addresses into the block's shared memory
# ---------------------------------------------------------------------------------------------

def _matrix_form(ins, cx, what: str) -> matrix_forms.MatrixForm:
    """The form of an ldmatrix/stmatrix/movmatrix, checked as ptxas checks it: the form must
    exist, and the module's ``.target``/``.version`` must allow it."""
    try:
        f = matrix_forms.parse_form(ins.full_opcode)
        module = cx.program.module
        if module.target and module.version:
            matrix_forms.check_target(f, module.target, module.version)
    except matrix_forms.FormError as exc:
        raise cx.error(str(exc)) from None
    if f.op != what:
        raise cx.error(f"{ins.full_opcode}: expected a {what} form")
    return f


#: The lanes that give row addresses, in order (lane i gives row i).
_ROW_LANES = np.arange(32)


def _shared_addresses(w, a: np.ndarray, lanes: np.ndarray, space: str, what) -> np.ndarray:
    """The ``.shared`` addresses of the row addresses ``a`` that ``lanes`` gave: a ``.shared``
    form keeps their low 32 bits, a generic one must point into the shared window."""
    if space == "shared":
        return w.spaces.shared32(a, lanes, what)
    inside = (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
    if not inside.all():
        i = int(np.argmax(~inside.reshape(-1)))
        raise LaneFault(f"{what}: generic address 0x{int(a.reshape(-1)[i]):x} is not in shared "
                        "memory (ldmatrix/stmatrix read and write only shared memory)",
                        (int(lanes.reshape(-1)[i]),))
    return a - np.uint64(SHARED_WINDOW)


def _shared_offsets(get_addr, space: str, what, used: int):
    """A getter of the ``used`` lanes' int64 byte offsets into the block's shared memory.

    Only the first ``used`` lanes give a row address (8 per matrix: lanes 0-7 for .x1, 0-15
    for .x2); the instruction ignores the others' registers, so only those lanes are read and
    checked."""
    lanes = _ROW_LANES[:used]

    def offsets(w) -> np.ndarray:
        a = np.asarray(get_addr(w), dtype=np.uint64)[:used]
        # below 2**32 once a .shared form keeps the low bits or a generic one is in the window
        return _shared_addresses(w, a, lanes, space, what).view(np.int64)
    return offsets


def _wide_rows(w, get_addr, space: str, used: int, m, what) -> tuple[np.ndarray, np.ndarray]:
    """``(warps, rows)`` of a matrix instruction run for the warps of group ``m`` of a vector
    run (:mod:`ptxlab.run.ptx.wide`): their numbers, and ``(k, 32)`` row addresses as indices
    into the side-by-side shared memory of their blocks (0 past the ``used`` lanes)."""
    ws = w.group_warps(m)
    a = get_addr(w).astype(np.uint64).reshape(-1, WARP)[ws, :used]
    a = _shared_addresses(w, a, _row_lanes(ws, used).reshape(a.shape), space, what)
    rows = np.zeros((ws.size, WARP), dtype=np.int64)
    rows[:, :used] = w.spaces.rows_in_blocks(a.astype(np.int64), ws * WARP)
    return ws, rows


def _row_lanes(ws: np.ndarray, used: int) -> np.ndarray:
    """The lanes (of the vector) that give the rows, warp by warp."""
    return (ws[:, None] * WARP + np.arange(used)).reshape(-1)


def _warp_values(w, ws: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """``(k, 32)`` values of warps ``ws`` as one ``(width,)`` register (0 in other lanes)."""
    if ws.size * WARP == w.width:
        return np.ascontiguousarray(vals).reshape(w.width)
    full = np.zeros((w.width // WARP, WARP), dtype=vals.dtype)
    full[ws] = vals
    return full.reshape(w.width)


def _of_warps(w, ws: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The ``(k, 32, ...)`` values of warps ``ws`` from a ``(width, ...)`` array."""
    v = np.asarray(vals).reshape((w.width // WARP, WARP) + np.shape(vals)[1:])
    return v if ws.size * WARP == w.width else v[ws]


def _matrix_operands(ins, cx, what: str, regs_at: int, addr_at: int):
    """``(form, registers, offsets, site)`` of an ldmatrix/stmatrix: the register operands
    (checked against the form), a getter of the lanes' shared-memory offsets, and the access
    site racecheck names."""
    f = _matrix_form(ins, cx, what)
    regs = _regs(ins.operands[regs_at])
    try:
        matrix_forms.check_register_count(f, len(regs), ins.full_opcode)
    except matrix_forms.FormError as exc:
        raise cx.error(str(exc)) from None
    space = "shared" if f.space.startswith("shared") else "generic"
    _, get_addr = cx.address(ins.operands[addr_at], space)
    site = Site(ins)
    return (f, regs, _shared_offsets(get_addr, space, site, f.address_lane_count), site,
            (get_addr, space))


@handles("ldmatrix")
def ldmatrix(ins, cx):
    f, dsts, offsets, site, (get_addr, space) = _matrix_operands(ins, cx, "ldmatrix", regs_at=0,
                                                                  addr_at=1)
    sets = [cx.dst(d, "b32") for d in dsts]
    n = f.address_lane_count

    def wide(w, m):
        ws, rows = _wide_rows(w, get_addr, space, n, m, site)
        w.spaces.shared_guard.read(_row_lanes(ws, n), rows[:, :n].reshape(-1), 16)
        regs = emulator.ldmatrix_form(w.spaces.shared, rows, f)
        for i, s in enumerate(sets):
            s(w, _warp_values(w, ws, regs[:, :, i]), m)

    load = emulator.row_loader(f)

    def fn(w, m):
        rows = offsets(w)                                       # lanes 0 .. n-1: the rows
        w.spaces.check_shared_rows(rows, _ROW_LANES[:n], site)
        regs = load(w.spaces.shared_bytes(), rows)              # (regs, 32)
        if w.spaces.race is not None:      # lanes 0 .. n-1 give the 16-byte rows
            w.spaces.race.read(w.index, _ROW_LANES[:n], rows - SHARED_START, 16, site)
        for s, reg in zip(sets, regs):
            s(w, reg, m)
    return CodeEntry(K_COLL, fn, aligned=True, extra=ins.full_opcode, wide=wide)


@handles("stmatrix")
def stmatrix(ins, cx):
    f, srcs, offsets, site, (get_addr, space) = _matrix_operands(ins, cx, "stmatrix", regs_at=1,
                                                                 addr_at=0)
    gets = [cx.src(s, "b32") for s in srcs]
    n = f.address_lane_count

    def wide(w, m):
        ws, rows = _wide_rows(w, get_addr, space, n, m, site)
        regs = np.stack([np.asarray(g(w), dtype=np.uint32) for g in gets], axis=1)
        w.spaces.shared_guard.write(_row_lanes(ws, n), rows[:, :n].reshape(-1), 16)
        emulator.stmatrix_form(w.spaces.shared, rows, _of_warps(w, ws, regs), f)

    store = emulator.row_storer(f)

    def fn(w, m):
        regs = np.array([g(w) for g in gets], dtype=np.uint32)     # (regs, 32)
        rows = offsets(w)                                       # lanes 0 .. n-1: the rows
        w.spaces.check_shared_rows(rows, _ROW_LANES[:n], site)
        smem = w.spaces.shared_bytes()
        race = w.spaces.race
        if race is not None:
            offs = rows - SHARED_START
            # rows outside the block's shared memory: the emulator refuses them just below
            if (offs >= 0).all() and (offs <= w.spaces.shared_size - 16).all():
                race.write(w.index, _ROW_LANES[:n], offs, 16, site,
                           unchanged=lambda: _stmatrix_unchanged(smem, rows, regs, store))
        store(smem, rows, regs)
    return CodeEntry(K_COLL, fn, aligned=True, extra=ins.full_opcode, wide=wide)


def _stmatrix_unchanged(smem: np.ndarray, rows: np.ndarray, regs: np.ndarray, store) -> np.ndarray:
    """Which bytes of its rows a stmatrix about to run leaves as they are (for racecheck's
    evidence, computed only when the store races): the store done on a copy, compared."""
    after = smem.copy()
    store(after, rows, regs)
    where = rows[:, None] + np.arange(16)
    return (after[where] == smem[where]).reshape(-1)


@handles("movmatrix")
def movmatrix(ins, cx):
    mods = set(ins.mods)
    if not {"sync", "aligned", "m8n8", "trans", "b16"} <= mods:
        # not a form the model lacks but one that does not exist: ptxas refuses it too
        missing = sorted({"sync", "aligned", "m8n8", "trans", "b16"} - mods)
        raise cx.error(f"{ins.full_opcode}: .{', .'.join(missing)} required for instruction "
                       "'movmatrix' (the only form is movmatrix.sync.aligned.m8n8.trans.b16)")
    _matrix_form(ins, cx, "movmatrix")      # the .target/.version gate (sm_75, PTX ISA 7.8)
    d = cx.dst(ins.operands[0], "b32")
    a = cx.src(ins.operands[1], "b32")

    def fn(w, m):
        d(w, emulator.movmatrix(np.asarray(a(w), dtype=np.uint32)), m)

    def wide(w, m):
        ws = w.group_warps(m)
        moved = emulator.movmatrix(_of_warps(w, ws, np.asarray(a(w), dtype=np.uint32)))
        d(w, _warp_values(w, ws, moved), m)
    return CodeEntry(K_COLL, fn, aligned=True, extra=ins.full_opcode, wide=wide)


# ---------------------------------------------------------------------------------------------
# mma.sync
# ---------------------------------------------------------------------------------------------

@handles("mma")
def mma(ins, cx):
    mods = list(ins.mods)
    if "sync" not in mods or "aligned" not in mods:
        raise cx.error(f"{ins.full_opcode}: mma needs .sync.aligned")
    shape = next((m for m in mods if m.startswith("m") and "n" in m and "k" in m), "")
    types = matrix_forms.mma_types(mods)
    if len(types) != 4:
        raise cx.error(f"{ins.full_opcode}: mma needs four types, .dtype.atype.btype.ctype "
                       f"(ptxas: \"Unexpected instruction types specified for 'mma'\"): write "
                       f"e.g. mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    dtype, atype, btype, ctype = types
    try:    # what ptxas refuses is a compile error, not a gap in the model
        matrix_forms.check_mma_types(ins.full_opcode, dtype, atype, btype, ctype)
    except matrix_forms.FormError as exc:
        raise cx.error(str(exc)) from None
    if "row" not in mods or "col" not in mods:
        raise Unsupported(f"{ins.full_opcode}: the course's mma forms are .row.col")
    if "satfinite" in mods:
        raise Unsupported(f"{ins.full_opcode}: .satfinite is not modelled")
    if (shape, atype, btype, ctype, dtype) not in layouts.MMA_VARIANTS:
        raise Unsupported(f"{ins.full_opcode} is not one of the mma forms the CPU model covers "
                          f"({len(layouts.MMA_VARIANTS)} forms, see ptxlab.layouts.MMA_VARIANTS)")
    form = layouts.mma_form(shape, atype, btype, ctype, dtype)
    dop, aop, bop, cop = ins.operands[:4]
    for op, lay, name in ((dop, form.d, "D"), (aop, form.a, "A"), (bop, form.b, "B"),
                          (cop, form.c, "C")):
        if len(_regs(op)) != lay.regs:
            raise cx.error(f"{form.ptx}: operand {name} needs {lay.regs} register(s), got "
                           f"{len(_regs(op))}")
    sets = [cx.dst(r, "b32") for r in _regs(dop)]
    ga = [cx.src(r, "b32") for r in _regs(aop)]
    gb = [cx.src(r, "b32") for r in _regs(bop)]
    gc = [cx.src(r, "b32") for r in _regs(cop)]

    every = ga + gb + gc
    na, nab = len(ga), len(ga) + len(gb)

    def fn(w, m):
        # every getter gives the warp's (32,) register of b32 bits: one row each
        regs = np.array([g(w) for g in every], dtype=np.uint32)
        d = emulator.mma_warp(form, regs[:na], regs[na:nab], regs[nab:])
        for s, reg in zip(sets, d):
            s(w, reg, m)

    def wide(w, m):
        ws = w.group_warps(m)
        ops = [_of_warps(w, ws, np.stack([np.asarray(g(w)).astype(np.uint32, copy=False)
                                          for g in gets], axis=1)) for gets in (ga, gb, gc)]
        d = emulator.mma(shape, *ops, atype=atype, btype=btype, ctype=ctype, dtype=dtype)
        for i, s in enumerate(sets):
            s(w, _warp_values(w, ws, d[:, :, i]), m)
    return CodeEntry(K_COLL, fn, aligned=True, extra=ins.full_opcode, wide=wide)


# ---------------------------------------------------------------------------------------------
# shfl.sync, vote.sync, match.sync, redux.sync, activemask
# ---------------------------------------------------------------------------------------------

def _membermask(ins, cx, index: int):
    return cx.src(ins.operands[index], "b32")


def _need_sync(ins) -> None:
    if "sync" not in ins.mods:
        raise Unsupported(f"{ins.full_opcode}: the forms without .sync were removed on sm_70 and "
                          "later; use the .sync form")


@handles("shfl")
def shfl(ins, cx):
    _need_sync(ins)
    mode = next((m for m in ins.mods if m in ("up", "down", "bfly", "idx")), None)
    if mode is None:
        raise cx.error("shfl.sync needs .up, .down, .bfly or .idx")
    dst = ins.operands[0]
    dop, pop = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    d = cx.dst(dop, "b32")
    p = cx.dst(pop, "pred") if pop is not None else None
    a = cx.src(ins.operands[1], "b32")
    b = cx.src(ins.operands[2], "b32")
    c = cx.src(ins.operands[3], "b32")
    member = _membermask(ins, cx, 4)
    lane = np.arange(WARP, dtype=np.int64)

    def fn(w, m):
        bval = np.asarray(b(w)).astype(np.int64) & 31
        cv = np.asarray(c(w)).astype(np.int64)
        cval, seg = cv & 31, (cv >> 8) & 31
        max_lane = (lane & seg) | (cval & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~seg)
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        active = np.ones(WARP, dtype=bool) if m is None else m
        src_ok = active[j]
        bad = active & ~src_ok
        if bad.any():
            i = int(np.argmax(bad))
            raise LaneFault(f"{ins.full_opcode}: lane {i} reads lane {int(j[i])}, which does not "
                            "take part in the shuffle (not in the membermask, exited, or on "
                            "another path): the value would be undefined", (i,),
                            kind="divergence")
        vals = np.asarray(a(w)).astype(np.uint32)
        vals = np.broadcast_to(vals, (WARP,))[j]
        d(w, vals, m)
        if p is not None:
            p(w, ok, m)
    return CodeEntry(K_COLL, fn, member=member, extra=ins.full_opcode)


@handles("vote")
def vote(ins, cx):
    _need_sync(ins)
    mode = next((m for m in ins.mods if m in ("all", "any", "uni", "ballot")), None)
    if mode is None:
        raise cx.error("vote.sync needs .all, .any, .uni or .ballot")
    d = cx.dst(ins.operands[0], "b32" if mode == "ballot" else "pred")
    a = cx.src(ins.operands[1], "pred")
    member = _membermask(ins, cx, 2)

    def fn(w, m):
        active = np.ones(WARP, dtype=bool) if m is None else m
        vals = np.broadcast_to(np.asarray(a(w), dtype=bool), (WARP,))
        mine = vals[active]
        if mode == "ballot":
            res = np.full(WARP, mask_bits(active & vals), dtype=np.uint32)
        elif mode == "all":
            res = np.full(WARP, bool(mine.all()))
        elif mode == "any":
            res = np.full(WARP, bool(mine.any()))
        else:
            res = np.full(WARP, bool(mine.all() or not mine.any()))
        d(w, res, m)
    return CodeEntry(K_COLL, fn, member=member, extra=ins.full_opcode)


@handles("activemask")
def activemask(ins, cx):
    d = cx.dst(ins.operands[0], "b32")

    def fn(w, m):
        d(w, np.full(WARP, mask_bits(m), dtype=np.uint32), m)
    return CodeEntry(K_OP, fn)


@handles("match")
def match(ins, cx):
    _need_sync(ins)
    mode = next((x for x in ins.mods if x in ("any", "all")), None)
    t = "b64" if "b64" in ins.mods else "b32"
    if mode is None:
        raise cx.error("match.sync needs .any or .all")
    dst = ins.operands[0]
    dop, pop = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    d = cx.dst(dop, "b32")
    p = cx.dst(pop, "pred") if pop is not None else None
    a = cx.src(ins.operands[1], t)
    member = _membermask(ins, cx, 2)

    def fn(w, m):
        active = np.ones(WARP, dtype=bool) if m is None else m
        vals = np.broadcast_to(np.asarray(a(w)), (WARP,))
        same = (vals[:, None] == vals[None, :]) & active[None, :]
        bits = (same.astype(np.uint64) * _LANE_BITS[None, :]).sum(axis=1).astype(np.uint32)
        if mode == "any":
            d(w, bits, m)
            return
        all_same = bool((vals[active] == vals[active][0]).all())
        d(w, np.full(WARP, mask_bits(m) if all_same else 0, dtype=np.uint32), m)
        if p is not None:
            p(w, np.full(WARP, all_same), m)
    return CodeEntry(K_COLL, fn, member=member, extra=ins.full_opcode)


@handles("redux")
def redux(ins, cx):
    _need_sync(ins)
    op = next((x for x in ins.mods if x in ("add", "min", "max", "and", "or", "xor")), None)
    t = next((x for x in ins.mods if x in ("u32", "s32", "b32")), None)
    if op is None or t is None:
        raise Unsupported(f"{ins.full_opcode}: only the integer redux.sync forms are modelled")
    d = cx.dst(ins.operands[0], t)
    a = cx.src(ins.operands[1], t)
    member = _membermask(ins, cx, 2)

    def fn(w, m):
        active = np.ones(WARP, dtype=bool) if m is None else m
        vals = np.broadcast_to(np.asarray(a(w)), (WARP,))[active]
        if op == "add":
            r = int(vals.astype(np.int64).sum()) & 0xFFFFFFFF
        elif op in ("min", "max"):
            r = int(vals.min() if op == "min" else vals.max()) & 0xFFFFFFFF
        else:
            u = vals.astype(np.uint32)
            r = int(np.bitwise_and.reduce(u) if op == "and" else
                    np.bitwise_or.reduce(u) if op == "or" else np.bitwise_xor.reduce(u))
        d(w, np.full(WARP, r, dtype=np.uint32).view(np.int32 if t == "s32" else np.uint32), m)
    return CodeEntry(K_COLL, fn, member=member, extra=ins.full_opcode)


@handles("elect")
def elect(ins, cx):
    _need_sync(ins)
    dst = ins.operands[0]
    dop, pop = (dst.first, dst.second) if isinstance(dst, Pair) else (dst, None)
    d = cx.dst(dop, "b32") if not (isinstance(dop, Reg) and dop.name == "_") else None
    p = cx.dst(pop, "pred") if pop is not None else None
    member = _membermask(ins, cx, 1)

    def fn(w, m):
        first = lanes_of(m)[0]
        if d is not None:
            d(w, np.full(WARP, first, dtype=np.uint32), m)
        if p is not None:
            p(w, np.arange(WARP) == first, m)
    return CodeEntry(K_COLL, fn, member=member, extra=ins.full_opcode)

