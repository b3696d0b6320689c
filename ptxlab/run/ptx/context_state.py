"""What a kernel can leave in its CUDA context for the launches that come after it.

A launch service runs one student's launches after another's in the same process when nothing
of the first can reach the second (:mod:`ptxlab.run.launch_server`): between students the
modules are unloaded (no ``__device__`` variable carries over) and every buffer a launch used
is zeroed before it is freed. One thing outlives both: the *device heap*, which in-kernel
``malloc``/``free`` (and ``new``/``delete``) draw on -- what a kernel allocates and never frees
stays allocated in the context, and a later kernel's ``malloc`` could find the heap full. The
PTX says whether a kernel uses it: it declares the system functions it calls.
"""
from __future__ import annotations

import re

__all__ = ["system_calls", "context_state_left"]

_EXTERN_FUNC = re.compile(r"^\s*\.extern\s+\.func\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)", re.M)
#: System functions that leave nothing behind: ``printf``'s buffer is drained when the launch
#: ends, and a failed ``assert`` traps, which ends the process's context anyway.
_LEAVE_NOTHING = frozenset({"vprintf", "__assertfail"})


def system_calls(ptx: str) -> list[str]:
    """The external functions ``ptx`` declares (``malloc``, ``free``, ``vprintf`` ...)."""
    return sorted(set(_EXTERN_FUNC.findall(ptx)))


def context_state_left(ptx: str) -> list[str]:
    """The functions of ``ptx`` that may leave state in the context after the launch (the
    device heap's); empty when the next student's launches may share the process."""
    return [name for name in system_calls(ptx) if name not in _LEAVE_NOTHING]
