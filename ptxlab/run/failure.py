"""One typed record of what a launch or a check ended in, made where it happened.

A kernel that faults on the CPU model, a race the sanitizer finds, a barrier part of a block
never reaches, a kernel that never ends, a store the PTX ISA leaves undefined, a source that
does not compile: each becomes one :class:`Failure`, whose *kind* and *fields* (block, warp,
lanes, address, PTX line, CUDA line, the two accesses of a race) are what every reader decides
from, never the wording of a message or the name of a class. :meth:`Failure.render` is the one
place the words are made, so a report, a notebook check and a whole-program run say the same.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

__all__ = ["FailureKind", "Failure", "RaceSide", "place_text", "lanes_text", "number_runs"]


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
        """Where it happened, in words (block, warp, lanes; the PTX line; the CUDA line)."""
        return place_text(self.block, self.warp, self.lanes, self.ptx_line, self.ptx_text,
                          self.cuda_line, self.cuda_text)

    def render(self) -> str:
        """The failure in words: the reason, then where (the one wording of every report)."""
        where = self.place()
        return self.reason + (("\n  at " + where) if where else "")


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
