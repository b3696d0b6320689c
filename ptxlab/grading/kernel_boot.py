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
* holds the kernel's working folder (with the sandbox's ``/tmp`` and ``/dev/shm``, folders of
  the grader's disk) to a quota: past it, the running cell gets ``OSError(EDQUOT, "Disk quota exceeded ...")``, and a
  kernel that keeps writing past one and a half times the quota is stopped, so filling the disk
  is this submission's fault, never the batch's;

these watchdogs run in the learner's own process, which can patch what they use: they give the
friendly in-cell errors, while the grader's own watch (:mod:`ptxlab.grading.sandbox_watch`,
outside the sandbox) enforces the same limits on all the notebook's processes together;
* makes ``os._exit`` called from a notebook cell raise an error instead of killing the kernel,
  so one stray call costs that cell, not the rest of the notebook;
* leaves out the debugger (``debugpy``): nobody debugs a kernel that grades, and importing it
  is a good part of a kernel's start.
"""
from __future__ import annotations

import json
import re
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


#: Where the kernel leaves why it stopped itself (set from the limits; the grader reads it as
#: an untrusted file of the kernel's private folder).
_stop_note: str = ""
#: What a stop note may say: which of its limits stopped the kernel. Only the name is written;
#: the grader words the reason from its own settings (:mod:`ptxlab.grading.stop_notes`), so
#: nothing a notebook writes there is ever shown as the grader's.
STOP_MEMORY = "memory-limit"
STOP_DISK = "disk-quota"
#: Past this multiple of a limit the kernel's own watchdogs stop it.
STOP_FACTOR = 1.5


def _stop_with_note(why: str) -> None:
    """Leave ``why`` (:data:`STOP_MEMORY` or :data:`STOP_DISK`) for the grader, then kill this
    kernel at once."""
    import signal

    if _stop_note:
        try:
            with open(_stop_note, "w") as fh:
                fh.write(why[:1000])
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


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
    import threading
    import time

    main_id = threading.main_thread().ident
    hard_mb = STOP_FACTOR * memory_mb

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
                _stop_with_note(STOP_MEMORY)
            if rss > armed_above:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main_id),
                                                           ctypes.py_object(MemoryError))
                armed_above = rss + _REARM_MB
            elif rss < memory_mb:
                armed_above = float(memory_mb)

    threading.Thread(target=watch, name="ptxlab-memory-watch", daemon=True).start()


_quota_message = "Disk quota exceeded"


class DiskQuotaExceeded(OSError):
    """The kernel's working folder holds more than its quota (raised in the running cell by the
    watchdog, which can pass a class only: the message is the module's)."""

    def __init__(self, *args):
        import errno

        super().__init__(errno.EDQUOT, _quota_message)


#: How often the working folder is measured.
_DISK_WATCH_S = 0.05


def _mount_points() -> set[str]:
    """Every mount point this process sees (``/proc/self/mountinfo``): in the sandbox, the
    read-only folders mounted inside a writable one (a Python installation under ``/tmp``, shown
    at ``/tmp/...``) are not what the notebook wrote."""
    points = set()
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4:
                    points.add(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]),
                                      fields[4]).decode("utf-8", "surrogateescape"))
    except OSError:
        pass
    return points


def _folder_usage(folder: str | list[str], stop_bytes: int,
                  stop_files: int, skip: set[str] = frozenset()) -> tuple[int, int]:
    """``(bytes, files)`` under ``folder`` (or each of a list; links and the folders in ``skip``
    not followed), counted until either passes its stop value.

    A file counts as the larger of its length and the blocks it holds: a compressing or
    deduplicating file system (or one that allocates late) reports few blocks for a large file
    of repeated bytes, and a quota measured in blocks alone would never be reached there."""
    total, files = 0, 0
    stack = [folder] if isinstance(folder, str) else list(folder)
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.path in skip:
                        continue
                    files += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            st = entry.stat(follow_symlinks=False)
                            total += max(st.st_size, st.st_blocks * 512)
                    except OSError:
                        continue
                    if total > stop_bytes or files > stop_files:
                        return total, files
        except OSError:
            continue
    return total, files


def _watch_disk(folder: str | list[str], quota_mb: int, max_files: int) -> None:
    """Raise :class:`DiskQuotaExceeded` in the main thread when ``folder`` (the working folder,
    and the sandbox's ``/tmp`` and ``/dev/shm`` where those are folders of the grader's disk)
    holds more than
    ``quota_mb`` MiB or ``max_files`` entries (again only once it grew by a tenth more), and
    kill the kernel past one and a half times either."""
    import ctypes
    import threading
    import time

    global _quota_message
    main_id = threading.main_thread().ident
    quota = quota_mb * 2**20
    _quota_message = (
        f"Disk quota exceeded: the submission's working folder, /tmp and /dev/shm may hold "
        f"{quota_mb} MiB and "
        f"{max_files} files while it is graded")

    roots = {folder} if isinstance(folder, str) else set(folder)
    mounted = _mount_points() - roots

    def watch() -> None:
        armed_bytes, armed_files = quota, max_files
        while True:
            time.sleep(_DISK_WATCH_S)
            used, files = _folder_usage(folder, int(STOP_FACTOR * quota),
                                        int(STOP_FACTOR * max_files), mounted)
            if used > STOP_FACTOR * quota or files > STOP_FACTOR * max_files:
                _stop_with_note(STOP_DISK)
            if used > armed_bytes or files > armed_files:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main_id),
                                                           ctypes.py_object(DiskQuotaExceeded))
                armed_bytes, armed_files = used + quota // 10, files + max_files // 10
            elif used < quota and files < max_files:
                armed_bytes, armed_files = quota, max_files

    threading.Thread(target=watch, name="ptxlab-disk-watch", daemon=True).start()


def _apply_limits(limits: dict) -> None:
    global _stop_note
    _stop_note = str(limits.get("stop_note") or "")
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
    disk_mb = int(limits.get("disk_mb") or 0)
    if disk_mb > 0:
        extra = [str(f) for f in limits.get("disk_folders") or () if os.path.isdir(str(f))]
        _watch_disk([os.getcwd(), *extra], disk_mb, int(limits.get("max_files") or 20000))


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
