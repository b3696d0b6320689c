"""Branches, exits, calls, barriers, and the instructions that only order memory (no-ops here,
because the interpreter runs one warp at a time and every access is visible at once)."""
from __future__ import annotations

import numpy as np

from ..decode_context import (K_BAR, K_BRA, K_CALL, K_COLL, K_EXIT, K_RET, K_TRAP, CodeEntry,
                              Unsupported)
from ..flow import DONE, Flow
from ..errors import NeedsWarpByWarp
from ..memory import LaneFault
from ..parser import ParenList, Reg, Sym
from ..values import WARP
from . import builtins_calls
from .registry import handles


@handles("bra", "brx")
def bra(ins, cx):
    if ins.opcode == "brx":
        raise Unsupported("brx.idx (indirect branch) is not supported by the CPU model")
    target = ins.operands[0]
    if not isinstance(target, Sym):
        raise cx.error("bra needs a label")
    return CodeEntry(K_BRA, target=cx.program.label_index(cx.fcode, target.name))


@handles("ret")
def ret(ins, cx):
    return CodeEntry(K_EXIT if cx.fn.is_entry else K_RET)


@handles("exit")
def exit_(ins, cx):
    return CodeEntry(K_EXIT)


@handles("trap", "brkpt")
def trap(ins, cx):
    if ins.opcode == "brkpt":
        return lambda w, m: None
    return CodeEntry(K_TRAP, lambda w, m: None)


@handles("membar", "fence", "nanosleep", "pmevent", "prefetch", "prefetchu", "griddepcontrol",
         "setmaxnreg", "discard", "applypriority", "createpolicy")
def no_op(ins, cx):
    if ins.opcode == "createpolicy":
        # produces a cache policy value that only hints the hardware
        d = cx.dst(ins.operands[0], "b64")
        zero = cx.constant(0, np.uint64)
        return lambda w, m: d(w, zero, m)
    if ins.opcode == "fence" and any(x.startswith("proxy") for x in ins.mods):
        return lambda w, m: None
    return lambda w, m: None


# ---------------------------------------------------------------------------------------------
# barriers
# ---------------------------------------------------------------------------------------------

@handles("bar", "barrier")
def bar(ins, cx):
    mods = set(ins.mods)
    if "warp" in mods:
        member = cx.src(ins.operands[0], "b32")
        return CodeEntry(K_COLL, lambda w, m: None, member=member, extra="bar.warp.sync",
                         wide=lambda w, m: None)
    mode = "sync"
    if "arrive" in mods:
        mode = "arrive"
    elif "red" in mods:
        mode = "red"
    elif not ({"sync"} & mods) and ins.opcode == "bar" and not mods - {"cta", "aligned"}:
        mode = "sync"
    ops = list(ins.operands)
    red_op = None
    red_dst = red_pred = None
    if mode == "red":
        red_op = next((x for x in ("popc", "and", "or") if x in mods), None)
        if red_op is None:
            raise cx.error("bar.red needs .popc, .and or .or")
        red_dst = cx.dst(ops[0], "u32" if red_op == "popc" else "pred")
        red_pred = cx.src(ops[-1], "pred")
        ops = ops[1:-1]
    bar_id = cx.src(ops[0], "u32")
    count = cx.src(ops[1], "u32") if len(ops) > 1 else None
    aligned = ins.opcode == "bar" or "aligned" in mods

    def fn(w, m):
        lanes = np.nonzero(w.flow.live if m is None else m)[0]
        ids = bar_id(w)[lanes]
        if (ids != ids[0]).any():
            raise LaneFault("lanes name different barriers", lanes[:1], kind="divergence")
        b = int(ids[0])
        if b > 15:
            raise LaneFault(f"barrier {b} does not exist (0-15)", lanes[:1])
        n = None
        if count is not None:
            n = int(count(w)[lanes[0]])
            if n % WARP:
                raise LaneFault(f"barrier thread count {n} is not a multiple of 32", lanes[:1])
        red = None
        if mode == "red":
            p = red_pred(w)
            contrib = p[lanes]

            def finish(values, w=w, m=m):
                allv = np.concatenate(values)
                if red_op == "popc":
                    res = np.full(WARP, int(allv.sum()), dtype=np.uint32)
                elif red_op == "and":
                    res = np.full(WARP, bool(allv.all()))
                else:
                    res = np.full(WARP, bool(allv.any()))
                saved = w.R
                w.R = w.flows[0].R
                red_dst(w, res, m)
                w.R = saved
            w.red = finish
            red = contrib
        w.block.arrive(w, b, n, mode, red)
        return "arrive" if mode == "arrive" else "wait"

    def wide(w, m):
        """Every lane of the blocks in ``m`` is here (the vector run waits for that): only
        one barrier number is left to check."""
        ids = bar_id(w) if m is None else bar_id(w)[m]
        if (ids != ids[0]).any() or int(ids[0]) > 15:
            raise NeedsWarpByWarp("lanes name different barriers, or one that does not exist")

    plain = mode == "sync" and count is None
    return CodeEntry(K_BAR, fn, aligned=aligned, extra=ins.full_opcode,
                     wide=wide if plain else None)


# ---------------------------------------------------------------------------------------------
# calls
# ---------------------------------------------------------------------------------------------

@handles("call")
def call(ins, cx):
    ops = list(ins.operands)
    rets: tuple = ()
    if ops and isinstance(ops[0], ParenList):
        rets = ops.pop(0).items
    if not ops or not isinstance(ops[0], Sym):
        raise Unsupported("indirect calls (through a function pointer) are not supported by "
                          "the CPU model")
    name = ops.pop(0).name
    args: tuple = ()
    if ops and isinstance(ops[0], ParenList):
        args = ops.pop(0).items
    arg_names = [a.name for a in args if isinstance(a, (Sym, Reg))]
    ret_names = [r.name for r in rets if isinstance(r, (Sym, Reg))]
    special = builtins_calls.lookup(name)
    if special is not None:
        return CodeEntry(K_CALL, special(ins, cx, ret_names, arg_names))
    program = cx.program
    if name not in program.functions:
        raise Unsupported(f"call to {name}, which has no body in this module (an external "
                          "function), is not supported by the CPU model")
    sizes = {d.name: d.size for d in cx.fn.locals if d.space == "param"}

    def fn(w, m, caller):
        callee_fc = program.functions[name]
        callee = callee_fc.fn
        pv = caller.pvars
        bind = {}
        for p, a in zip(callee.params, arg_names):
            bind[p.name] = pv.setdefault(a, np.zeros((WARP, max(sizes.get(a, p.size), p.size)),
                                                     np.uint8))
        for p, r in zip(callee.returns, ret_names):
            bind[p.name] = pv.setdefault(r, np.zeros((WARP, max(sizes.get(r, p.size), p.size)),
                                                     np.uint8))
        live = np.ones(WARP, dtype=bool) if m is None else m.copy()
        fl = Flow(callee_fc, live, bind, False)
        w.flows.append(fl)
        if len(w.flows) > 64:
            raise LaneFault("calls nest more than 64 deep (runaway recursion?)", (),
                            kind="unsupported")
        try:
            status = w.run_flow(fl)      # the interpreter's warp runs the callee
        finally:
            w.flows.pop()
        if status != DONE:
            raise LaneFault(f"{name} waits at a barrier, which the CPU model does not allow "
                            "inside a called function", (), kind="unsupported")
        cont = (np.ones(WARP, dtype=bool) if m is None else m) & w.live
        if not cont.any():
            return False
        return None if cont.all() else cont

    return CodeEntry(K_CALL, fn)
