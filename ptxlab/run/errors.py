"""Every error a kernel launch can end in, at the bottom of ``ptxlab.run``.

Both backends raise the :class:`BackendError` family; running a launch in a child or in the warm
launch service adds the :class:`IsolationError` family (the work was stopped or died) and
:class:`ServiceUnavailable` (a fault of the machine, never of the learner). A request the
launch stack will not run at all -- a source over the size limit, a compiler option that names
a file -- is a :class:`RequestRefused`, and a file the grader would not trust is an
:class:`UntrustedFile`. Every module of ``ptxlab.run`` imports its errors from here, so no
module needs another one's just for its exceptions.
"""
from __future__ import annotations

import os
import re

from .failure import Failure

__all__ = [
    "BackendError", "BackendUnavailable", "LaunchError", "RequestRefused", "CompileError",
    "KernelFault", "KernelDiagnostic", "first_compile_error", "IsolationError",
    "IsolatedTimeout", "IsolatedMemoryExceeded", "IsolatedCrash", "IsolatedError",
    "ServiceUnavailable", "GpuMemoryExhausted", "UntrustedFile",
]


class BackendError(RuntimeError):
    """Base class: something stopped a kernel from running."""


class BackendUnavailable(BackendError):
    """The requested backend cannot run here (no GPU, no CuPy, GPU too old, no CPU model)."""


class LaunchError(BackendError):
    """The launch itself is wrong: unknown kernel name, bad grid/block, a Python scalar argument."""


class RequestRefused(LaunchError):
    """The launch is refused before anything compiles: a source over the size limit, a compiler
    option outside the allowed list. The message says which limit and how to fix it."""


class CompileError(BackendError):
    """The CUDA source did not compile. ``log`` is the compiler's full message.

    ``line`` and ``file`` locate the first error (``None`` when the log names no line), and
    ``first_error`` is that error's text, so a learner sees one precise line first.
    """

    def __init__(self, log: str, *, backend: str = "", source_name: str = "kernel.cu"):
        self.log = log
        self.file, self.line, self.first_error = first_compile_error(log)
        where = ""
        if self.line is not None:
            shown = self.file if self.file and self.file != source_name else "line"
            where = f"{shown} {self.line}: " if shown == "line" else f"{shown} line {self.line}: "
        head = f"{where}{self.first_error}" if self.first_error else "compilation failed"
        prefix = f"{backend} compile error: " if backend else "compile error: "
        super().__init__(prefix + head)

    def __reduce__(self):     # rebuilt from its log in the process that receives it
        return (_rebuild_compile_error, (self.log, str(self)))


def _rebuild_compile_error(log: str, message: str) -> "CompileError":
    err = CompileError(log)
    err.args = (message,)
    return err


class KernelFault(BackendError):
    """The kernel started but faulted (illegal address, misaligned access, trap, timeout), or
    the CPU model's sanitizer found a race (``sanitizer == "racecheck"``) or a barrier only
    part of the block reached (``"synccheck"``); ``advice`` is then its sentence on the fix.
    ``failure`` is the typed record made where it happened (``None`` for a GPU's fault, which
    says no more than its message)."""

    sanitizer: str = ""
    advice: str = ""
    failure: Failure | None = None


class KernelDiagnostic(UserWarning):
    """Something the CPU model noticed about a kernel that ran (see ``LaunchResult.diagnostics``)."""


def first_compile_error(log: str) -> tuple[str | None, int | None, str]:
    """``(file, line, message)`` of the first error in an NVRTC/nvcc/ptxas log.

    NVRTC and nvcc write ``path/kern.cu(12): error: ...``; ptxas writes ``ptxas ... line 45;
    error : ...``. The file is reduced to its base name (NVRTC compiles from a temporary path).
    """
    for raw in log.splitlines():
        line = raw.strip()
        m = re.match(r"(?P<file>.*?)\((?P<line>\d+)\): (?:catastrophic )?error\b:?\s*(?P<msg>.*)", line)
        if m:
            return os.path.basename(m["file"]) or None, int(m["line"]), m["msg"].strip()
        m = re.search(r"line (?P<line>\d+); error\s*:\s*(?P<msg>.*)", line)
        if m:
            return "PTX", int(m["line"]), m["msg"].strip()
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return None, None, line
    stripped = [x.strip() for x in log.splitlines() if x.strip()]
    return None, None, stripped[0] if stripped else ""


class IsolationError(RuntimeError):
    """The isolated child did not return a result; the message says why in plain words."""

    def __init__(self, message: str, *, output_tail: str = ""):
        super().__init__(message)
        self.output_tail = output_tail


class IsolatedTimeout(IsolationError):
    """The child ran past its wall-clock limit (a kernel that never finishes, an endless loop)."""


class IsolatedMemoryExceeded(IsolationError):
    """The child's resident memory went over its limit."""


class IsolatedCrash(IsolationError):
    """The child died without a reply (a signal, ``os._exit``, an abort in a driver)."""


class IsolatedError(IsolationError):
    """The work raised an exception that could not be carried back as itself."""

    def __init__(self, message: str, *, type_name: str, remote_traceback: str,
                 output_tail: str = ""):
        super().__init__(message, output_tail=output_tail)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


class ServiceUnavailable(RuntimeError):
    """The launch service could not take the launch (not running, not answering, no executor): a
    fault of the machine, never of the learner."""


class GpuMemoryExhausted(ServiceUnavailable):
    """The GPU had no memory left for a launch after waiting and retrying: another process
    held it. A fault of the machine, so a grader retries the student later; never a wrong
    answer."""


class UntrustedFile(OSError):
    """A file someone else could write was not read: a link, a FIFO, a device, a socket, a file
    over its size cap. ``reason`` says which, in words for the student's row."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.path, self.reason))
