"""Flows: the lanes of one warp inside one function activation (the kernel, or a called
``.func``), and the statuses a flow stops with.

The interpreter runs flows; ``call`` (an instruction family) opens one for the callee and has
the warp run it (``Warp.run_flow``), so the family needs this module, never the interpreter.
"""
from __future__ import annotations

import bisect

import numpy as np

from .decode_context import FunctionCode
from .lanes import mask_or

#: What running a flow ends with: all its lanes returned, or it waits at a barrier.
DONE, BLOCKED = 0, 1


class Flow:
    """Program counters of one warp in one function (the entry, or a called ``.func``)."""

    __slots__ = ("fc", "code", "R", "pc", "mask", "pending", "parked", "live", "pvars",
                 "is_entry")

    def __init__(self, fc: FunctionCode, live: np.ndarray, pvars: dict, is_entry: bool):
        self.fc = fc
        self.code = fc.code
        self.R = fc.initial_registers()
        self.pc = 0
        self.live = live.copy()
        self.mask = None if live.all() else live.copy()
        self.pending: list = []                 # sorted [pc, mask]
        self.parked: dict = {}                  # pc -> (mask, member-bits or None)
        self.pvars = pvars                      # call parameters by name -> (32, size) uint8
        self.is_entry = is_entry

    def reconverge(self, pc: int, mask):
        """The running group reached the lowest waiting group's PC (merge with it) or passed it
        (park the running group and run the waiting one first, which is behind)."""
        top = self.pending.pop(0)
        if top[0] == pc:
            return pc, mask_or(mask, top[1])
        self.push(pc, mask)
        return top[0], top[1]

    def guarded(self, entry, have: np.ndarray) -> np.ndarray:
        """The lanes of ``have`` whose guard predicate (``@p`` / ``@!p``) lets ``entry`` run."""
        pred = self.R[entry.guard]
        return (~pred if entry.neg else pred) & have

    def branch(self, entry, pc: int, mask):
        """``bra`` of the running group: the (pc, mask) to run next; a predicate that splits
        the lanes runs the lower target first and leaves the other part waiting."""
        if entry.guard < 0:
            return entry.target, mask
        pred = self.R[entry.guard]
        if entry.neg:
            pred = ~pred
        if mask is not None:
            pred = pred & mask
        if not pred.any():
            return pc + 1, mask
        rest = ~pred if mask is None else mask & ~pred
        if not rest.any():
            return entry.target, mask
        taken = None if pred.all() else pred
        if entry.target < pc + 1:
            self.push(pc + 1, rest)
            return entry.target, taken
        self.push(entry.target, taken)
        return pc + 1, rest

    def push(self, pc: int, m) -> None:
        """Add a group, merging with one already waiting at the same PC."""
        pend = self.pending
        i = bisect.bisect_left(pend, pc, key=lambda g: g[0])
        if i < len(pend) and pend[i][0] == pc:
            pend[i][1] = mask_or(pend[i][1], m)
        else:
            pend.insert(i, [pc, m])


__all__ = ["DONE", "BLOCKED", "Flow"]
