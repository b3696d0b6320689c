"""The grading worker's warm launch service: started once, in a sandbox of its own, and shared by
every notebook kernel the worker starts.

A notebook kernel reaches it through one Unix socket mounted read-only into its sandbox
(``$PTXLAB_LAUNCH_SERVICE``); the service sees none of the course or the submissions (its only
writable folder holds the socket), has no network, and dies with the worker. When it cannot
start, kernels isolate each launch in a child of their own, as before: slower, same verdicts.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
from pathlib import Path

from ..run.errors import ServiceUnavailable
from ..run.launch_client import ServiceProcess
from ..run.includes import CHECK_ENV
from ..run.sources import private_kernel_paths
from . import sandbox
from .sandbox_account import hand_over, sandbox_account

__all__ = ["service_socket", "shutdown_launch_services", "wants_service"]

_log = logging.getLogger(__name__)
#: Running services of this process, by the settings they were started with.
_SERVICES: dict[str, ServiceProcess] = {}
#: Settings whose service failed to start: not tried again for every kernel.
_FAILED: dict[str, str] = {}


def wants_service(mode: str, gpu: bool) -> bool:
    """``on`` (the default): always; ``off``: never; ``auto``: when the kernel gets a GPU (a
    CUDA context per launch is what makes per-launch children slowest; on the CPU model a warm
    executor still spares each launch a fork and a compile: a class of the grading fixture
    took about 15% less CPU time)."""
    mode = mode.strip().lower()
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"SandboxedKernelManager.launch_service must be 'auto', 'on' or 'off', "
                         f"got {mode!r}")
    if mode == "auto":
        return gpu and bool(sandbox.gpu_device_nodes())
    return mode == "on"


#: How many grading workers share this machine's GPU (set for each worker by its pool).
WORKERS_ENV = "PTXLAB_GRADING_WORKERS"
#: The share of the GPU's memory the workers' launch services divide among themselves.
_GPU_SHARE_OF_ALL = 90


def gpu_memory_cap(configured_mb: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that caps one process's GPU memory: the configured MiB, else an equal
    share of the GPU for each of the machine's grading workers (CuPy's pool limit takes a
    percentage). Where an MPS daemon serves the GPU, its per-client limit holds a configured
    figure in the driver too."""
    env = os.environ if environ is None else environ
    if configured_mb > 0:
        cap = {"CUPY_GPU_MEMORY_LIMIT": str(configured_mb * 2**20)}
        if sandbox.mps_pipe_directory() is not None:
            cap["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={configured_mb}M"
        return cap
    return {"CUPY_GPU_MEMORY_LIMIT": f"{max(1, _GPU_SHARE_OF_ALL // sharing_workers(env))}%"}


def sharing_workers(env: dict[str, str]) -> int:
    """How many grading workers share this machine (its GPU, its scratch disk): ``env``'s
    :data:`WORKERS_ENV`, 1 where it is not set or not a number."""
    try:
        return max(1, int(env.get(WORKERS_ENV, "1")))
    except ValueError:
        return 1


def service_socket(*, sandbox_mode: str, gpu: bool, hidden: list[Path], env: dict[str, str],
                   max_timeout_s: float, max_memory_mb: int) -> str | None:
    """The socket of this worker's service for these settings, starting it if needed; ``None``
    when it cannot run (the reason is logged once and launches are isolated one by one)."""
    key = json.dumps([sandbox_mode, gpu, sorted(map(str, hidden)), max_timeout_s, max_memory_mb,
                      sorted(env.items())])
    svc = _SERVICES.get(key)
    if svc is not None and svc.alive():
        return svc.socket_path
    if svc is not None:                         # it died: a fresh one
        _log.warning("the launch service stopped (%s); starting a new one", svc.log_tail()[-300:])
        svc.stop()
        del _SERVICES[key]
    if key in _FAILED:
        return None

    def wrap(command: list[str], folder: Path,
             run_env: dict[str, str]) -> list[str] | sandbox.SandboxLaunch:
        if sandbox_mode != "bwrap":
            return command
        # Every learner compile of a grading run happens here: the include path and the whole
        # file system hold the toolkit's and the course's public headers, no reference kernel.
        account = sandbox_account()
        hand_over(folder, account)             # its socket and scratch files are its own
        policy = sandbox.SandboxPolicy(workdir=folder, hidden=hidden + private_kernel_paths(),
                                       gpu=gpu, kernel_headers_only=True,
                                       tmp_size_mb=max_memory_mb, account=account)
        return sandbox.sandbox_launch(policy, command, env=run_env)

    run_env = {**env, CHECK_ENV: "1"}
    if sandbox_mode != "bwrap":
        run_env = {**os.environ, **run_env}
    try:
        svc = ServiceProcess(max_timeout_s=max_timeout_s, max_memory_mb=max_memory_mb,
                             wrap=wrap, env=run_env)
    except (OSError, sandbox.SandboxUnavailable) as exc:
        _FAILED[key] = str(exc)
        _log.warning("no warm launch service (%s); each launch runs in a child of its own", exc)
        return None
    try:
        state = svc.wait_ready()
    except ServiceUnavailable as exc:
        svc.stop()
        _FAILED[key] = str(exc)
        _log.warning("%s; each launch runs in a child of its own", exc)
        return None
    _log.info("warm launch service ready (pid %s, launches on %s)", state.get("pid"),
              state.get("executor", {}).get("device") or state.get("executor", {}).get("backend"))
    _SERVICES[key] = svc
    return svc.socket_path


def shutdown_launch_services() -> None:
    """Stop every service of this process (at the end of a batch, and at exit)."""
    while _SERVICES:
        _, svc = _SERVICES.popitem()
        svc.stop()
    _FAILED.clear()


atexit.register(shutdown_launch_services)
