"""One typed record of what a launch or a check ended in, made where it happened.

A kernel that faults on the CPU model, a race the sanitizer finds, a barrier part of a block
never reaches, a kernel that never ends, a store the PTX ISA leaves undefined, a source that
does not compile: each becomes one :class:`Failure`, whose *kind* and *fields* (block, warp,
lanes, address, PTX line, CUDA line, the two accesses of a race) are what every reader decides
from, never the wording of a message or the name of a class. :meth:`Failure.render` is the one
place the words are made, so a report, a notebook check and a whole-program run say the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable

__all__ = ["FailureKind", "Failure", "RaceSide", "place_text", "lanes_text", "number_runs",
           "clip_text", "MAX_CAUSE"]

#: A cause (a finding, where it is, and its fix: :meth:`Failure.cause`) fits in this many
#: characters, a few lines of a notebook's output; the diagnosis of a wrong output keeps to it too.
MAX_CAUSE = 400
#: A source line quoted in a sanitizer's finding is cut to this many characters.
CLIP = 60


class FailureKind(str, Enum):
    """What a launch or a check ended in (the values are the words checks have always used)."""

    COMPILE = "compile"            # the source did not compile
    REFUSED = "refused"            # the request was refused before anything ran
    LAUNCH = "launch"              # the launch itself was wrong (grid, block, arguments)
    UNSUPPORTED = "unsupported"    # the CPU model lacks an instruction the kernel uses
    FAULT = "fault"                # an access or an instruction the GPU faults on
    RACE = "race"                  # two warps, one shared byte, no barrier between
    BARRIER = "barrier"            # a barrier reached by part of the block only
    HANG = "hang"                  # the kernel never ends (an endless loop, a barrier never met)
    UNDEFINED = "undefined"        # a result the PTX ISA leaves undefined (two lanes, one row)
    ASSERT = "assert"              # a device-side assert failed
    WRONG_OUTPUT = "wrong_output"  # it ran, and what it left is wrong


@dataclass(frozen=True)
class RaceSide:
    """One of a race's two accesses: who, how, and where in the code."""

    access: str                    # "read" or "write"
    warp: int
    lane: int
    ptx_line: int | None = None
    cuda_line: str = ""            # "kernel.cu:12"
    line: int | None = None        # that CUDA line's number

    def who(self) -> str:
        return f"warp {self.warp}" + (f" lane {self.lane}" if self.lane >= 0 else "")


@dataclass(frozen=True)
class Failure:
    """What went wrong and where, as fields."""

    kind: FailureKind
    reason: str                                  # the one sentence of what happened
    block: tuple[int, int, int] | None = None
    warp: int | None = None
    lanes: tuple[int, ...] = ()
    address: int | None = None
    ptx_line: int | None = None
    ptx_text: str = ""
    cuda_line: str = ""                          # "kernel.cu:12 (inlined at kernel.cu:30)"
    cuda_text: str = ""
    advice: str = ""                             # the one sentence on the fix, said apart
    sanitizer: str = ""                          # "racecheck" or "synccheck" for their findings
    race: tuple[RaceSide, ...] = ()              # a race's first and second access
    bad_access: bool = False                     # a fault of an address: outside, misaligned

    @property
    def lane(self) -> int | None:
        """The first lane concerned."""
        return self.lanes[0] if self.lanes else None

    def place(self) -> str:
        """Where it happened, in words (block, warp, lanes; the PTX line; the CUDA line). For a
        sanitizer's finding (a race, a barrier), see :meth:`_finding_place`."""
        if self.kind in (FailureKind.RACE, FailureKind.BARRIER):
            return self._finding_place()
        return place_text(self.block, self.warp, self.lanes, self.ptx_line, self.ptx_text,
                          self.cuda_line, self.cuda_text)

    def _finding_place(self) -> str:
        """The place of a race or a barrier, less what its reason says already (a race's reason
        names both accesses: the block is left; else the warp, the lanes, a line it names),
        the source line's text cut to the room :data:`MAX_CAUSE` leaves (at most :data:`CLIP`
        characters), so that :meth:`cause` fits."""
        if self.race:
            return place_text(self.block, None, (), None, "", "", "")
        said = self.reason
        warp = None if _names(said, f"warp {self.warp}") else self.warp
        lanes = () if self.lanes and _names(said, lanes_text(self.lanes)) else self.lanes
        ptx = None if _names(said, f"PTX line {self.ptx_line}") else self.ptx_line
        cuda = "" if _names(said, self.cuda_line) else self.cuda_line
        ptx_text = clip_text(self.ptx_text) if ptx is not None else ""
        bare = place_text(self.block, warp, lanes, ptx, ptx_text, cuda, "")
        room = (MAX_CAUSE - len(said) - len(bare) - len("\n  at : ")
                - (len(f"\n  => {self.advice}") if self.advice else 0))
        text = clip_text(self.cuda_text, min(CLIP, room)) if cuda and room >= 12 else ""
        return place_text(self.block, warp, lanes, ptx, ptx_text, cuda, text)

    def render(self) -> str:
        """The failure in words: the reason, then where (the one wording of every report)."""
        where = self.place()
        return self.reason + (("\n  at " + where) if where else "")

    def cause(self) -> str:
        """What a learner reads as the cause: :meth:`render`, then the advice on the fix; a
        race's or a barrier's fits in :data:`MAX_CAUSE` characters."""
        return self.render() + (f"\n  => {self.advice}" if self.advice else "")


def _names(reason: str, line: str) -> bool:
    """Whether ``reason`` names ``line`` (``kernel.cu:4``, not ``kernel.cu:45``)."""
    return bool(line) and re.search(r"(?<![\w.])" + re.escape(line) + r"(?!\d)",
                                    reason) is not None


def clip_text(text: str, n: int = CLIP) -> str:
    """A source line on one line, cut to ``n`` characters (``...`` at the cut)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(n - 3, 0)].rstrip() + "..."


def place_text(block, warp, lanes, ptx_line, ptx_text: str, cuda_line: str,
               cuda_text: str) -> str:
    """``block (0, 0, 0), warp 1, lanes 8-31`` / ``PTX line 66: ...`` / ``CUDA source ...``."""
    parts = []
    if block is not None:
        parts.append("block (" + ", ".join(str(b) for b in block) + ")")
    if warp is not None:
        parts.append(f"warp {warp}")
    if lanes:
        parts.append(lanes_text(lanes))
    head = ", ".join(parts)
    lines = [head] if head else []
    if ptx_line is not None:
        lines.append(f"PTX line {ptx_line}: {ptx_text.strip()}")
    if cuda_line:
        src = f"CUDA source {cuda_line}"
        if cuda_text:
            src += f": {cuda_text.strip()}"
        lines.append(src)
    return "\n  ".join(lines)


def number_runs(numbers: Iterable[int]) -> str:
    """Lanes, rows or registers in words, the one wording of every report: sorted, each run of
    three or more as ``4-7``, the others one by one: ``0, 1, 4-7, 9``."""
    values = sorted({int(x) for x in numbers})
    runs: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append(f"{values[i]}-{values[j]}")
        else:
            runs += [str(v) for v in values[i:j + 1]]
        i = j + 1
    return ", ".join(runs)


def lanes_text(lanes: Iterable[int]) -> str:
    """``lane 3`` or ``lanes 0-7, 9``."""
    values = {int(x) for x in lanes}
    return ("lane " if len(values) == 1 else "lanes ") + number_runs(values)
