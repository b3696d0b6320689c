"""Whether the machine, not the submission, failed to grade a notebook.

Read from the exceptions the grading raised (their types and error numbers), never from the
log's text: the log carries text the submission wrote (its cell metadata in nbgrader's messages,
its outputs, its stop note), and a submission must not be able to pass its own failure off as
the machine's (a "not graded (infrastructure)" row is retried and never scored).
"""
from __future__ import annotations

import errno
import logging
import sqlite3
import sys

__all__ = ["KernelStartFailed", "FaultRecorder", "machine_fault"]


class KernelStartFailed(RuntimeError):
    """The notebook's kernel died or stayed silent before any of the notebook's code ran."""


_OS_FAULTS = {
    errno.ENOSPC: "the disk was full",
    errno.EDQUOT: "the grading account's disk quota was full",
    errno.EMFILE: "the machine ran out of file handles",
    errno.ENFILE: "the machine ran out of file handles",
    errno.EAGAIN: "the machine could not start a process",
}


def _fault_of(exc: BaseException) -> str | None:
    from ..run.errors import GpuMemoryExhausted, ServiceUnavailable
    from .sandbox_errors import SandboxUnavailable

    if isinstance(exc, KernelStartFailed):
        return "the notebook kernel did not start"
    if isinstance(exc, SandboxUnavailable):
        return "the grading sandbox could not start"
    if isinstance(exc, GpuMemoryExhausted):
        return "the GPU's memory was held by another process"
    if isinstance(exc, ServiceUnavailable):
        return "the sandboxed launch service did not run the grader's launches"
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("database is locked"):
        return "the gradebook was locked"
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(
            ("database or disk is full", "disk I/O error")):
        return "the gradebook's disk was full"
    if isinstance(exc, OSError) and exc.errno in _OS_FAULTS:
        return _OS_FAULTS[exc.errno]
    return None


def machine_fault(exc: BaseException | None) -> str | None:
    """The machine's failure behind ``exc`` (or an exception it was raised from, or a database
    error's original), in words, or ``None`` when it is the submission's."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        cause = _fault_of(item)
        if cause:
            return cause
        todo += [item.__cause__, item.__context__, getattr(item, "orig", None)]
    return None


class FaultRecorder(logging.Handler):
    """Keeps the exception being handled whenever an error is logged: nbgrader logs what it
    catches while it converts a notebook, and goes on with a message of its own."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.raised: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        if exc is not None:
            self.raised.append(exc)

    def fault(self) -> str | None:
        """The first of the recorded exceptions that is the machine's, in words."""
        for exc in self.raised:
            cause = machine_fault(exc)
            if cause:
                return cause
        return None
