"""One call that runs a warp-level CUDA kernel on the GPU (CuPy) or on the CPU model.

``launch`` takes numpy inputs and returns numpy outputs whichever backend runs, so notebooks,
checks and the grader never branch on the machine they are on. ``backend="auto"`` picks the GPU
when one is usable and supports every matrix instruction the kernel uses, else the CPU model
(``ptxlab.run.cpu``, a PTX interpreter). The choice is reported with the result, never hidden.

This module is the top of the launch stack, the one place that decides *where* a launch runs:

* in this process (:func:`ptxlab.run.in_process.run_here`), the default;
* isolated (``isolate=True`` or ``PTXLAB_ISOLATE=1``, as in a graded notebook): in the warm
  launch service named by ``$PTXLAB_LAUNCH_SERVICE`` (:mod:`ptxlab.run.launch_client`), else in
  a throw-away child process (:mod:`ptxlab.run.isolation`). Where the service is required
  (``$PTXLAB_LAUNCH_SERVICE_REQUIRED=1``: the grader's own launches, which must compile in the
  service's sandbox), a service that cannot take the launch is an error of the machine, never a
  reason to compile anywhere else.

The layers below know nothing of this choice. The errors live in :mod:`ptxlab.run.errors` and
are re-exported here, as are the results and the backend choice.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import in_process
from .errors import (BackendError, BackendUnavailable, CompileError, KernelDiagnostic,
                     KernelFault, LaunchError, RequestRefused, ServiceUnavailable,
                     first_compile_error)
from .in_process import (BACKENDS, CPU_DEVICE, LaunchResult, choose_backend, cpu_available,
                         describe)
from .launch_log import append_launch_record
from .launch_request import check_options, check_source

__all__ = [
    "BackendError", "BackendUnavailable", "CompileError", "KernelFault", "LaunchError",
    "RequestRefused", "KernelDiagnostic", "LaunchResult", "KernelCase", "launch", "describe",
    "choose_backend", "cpu_available", "CPU_DEVICE", "BACKENDS", "first_compile_error",
    "ISOLATE_ENV", "SERVICE_REQUIRED_ENV", "launch_in_child", "ServiceUnavailable",
]

#: ``1`` isolates every launch of this process (the grading kernel's environment sets it).
ISOLATE_ENV = "PTXLAB_ISOLATE"
#: ``1``: isolated launches go to the launch service or fail; never to an unsandboxed child.
SERVICE_REQUIRED_ENV = "PTXLAB_LAUNCH_SERVICE_REQUIRED"


@dataclass
class KernelCase:
    """One kernel launch with fixed inputs, for comparing backends (CPU model vs GPU).

    ``compare`` lists the indices of ``args`` whose outputs must agree bit for bit.
    """

    name: str
    source: str
    kernel: str
    grid: tuple
    block: tuple
    args: list
    shared_mem: int = 0
    compare: tuple[int, ...] = ()
    options: tuple[str, ...] = ()

    def launch(self, backend: str = "auto", **kwargs: Any) -> LaunchResult:
        """Run this case on ``backend`` (copies of the inputs; the case itself is unchanged)."""
        return launch(self.source, self.kernel, grid=self.grid, block=self.block,
                      args=[a.copy() if isinstance(a, np.ndarray) else a for a in self.args],
                      shared_mem=self.shared_mem, backend=backend, options=self.options, **kwargs)


# ---------------------------------------------------------------------------------------------
# Where a launch runs
# ---------------------------------------------------------------------------------------------

def launch(source: str, kernel: str, grid=(1,), block=(32,), args: Sequence = (),
           shared_mem: int = 0, backend: str = "auto", options: Sequence[str] = (),
           isolate: bool | None = None, *, timeout_s: float | None = None,
           memory_mb: int | None = None) -> LaunchResult:
    """Compile ``source`` (cached), run ``kernel`` and return every argument after the run.

    Every numpy array is passed as a pointer to a device copy and copied back; numpy scalars
    are passed by value and returned unchanged. ``kernels/`` is on the include path.
    ``isolate=True`` (or ``PTXLAB_ISOLATE=1``) runs the launch in the warm launch service or in
    a separate process, so a fault or a hang cannot take the caller down (used when grading);
    ``timeout_s`` and ``memory_mb`` are then its limits (default: ``$PTXLAB_ISOLATE_TIMEOUT_S``,
    ``$PTXLAB_ISOLATE_MEMORY_MB``). ``CompileError`` and ``KernelFault`` come back as
    themselves; a launch that hangs, runs out of memory or kills its process raises an
    :class:`~ptxlab.run.errors.IsolationError` whose message names the kernel, where it ran
    and the limit it broke. A source over the size limit or a compiler option outside the
    allowed list raises :class:`RequestRefused` before anything compiles.
    """
    if isolate is None:
        isolate = os.environ.get(ISOLATE_ENV, "") == "1"
    kwargs = dict(source=source, kernel=kernel, grid=grid, block=block, args=list(args),
                  shared_mem=int(shared_mem), backend=backend, options=tuple(options))
    if not isolate:
        return in_process.run_here(**kwargs)
    check_source(source)
    kwargs["options"] = check_options(options)
    kwargs["grid"] = in_process.normalise_dims(grid, "grid")
    kwargs["block"] = in_process.normalise_dims(block, "block")
    kwargs["args"] = in_process.check_args(args)
    if kwargs["shared_mem"] < 0:
        raise LaunchError(f"shared_mem must be >= 0 bytes, got {shared_mem}")
    return _launch_isolated(kwargs, timeout_s, memory_mb)


def _launch_isolated(kwargs: dict, timeout_s: float | None, memory_mb: int | None) -> LaunchResult:
    """The launch in the service, else in a child; every outcome recorded in the launch log."""
    from . import isolation, launch_client   # loaded by the first isolated launch, not before

    timeout_s = isolation.default_timeout_s() if timeout_s is None else float(timeout_s)
    memory_mb = isolation.default_memory_mb() if memory_mb is None else int(memory_mb)
    notes: dict = {}
    t0 = time.monotonic()
    outcome, route = "ok", "child"
    try:
        result = None
        service = os.environ.get(launch_client.SERVICE_ENV)
        required = os.environ.get(SERVICE_REQUIRED_ENV, "") == "1"
        if required and not service:
            raise ServiceUnavailable("no launch service to run this launch in its sandbox")
        if service:
            try:
                result = launch_client.launch(service, timeout_s=timeout_s, memory_mb=memory_mb,
                                              notes=notes, **kwargs)
                route = "service"
            except ServiceUnavailable as exc:
                if required:
                    raise
                notes.clear()
                route = f"child (launch service unavailable: {exc})"
        if result is None:
            if isolation.fork_is_safe():
                in_process.cpu_module()        # imported once here, not in every child
            result = isolation.run_isolated(
                "ptxlab.run.backends:launch_in_child", kwargs=kwargs, timeout_s=timeout_s,
                memory_mb=memory_mb, what=f"kernel '{kwargs['kernel']}'", notes=notes)
        notes["backend"] = getattr(result, "backend", notes.get("backend", ""))
        notes["device"] = getattr(result, "device", notes.get("device", ""))
        return result
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        append_launch_record({"kernel": kwargs["kernel"], "backend": notes.get("backend", ""),
                              "device": notes.get("device", ""),
                              "reason": notes.get("reason", ""), "outcome": outcome,
                              "seconds": round(time.monotonic() - t0, 3), "route": route})


def launch_in_child(**kwargs: Any) -> LaunchResult:
    """What an isolated child runs: say where the launch runs, then run it there."""
    from . import isolation

    isolation.write_note(in_process.where_it_runs(kwargs.get("source", ""),
                                                  kwargs.get("backend", "auto")))
    return in_process.run_here(**kwargs)
