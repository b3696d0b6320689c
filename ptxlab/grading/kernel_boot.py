"""First code of a grading kernel: set its limits, then become an ordinary IPython kernel.

Started (inside the sandbox) as ``python -m ptxlab.grading.kernel_boot -- -m ipykernel_launcher
-f CONNECTION_FILE``. Before IPython starts it

* limits the kernel's memory, so a memory hog gets ``MemoryError`` instead of taking the
  server's memory: by address space (``RLIMIT_AS``, a *soft* limit that the isolated
  kernel-launch children lift), or -- where the kernel may touch CUDA, which reserves far more
  address space than it uses -- by a watchdog thread that raises ``MemoryError`` in the running
  cell when resident memory grows past the limit, and stops the kernel past one and a half
  times the limit;
* limits the size of any file written and turns off core dumps;
* makes ``os._exit`` called from a notebook cell raise an error instead of killing the kernel,
  so one stray call costs that cell, not the rest of the notebook;
* leaves out the debugger (``debugpy``): nobody debugs a kernel that grades, and importing it
  is a good part of a kernel's start.
"""
from __future__ import annotations

import json
import os
import resource
import runpy
import sys

from .sandbox import KERNEL_LIMITS_ENV


class ExitBlocked(RuntimeError):
    """``os._exit`` from learner code while grading."""


def _guard_os_exit() -> None:
    real_exit = os._exit

    def guarded_exit(status: int = 0) -> None:
        caller = sys._getframe(1)
        if caller.f_globals.get("__name__") == "__main__":
            raise ExitBlocked(f"os._exit({status}) is not allowed while the notebook is "
                              "graded: the kernel keeps running and the next cells still run")
        real_exit(status)

    os._exit = guarded_exit


#: How often the resident-memory watchdog looks, and how much more memory a cell may take
#: after a ``MemoryError`` before it gets the next one.
_WATCH_S = 0.05
_REARM_MB = 64


def _resident_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _tmp_mb() -> float:
    """What the sandbox's ``/tmp`` holds: a tmpfs, so memory the kernel uses."""
    st = os.statvfs("/tmp")
    return (st.f_blocks - st.f_bfree) * st.f_frsize / 2**20


def _watch_resident_memory(memory_mb: int, *, count_resident: bool = True,
                           count_tmp: bool = False) -> None:
    """Raise ``MemoryError`` in the main thread when the kernel's memory -- resident memory
    (``count_resident``) plus the files it keeps in the sandbox's own ``/tmp`` tmpfs
    (``count_tmp``; never the machine's ``/tmp``) -- passes ``memory_mb``
    (again only once it grew by ``_REARM_MB`` more: the memory a hog holds stays held), and
    kill the kernel past 1.5x the limit (a single huge allocation in C code, which no Python
    exception interrupts)."""
    import ctypes
    import signal
    import threading
    import time

    main_id = threading.main_thread().ident
    hard_mb = 1.5 * memory_mb

    def watch() -> None:
        armed_above = float(memory_mb)
        while True:
            time.sleep(_WATCH_S)
            try:
                rss = ((_resident_mb() if count_resident else 0.0)
                       + (_tmp_mb() if count_tmp else 0.0))
            except (OSError, ValueError):
                continue
            if rss > hard_mb:
                os.kill(os.getpid(), signal.SIGKILL)
            if rss > armed_above:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main_id),
                                                           ctypes.py_object(MemoryError))
                armed_above = rss + _REARM_MB
            elif rss < memory_mb:
                armed_above = float(memory_mb)

    threading.Thread(target=watch, name="ptxlab-memory-watch", daemon=True).start()


def _apply_limits(limits: dict) -> None:
    memory_mb = int(limits.get("memory_mb") or 0)
    watch_tmp = bool(limits.get("watch_tmp"))
    if memory_mb > 0 and limits.get("memory_mode", "address_space") == "resident":
        _watch_resident_memory(memory_mb, count_tmp=watch_tmp)
    elif memory_mb > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, hard))
        if watch_tmp:        # files in the sandbox's tmpfs are memory the limit misses
            _watch_resident_memory(memory_mb, count_resident=False, count_tmp=True)
    file_mb = int(limits.get("file_size_mb") or 0)
    if file_mb > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if len(argv) < 2 or argv[0] != "-m":
        raise SystemExit("usage: python -m ptxlab.grading.kernel_boot -- -m MODULE ARGS...")
    limits = json.loads(os.environ.pop(KERNEL_LIMITS_ENV, "{}") or "{}")
    os.makedirs(os.environ.get("HOME", "/tmp"), exist_ok=True)
    _apply_limits(limits)
    _guard_os_exit()
    sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]  # ipykernel: no debugger
    module = argv[1]
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
