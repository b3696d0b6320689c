"""Errors of the PTX toolchain: compiling, reading and running a kernel on the CPU.

Every error that comes from running a kernel says where it happened (block, warp, lane, PTX line
and, with line info, the CUDA source line), because "your kernel faulted" alone teaches nothing.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class PtxError(Exception):
    """Base class of everything this package raises on purpose."""


class CompileError(PtxError):
    """The CUDA source did not compile; ``log`` holds the compiler's own message."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message + (("\n" + log.strip()) if log.strip() else ""))
        self.log = log


class CompilerNotFound(PtxError):
    """No CUDA-to-PTX compiler (NVRTC library or nvcc) could be found on this machine."""


class PtxSyntaxError(PtxError):
    """The PTX text could not be read (names the PTX line)."""

    def __init__(self, message: str, line: int | None = None, text: str = ""):
        where = f"PTX line {line}: " if line is not None else ""
        shown = f"\n    {text.strip()}" if text.strip() else ""
        super().__init__(where + message + shown)
        self.line = line


class LaunchError(PtxError, ValueError):
    """The launch itself is wrong: unknown kernel, bad grid/block, argument of the wrong kind."""


@dataclass
class Where:
    """A place in a running kernel: which thread(s) and which line."""

    block: tuple[int, int, int] | None = None
    warp: int | None = None
    lanes: tuple[int, ...] = ()
    ptx_line: int | None = None
    ptx_text: str = ""
    source: str = ""          # e.g. "kernel.cu:12 (inlined at kernel.cu:30)"
    source_text: str = ""     # that source line, when the source is known

    def describe(self) -> str:
        parts = []
        if self.block is not None:
            parts.append("block (" + ", ".join(str(b) for b in self.block) + ")")
        if self.warp is not None:
            parts.append(f"warp {self.warp}")
        if self.lanes:
            parts.append(lanes_text(self.lanes))
        head = ", ".join(parts)
        lines = [head] if head else []
        if self.ptx_line is not None:
            lines.append(f"PTX line {self.ptx_line}: {self.ptx_text.strip()}")
        if self.source:
            src = f"CUDA source {self.source}"
            if self.source_text:
                src += f": {self.source_text.strip()}"
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


#: The name the interpreter imports.
_lanes_text = lanes_text


class KernelFault(PtxError):
    """The kernel did something the GPU would fault on or leave undefined.

    Attributes ``block``, ``warp``, ``lane`` (the first lane concerned), ``lanes``, ``ptx_line``
    and ``source_line`` (``"file:line"`` or ``""``) say where. ``sanitizer`` names the check
    that found a mistake the GPU would not fault on (``racecheck``, ``synccheck``; empty for a
    fault), and ``advice`` is its one sentence on the fix, kept out of the message so a report
    that prints both says it once.
    """

    sanitizer: str = ""
    advice: str = ""

    def __init__(self, message: str, where: Where | None = None):
        self.reason = message
        self.where = where or Where()
        w = self.where
        self.block, self.warp = w.block, w.warp
        self.lanes = w.lanes
        self.lane = w.lanes[0] if w.lanes else None
        self.ptx_line = w.ptx_line
        self.source_line = w.source
        detail = w.describe()
        super().__init__(message + (("\n  at " + detail) if detail else ""))


class MemoryFault(KernelFault):
    """An access outside every buffer, or misaligned for its size."""


class DivergenceFault(KernelFault):
    """Lanes of one warp reached a warp-collective instruction apart (or not at all)."""


class Deadlock(KernelFault):
    """Warps wait at a barrier that can never complete."""


class DeviceAssertion(KernelFault):
    """A device-side ``assert`` failed (``__assertfail``): the GPU stops the kernel."""


class UnsupportedInstruction(KernelFault):
    """An instruction the CPU model does not execute: run the kernel on a GPU instead."""
