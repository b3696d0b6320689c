"""Disk quotas sized to the disk: a submission's quota never promises more than its share of
the free space that every grading worker of the machine writes to.

With a 512 MiB quota per submission and 400 MB free, one submission could fill the disk, and
the gradebook, the ledger and every other student's notebook then met a full disk. The quota a
kernel gets is therefore the smaller of the configured one and an equal share, per worker, of
what is free now (less a reserve for the grader's own files), counted at the watch's hard
factor: each sandbox may pass its quota by half before it is stopped.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .libc import libc

__all__ = ["DiskShare", "disk_share", "snapshot", "remove_new_files", "RESERVE_MB", "FLOOR_MB",
           "can_mount_scratch", "mount_scratch", "unmount_scratch", "copy_submission"]

#: Free space kept for the grader itself (gradebook, ledger, autograded notebooks), MiB.
RESERVE_MB = 256
#: A quota is never below this (a machine that full is reported, not shared out to nothing).
FLOOR_MB = 8


@dataclass(frozen=True)
class DiskShare:
    """The quota a kernel gets, and why."""

    quota_mb: int
    configured_mb: int
    free_mb: int
    workers: int

    @property
    def reduced(self) -> bool:
        return self.quota_mb < self.configured_mb

    def describe(self, sized_scratch: bool = False) -> str:
        if self.configured_mb <= 0:
            return "disk: no quota per submission"
        text = (f"disk: each submission may write {self.quota_mb} MiB (working folder, /tmp "
                f"and /dev/shm), " + (
                    "enforced by the kernel: each notebook's private folder (its /tmp, /dev/shm "
                    "and working folder) is a file system of that size and file count, with "
                    "the grader's watch as well" if sized_scratch else
                    "enforced by the grader's watch (no sized file system can be mounted here)"))
        if self.reduced:
            text += (f"; the configured {self.configured_mb} MiB would promise more than the "
                     f"{self.free_mb} MiB free shared by {self.workers} worker"
                     f"{'s' if self.workers != 1 else ''}")
        return text


def disk_share(configured_mb: int, folders: list[Path], workers: int,
               hard_factor: float = 1.5) -> DiskShare:
    """The quota for one kernel writing into ``folders`` beside ``workers`` others."""
    workers = max(1, workers)
    free = []
    for folder in folders:
        try:
            free.append(shutil.disk_usage(folder).free)
        except OSError:
            continue
    free_mb = int(min(free) / 2**20) if free else 0
    if configured_mb <= 0 or not free:
        return DiskShare(configured_mb, configured_mb, free_mb, workers)
    fair = int((free_mb - RESERVE_MB) / (workers * hard_factor))
    return DiskShare(max(FLOOR_MB, min(configured_mb, fair)), configured_mb, free_mb, workers)


def snapshot(folder: Path) -> set[str]:
    """The relative paths under ``folder`` now (links not followed)."""
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def remove_new_files(folder: Path, before: set[str]) -> int:
    """Remove what was written under ``folder`` since ``before`` (a submission stopped at its
    quota leaves nothing behind); returns how many entries went."""
    removed = 0
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if str(path.relative_to(folder)) in before:
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        except OSError:             # gone already, or not ours to remove
            continue
    return removed


def can_mount_scratch() -> bool:
    """Whether this grader may mount a sized file system for each notebook (root may)."""
    return os.geteuid() == 0 and shutil.which("mount") is not None


def _libc():
    """The C library, for ``mount(2)`` and ``umount2(2)`` without starting a program (a
    ``mount`` and an ``umount`` per submission cost two process starts), or ``None``."""
    lib = libc()
    return lib if lib is not None and hasattr(lib, "mount") and hasattr(lib, "umount2") else None


#: ``umount2``'s flag for a lazy unmount (``umount -l``).
_MNT_DETACH = 2


def mount_scratch(folder: Path, size_bytes: int, files: int) -> bool:
    """Mount a tmpfs of ``size_bytes`` and ``files`` entries at ``folder``: past either, the
    kernel answers "No space left on device" however fast a notebook writes. Its pages count
    against the notebook's memory too (its control group is charged for them). ``False``
    where it cannot be mounted (the watch then holds the quota alone)."""
    options = f"size={max(size_bytes, 1 << 20)},nr_inodes={max(files, 64)},mode=0700"
    libc = _libc()
    if libc is not None and libc.mount(b"ptxlab-scratch", os.fsencode(folder), b"tmpfs", 0,
                                       options.encode()) == 0:
        return True
    try:             # the mount program, where the call is refused (it may know better)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "ptxlab-scratch",
                               str(folder)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def unmount_scratch(folder: Path) -> None:
    """Unmount a scratch file system (lazily: a process still dying there does not hold it)."""
    libc = _libc()
    if libc is not None and libc.umount2(os.fsencode(folder), _MNT_DETACH) == 0:
        return
    try:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass


def copy_submission(source: Path, dest: Path) -> None:
    """The notebook's folder (the files next to the notebook) into a kernel's own working
    folder, links left behind (never followed out of the submission)."""
    for item in source.iterdir():
        target = dest / item.name
        if item.is_symlink():
            continue
        if item.is_dir():
            shutil.copytree(item, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
