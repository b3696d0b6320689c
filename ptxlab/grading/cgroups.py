"""Per-submission control groups: the kernel, not a sampler, holds each sandbox to its limits.

A watch that samples a sandbox every 0.1 s can be outrun (a burst between two samples) and
misses what it does not walk (a tmpfs, a detached System V segment, a new session). The
kernel's cgroup controllers account for all of it as it is granted: every page a process of
the group touches, tmpfs and shared memory included, counts against ``memory``; every task
against ``pids``; and ``cpu`` gives each group one equal share however many processes or
sessions it makes. This is how systemd, container runtimes and PrairieLearn's graders hold
untrusted jobs.

:func:`find_root` finds, once per process, where this grader may make groups: cgroup v2 (a
delegated subtree, or the root) or v1 (one hierarchy per controller, as on many hosts and
containers), controller by controller. :class:`SubmissionGroup` is one kernel's group: made
before the kernel starts, entered by the kernel's first process before it ``exec``\\ s the
sandbox (so no child is ever outside it), read for what the kernel did (out-of-memory kills,
refused forks), killed and removed with the kernel.
"""
from __future__ import annotations

import atexit
import errno
import functools
import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CgroupRoot", "SubmissionGroup", "GroupLimits", "find_root", "CONTROLLERS"]

#: What a submission's group limits: memory (all its pages, tmpfs and shm included), tasks
#: (processes and threads), and its share of the CPU.
CONTROLLERS = ("memory", "pids", "cpu")
#: What holds a limit whose controller this grader cannot use.
_FALLBACK = {"memory": "the grader's watch measures memory instead",
             "pids": "the grader's watch counts processes instead",
             "cpu": "the CPU is not shared per submission"}
#: Every group gets the same weight: CPU is shared per submission, not per process or session.
_CPU_WEIGHT_V2 = 100
_CPU_SHARES_V1 = 1024


@dataclass(frozen=True)
class GroupLimits:
    """The figures a submission's group is held to (0: not limited)."""

    memory_bytes: int = 0
    tasks: int = 0
    #: The memory limit as the instructor set it (the group holds a margin above it, where the
    #: kernel's own watchdog gives the friendly ``MemoryError`` first), MiB.
    stated_memory_mb: int = 0


@dataclass(frozen=True)
class _Hierarchy:
    """Where groups of one controller are made: ``base`` (this grader's own folder)."""

    controller: str
    version: int
    base: Path


@dataclass
class CgroupRoot:
    """The controllers this grader can use, with where, or why it cannot."""

    hierarchies: dict[str, _Hierarchy] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return bool(self.hierarchies)

    def describe(self) -> str:
        """One line for the instructor: which limits the kernel enforces, and which not."""
        if not self.hierarchies:
            why = "; ".join(f"{c}: {w}" for c, w in self.missing.items()) or "no cgroup file system"
            return ("limits: no cgroup controller can be used here (" + why + "); the grader's "
                    "watch measures memory and processes every 0.1 s instead, and the CPU is "
                    "not shared per submission")
        by_version: dict[int, list[str]] = {}
        for h in self.hierarchies.values():
            by_version.setdefault(h.version, []).append(h.controller)
        parts = [f"cgroup v{v} ({', '.join(cs)})" for v, cs in sorted(by_version.items())]
        text = "limits: enforced by the kernel per submission through " + " and ".join(parts)
        if self.missing:
            text += "; not available: " + "; ".join(
                f"{c} ({w}; {_FALLBACK[c]})" for c, w in self.missing.items())
        return text

    def group(self, name: str, limits: GroupLimits) -> "SubmissionGroup":
        """A new group ``name`` held to ``limits``, in every usable hierarchy."""
        return SubmissionGroup.create(self, name, limits)


# ---------------------------------------------------------------------------------------------
# Finding where groups may be made
# ---------------------------------------------------------------------------------------------

def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, file system type, super options)`` of every cgroup mount."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        out.append((point, rfields[0], set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's group per v1 controller, and under ``""`` its v2 group."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        for name in names.split(",") if names else [""]:
            paths[name] = path
    return paths


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _v1_hierarchies(found: CgroupRoot, own: dict[str, str], tag: str) -> None:
    for point, fstype, options in _mounts():
        if fstype != "cgroup":
            continue
        for controller in CONTROLLERS:
            if controller not in options or controller in found.hierarchies:
                continue
            parent = Path(point) / own.get(controller, "/").lstrip("/")
            if not _writable_dir(parent):
                found.missing[controller] = f"{parent} is not writable by this account"
                continue
            found.hierarchies[controller] = _Hierarchy(controller, 1, parent / tag)
            found.missing.pop(controller, None)


#: The leaf a delegated v2 group's own processes move into, so that the group itself may hand
#: controllers down (the "no internal processes" rule); every grader process of the group,
#: started before or after, lives there.
_LEAF = "ptxlab-grader"


def _enable_v2(parent: Path, wanted: list[str]) -> str:
    """Enable ``wanted`` for the children of ``parent``; ``""`` or why not. A non-root group
    with processes of its own cannot hand controllers down: its processes (this grader, the job
    that started it) then move to a leaf of their own first, as systemd's delegation expects."""
    control = parent / "cgroup.subtree_control"
    text = " ".join(f"+{c}" for c in wanted)
    try:
        control.write_text(text)
        return ""
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            return f"cannot enable {', '.join(wanted)} in {parent}: {exc.strerror}"
    leaf = parent / _LEAF
    try:
        leaf.mkdir(exist_ok=True)
        for pid in _pids_of(parent):
            try:
                (leaf / "cgroup.procs").write_text(str(pid))
            except OSError:
                continue            # gone, or a kernel thread: the write below says
        control.write_text(text)
        return ""
    except OSError as exc:
        return (f"{parent} holds processes this account cannot move, so it cannot hand "
                f"{', '.join(wanted)} down ({exc.strerror}); run the grader in a delegated "
                "group (systemd: Delegate=yes, as in autograder/ptxlab-grade@.service)")


def _v2_hierarchies(found: CgroupRoot, own: dict[str, str], tag: str) -> None:
    point = next((p for p, fstype, _ in _mounts() if fstype == "cgroup2"), None)
    wanted = [c for c in CONTROLLERS if c not in found.hierarchies]
    if point is None or not wanted:
        return
    parent = Path(point) / own.get("", "/").lstrip("/")
    if parent.name == _LEAF:        # an earlier grader process of this job moved us here
        parent = parent.parent
    try:
        offered = set((parent / "cgroup.controllers").read_text().split())
    except OSError:
        return
    for c in wanted:
        if c not in offered:
            found.missing[c] = (f"the grader's cgroup v2 group ({parent}) is not given it "
                                f"(its cgroup.controllers: {' '.join(sorted(offered)) or 'none'})")
    wanted = [c for c in wanted if c in offered]
    if not wanted:
        return
    if not _writable_dir(parent):
        for c in wanted:
            found.missing[c] = f"{parent} is not writable by this account"
        return
    problem = _enable_v2(parent, wanted)
    if problem:
        for c in wanted:
            found.missing[c] = problem
        return
    base = parent / tag
    try:
        base.mkdir(exist_ok=True)
        (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    except OSError as exc:
        for c in wanted:
            found.missing[c] = f"cannot make {base}: {exc.strerror}"
        return
    for c in wanted:
        found.hierarchies[c] = _Hierarchy(c, 2, base)
        found.missing.pop(c, None)


@functools.lru_cache(maxsize=None)
def find_root(mode: str = "auto") -> CgroupRoot:
    """Where this process may make its submissions' groups (``mode`` ``"off"``: nowhere).

    v2 is preferred for every controller it offers; v1 hierarchies serve the rest (a hybrid
    host mounts both). The grader's folder in each is ``ptxlab-grading-<pid>``, removed at exit.
    """
    found = CgroupRoot()
    if mode == "off":
        found.missing = {c: "turned off (limit_enforcement = 'watch')" for c in CONTROLLERS}
        return found
    own, tag = _own_paths(), f"ptxlab-grading-{os.getpid()}"
    _v2_hierarchies(found, own, tag)
    _v1_hierarchies(found, own, tag)
    for c in CONTROLLERS:
        if c not in found.hierarchies:
            found.missing.setdefault(c, "no cgroup hierarchy offers it here")
    for h in found.hierarchies.values():
        if h.version == 1:
            try:
                h.base.mkdir(exist_ok=True)
            except OSError as exc:
                found.missing[h.controller] = f"cannot make {h.base}: {exc.strerror}"
    found.hierarchies = {c: h for c, h in found.hierarchies.items() if h.base.is_dir()}
    for h in found.hierarchies.values():
        _remove_stale(h.base.parent)
    if found.hierarchies:
        atexit.register(_remove_bases, [h.base for h in found.hierarchies.values()])
    return found


def _remove_stale(parent: Path) -> None:
    """The empty groups of graders that are gone (killed before their exit could remove
    them). Only empty ones: a grader in another PID namespace looks gone from here, and its
    notebooks' processes are not this grader's to kill."""
    for base in parent.glob("ptxlab-grading-*"):
        pid = base.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        for child in [c for c in base.iterdir() if c.is_dir()]:
            try:
                child.rmdir()
            except OSError:
                continue
        try:
            base.rmdir()
        except OSError:
            continue


def _remove_bases(bases: list[Path]) -> None:
    for base in bases:
        for child in sorted(base.glob("*/"), reverse=True):
            _kill_and_remove(child)
        try:
            base.rmdir()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# One submission's group
# ---------------------------------------------------------------------------------------------

def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text)


def _read_keyed(path: Path) -> dict[str, int]:
    """A ``key value`` file (``memory.events``, ``pids.events``, v1 ``memory.oom_control``)."""
    out: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                out[key] = int(value)
    except OSError:
        pass
    return out


def _pids_of(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_all(folder: Path, pids: list[int] | None = None) -> None:
    """SIGKILL every process of the group once: ``cgroup.kill`` where the kernel has it (v2,
    5.14 and later), else each process listed."""
    try:
        (folder / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass
    for pid in _pids_of(folder) if pids is None else pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill_and_remove(folder: Path, rounds: int = 100) -> bool:
    """SIGKILL every process of the group until none is left, then remove its folder."""
    for _ in range(rounds):
        pids = _pids_of(folder)
        if not pids:
            try:
                folder.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(0.01)        # its last tasks are still being reaped
                continue
        _kill_all(folder, pids)
        time.sleep(0.01)
    return False


@dataclass
class SubmissionGroup:
    """One kernel's group in every usable hierarchy, held to ``limits``."""

    name: str
    limits: GroupLimits
    folders: dict[str, tuple[int, Path]] = field(default_factory=dict)

    @classmethod
    def create(cls, root: CgroupRoot, name: str, limits: GroupLimits) -> "SubmissionGroup":
        group = cls(name, limits)
        seen: dict[Path, int] = {}
        for controller, h in root.hierarchies.items():
            folder = h.base / name
            if folder not in seen:
                folder.mkdir(exist_ok=True)
                seen[folder] = h.version
            group.folders[controller] = (h.version, folder)
        try:
            group._apply()
        except OSError:
            group.remove()
            raise
        return group

    def _apply(self) -> None:
        lim = self.limits
        for controller, (version, folder) in self.folders.items():
            if controller == "memory" and lim.memory_bytes > 0:
                if version == 2:
                    (folder / "memory.max").write_text(str(lim.memory_bytes))
                    _write_if_present(folder / "memory.swap.max", "0")
                    _write_if_present(folder / "memory.oom.group", "1")
                else:
                    (folder / "memory.limit_in_bytes").write_text(str(lim.memory_bytes))
                    _write_if_present(folder / "memory.memsw.limit_in_bytes",
                                      str(lim.memory_bytes))
            elif controller == "pids" and lim.tasks > 0:
                (folder / "pids.max").write_text(str(lim.tasks))
            elif controller == "cpu":
                if version == 2:
                    _write_if_present(folder / "cpu.weight", str(_CPU_WEIGHT_V2))
                else:
                    _write_if_present(folder / "cpu.shares", str(_CPU_SHARES_V1))

    def enter_argv(self, command: list[str]) -> list[str]:
        """``command``, started by a shell that first moves itself into this group: every
        process the command makes is born inside it."""
        procs = sorted({str(folder / "cgroup.procs") for _, folder in self.folders.values()})
        joins = " && ".join(f"echo $$ > {shlex.quote(p)}" for p in procs)
        return ["/bin/sh", "-c", f'{joins} && exec "$0" "$@"', *command]

    # -- what the kernel recorded -------------------------------------------------------------

    def _folder(self, controller: str) -> tuple[int, Path] | None:
        return self.folders.get(controller)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the group's memory limit."""
        entry = self._folder("memory")
        if entry is None:
            return 0
        version, folder = entry
        if version == 2:
            return _read_keyed(folder / "memory.events").get("oom_kill", 0)
        return _read_keyed(folder / "memory.oom_control").get("oom_kill", 0)

    def refused_tasks(self) -> int:
        """How many forks or threads the kernel refused at the group's task limit."""
        entry = self._folder("pids")
        return 0 if entry is None else _read_keyed(entry[1] / "pids.events").get("max", 0)

    def processes(self) -> list[int]:
        """The live processes of the group (one hierarchy is enough: all join all)."""
        for _, folder in self.folders.values():
            return _pids_of(folder)
        return []

    def limit_reason(self) -> str:
        """Why the kernel stopped the group, in the grader's words and figures, or ``""``."""
        if self.oom_kills() > 0:
            stated = self.limits.stated_memory_mb
            return (f"memory limit exceeded: all the notebook's processes together reached "
                    f"{self.limits.memory_bytes / 2**20:.0f} MiB"
                    + (f", one and a half times its limit of {stated} MiB" if stated else "")
                    + " (memory, files in /tmp and /dev, and shared memory, counted by the "
                    "kernel's memory controller), and the kernel stopped them")
        if self.refused_tasks() > 0:
            return (f"process limit exceeded: the notebook tried to run more than "
                    f"{self.limits.tasks} processes and threads together; the kernel refused "
                    "the rest and the grader stopped them all")
        return ""

    def kill(self) -> None:
        """SIGKILL every process of the group (it stays, empty, until :meth:`remove`)."""
        for _, folder in self.folders.values():
            _kill_all(folder)

    def remove(self) -> bool:
        """Kill what is left and remove the group's folders; ``False`` if one stayed."""
        done = True
        for folder in {folder for _, folder in self.folders.values()}:
            done = _kill_and_remove(folder) and done
        return done


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        try:
            path.write_text(value)
        except OSError:
            pass
