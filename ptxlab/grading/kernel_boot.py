"""First code of a grading kernel: set its limits, then become an ordinary IPython kernel.

Started (inside the sandbox) as ``python -m ptxlab.grading.kernel_boot -- -m ipykernel_launcher
-f CONNECTION_FILE``. Before IPython starts it

* limits the address space (a memory hog gets ``MemoryError`` instead of taking the server's
  memory) -- a *soft* limit, which the isolated kernel-launch children lift for CUDA and watch
  by resident memory instead;
* limits the size of any file written and turns off core dumps;
* makes ``os._exit`` called from a notebook cell raise an error instead of killing the kernel,
  so one stray call costs that cell, not the rest of the notebook.
"""
from __future__ import annotations

import json
import os
import resource
import runpy
import sys

from ptxlab.grading.sandbox import KERNEL_LIMITS_ENV


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


def _apply_limits(limits: dict) -> None:
    memory_mb = int(limits.get("memory_mb") or 0)
    if memory_mb > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, hard))
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
    module = argv[1]
    sys.argv = [module, *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
