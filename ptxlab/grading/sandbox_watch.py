"""The grader's watch over one running sandbox: limits the learner's code cannot reach.

The kernel's own watchdogs (:mod:`ptxlab.grading.kernel_boot`) run inside the learner's
process: they give the friendly in-cell ``MemoryError`` and "Disk quota exceeded", but the
learner can patch what they use, and they see their own process only. A :class:`SandboxWatch`
is a thread of the grading worker, one per running kernel, that measures, whenever nobody has
for ~0.1 s (the grader also measures after each cell that ran code, through
:meth:`SandboxWatch.check_now`),

* the resident memory of **every process** of the sandbox (the whole tree below the process the
  grader started, found through ``/proc``'s ``children`` links; in the sandbox's own PID
  namespace no process can leave that tree), plus the memory files it holds open without a name
  (``memfd``); a process whose first thread has ended while others run on, which ``/proc``
  shows as a zombie holding nothing, is read through one of its live threads;
* the bytes (a file counts as ``max(st_size, st_blocks * 512)``) and entries held by every
  folder the sandbox can write (its working folder and the kernel's private folder, which holds
  the sandbox's ``/tmp`` and ``/dev/shm``), plus files deleted while still open (by any thread:
  one with a table of open files of its own is read too);
* the number of processes and threads of the tree,

and past one and a half times a limit writes why into a folder only the grader can write, then
kills every process of the sandbox. The grader reads that reason as the kernel's stop note.

Where the sandbox has a control group (:mod:`ptxlab.grading.cgroups`), the kernel enforces
memory and processes itself, as they are granted; the watch then only reads what the group
recorded (an out-of-memory kill, a refused fork), names it, and stops the rest of the sandbox,
and takes the sandbox's processes from the group's own list instead of walking the tree.
Disk is always measured here too, also where a sized scratch area lets the kernel refuse the
write past the quota: the measure is what names the quota on the row.
"""
from __future__ import annotations

import os
import signal
import stat
import threading
import time
from pathlib import Path

from .cgroups import SubmissionGroup
from .kernel_boot import _folder_usage
from .libc import libc
from .sandbox import _dedupe_nested

__all__ = ["SandboxWatch", "process_table", "process_tree", "folder_usage", "resident_now"]

_PAGE = os.sysconf("SC_PAGE_SIZE")
#: A limit is enforced past this multiple of it (the kernel's own watchdogs stop it there too;
#: below it they raise the friendly error in the cell).
HARD_FACTOR = 1.5


def _read(path: str, limit: int = 4096) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _stat_fields(raw: bytes) -> tuple[int, int, int, str]:
    """``(ppid, resident pages, threads, state)`` of a ``stat`` line of ``/proc``."""
    rest = raw[raw.rfind(b")") + 2:].split()
    return int(rest[1]), int(rest[21]), int(rest[17]), rest[0].decode()


def _parse_stat(pid: int, raw: bytes) -> tuple[int, int, int, str]:
    """``(ppid, resident pages, threads, state)`` from ``/proc/PID/stat``. A process whose
    first thread has exited while others run on shows a zombie holding nothing there: its
    memory and state are read from one of its live threads instead."""
    ppid, resident, threads, state = _stat_fields(raw)
    if state == "Z" and threads > 1:
        live = _live_thread(pid)
        if live is not None:
            try:
                _, resident, _, state = _stat_fields(_read(f"{live}/stat"))
            except (OSError, IndexError, ValueError):
                pass
    return ppid, resident, threads, state


def _live_thread(pid: int) -> str | None:
    """The ``/proc`` folder of a thread of ``pid`` other than its first, or ``None``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        if tid != str(pid):
            return f"/proc/{pid}/task/{tid}"
    return None


def _proc_table() -> dict[int, tuple[int, int, int, str]]:
    """``pid -> (ppid, resident pages, threads, state)`` of every process of this machine."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            raw = _read(f"/proc/{name}/stat")
        except OSError:
            continue
        try:
            table[int(name)] = _parse_stat(int(name), raw)
        except (IndexError, ValueError):
            continue
    return table


def _stat_of(pid: int) -> tuple[int, int, int, str] | None:
    """``(ppid, resident pages, threads, state)`` of one process, or ``None`` when it is gone."""
    try:
        return _parse_stat(pid, _read(f"/proc/{pid}/stat"))
    except (OSError, IndexError, ValueError):
        return None


def _children_of(pid: int) -> list[int] | None:
    """The children of ``pid`` from its threads' ``children`` files (a few reads, whatever the
    machine runs), or ``None`` where the kernel does not provide them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            out += [int(x) for x in _read(f"/proc/{pid}/task/{tid}/children", 1 << 16).split()]
        except FileNotFoundError:
            return None if tid == str(pid) else out
        except (OSError, ValueError):
            continue
    return out


def process_table(root: int) -> dict[int, tuple[int, int, int, str]]:
    """``pid -> (ppid, resident pages, threads, state)`` of ``root`` and every process below it.

    Walked from ``root`` through ``/proc/PID/task/TID/children``, so a check costs as much as
    the sandbox holds processes, not as much as the machine does (a grading server runs a
    sandbox per worker, each watched ten times a second); where the kernel has no
    ``children`` files, from the whole process table."""
    first = _stat_of(root)
    if first is None:
        return {}
    table, queue = {root: first}, [root]
    while queue:
        pid = queue.pop(0)
        kids = _children_of(pid)
        if kids is None:                        # no children files: the whole table
            whole = _proc_table()
            return {p: whole[p] for p in process_tree(root, whole)}
        for kid in kids:
            if kid not in table:
                info = _stat_of(kid)
                if info is not None:
                    table[kid] = info
                    queue.append(kid)
    return table


def process_tree(root: int, table: dict | None = None) -> list[int]:
    """``root`` and every process below it (parents before children), where they exist."""
    if table is None:
        return list(process_table(root))
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, queue = [], [root] if root in table else []
    while queue:
        pid = queue.pop(0)
        out.append(pid)
        queue.extend(children.get(pid, ()))
    return out


def _pss_bytes(pid: int) -> int | None:
    """Proportional resident memory (shared pages split among their users): 0 for a process
    that has exited (it holds nothing), ``None`` where the kernel does not say (then
    :func:`resident_now` reads its resident size, or 0 for a zombie)."""
    folder: str | None = f"/proc/{pid}"
    while folder is not None:
        try:
            for line in _read(f"{folder}/smaps_rollup", 8192).splitlines():
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
            return None
        except (FileNotFoundError, ProcessLookupError):
            # gone, or its first thread ended while others run on: read a live one's
            folder = _live_thread(pid) if folder == f"/proc/{pid}" else None
        except (OSError, ValueError, IndexError):
            return None
    return 0


def resident_now(pids: list[int], memfd: int) -> int:
    """Bytes the live processes among ``pids`` hold, measured again one by one: a process that
    exited since the table was read counts nothing (a busy class's short-lived processes once
    read as thousands of MiB), shared pages are split among their users."""
    total = memfd
    for pid in pids:
        pss = _pss_bytes(pid)
        if pss is None:
            info = _stat_of(pid)
            pss = 0 if info is None or info[3] in ("Z", "X") else info[1] * _PAGE
        total += pss
    return total


#: ``kcmp(2)``'s number where this module knows it, and its kind for "the same table of open
#: files".
_SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
_KCMP_FILES = 2


def _same_files(pid: int, tid: int) -> bool:
    """Whether thread ``tid`` shares the table of open files of thread ``pid`` (threads do
    unless one called ``unshare(CLONE_FILES)``); ``False`` where the kernel cannot say."""
    lib = libc()
    if _SYS_KCMP is None or lib is None:
        return False
    return lib.syscall(_SYS_KCMP, pid, tid, _KCMP_FILES, 0, 0) == 0


def _fd_folders(pid: int) -> list[str]:
    """The folders listing every file ``pid`` holds open: its own ``fd`` folder, and that of
    each of its threads with a table of its own (or of a live thread, where its first has
    ended)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []
    folders, tables = [], []
    for tid in tids:
        folder = f"/proc/{pid}/fd" if tid == pid else f"/proc/{pid}/task/{tid}/fd"
        if any(_same_files(held, tid) for held in tables):
            continue
        tables.append(tid)
        folders.append(folder)
    return folders


def _held_without_name(pids: list[int]) -> tuple[int, int]:
    """``(memfd bytes, deleted-file bytes)`` the processes hold open: space no folder shows."""
    memfd = deleted = 0
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        for folder in _fd_folders(pid):
            try:
                fds = os.listdir(folder)
            except OSError:
                continue
            for fd in fds:
                path = f"{folder}/{fd}"
                try:
                    target = os.readlink(path)
                    if not (target.startswith("/memfd:") or target.endswith(" (deleted)")):
                        continue
                    st = os.stat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                size = max(st.st_size, st.st_blocks * 512)
                if target.startswith("/memfd:"):
                    memfd += size
                else:
                    deleted += size
    return memfd, deleted


def folder_usage(folders: list[Path], stop_bytes: int, stop_files: int) -> tuple[int, int]:
    """``(bytes, entries)`` under ``folders`` (links not followed), counted until either passes
    its stop value, as the kernel's own watchdog counts them (a file is the larger of its length
    and the blocks it holds)."""
    return _folder_usage([str(f) for f in folders], stop_bytes, stop_files)


class SandboxWatch:
    """Watches the process tree below ``root_pid`` and the ``folders`` it may write; past a
    limit writes why to ``reason_file`` and kills the tree. Limits of 0 are not watched."""

    def __init__(self, root_pid: int, *, reason_file: Path, folders: list[Path],
                 memory_mb: int = 0, disk_mb: int = 0, max_files: int = 0,
                 max_tasks: int = 0, interval_s: float = 0.1, log=None,
                 group: SubmissionGroup | None = None) -> None:
        self.root_pid = root_pid
        self.group = group
        self.reason_file = Path(reason_file)
        self.folders = _dedupe_nested([Path(f).resolve() for f in folders])
        self.memory_mb, self.disk_mb = memory_mb, disk_mb
        self.max_files, self.max_tasks = max_files, max_tasks
        self.interval_s = interval_s
        self.log = log
        self.reason = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: When the sandbox was last measured, by the watch or by the grader between two
        #: cells: the watch measures when neither has for ``interval_s``.
        self._looked_at = float("-inf")

    def start(self) -> "SandboxWatch":
        self._thread = threading.Thread(target=self._run, name=f"ptxlab-sandbox-watch-"
                                        f"{self.root_pid}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the grader stops the kernel itself)."""
        self._stop.set()

    def _run(self) -> None:
        pause = self.interval_s
        while not self._stop.is_set():
            since = time.monotonic() - self._looked_at
            if since < pause:       # the grader measured after a cell just now: wait on that
                self._stop.wait(pause - since)
                continue
            began = time.perf_counter()
            try:
                why, pids = self.check()
            except Exception as exc:            # never let the watch die silently
                if self.log is not None:
                    self.log.warning("sandbox watch: %s", exc)
                why, pids = "", [self.root_pid]
            if why and not self._stop.is_set():
                self._enforce(why)
                return
            if not pids:
                return                          # the sandbox is gone
            # at most a fifth of a core for one sandbox, however large its folders
            pause = max(self.interval_s, 4 * (time.perf_counter() - began))
            self._stop.wait(pause)

    def check(self) -> tuple[str, list[int]]:
        """``(why the sandbox must stop or "", its live processes)``, measured now."""
        try:
            return self._measure()
        finally:
            self._looked_at = time.monotonic()

    def _measure(self) -> tuple[str, list[int]]:
        enforced = set(self.group.folders) if self.group is not None else set()
        table, pids = self._processes(enforced)
        if self.group is not None:
            why = self.group.limit_reason()
            if why:
                return why, pids or [self.root_pid]
        if not pids:
            return "", []
        if self.max_tasks > 0 and "pids" not in enforced:
            tasks = sum(table[p][2] for p in pids)
            if tasks > self.max_tasks:
                return (f"process limit exceeded: the notebook ran {tasks} processes and "
                        f"threads together, more than its limit of {self.max_tasks}; the grader "
                        "stopped them all"), pids
        memfd, deleted = _held_without_name(pids)
        if self.memory_mb > 0 and "memory" not in enforced:
            hard = HARD_FACTOR * self.memory_mb * 2**20
            resident = sum(table[p][1] for p in pids) * _PAGE + memfd
            if resident > hard:
                # measured again, process by process: only the living count, shared pages once
                resident = resident_now(pids, memfd)
            if resident > hard:
                return (f"memory limit exceeded: the notebook's {len(pids)} processes held "
                        f"{resident / 2**20:.0f} MiB together, more than {hard / 2**20:.0f} MiB, "
                        f"one and a half times its limit of {self.memory_mb} MiB (all the "
                        "notebook's processes together); the grader stopped them all"), pids
        return self.disk_reason(deleted), pids

    def _processes(self, enforced: set[str]) -> tuple[dict[int, tuple[int, int, int, str]],
                                                       list[int]]:
        """``(process table, live processes)`` of the sandbox. Where its control group holds
        both memory and processes, nothing here needs each process's memory and threads: the
        group's list of its processes (one read; no process of the sandbox can leave the group)
        stands in for the walk of the tree, and the table is left empty."""
        if (self.group is not None and (self.memory_mb <= 0 or "memory" in enforced)
                and (self.max_tasks <= 0 or "pids" in enforced)):
            pids = self.group.processes()
            if pids:            # none yet (the kernel's first process joins as it starts): walk
                return {}, pids
        table = process_table(self.root_pid)
        return table, [p for p in table if table[p][3] != "Z"]

    def disk_reason(self, deleted: int = 0) -> str:
        """Why the folders the sandbox writes are past the hard quota, or ``""`` (measured
        whether or not a process is left: a kernel that stopped itself at its quota may have
        had no room left for its own note)."""
        if self.disk_mb <= 0 and self.max_files <= 0:
            return ""
        hard_bytes = int(HARD_FACTOR * self.disk_mb * 2**20) if self.disk_mb > 0 else 1 << 62
        hard_files = int(HARD_FACTOR * self.max_files) if self.max_files > 0 else 1 << 62
        used, files = folder_usage(self.folders, hard_bytes, hard_files)
        used += deleted
        if used <= hard_bytes and files <= hard_files:
            return ""
        what = (f"at least {used / 2**20:.0f} MiB written, limit {self.disk_mb} MiB"
                if used > hard_bytes else
                f"at least {files} files written, limit {self.max_files} files")
        return (f"Disk quota exceeded ({what}): the notebook's working folder, /tmp and "
                "/dev/shm together held more than one and a half times its quota, and "
                "the grader stopped it")

    def _enforce(self, why: str) -> None:
        self.reason = why
        try:
            self.reason_file.write_text(why + "\n")
        except OSError:
            pass
        if self.log is not None:
            self.log.warning("sandbox of process %d stopped: %s", self.root_pid, why)
        if self.group is not None:
            self.group.kill()
        kill_tree(self.root_pid)

    def check_now(self) -> str:
        """Measure now (between two cells) and stop the sandbox past a limit: the reason, or
        ``""``. A write the kernel refused at a sized scratch area's end leaves the folder just
        past the hard quota, so this names the quota even when the notebook would have ended
        before the next look."""
        if not self.reason:
            self._stop_for(self.check()[0])
        return self.reason

    def settle(self) -> str:
        """The reason the sandbox was stopped, checked once more now (the kernel may have
        stopped it between two looks): written to ``reason_file`` when there is one."""
        if not self.reason:
            self._stop_for((self.group.limit_reason() if self.group is not None else "")
                           or self.disk_reason())
        return self.reason

    def _stop_for(self, why: str) -> None:
        """Stop watching and stop the sandbox for ``why`` (nothing when it is empty)."""
        if why:
            self._stop.set()
            self._enforce(why)


def kill_tree(root: int, rounds: int = 20) -> None:
    """SIGKILL ``root``, its process group and every process below it, until none is left."""
    try:
        os.killpg(root, signal.SIGKILL)     # the grader starts each kernel in a session
    except (OSError, ProcessLookupError):
        pass
    known: set[int] = set()
    for _ in range(rounds):
        tree = {p for p, info in process_table(root).items() if info[3] != "Z"}
        # orphans of a killed parent leave the tree (the walk starts at the root): keep killing
        # those seen before, each looked up on its own
        alive = tree | {p for p in known - tree
                        if (info := _stat_of(p)) is not None and info[3] != "Z"}
        if not alive:
            return
        known.update(alive)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        time.sleep(0.01)
