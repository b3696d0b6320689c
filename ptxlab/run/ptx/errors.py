"""Errors of the PTX toolchain: compiling, reading and running a kernel on the CPU.

Every error that comes from running a kernel says where it happened (block, warp, lane, PTX line
and, with line info, the CUDA source line), because "your kernel faulted" alone teaches nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..failure import Failure, FailureKind, RaceSide, lanes_text, number_runs, place_text


class PtxError(Exception):
    """Base class of everything this package raises on purpose."""


class CompileError(PtxError):
    """The CUDA source did not compile; ``log`` holds the compiler's own message."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message + (("\n" + log.strip()) if log.strip() else ""))
        self.log = log

    @property
    def failure(self) -> Failure:
        return Failure(FailureKind.COMPILE, str(self))


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

    @property
    def failure(self) -> Failure:
        return Failure(FailureKind.LAUNCH, str(self))


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
        return place_text(self.block, self.warp, self.lanes, self.ptx_line, self.ptx_text,
                          self.source, self.source_text)


#: The name the interpreter imports.
_lanes_text = lanes_text


class KernelFault(PtxError):
    """The kernel did something the GPU would fault on or leave undefined.

    Attributes ``block``, ``warp``, ``lane`` (the first lane concerned), ``lanes``, ``ptx_line``
    and ``source_line`` (``"file:line"`` or ``""``) say where, ``address`` the address concerned
    when there is one. ``sanitizer`` names the check that found a mistake the GPU would not
    fault on (``racecheck``, ``synccheck``; empty for a fault), and ``advice`` is its one
    sentence on the fix, kept out of the message so a report that prints both says it once.
    :attr:`failure` is all of it as one typed record; each class says its kind.
    """

    sanitizer: str = ""
    advice: str = ""
    failure_kind: FailureKind = FailureKind.FAULT
    bad_access: bool = False

    def __init__(self, message: str, where: Where | None = None, *,
                 address: int | None = None, race: tuple[RaceSide, ...] = ()):
        self.reason = message
        self.where = where or Where()
        w = self.where
        self.block, self.warp = w.block, w.warp
        self.lanes = w.lanes
        self.lane = w.lanes[0] if w.lanes else None
        self.ptx_line = w.ptx_line
        self.source_line = w.source
        self.address = address
        self.race = tuple(race)
        super().__init__(self.failure.render())

    @property
    def failure(self) -> Failure:
        """This fault as the typed record every reader decides from."""
        w = self.where
        return Failure(self.failure_kind, self.reason, block=w.block, warp=w.warp,
                       lanes=tuple(w.lanes), address=self.address, ptx_line=w.ptx_line,
                       ptx_text=w.ptx_text, cuda_line=w.source, cuda_text=w.source_text,
                       advice=self.advice, sanitizer=self.sanitizer, race=self.race,
                       bad_access=self.bad_access)


class MemoryFault(KernelFault):
    """An access outside every buffer, or misaligned for its size."""

    bad_access = True


class DivergenceFault(KernelFault):
    """Lanes of one warp reached a warp-collective instruction apart (or not at all)."""


class Deadlock(KernelFault):
    """Warps wait at a barrier that can never complete, or a kernel never ends."""

    failure_kind = FailureKind.HANG


class DeviceAssertion(KernelFault):
    """A device-side ``assert`` failed (``__assertfail``): the GPU stops the kernel."""

    failure_kind = FailureKind.ASSERT


class UndefinedStore(KernelFault):
    """A store whose result the PTX ISA leaves undefined (two lanes of one stmatrix naming one
    row): the model refuses to pick one; ``lanes`` and ``address`` say which."""

    failure_kind = FailureKind.UNDEFINED


class UnsupportedInstruction(KernelFault):
    """An instruction the CPU model does not execute: run the kernel on a GPU instead."""

    failure_kind = FailureKind.UNSUPPORTED


class NeedsWarpByWarp(Exception):
    """Raised inside a vector run of many warps (:mod:`ptxlab.run.ptx.wide`) where that run
    could differ from the warp-by-warp model: a fault, a race, a divergent barrier, an
    instruction without a vector form. The launch then runs again warp by warp, which gives
    the one answer and report the CPU model promises."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
