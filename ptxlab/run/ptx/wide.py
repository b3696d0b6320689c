"""Run a launch with every warp of many blocks as one vector program.

The warp-by-warp interpreter (:mod:`.interpreter`) pays numpy's per-call cost once per
instruction per warp. Here the lanes of all warps of a batch of blocks sit in one register
array: an instruction that all of them reach together is one numpy call over thousands of
lanes. Divergence is handled as in the warp-by-warp model, with groups of lanes that share a
program counter, lowest first. A warp-collective instruction runs once every lane of its warp
is there, for all such warps at once; a barrier opens once every lane of its block is there.

The promise is the warp-by-warp model's answer, bit for bit. Where the two could differ the
vector run stops (:class:`NeedsWarpByWarp`) and the launch runs warp by warp, which gives that
model's own result, report or warning: a fault, a race or any two unordered accesses of one
byte by different warps (:mod:`.wide_memory`), a divergent barrier or collective, a warning, a
budget or time limit reached, or an instruction with no vector form (atomics, shuffles and
votes, calls and printf, volatile and ordered accesses).
"""
from __future__ import annotations

import functools
import time
import warnings
import weakref
from types import SimpleNamespace

import numpy as np

from .decode_context import K_BAR, K_BRA, K_CALL, K_COLL, K_EXIT, K_OP, K_RET
from .errors import NeedsWarpByWarp
from .flow import Flow
from .launch_shape import launch_shape
from .lanes import mask_or
from .memory import SHARED_START
from .values import WARP
from .wide_memory import WideSpaces

#: Lanes of one vector: a launch with more runs in batches of whole blocks, in block order.
MAX_LANES = 1 << 15

_BIG = 1 << 62
#: Instructions whose result depends on the order in which warps run, or that the vector run
#: has no form of: a kernel that has one runs warp by warp.
_ORDERED_OPS = {"atom", "red", "membar", "fence", "call", "shfl", "vote", "match", "redux",
                "activemask", "elect", "brx", "nanosleep", "griddepcontrol", "mbarrier",
                "cp.async.bulk", "setmaxnreg"}
_ORDERED_MODS = {"volatile", "relaxed", "acquire", "release", "acq_rel", "mmio", "sc"}


def why_warp_by_warp(program) -> str | None:
    """Why ``program`` cannot run as one vector program (None: it can); read once per
    program, which a check or a grade launches many times."""
    if program not in _REASONS:
        _REASONS[program] = _scan(program)
    return _REASONS[program]


#: ``why_warp_by_warp`` of each program still in use.
_REASONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _scan(program) -> str | None:
    fc = program.entry
    for ins, entry in zip(fc.instrs, fc.code):
        if ins.opcode in _ORDERED_OPS:
            return f"{ins.full_opcode} (PTX line {ins.line}) depends on the order warps run in"
        if _ORDERED_MODS & set(ins.mods):
            return f"{ins.full_opcode} (PTX line {ins.line}) is an ordered access"
        if entry.kind == K_CALL or (entry.kind in (K_COLL, K_BAR) and entry.wide is None):
            return f"{ins.full_opcode} (PTX line {ins.line}) has no vector form"
    return None


@functools.lru_cache(maxsize=32)
def _tiled_specials(shape: tuple, slots: int) -> dict:
    """The special registers that do not depend on the block, for ``slots`` blocks of a
    launch of ``shape`` side by side (read-only: a check or a grade launches one shape again
    and again, and the batches of one launch share them)."""
    _, warp_specials = launch_shape(*shape)
    special = {}
    for name in warp_specials[0]:
        arr = np.tile(np.concatenate([s[name] for s in warp_specials]), slots)
        arr.flags.writeable = False
        special[name] = arr
    return special


class WideWarp:
    """The architectural state of many warps of several blocks, as one vector of lanes: the
    instruction families run on it as on one warp (``width`` lanes, masks of that width)."""

    def __init__(self, launch, blocks: list[tuple[int, int, int]], slots: int):
        self.launch = launch
        self.lanes_per_block = launch.nwarps * WARP
        self.width = slots * self.lanes_per_block
        self.nwarps = self.width // WARP
        self.index = 0
        self.block = SimpleNamespace(carry={})
        self.cp_open: list = []
        self.cp_groups: list = []
        self.parked: dict[int, np.ndarray | None] = {}
        self._all_warps = np.arange(self.nwarps)
        present = np.repeat(np.arange(slots) < len(blocks), self.lanes_per_block)
        self.exists = np.tile(np.concatenate(launch.thread_exists), slots) & present
        self.live = self.exists.copy()
        self.special = self._specials(blocks, slots)
        program = launch.program.at_width(self.width)
        self.local = (np.zeros((self.width, program.local_size), dtype=np.uint8)
                      if program.local_size else None)
        self.generation = np.zeros(slots, dtype=np.int32)
        per_block = SHARED_START + max(16, (launch.shared_size + 15) // 16 * 16)
        lane = np.arange(self.width)
        self.spaces = WideSpaces(
            launch.glob, np.zeros(slots * per_block, dtype=np.uint8), launch.shared_size,
            self.local, launch.param_bytes, (lane // self.lanes_per_block) * per_block,
            lane // WARP, np.arange(self.nwarps) // launch.nwarps, self.generation,
            uninitialized_reads=launch.racecheck != "off")
        self.flows = [Flow(program.entry, self.live, {}, True)]
        self.R = self.flows[0].R

    def _specials(self, blocks, slots: int) -> dict:
        """Every special register, one value per lane: the launch's per-warp ones side by side
        for each block, and the block's own index."""
        special = dict(_tiled_specials(self.launch.shape, slots))
        coords = np.array(blocks + [blocks[0]] * (slots - len(blocks)), dtype=np.uint32)
        for axis, name in enumerate(("%ctaid.x", "%ctaid.y", "%ctaid.z")):
            special[name] = np.repeat(coords[:, axis], self.lanes_per_block)
        return special

    @property
    def flow(self) -> Flow:
        return self.flows[-1]

    def group_warps(self, m) -> np.ndarray:
        """The numbers of the warps with lanes in ``m``."""
        if m is None:
            return self._all_warps
        return np.nonzero(m.reshape(-1, WARP).any(axis=1))[0]

    def clock_value(self, name: str) -> np.ndarray:
        t = self.launch.clock()
        if name == "%globaltimer_hi":
            t >>= 32
        return np.full(self.width, t, dtype=np.uint64)

    def mask_array(self, m) -> np.ndarray:
        return np.ones(self.width, dtype=bool) if m is None else m


# ---------------------------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------------------------

def _branch(w: WideWarp, fl: Flow, entry, pc: int, mask):
    """``bra``, counted against the launch's budget once per warp, as warp by warp."""
    launch = w.launch
    launch.branches += w.nwarps if mask is None else int(
        np.count_nonzero(mask.reshape(-1, WARP).any(axis=1)))
    if launch.branches > launch.branch_budget:
        raise NeedsWarpByWarp("the branch budget ran out")
    if launch.deadline is not None and time.monotonic() > launch.deadline:
        raise NeedsWarpByWarp("the time limit ran out")
    return fl.branch(entry, pc, mask)


def _exit(w: WideWarp, fl: Flow, mask) -> None:
    gone = w.mask_array(mask)
    w.live = w.live & ~gone
    fl.live = fl.live & ~gone


def _arrive(w: WideWarp, fl: Flow, entry, pc: int, mask):
    """A group reaches a warp-collective instruction or a barrier: it waits there (None) for
    the rest of its warp or block, or skips it (``pc + 1``) under a false guard."""
    if entry.guard >= 0:
        have = w.mask_array(mask)
        on = fl.guarded(entry, have)
        if not on.any():
            return pc + 1
        if not (on == have).all():
            raise NeedsWarpByWarp("a guard that differs between lanes skips a collective")
    if entry.member is not None:
        named = np.asarray(entry.member(w)).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        if ((named if mask is None else named[mask]) != np.uint64(0xFFFFFFFF)).any():
            raise NeedsWarpByWarp("a membermask that names part of the warp")
    w.parked[pc] = mask_or(w.parked[pc], mask) if pc in w.parked else mask
    return None


def _ready(w: WideWarp, fl: Flow, pc: int):
    """The lanes parked at ``pc`` whose whole warp (collective) or block (barrier) is there,
    taken out of the parked group; False if none."""
    entry = fl.code[pc]
    unit = WARP if entry.kind == K_COLL else w.lanes_per_block
    present = w.mask_array(w.parked[pc]).reshape(-1, unit)
    live = w.live.reshape(-1, unit)
    complete = (present | ~live).all(axis=1) & present.any(axis=1)
    if not complete.any():
        return False
    exists = w.exists.reshape(-1, unit)[complete]
    if (live[complete] != exists).any():
        raise NeedsWarpByWarp("a collective or barrier after some lanes exited")
    if entry.kind == K_COLL and entry.aligned and not exists.all():
        raise NeedsWarpByWarp("a .aligned collective in a warp with fewer than 32 threads")
    ready = np.repeat(complete, unit) & present.reshape(-1)
    rest = present.reshape(-1) & ~ready
    if rest.any():
        w.parked[pc] = rest
    else:
        del w.parked[pc]
    return None if ready.all() else ready


def _next_group(w: WideWarp, fl: Flow):
    """``(pc, mask, collective)`` to run next: the lowest ready parked group or pending group;
    None when every lane has exited."""
    best = fl.pending[0][0] if fl.pending else _BIG
    for pc in sorted(w.parked):
        if pc >= best:
            break
        ready = _ready(w, fl, pc)
        if ready is not False:
            return pc, ready, True
    if best == _BIG:
        if w.parked:
            raise NeedsWarpByWarp("lanes wait at a collective or barrier the rest never reach")
        return None
    pc, m = fl.pending.pop(0)
    return pc, m, False


def _collective(w: WideWarp, fl: Flow, pc: int, mask) -> None:
    """Run the collective or open the barrier at ``pc`` for the lanes of ``mask``."""
    entry = fl.code[pc]
    entry.wide(w, mask)
    if entry.kind == K_BAR:
        blocks = w.mask_array(mask).reshape(-1, w.lanes_per_block).any(axis=1)
        w.generation[blocks] += 1
        running = w.live.reshape(-1, w.lanes_per_block).any(axis=1)
        w.spaces.shared_guard.barrier(bool((blocks | ~running).all()))


def _run_flow(w: WideWarp, fl: Flow) -> None:
    """Run every lane to its exit (the loop of :func:`.interpreter.run_flow`, for a vector)."""
    code, pending = fl.code, fl.pending
    pc, mask = 0, fl.mask
    while True:
        if pc < 0:
            nxt = _next_group(w, fl)
            if nxt is None:
                return
            pc, mask, collective = nxt
            if collective:
                _collective(w, fl, pc, mask)
                pc += 1
            continue
        if pending and pc >= pending[0][0]:
            pc, mask = fl.reconverge(pc, mask)
            continue
        entry = code[pc]
        kind = entry.kind
        if kind == K_OP:
            (entry.wide or entry.fn)(w, mask)
            pc += 1
        elif kind == K_BRA:
            pc, mask = _branch(w, fl, entry, pc, mask)
        elif kind == K_EXIT or kind == K_RET:
            _exit(w, fl, mask)
            pc = -1
        elif kind == K_COLL or kind == K_BAR:
            nxt = _arrive(w, fl, entry, pc, mask)
            pc = -1 if nxt is None else nxt
        else:
            raise NeedsWarpByWarp(f"{fl.fc.instrs[pc].full_opcode} has no vector form")


# ---------------------------------------------------------------------------------------------
# A launch
# ---------------------------------------------------------------------------------------------

def block_batches(launch) -> tuple[list[list[tuple[int, int, int]]], int]:
    """The launch's blocks in batches of at most :data:`MAX_LANES` lanes, in the order the
    warp-by-warp model runs them, and the blocks per batch."""
    gx, gy, gz = launch.grid
    blocks = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
    per = max(1, min(len(blocks), MAX_LANES // (launch.nwarps * WARP)))
    return [blocks[i:i + per] for i in range(0, len(blocks), per)], per


def run(launch) -> None:
    """Run ``launch`` as vector programs, batch after batch; :class:`NeedsWarpByWarp` where
    the warp-by-warp model must answer (nothing of the run is to be kept then)."""
    batches, per = block_batches(launch)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for blocks in batches:
                w = WideWarp(launch, blocks, per)
                _run_flow(w, w.flows[0])
                w.spaces.shared_guard.check()
        if caught:
            raise NeedsWarpByWarp(f"a warning: {caught[0].message}")
    except NeedsWarpByWarp:
        raise
    except Exception as exc:  # a fault, an emulator refusal: the warp-by-warp model reports it
        raise NeedsWarpByWarp(f"{type(exc).__name__}: {exc}") from None


__all__ = ["MAX_LANES", "why_warp_by_warp", "WideWarp", "block_batches", "run"]
