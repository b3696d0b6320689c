"""The C library, for the few system calls Python's ``os`` module lacks: ``mount(2)`` and
``umount2(2)`` for a kernel's sized scratch area, and ``kcmp(2)`` (through ``syscall(2)``) for
the sandbox watch. Loaded once per process."""
from __future__ import annotations

import functools
from typing import Any

__all__ = ["libc"]


@functools.lru_cache(maxsize=None)
def libc() -> Any | None:
    """The process's C library (``ctypes.CDLL``, errno kept), or ``None`` where it cannot be
    loaded."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
