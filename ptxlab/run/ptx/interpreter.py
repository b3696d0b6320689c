"""Run a decoded PTX kernel on the CPU: blocks one after another, warps of a block in turn.

Within a warp the 32 lanes run together as numpy vectors. Divergence is handled with groups of
lanes that share a program counter: the group with the lowest PC runs first, and groups that
reach the same PC merge again, so lanes reconverge as early as the code allows. A group that
reaches a warp-collective instruction (``ldmatrix``, ``mma``, ``bar.sync``, ``shfl.sync`` ...)
waits there until every lane the instruction needs has arrived; if those lanes end up
elsewhere, that is the divergence the GPU would leave undefined, and it is reported.

Warps of a block run until each waits at a barrier or exits; then the barrier opens and they
go on. Shared memory is per block, local memory per thread, global memory is the caller's
arrays (copied).
"""
from __future__ import annotations

import functools
import os
import re
import time
import types
from dataclasses import dataclass, field

import numpy as np

from . import memory, synccheck
from .errors import (Deadlock, DeviceAssertion, DivergenceFault, KernelFault, LaunchError,
                     MemoryFault, NeedsWarpByWarp, UndefinedStore, UnsupportedInstruction, Where)
from .decode_context import (K_BAR, K_BRA, K_CALL, K_COLL, K_EXIT, K_OP, K_RET, K_TRAP,
                             FunctionCode)
from .flow import BLOCKED, DONE, Flow
from .launch_shape import launch_shape
# the lane-mask helpers live in ``lanes`` (the instruction families import them from there);
# they stay importable from here, as before
from .lanes import (_LANE_BITS, ALL, bits_mask, lanes_of, mask_array, mask_bits,  # noqa: F401
                    mask_or)
from .memory import LaneFault
from .program import Program
from .racecheck import RaceTracker, SoleWarpTracker, racecheck_mode
from .values import WARP, constant

_BIG = 1 << 62
#: ``vector`` (default): a launch of several warps runs as one vector program where it can
#: (:mod:`.wide`, loaded by the first such launch); ``warp``: always warp by warp (the model
#: before the vector run, kept to compare with).
ENGINE_ENV = "PTXLAB_CPU_ENGINE"
ENGINES = ("vector", "warp")
MAX_SHARED_BYTES = 227 * 1024               # per block on sm_90 (with the opt-in)
DEFAULT_BRANCH_BUDGET = 20_000_000


class Warp:
    """Architectural state of one warp."""

    width = WARP                              # lanes per register array

    __slots__ = ("index", "block", "launch", "R", "special", "live", "spaces", "flows",
                 "state", "bar_id", "red", "cp_open", "cp_groups", "local", "exited_at")

    def __init__(self, index: int, block: "BlockRun", live: np.ndarray, special: dict):
        self.index = index
        self.block = block
        self.launch = block.launch
        self.special = special
        self.live = live.copy()
        self.flows: list[Flow] = []
        self.state = "run"
        self.bar_id = None
        self.red = None
        self.cp_open: list = []
        self.cp_groups: list = []
        self.R = None
        self.exited_at: list = []             # (function code, pc, lanes) of each exit
        prog = block.launch.program
        self.local = np.zeros((WARP, prog.local_size), dtype=np.uint8) if prog.local_size else None
        self.spaces = memory.Spaces(block.launch.glob, block.shared, block.shared_size,
                                    self.local, block.launch.param_bytes)

    @property
    def flow(self) -> Flow:
        return self.flows[-1]

    def run_flow(self, fl: Flow) -> int:
        """Run ``fl`` (a call's flow, opened by the ``call`` instruction) in this warp: DONE or
        BLOCKED. The instruction families reach the interpreter only through this method."""
        return run_flow(self, fl)

    def clock_value(self, name: str) -> np.ndarray:
        t = self.launch.clock()
        if name == "%globaltimer_hi":
            t >>= 32
        return np.full(WARP, t, dtype=np.uint64)


# ---------------------------------------------------------------------------------------------
# Running one warp
# ---------------------------------------------------------------------------------------------

def _next_group(w: Warp, fl: Flow):
    """The next group to run: the lowest-PC pending group, or a parked group now complete."""
    best_pc, best = _BIG, None
    if fl.pending:
        best_pc = fl.pending[0][0]
    for pc, (pm, member) in fl.parked.items():
        if pc < best_pc and _parked_ready(w, fl, pm, member):
            best_pc, best = pc, pm
    if best_pc == _BIG:
        if fl.parked:
            _divergence_error(w, fl)
        return None
    if best is not None and fl.parked.get(best_pc, (None,))[0] is best:
        del fl.parked[best_pc]
        return best_pc, best
    pc, m = fl.pending.pop(0)
    return pc, m


def _parked_ready(w: Warp, fl: Flow, pm, member) -> bool:
    have = mask_array(pm)
    if member is None:
        need = fl.live
    else:
        need = bits_mask(member) & fl.live
    return bool((have | ~need).all()) and bool(need.any())


def _divergence_error(w: Warp, fl: Flow) -> None:
    prog = w.launch.program
    parts = []
    for pc, (pm, member) in sorted(fl.parked.items()):
        ins = fl.fc.instrs[pc]
        src, _ = prog.source_location(ins)
        parts.append(f"{_lanes(pm)} wait at PTX line {ins.line} ({ins.text.split()[0]}"
                     + (f", {src}" if src else "") + ")")
    gone = ~fl.live & w.block.thread_exists[w.index]
    if gone.any():
        parts.append(f"{_lanes(gone)} have already exited")
    first_pc = min(fl.parked)
    lanes = lanes_of(fl.parked[first_pc][0])
    if any(fl.code[pc].kind == K_BAR for pc in fl.parked):   # synccheck's words for a barrier
        raise _located(synccheck.BarrierDivergence, w, fl.fc, first_pc, lanes,
                       f"divergent threads in warp: in warp {w.index}, " + "; ".join(parts)
                       + ". The lanes of a warp must reach the same barrier instruction")
    raise _located(DivergenceFault, w, fl.fc, first_pc, lanes,
                   "lanes of one warp reach a warp-collective instruction apart: "
                   + "; ".join(parts) + ". All lanes the instruction names must execute it "
                   "together (converged code, no lane-dependent branch around it).")


def _lanes(m) -> str:
    ls = lanes_of(m)
    from .errors import _lanes_text
    return _lanes_text(ls) if ls else "no lanes"


def _located(cls, w: Warp, fc: FunctionCode, pc: int, lanes, message: str,
             address: int | None = None) -> KernelFault:
    prog = w.launch.program
    ins = fc.instrs[pc] if 0 <= pc < len(fc.instrs) else None
    src, text = prog.source_location(ins) if ins is not None else ("", "")
    where = Where(block=w.block.index, warp=w.index, lanes=tuple(lanes),
                  ptx_line=ins.line if ins else None, ptx_text=ins.text if ins else "",
                  source=src, source_text=text)
    return cls(message, where, address=address)


# ---------------------------------------------------------------------------------------------
# One step per kind of code entry
#
# Legend of run_flow and the steps below:
#   pc, mask    the running group: its program counter and lanes (mask None: every lane of
#               the flow that is still live)
#   pending     groups of the same flow waiting to run, [pc, mask] sorted by pc; the running
#               group stops at the lowest of them (``merge_at``) to merge or to let it run first
#   parked      groups waiting at a warp-collective instruction for the rest of their lanes
#   K_OP        a plain instruction: ``entry.fn(warp, mask)``, then the next one (inline in the
#               loop, the hot path); every other kind has its step function in ``_STEPS``
# A step takes (warp, flow, entry, pc, mask) and returns the (pc, mask) to run next, or
# (_RETURNED, None) / (_AT_BARRIER, None) when the flow stops there.
# ---------------------------------------------------------------------------------------------

_RETURNED, _AT_BARRIER = -1, -2


def _next_or_return(w: Warp, fl: Flow, pc: int):
    """The next group to run after the current one stopped at ``pc``, or ``_RETURNED``."""
    nxt = _next_group(w, fl)
    if nxt is None:
        fl.pc, fl.mask = pc, None
        return _RETURNED, None
    return nxt


def _step_branch(w: Warp, fl: Flow, entry, pc: int, mask):
    """``bra``: counted against the launch's budget (a CPU model cannot wait out a spin on
    another warp); a predicate that splits the lanes runs the lower target first."""
    launch = w.launch
    launch.branches += 1
    if launch.deadline is not None and not launch.branches & 0xFFFF \
            and time.monotonic() > launch.deadline:
        raise LaneFault(
            f"the kernel ran longer than {launch.time_limit_s:g} s on the CPU model: an endless "
            "loop? (a lane spinning on a value another warp or block writes never finishes on "
            "the CPU model, which runs warps one at a time)", lanes_of(mask), kind="deadlock")
    if launch.branches > launch.branch_budget:
        raise LaneFault(
            f"the kernel ran more than {launch.branch_budget} branches: an endless loop? (a lane "
            "spinning on a value another warp or block writes never finishes on the CPU model, "
            "which runs warps one at a time)", lanes_of(mask), kind="deadlock")
    return fl.branch(entry, pc, mask)


def _step_exit(w: Warp, fl: Flow, entry, pc: int, mask):
    """``exit`` (or ``ret`` of the kernel): the lanes leave the warp; ``ret`` of a called
    function: they leave the call only."""
    lanes = mask_array(mask)
    if entry.kind == K_EXIT or fl.is_entry:
        w.exited_at.append((fl.fc, pc, lanes & w.live))
        w.live = w.live & ~lanes
        for f in w.flows:
            f.live = f.live & ~lanes
    else:
        fl.live = fl.live & ~lanes
    return _next_or_return(w, fl, pc)


def _step_collective(w: Warp, fl: Flow, entry, pc: int, mask):
    """A warp-collective instruction (``K_COLL``) or a barrier (``K_BAR``): it runs once every
    lane it needs is here; until then the group parks and another runs."""
    if entry.guard >= 0:
        have = mask_array(mask)
        on = fl.guarded(entry, have)
        if not on.any():
            return pc + 1, mask
        if not (on == have).all():
            raise LaneFault("a guard predicate that differs between lanes skips a "
                            "warp-collective instruction in some of them", lanes_of(have & ~on),
                            kind="divergence")
    member = None
    if entry.member is not None:
        member = _uniform_member(entry.member(w), mask)
        named = bits_mask(member)
        need = named & fl.live
        have = mask_array(mask)
        extra = have & ~named
        if extra.any():
            raise LaneFault(f"lanes execute {entry.extra or 'a .sync instruction'} without being "
                            f"in its membermask 0x{member:08x}", lanes_of(extra), kind="divergence")
        ready = bool((have == need).all())
        if ready and w.exited_at and entry.extra == "bar.warp.sync":
            invalid = synccheck.check_syncwarp(w, fl, named)
            if invalid is not None:
                raise LaneFault(invalid.reason, lanes_of(mask), kind="sync", advice=invalid.advice)
    else:
        ready = mask is None or bool((mask == fl.live).all())
    if not ready:
        waiting = fl.parked.get(pc, (False, member))[0]
        fl.parked[pc] = (mask if waiting is False else mask_or(waiting, mask), member)
        return _next_or_return(w, fl, pc)
    if entry.aligned and entry.kind == K_COLL and not w.live.all():
        gone = ~w.live
        raise LaneFault(
            f"{entry.extra or 'this warp-collective instruction'} needs all 32 lanes of the warp, "
            f"but {_lanes(gone)} "
            + ("never existed (the block size is not a multiple of 32)"
               if (gone & ~w.block.thread_exists[w.index]).any() else "have exited"),
            lanes_of(gone), kind="divergence")
    if entry.kind == K_COLL:
        entry.fn(w, mask)
        return pc + 1, mask
    if not fl.is_entry:
        raise LaneFault("bar.sync inside a called (non-inlined) function is not modelled",
                        lanes_of(mask), kind="unsupported")
    if entry.fn(w, mask) == "arrive":
        return pc + 1, mask
    fl.pc, fl.mask = pc + 1, mask
    w.state = "bar"
    return _AT_BARRIER, None


def _step_call(w: Warp, fl: Flow, entry, pc: int, mask):
    """``call``: the callee runs to its return; the lanes still live go on after the call."""
    cont = entry.fn(w, mask, fl)
    w.R = fl.R
    if cont is False:
        return _next_or_return(w, fl, pc)
    return pc + 1, cont


def _step_trap(w: Warp, fl: Flow, entry, pc: int, mask):
    entry.fn(w, mask)
    raise LaneFault("the kernel executed trap", lanes_of(mask), kind="trap")


#: The step of each kind of code entry, indexed by kind (K_OP runs inline in run_flow).
_STEPS = [None] * (max(K_OP, K_BRA, K_EXIT, K_RET, K_BAR, K_COLL, K_CALL, K_TRAP) + 1)
for _kind, _step in ((K_BRA, _step_branch), (K_EXIT, _step_exit), (K_RET, _step_exit),
                     (K_COLL, _step_collective), (K_BAR, _step_collective),
                     (K_CALL, _step_call), (K_TRAP, _step_trap)):
    _STEPS[_kind] = _step
del _kind, _step

_FAULT_CLASSES = {"memory": MemoryFault, "divergence": DivergenceFault, "deadlock": Deadlock,
                  "assert": DeviceAssertion,
                  "unsupported": UnsupportedInstruction, "sync": synccheck.BarrierDivergence}


def run_flow(w: Warp, fl: Flow) -> int:
    """Run ``fl`` until all its lanes return (DONE) or it waits at a barrier (BLOCKED)."""
    code = fl.code
    pending = fl.pending
    pc, mask = fl.pc, fl.mask
    w.R = fl.R
    merge_at = pending[0][0] if pending else _BIG
    try:
        while True:
            if pc >= merge_at:
                pc, mask = fl.reconverge(pc, mask)
            else:
                entry = code[pc]
                if entry.kind == K_OP:
                    entry.fn(w, mask)
                    pc += 1
                    continue
                pc, mask = _STEPS[entry.kind](w, fl, entry, pc, mask)
                if pc < 0:
                    return DONE if pc == _RETURNED else BLOCKED
            merge_at = pending[0][0] if pending else _BIG
    except LaneFault as f:
        msg = f.message
        if f.kind == "unsupported":
            msg = (f"{msg}. The CPU model stops here rather than guess: run this kernel on a "
                   "GPU (backend='gpu').")
        fault = _located(_FAULT_CLASSES.get(f.kind, KernelFault), w, fl.fc, pc,
                         f.lanes or lanes_of(mask), msg)
        if f.advice:
            fault.advice = f.advice
        raise fault from None
    except KernelFault:
        raise
    except _emulator_error() as exc:
        raise _emulator_fault(exc, w, fl, pc, mask) from None


def _emulator_fault(exc, w: Warp, fl: Flow, pc: int, mask) -> KernelFault:
    """The emulator's refusal as a located fault of its kind: an address the hardware faults
    on, a store the ISA leaves undefined (with every lane that names the row), or else a
    fault of the instruction."""
    from ...model import emulator

    if isinstance(exc, emulator.UndefinedResult):
        return _located(UndefinedStore, w, fl.fc, pc, exc.lanes or lanes_of(mask), str(exc),
                        exc.address)
    lanes = (exc.lane,) if exc.lane is not None else lanes_of(mask)
    cls = MemoryFault if isinstance(exc, (emulator.MisalignedAddress,
                                          emulator.AddressOutOfRange)) else KernelFault
    return _located(cls, w, fl.fc, pc, lanes, str(exc), exc.address)


def _emulator_error():
    from ...model import emulator
    return emulator.EmulatorError


def _uniform_member(values: np.ndarray, m) -> int:
    v = values if m is None else values[m]
    first = int(v[0])
    if (v != v[0]).any():
        bad = lanes_of(m)[int(np.argmax(v != v[0]))]
        raise LaneFault(f"lanes pass different membermasks (0x{first:08x} and "
                        f"0x{int(values[bad]):08x})", (bad,), kind="divergence")
    return first & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Blocks and barriers
# ---------------------------------------------------------------------------------------------

@dataclass
class BarrierState:
    arrived: int = 0
    count: int | None = None
    waiting: list = field(default_factory=list)
    red_values: list = field(default_factory=list)
    pc_of: dict = field(default_factory=dict)


class BlockRun:
    """One thread block: its shared memory, warps and barriers."""

    def __init__(self, launch: "Launch", index: tuple[int, int, int]):
        self.launch = launch
        self.index = index
        self.shared_size = launch.shared_size
        # indexed by .shared address: the reserved first KiB, then the block's variables
        self.shared = np.zeros(memory.SHARED_START + max(16, (launch.shared_size + 15) // 16 * 16),
                               dtype=np.uint8)
        self.barriers: dict[int, BarrierState] = {}
        tracker = SoleWarpTracker if launch.nwarps == 1 else RaceTracker
        self.race = (tracker(launch.shared_size, launch.program, index)
                     if launch.racecheck != "off" and launch.shared_size else None)
        self.thread_exists = launch.thread_exists
        special_block = launch.block_specials(index)
        self.warps = []
        for wi in range(launch.nwarps):
            special = dict(launch.warp_specials[wi])
            special.update(special_block)
            w = Warp(wi, self, launch.thread_exists[wi], special)
            w.spaces.race, w.spaces.warp = self.race, wi
            w.spaces.source_of = launch.program.source_location
            w.flows.append(Flow(launch.program.entry, w.live, {}, True))
            self.warps.append(w)

    def arrive(self, w: Warp, bar_id: int, count: int | None, mode: str, red=None) -> None:
        st = self.barriers.setdefault(bar_id, BarrierState())
        if count is not None:
            st.count = count
        st.arrived += WARP
        if red is not None:
            st.red_values.append(red)
        if mode != "arrive":
            st.waiting.append(w)
            w.bar_id = bar_id

    def run(self) -> None:
        warps = self.warps
        while True:
            for w in warps:
                if w.state == "run":
                    status = run_flow(w, w.flows[0])
                    if status == DONE:
                        w.state = "done"
            alive = [w for w in warps if w.state != "done"]
            if not alive:
                if self.race is not None:
                    self.race.finish(self.launch.racecheck)
                return
            released = False
            for bar_id, st in list(self.barriers.items()):
                if not st.waiting:
                    continue
                expected = st.count if st.count is not None else WARP * len(alive)
                if st.arrived >= expected:
                    synccheck.check_release(self, bar_id, st)
                    self._release(bar_id, st)
                    released = True
            if not released:
                self._deadlock(alive)

    def _release(self, bar_id: int, st: BarrierState) -> None:
        if self.race is not None:
            self.race.barrier()
        for w in st.waiting:
            w.state = "run"
            w.bar_id = None
            if w.red is not None:
                w.red(st.red_values)
                w.red = None
        self.barriers[bar_id] = BarrierState()

    def _deadlock(self, alive) -> None:
        parts = []
        for w in alive:
            fl = w.flows[0]
            ins = fl.fc.instrs[max(fl.pc - 1, 0)]
            parts.append(f"warp {w.index} waits at barrier {w.bar_id} (PTX line {ins.line})")
        done = [w.index for w in self.warps if w.state == "done"]
        msg = ("the block's barriers can never open: " + "; ".join(parts)
               + (f"; warps {done} have finished" if done else "")
               + ". Every warp must reach the same bar.sync/__syncthreads().")
        w = alive[0]
        raise _located(Deadlock, w, w.flows[0].fc, max(w.flows[0].pc - 1, 0), (), msg)


# ---------------------------------------------------------------------------------------------
# A launch
# ---------------------------------------------------------------------------------------------

def engine_named(name: str | None = None) -> str:
    """The engine asked for, else ``$PTXLAB_CPU_ENGINE``, else ``vector``."""
    name = (name or os.environ.get(ENGINE_ENV) or "vector").strip().lower()
    if name not in ENGINES:
        raise ValueError(f"the CPU engine must be one of {ENGINES}, got {name!r}")
    return name


def _dims(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    try:
        dims = tuple(int(v) for v in value)
    except TypeError:
        raise LaunchError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise LaunchError(f"{what} must be 1-3 positive sizes, got {value!r}")
    return dims + (1,) * (3 - len(dims))


class Launch:
    """Everything shared by the blocks of one kernel launch."""

    def __init__(self, program: Program, grid, block, args, shared_mem: int = 0,
                 branch_budget: int = DEFAULT_BRANCH_BUDGET, printf=None,
                 racecheck: str | None = None, device_memory: memory.GlobalMemory | None = None,
                 raw_params: bytes | None = None, time_limit_s: float | None = None,
                 engine: str | None = None):
        """``device_memory`` and ``raw_params``: a whole program's launch, whose buffers live
        across launches and whose arguments come packed as the driver packs them;
        ``time_limit_s``: stop an endless loop after that long, not only after the budget;
        ``engine``: ``vector`` or ``warp`` (:func:`engine_named`)."""
        self.program = program
        self.engine = engine_named(engine)
        #: how the launch ran: ``vector``, or ``warp`` and why (set by :meth:`run`)
        self.ran_as: tuple[str, str] = ("warp", "")
        self.racecheck = racecheck_mode(racecheck)
        self.grid = _dims(grid, "grid")
        self.block = _dims(block, "block")
        threads = self._check_block_size(program)
        self.threads = threads
        self.nwarps = (threads + WARP - 1) // WARP
        self.shared_size = self._shared_size(program, shared_mem)
        self.branch_budget = branch_budget
        self.branches = 0
        self.printf = printf
        self._t0 = time.perf_counter_ns()
        self.deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
        self.time_limit_s = time_limit_s
        self.arg_buffers: list = []
        if device_memory is not None:
            self.glob = device_memory
        else:
            self.glob = module_memory(program)
        if raw_params is not None:
            self.param_bytes = np.zeros(max(16, (program.param_size + 15) // 16 * 16), np.uint8)
            raw = np.frombuffer(raw_params, dtype=np.uint8)[: program.param_size]
            self.param_bytes[: raw.size] = raw
        else:
            self.param_bytes = self._pack_params(list(args))
        # per-warp special registers that do not depend on the block
        self._set_warp_specials(threads, shared_mem)

    def _check_block_size(self, program: Program) -> int:
        """The threads of a block, checked against the hardware's limit and the kernel's
        ``.reqntid`` / ``.maxntid``."""
        threads = self.block[0] * self.block[1] * self.block[2]
        if threads > 1024:
            raise LaunchError(f"a block has at most 1024 threads, got {threads} ({self.block})")
        req = program.entry.fn.directives.get("reqntid")
        if req and tuple(req) + (1,) * (3 - len(req)) != self.block:
            raise LaunchError(f"the kernel requires blocks of {req} threads (.reqntid), "
                              f"got {self.block}")
        maxn = program.entry.fn.directives.get("maxntid")
        if maxn and threads > int(np.prod(maxn)):
            raise LaunchError(f"the kernel allows at most {int(np.prod(maxn))} threads per block "
                              f"(__launch_bounds__/.maxntid), got {threads}")
        return threads

    @staticmethod
    def _shared_size(program: Program, shared_mem: int) -> int:
        """Bytes of shared memory per block: the static variables, then ``shared_mem`` dynamic
        bytes (at the dynamic array's alignment)."""
        if shared_mem < 0:
            raise LaunchError("shared_mem must be >= 0")
        size = program.dynamic_shared_offset + int(shared_mem) \
            if shared_mem else program.static_shared
        if size > MAX_SHARED_BYTES:
            raise LaunchError(f"the block needs {size} bytes of shared memory; sm_90 "
                              f"allows at most {MAX_SHARED_BYTES}")
        return size

    def _set_warp_specials(self, threads: int, shared_mem: int) -> None:
        """``thread_exists`` and ``warp_specials``: per warp, which of its lanes are threads of
        the block, and the special registers (%tid, %laneid, %ntid ...) that do not depend on
        the block (read-only, shared by the launches of one shape)."""
        #: what the per-warp tables depend on: block, grid, dynamic and total shared bytes
        self.shape = (self.block, self.grid, int(shared_mem), self.shared_size)
        self.thread_exists, self.warp_specials = launch_shape(*self.shape)

    def clock(self) -> int:
        return time.perf_counter_ns() - self._t0

    def block_specials(self, idx) -> types.MappingProxyType:
        return _block_specials(tuple(idx))

    def _pack_params(self, args: list) -> np.ndarray:
        prog = self.program
        params = prog.params
        if len(args) != len(params):
            raise LaunchError(f"kernel {prog.entry_name} takes {len(params)} argument(s), "
                              f"got {len(args)}")
        # padded to 16 bytes so every aligned parameter can be read as its own type; packed as
        # bytes first (a slice of a bytearray costs a tenth of a numpy slice assignment)
        out = bytearray(max(16, (prog.param_size + 15) // 16 * 16))
        for i, ((p, off), arg) in enumerate(zip(params, args)):
            if isinstance(arg, np.ndarray) and arg.ndim > 0:
                if p.size != 8:
                    raise LaunchError(f"argument {i} is an array (passed as a pointer) but the "
                                      f"kernel's parameter {i} is a {p.size}-byte .{p.type}")
                data = np.ascontiguousarray(arg)
                buf = self.glob.add(data.nbytes, f"argument {i} ({_dtype_text(data.dtype)} "
                                    f"array of {data.size} elements)",
                                    data.view(np.uint8).reshape(-1))
                self.arg_buffers.append((i, buf, arg))
                out[off:off + 8] = buf.base.to_bytes(8, "little")
                continue
            if isinstance(arg, (bool, int, float)) and not isinstance(arg, np.generic):
                raise LaunchError(
                    f"argument {i} is a Python {type(arg).__name__}; pass a numpy scalar of the "
                    f"kernel's parameter type (.{p.type}, {p.size} bytes), e.g. np.int32({arg!r}) "
                    "or np.uint32(...)")
            if isinstance(arg, np.ndarray) and arg.ndim == 0:
                arg = arg[()]
            if not isinstance(arg, np.generic):
                raise LaunchError(f"argument {i} must be a numpy array or numpy scalar, got "
                                  f"{type(arg).__name__}")
            raw = arg.tobytes()
            if len(raw) != p.size:
                raise LaunchError(f"argument {i} is a {np.asarray(arg).dtype} ({len(raw)} bytes) "
                                  f"but the kernel's parameter {i} is .{p.type} ({p.size} bytes)")
            out[off:off + p.size] = raw
        return np.frombuffer(out, dtype=np.uint8)

    def run(self) -> list:
        with np.errstate(all="ignore"):
            why = self._why_warp_by_warp()
            self.ran_as = ("warp", why)
            if not why:
                from . import wide

                saved = [(b, b.data.copy()) for b in self.glob.buffers]
                try:
                    wide.run(self)
                    self.ran_as = ("vector", "")
                    return self.outputs()
                except NeedsWarpByWarp as stop:     # the warp-by-warp model answers
                    for b, data in saved:
                        b.data[:] = data
                    self.branches = 0
                    self.ran_as = ("warp", stop.reason)
            self._run_warp_by_warp()
        return self.outputs()

    def _why_warp_by_warp(self) -> str:
        """Why this launch runs warp by warp ("": it can run as one vector): asked for, one
        warp (which gains nothing), or a kernel with no vector form."""
        if self.engine != "vector":
            return "asked for"
        if self.grid[0] * self.grid[1] * self.grid[2] * self.nwarps == 1:
            return "one warp"
        from . import wide

        return wide.why_warp_by_warp(self.program) or ""

    def _run_warp_by_warp(self) -> None:
        gx, gy, gz = self.grid
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    BlockRun(self, (x, y, z)).run()

    def outputs(self) -> list:
        results = []
        by_index = {i: (buf, arg) for i, buf, arg in self.arg_buffers}
        prog = self.program
        for i in range(len(prog.params)):
            if i in by_index:
                buf, arg = by_index[i]
                arr = np.ascontiguousarray(arg).copy()
                arr.reshape(-1).view(np.uint8)[:] = buf.data[: buf.size]
                results.append(arr)
            else:
                results.append(None)
        return results


@functools.lru_cache(maxsize=4096)
def _block_specials(idx: tuple) -> types.MappingProxyType:
    """``%ctaid`` of the block ``idx``: read-only arrays in a read-only table, so the launches
    of a check share them (each warp copies the table into its own)."""
    return types.MappingProxyType({
        "%ctaid.x": constant(idx[0], np.uint32), "%ctaid.y": constant(idx[1], np.uint32),
        "%ctaid.z": constant(idx[2], np.uint32)})


@functools.lru_cache(maxsize=None)
def _dtype_text(dtype: np.dtype) -> str:
    """``str(dtype)``, which numpy spells out afresh each time (microseconds, for every array
    argument of every launch)."""
    return str(dtype)


def module_memory(program: Program) -> memory.GlobalMemory:
    """A fresh global memory holding the module's variables, at the addresses the program's
    code was decoded with (they come first, in declaration order)."""
    glob = memory.GlobalMemory()
    for v in program.global_vars:
        buf = glob.add(max(v.size, 1), f"variable {v.name}",
                       _var_init(v, program.global_addresses), writable=v.space == "global")
        assert buf.base == program.global_addresses[v.name]
    return glob


_SYMBOL_INIT = re.compile(r"^(?:generic\()?([\w$.]+)(?:\+(\d+))?\)?$")


def _var_init(v, addresses: dict[str, int] | None = None) -> bytes | None:
    """The bytes of a module variable's initialiser; an address of another variable
    (``generic($str)``: a table of strings) is that variable's address in this memory."""
    if not v.init:
        return None
    from .values import VIEW_DTYPE
    import struct
    dt = np.dtype(VIEW_DTYPE.get(v.type) or np.uint8)
    vals = []
    for x in v.init:
        if isinstance(x, tuple) and x[0] == "fbits":
            raw, bits = x[1], x[2]
            if dt.kind == "f" and dt.itemsize * 8 != bits:
                f = struct.unpack("<d" if bits == 64 else "<f",
                                  raw.to_bytes(bits // 8, "little"))[0]
                vals.append(np.array(f, dtype=dt).tobytes())
            else:
                vals.append(raw.to_bytes(dt.itemsize, "little"))
        elif isinstance(x, tuple):
            m = _SYMBOL_INIT.match(str(x[1]).replace(" ", ""))
            if not (m and addresses and m.group(1) in addresses):
                raise LaunchError(f"initialiser of {v.name} refers to {x[1]}: not supported")
            addr = addresses[m.group(1)] + int(m.group(2) or 0)
            vals.append((addr & ((1 << (8 * dt.itemsize)) - 1)).to_bytes(dt.itemsize, "little"))
        elif isinstance(x, float):
            vals.append(np.array(x, dtype=dt).tobytes())
        else:
            vals.append(int(x & ((1 << (8 * dt.itemsize)) - 1)).to_bytes(dt.itemsize, "little"))
    return b"".join(vals)
