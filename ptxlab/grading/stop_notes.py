"""Why a notebook's kernel stopped, worded by the grader.

Two files may say why. The grader's own (its watch or the kernel's control group stopped the
sandbox at a limit; a folder the sandbox never sees) is the grader's text and is shown as it is.
The kernel's stop note lies in the kernel's private folder, which the sandbox can write: the
kernel's own watchdogs name the limit they stopped it at there (``memory-limit``,
``disk-quota``), and that name may only *select* one of the grader's reasons, worded here from
the grader's configured figures. Any other content is the notebook's own words: quoted, short,
on one line, after a phrase that says whose words they are. It never becomes a reason the grader
gives -- a machine's fault ("not graded (infrastructure)") is told from exceptions, never from
text (:mod:`ptxlab.grading.machine_faults`) -- and it changes no score.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..run.errors import UntrustedFile
from ..run.untrusted_files import read_regular
from .kernel_boot import STOP_DISK, STOP_FACTOR, STOP_MEMORY

if TYPE_CHECKING:
    from .kernel_manager import SandboxedKernelManager

__all__ = ["kernel_stop_reason", "known_reasons", "quoted_words"]

#: How much of a note that names no known reason is quoted.
_QUOTED_CHARS = 160


def known_reasons(km: "SandboxedKernelManager") -> dict[str, str]:
    """The reasons a stop note may select, worded from ``km``'s settings."""
    memory_mb = int(getattr(km, "kernel_memory_mb", 0) or 0)
    # the quota the kernel was given: the configured one, or its share of a fuller disk
    share = getattr(km, "disk_share", None)
    disk_mb = int(getattr(share, "quota_mb", 0) or getattr(km, "disk_quota_mb", 0) or 0)
    max_files = int(getattr(km, "max_files", 0) or 0)
    return {
        STOP_MEMORY: (f"the kernel used more than {STOP_FACTOR * memory_mb:.0f} MiB of memory, "
                      f"one and a half times its limit of {memory_mb} MiB, and was stopped"),
        STOP_DISK: (f"Disk quota exceeded: the submission's working folder, /tmp and /dev/shm "
                    f"may hold {disk_mb} MiB and {max_files} files while it is graded: the "
                    "kernel kept writing past it and was stopped"),
    }


def quoted_words(text: str) -> str:
    """``text`` as a short quotation on one line: printable characters only, cut."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(flat) > _QUOTED_CHARS:
        flat = flat[:_QUOTED_CHARS - 3] + "..."
    return '"' + flat.replace('"', "'") + '"'


def kernel_stop_reason(km: "SandboxedKernelManager") -> str:
    """Why ``km``'s kernel stopped, or ``""`` when nothing says so."""
    path: Path | None = getattr(km, "stop_note", None)
    if path is None:
        return ""
    trusted = getattr(km, "watch_reason_file", None)
    try:
        text = read_regular(path, max_bytes=4096).decode("utf-8", "replace").strip()
    except UntrustedFile as exc:        # the notebook replaced the note: say so, read nothing
        return (f"the notebook's kernel stopped, and its stop note {exc.reason}; it was not "
                "read (did the notebook replace it?)")
    except OSError:
        return ""
    if trusted is not None and Path(path) == Path(trusted):
        return text                     # the grader's own words
    if not text:
        return ""
    known = known_reasons(km)
    if text in known:
        return known[text]
    return ("the notebook's kernel stopped; a file the notebook can write names no limit of "
            f"the grader and says, in the notebook's own words: {quoted_words(text)}")
