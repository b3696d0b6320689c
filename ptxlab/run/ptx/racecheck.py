"""Shared-memory race detection for the CPU model, in the spirit of compute-sanitizer's racecheck.

The CPU model runs the warps of a block one after another until each waits at a barrier, so a
kernel that reads what another warp writes without a barrier between them gets one fixed
answer here and another on a GPU, where the warps run at once. This module watches every
shared-memory byte: which warp last wrote it and which warps read it since the last barrier.
Two accesses to one byte by different warps, at least one a write, with no ``bar.sync``
(``__syncthreads``) between them, is a race; it is reported with both warps, lanes, the
address, and the PTX and CUDA lines of both accesses. Accesses of one warp are ordered by the
warp's own program order (``__syncwarp`` included) and are never a race. Atomics are not
watched.

A read of a byte no thread of the block wrote is reported as a warning: it reads whatever the
GPU's shared memory held before.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np

from ..failure import CLIP, MAX_CAUSE, FailureKind, RaceSide, clip_text
from .errors import KernelFault, Where
from .memory import SHARED_START, item_view

__all__ = ["RACECHECK_ENV", "racecheck_mode", "SharedMemoryRace", "RaceWarning",
           "UninitializedSharedRead", "RaceTracker", "SoleWarpTracker", "Access", "Site", "Race",
           "REDUNDANT_COPY_ADVICE", "BARRIER_ADVICE", "OVERWRITE_ADVICE", "access_units"]

#: ``error`` (default): a launch with a race raises :class:`SharedMemoryRace`; ``warn``: a
#: :class:`RaceWarning` instead; ``off``: no watching (and no cost).
RACECHECK_ENV = "PTXLAB_RACECHECK"
_MODES = ("error", "warn", "off")


def racecheck_mode(mode: str | None = None) -> str:
    """The mode asked for, else ``$PTXLAB_RACECHECK``, else ``error``."""
    mode = (mode or os.environ.get(RACECHECK_ENV) or "error").strip().lower()
    if mode not in _MODES:
        raise ValueError(f"racecheck must be one of {_MODES}, got {mode!r}")
    return mode


class Site(str):
    """The ``what`` of a memory access (its opcode, as messages print it) that also carries the
    instruction, so a race can name its PTX and CUDA lines."""

    ins: object

    def __new__(cls, ins):
        s = super().__new__(cls, ins.full_opcode)
        s.ins = ins
        return s


class SharedMemoryRace(KernelFault):
    """Two warps touched one shared-memory byte with no barrier between them; ``advice`` says
    what fixes it, from what the accesses were (see :meth:`Race.advice`); ``race`` holds the
    two accesses as fields."""

    sanitizer = "racecheck"
    failure_kind = FailureKind.RACE


class RaceWarning(UserWarning):
    """A race found with ``racecheck='warn'``."""


class UninitializedSharedRead(UserWarning):
    """A read of shared memory that no thread of the block wrote."""


@dataclass
class Access:
    """One side of a race: who touched the byte, and where in the code."""

    kind: str            # "read" or "write"
    warp: int
    lane: int
    ptx_line: int | None
    ptx_text: str
    source: str          # "kernel.cu:12" (from .loc), empty without line info
    source_text: str

    def place(self, clip: int = CLIP) -> str:
        """Where in the code: the CUDA line and the PTX line, then the CUDA line's text (the PTX
        line's where there is no CUDA line) cut to ``clip`` characters (0: no text)."""
        ptx = f"PTX line {self.ptx_line}" if self.ptx_line else "PTX"
        text = self.source_text if self.source else self.ptx_text
        text = _clip(text, clip) if clip else ""
        return (f"{self.source} ({ptx})" if self.source else ptx) + (f" `{text}`" if text else "")

    def who(self) -> str:
        return f"warp {self.warp}" + (f" lane {self.lane}" if self.lane >= 0 else "")

    def how(self) -> str:
        """`` with ldmatrix`` for an instruction other than a plain load or store."""
        words = self.ptx_text.split()
        op = words[0].split(".")[0] if words else ""
        return f" with {op}" if op and op not in ("ld", "st") else ""


def _line_number(source: str, name: str) -> int | None:
    """The line of the kernel's own source an access is at: ``12`` of ``kernel.cu:12``, or of
    ``ldmatrix.cuh:40 (inlined at kernel.cu:12)``; ``None`` without line info."""
    for place in source.replace("(inlined at ", " ").replace(")", " ").split():
        file, _, line = place.rpartition(":")
        if file.rsplit("/", 1)[-1] == name and line.isdigit():
            return int(line)
    return None


def _clip(text: str, n: int = CLIP) -> str:
    return clip_text(text, n)


@dataclass
class Race:
    """Two accesses of one byte by different warps with no barrier between them. ``unchanged``:
    the later access is a write that left the byte as it was (for a write-after-write: the
    value the other warp wrote)."""

    block: tuple
    address: int
    first: Access
    second: Access
    unchanged: bool = False

    @property
    def hazard(self) -> str:
        return {("write", "read"): "read-after-write", ("read", "write"): "write-after-read",
                ("write", "write"): "write-after-write"}[(self.first.kind, self.second.kind)]

    def describe(self, clip: int = CLIP) -> str:
        """The two accesses: hazard, warps and lanes, the address, the CUDA and PTX lines, and
        each line's text cut to ``clip`` characters (0: none; none either for an access the
        instruction names, ``with ldmatrix``: its line is the asm statement)."""
        verb = {"read": "reads", "write": "writes"}[self.second.kind]
        done = {"read": "read", "write": "wrote"}[self.first.kind]
        before = self.first.place(0 if self.first.how() else clip)
        if self.first.source and self.first.source == self.second.source:
            before = "the same line" + ("" if self.first.ptx_line == self.second.ptx_line
                                        else f" (PTX line {self.first.ptx_line})")
        there = self.second.place(0 if self.second.how() else clip)
        return (f"({self.hazard}): {self.second.who()} {verb}{self.second.how()} shared "
                f"address 0x{self.address:x} at {there}, which {self.first.who()} {done}"
                f"{self.first.how()} at {before}, no barrier between them")

    def advice(self) -> str:
        """What fixes it, from what was seen: the same values written by two warps are a copy
        every warp makes in full (a barrier does not help), different values written need one
        writer per element, a write and a read need a barrier between them."""
        if self.hazard == "write-after-write":
            return REDUNDANT_COPY_ADVICE if self.unchanged else OVERWRITE_ADVICE
        return BARRIER_ADVICE


#: Several warps write the same values to the same addresses: each copies the whole tile.
REDUNDANT_COPY_ADVICE = (
    "the copy is not split by thread: every warp copies the whole tile. Loop from threadIdx.x "
    "in steps of blockDim.x; a barrier does not fix this")
#: One warp writes, another reads the same address, unordered: which runs first decides.
BARRIER_ADVICE = ("put __syncthreads() after the writes and before the reads, where the "
                  "whole block reaches it")
#: Two warps write different values to one address: which one stays depends on timing.
OVERWRITE_ADVICE = ("the values differ: give each element one writer (index by threadIdx.x), "
                    "or order the writes with __syncthreads()")


def _all_unchanged(unchanged, where: np.ndarray) -> bool:
    """Whether every racing byte (``where``) of a write kept its value."""
    if unchanged is None:
        return False
    flags = unchanged() if callable(unchanged) else unchanged
    return bool(flags[where].all())


_BYTE_STEPS = [np.arange(n) for n in range(33)]


def _bytes_of(off: np.ndarray, nbytes: int) -> np.ndarray:
    """Every byte an access of ``nbytes`` at each offset touches, lane by lane (the indices
    :func:`access_units` gives in units of one byte, without the lane of each)."""
    off = np.asarray(off, np.int64)
    if nbytes == 1:
        return off
    steps = _BYTE_STEPS[nbytes] if nbytes < len(_BYTE_STEPS) else np.arange(nbytes)
    return (off[:, None] + steps).reshape(-1)


def access_units(who: np.ndarray, off: np.ndarray, nbytes: int, widest: int = 16
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """An access of ``nbytes`` at each offset as rows of ``unit`` bytes: the largest power of
    two up to ``widest`` that divides ``nbytes`` and every offset. Returns the index of each
    row in a record viewed ``(-1, unit)``, whose row it is (``who``, one per offset: a lane or
    a warp), and ``unit``. A record that keeps one entry per byte judges rows exactly, not as
    a coarser grain: a 16-byte copy costs one index, not sixteen. ``widest=1``: byte by
    byte."""
    off = np.asarray(off, np.int64)
    unit = widest
    while unit > 1 and (nbytes % unit or (off & (unit - 1)).any()):
        unit //= 2
    per = nbytes // unit
    return _bytes_of(off // unit, per), np.repeat(np.asarray(who), per), unit


class RaceTracker:
    """Every shared-memory byte of one block: its last writer, its readers since the barrier."""

    def __init__(self, size: int, program, block: tuple):
        self._start(program, block)
        n = max(1, size)
        self.w_warp = np.full(n, -1, np.int32)
        self.w_gen = np.full(n, -1, np.int64)
        self.w_lane = np.zeros(n, np.int16)
        self.w_site = np.zeros(n, np.int32)
        self.r_gen = np.full(n, -1, np.int64)
        self.r_warps = np.zeros(n, np.uint64)  # bit per warp that read it in r_gen
        self.r_warp = np.zeros(n, np.int32)    # one of them, for the message
        self.r_lane = np.zeros(n, np.int16)
        self.r_site = np.zeros(n, np.int32)

    def _start(self, program, block: tuple) -> None:
        """What every tracker keeps besides its per-byte record: the sites, the races and the
        reads of bytes nobody wrote found so far."""
        self.program = program
        self.block = block
        self.generation = 0                   # barriers the block has passed
        self.sites: list = []
        self._site_ids: dict[int, int] = {}
        self.races: list[Race] = []
        self._seen: set = set()
        self.uninitialized: list[tuple[Access, int]] = []
        self._uninit_seen: set = set()

    def barrier(self) -> None:
        """A barrier of the block opened: what came before is ordered before what follows."""
        self.generation += 1

    def _site(self, what) -> int:
        ins = getattr(what, "ins", None)
        key = id(ins)
        sid = self._site_ids.get(key)
        if sid is None:
            sid = self._site_ids[key] = len(self.sites)
            self.sites.append(ins)
        return sid

    def _access(self, kind: str, warp: int, lane: int, sid: int) -> Access:
        ins = self.sites[sid]
        src, text = ("", "")
        if ins is not None:
            try:
                src, text = self.program.source_location(ins)
            except Exception:  # no line table: the PTX line is enough
                pass
        return Access(kind, int(warp), int(lane), getattr(ins, "line", None),
                      getattr(ins, "text", "") or "", src, text)

    def _report(self, first: Access, second: Access, index: int, unchanged: bool) -> None:
        key = (first.kind, first.ptx_line, second.kind, second.ptx_line)
        if key in self._seen:
            return
        self._seen.add(key)
        self.races.append(Race(self.block, int(index) + SHARED_START, first, second, unchanged))

    def _after_other_writer(self, kind: str, warp: int, idx, who, sid: int,
                            unchanged=None) -> np.ndarray:
        """Report a ``kind`` access of bytes another warp wrote since the last barrier; return
        the bytes' last writers (-1: never written)."""
        ww = self.w_warp[idx]
        clash = (ww >= 0) & (ww != warp) & (self.w_gen[idx] == self.generation)
        if clash.any():
            i = int(np.argmax(clash))
            b = idx[i]
            self._report(self._access("write", ww[i], self.w_lane[b], self.w_site[b]),
                         self._access(kind, warp, who[i], sid), b,
                         _all_unchanged(unchanged, clash))
        return ww

    def read(self, warp: int, lanes: np.ndarray, off: np.ndarray, nbytes: int, what) -> None:
        idx, who, _ = access_units(lanes, off, nbytes, widest=1)
        gen = self.generation
        sid = self._site(what)
        never = self._after_other_writer("read", warp, idx, who, sid) < 0
        if never.any():
            self._note_unwritten_read(warp, never, idx, who, sid)
        stale = self.r_gen[idx] != gen
        if stale.any():
            s = idx[stale]
            self.r_gen[s] = gen
            self.r_warps[s] = 0
        self.r_warps[idx] |= np.uint64(1 << warp)
        self.r_warp[idx] = warp
        self.r_lane[idx] = who
        self.r_site[idx] = sid

    def _note_unwritten_read(self, warp: int, never: np.ndarray, idx: np.ndarray,
                             who: np.ndarray, sid: int) -> None:
        """Keep the first read at site ``sid`` of a byte nobody wrote (``never``: per byte of
        the access), once per site, for the warning."""
        if sid not in self._uninit_seen:
            i = int(np.argmax(never))
            self._uninit_seen.add(sid)
            self.uninitialized.append((self._access("read", warp, who[i], sid),
                                       int(idx[i]) + SHARED_START))

    def write(self, warp: int, lanes: np.ndarray, off: np.ndarray, nbytes: int, what,
              unchanged: np.ndarray | None = None) -> None:
        """Record a write of ``nbytes`` at each lane's offset; ``unchanged`` (one flag per byte,
        lane by lane, or a function that returns them, called only if there is a race) says
        which bytes the write leaves as they were, the evidence of a copy that several warps
        make in full."""
        idx, who, _ = access_units(lanes, off, nbytes, widest=1)
        gen = self.generation
        sid = self._site(what)
        self._after_other_writer("write", warp, idx, who, sid, unchanged)
        me = np.uint64(1 << warp)
        others = (self.r_gen[idx] == gen) & ((self.r_warps[idx] & ~me) != 0)
        if others.any():
            i = int(np.argmax(others))
            b = idx[i]
            reader = int(self.r_warp[b])
            if reader == warp:     # the last reader was this warp: name another one
                mask = int(self.r_warps[b]) & ~(1 << warp)
                reader = (mask & -mask).bit_length() - 1
                first = self._access("read", reader, -1, int(self.r_site[b]))
            else:
                first = self._access("read", reader, self.r_lane[b], self.r_site[b])
            self._report(first, self._access("write", warp, who[i], sid), b,
                         _all_unchanged(unchanged, others))
        self.w_warp[idx] = warp
        self.w_gen[idx] = gen
        self.w_lane[idx] = who
        self.w_site[idx] = sid

    def finish(self, mode: str) -> None:
        """Raise (``error``) or warn about what was found, once the block has run."""
        for access, index in self.uninitialized:
            warnings.warn(UninitializedSharedRead(
                f"{access.who()} at {access.place()} reads shared address 0x{index:x} of block "
                f"{self.block}, which no thread of the block wrote: on a GPU it holds whatever "
                "was there before"), stacklevel=2)
        if not self.races:
            return
        first = self.races[0]
        more = len(self.races) - 1
        advice = first.advice()
        for clip in (*range(CLIP, 15, -2), 0):    # source texts cut until the cause fits
            message = (f"race in shared memory {first.describe(clip)}"
                       + (f" ({more} more pair{'s' if more > 1 else ''} race too)" if more else ""))
            race = self._fault(first, message, advice)
            if len(race.failure.cause()) <= MAX_CAUSE:
                break
        if mode == "warn":
            warnings.warn(RaceWarning(f"{message}. {advice}"), stacklevel=2)
            return
        raise race

    def _fault(self, first: Race, message: str, advice: str) -> SharedMemoryRace:
        """The :class:`SharedMemoryRace` of ``first``, located at its second access."""
        where = Where(block=self.block, warp=first.second.warp,
                      lanes=(first.second.lane,) if first.second.lane >= 0 else (),
                      ptx_line=first.second.ptx_line, ptx_text=first.second.ptx_text,
                      source=first.second.source, source_text=first.second.source_text)
        name = getattr(self.program, "source_name", "")
        sides = tuple(RaceSide(a.kind, a.warp, a.lane, a.ptx_line, a.source,
                               _line_number(a.source, name))
                      for a in (first.first, first.second))
        race = SharedMemoryRace(message, where, address=first.address, race=sides)
        race.advice = advice
        return race


class SoleWarpTracker(RaceTracker):
    """The tracker of a block of one warp. No other warp can race with it (a warp's own
    accesses are ordered), so only whether each byte was written is kept, for the warning about
    reads of bytes nobody wrote: one flag per byte instead of a writer and its readers. An
    access's flags are seen as one item per lane (``_flags``), so a record is one index."""

    def __init__(self, size: int, program, block: tuple):
        self._start(program, block)          # no writer and readers per byte: only the flags
        self.written = np.zeros(max(1, size), bool)
        self._views: dict = {}

    def _flags(self, nbytes: int) -> np.ndarray:
        """``written`` seen as items of ``nbytes`` flags, one starting at every byte."""
        v = self._views.get(nbytes)
        if v is None:
            v = self._views[nbytes] = item_view(self.written, np.dtype(f"V{nbytes}"))
        return v

    def read(self, warp: int, lanes: np.ndarray, off: np.ndarray, nbytes: int, what) -> None:
        if b"\x00" not in self._flags(nbytes)[off].tobytes():
            return                              # the usual case: every byte written before
        idx, who, _ = access_units(lanes, off, nbytes, widest=1)
        self._note_unwritten_read(warp, ~self.written[idx], idx, who, self._site(what))

    def write(self, warp: int, lanes: np.ndarray, off: np.ndarray, nbytes: int, what,
              unchanged: np.ndarray | None = None) -> None:
        self._flags(nbytes)[off] = _SET[nbytes] if nbytes < len(_SET) else np.void(
            b"\x01" * nbytes)


#: ``nbytes`` flags set, as one item (index ``nbytes``)
_SET = [np.void(b"\x01" * n) for n in range(33)]
