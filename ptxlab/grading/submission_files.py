"""A submission's files are data: read without following links, every problem said in words.

A student controls every byte of what they submit, names and links included. A link followed
by the grader reads (or overwrites) whatever it points at with the grader's rights: the
solutions, the gradebook, another student's work. A ``timestamp.txt`` that is not text must
cost that student a readable reason, not the class its batch.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..run.errors import UntrustedFile
from ..run.untrusted_files import read_regular

__all__ = ["links_in", "special_files_in", "read_timestamp", "submission_problems",
           "TIMESTAMP_FILE", "MAX_FILE_MB"]

TIMESTAMP_FILE = "timestamp.txt"
#: A timestamp is one short line; more is not read.
_TIMESTAMP_MAX_BYTES = 256
#: Largest file a submission may hold (a notebook with its outputs is well below).
MAX_FILE_MB = 100


def links_in(folder: Path) -> list[str]:
    """Paths (relative to ``folder``) of the symbolic links in it, never following one."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                found.append(str(path.relative_to(folder)))
    return sorted(found)


def special_files_in(folder: Path) -> list[str]:
    """``"path (what it is)"`` for every entry of ``folder`` that is neither a folder, a link nor
    a regular file within :data:`MAX_FILE_MB` (a FIFO would stall whoever opens it; a huge file
    fills the grading disk with every copy)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = str(path.relative_to(folder))
            if stat.S_ISLNK(st.st_mode):
                continue                      # said by links_in
            if not stat.S_ISREG(st.st_mode):
                kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
                        if stat.S_ISSOCK(st.st_mode) else "a device")
                found.append(f"{rel} ({kind})")
            elif st.st_size > MAX_FILE_MB * 2**20:
                found.append(f"{rel} ({st.st_size / 2**20:.0f} MiB, more than {MAX_FILE_MB} MiB)")
    return sorted(found)


def parse_utc(text: str):
    """A timestamp as nbgrader reads it (``nbgrader.utils.parse_utc``: ``date time zone``, the
    zone a name or an offset), without importing nbgrader, which takes seconds: the batch's
    head reads every student's timestamp before its workers start."""
    import dateutil.parser
    import dateutil.tz

    parts = text.split(" ")
    if len(parts) == 3:
        zone: object = parts[2]
        try:
            zone = int(parts[2])
        except ValueError:
            zone = dateutil.tz.gettz(parts[2])
        ts = dateutil.parser.parse(" ".join(parts[:2] + ["TZ"]), tzinfos={"TZ": zone})
    else:
        ts = dateutil.parser.parse(text)
    if ts.tzinfo is not None:
        ts = (ts - ts.utcoffset()).replace(tzinfo=None)
    return ts


def read_timestamp(folder: Path) -> tuple[str, str | None]:
    """``(text, problem)`` of ``folder/timestamp.txt``: the text as far as it reads (``""`` when
    there is none), and what is wrong with it (``None`` when nothing is)."""
    path = Path(folder) / TIMESTAMP_FILE
    if path.is_symlink():
        return "", f"{TIMESTAMP_FILE} is a symbolic link"
    try:
        raw = read_regular(path, max_bytes=4096, root=folder)[:_TIMESTAMP_MAX_BYTES + 1]
    except FileNotFoundError:
        return "", None
    except UntrustedFile as exc:
        return "", f"{TIMESTAMP_FILE} {exc.reason}"
    except OSError as exc:
        return "", f"{TIMESTAMP_FILE} cannot be read ({exc.strerror or exc})"
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return raw.decode("utf-8", "replace").strip()[:60], (
            f"{TIMESTAMP_FILE} is not text (byte 0x{raw[exc.start]:02x} at position "
            f"{exc.start}): {raw[:40]!r}")
    if len(raw) > _TIMESTAMP_MAX_BYTES:
        return text[:60], f"{TIMESTAMP_FILE} is longer than a date ({len(raw)}+ bytes)"
    if text:
        try:
            parse_utc(text)
        except (ValueError, OverflowError, TypeError) as exc:
            return text, f"{TIMESTAMP_FILE} holds no date nbgrader can read: {text[:60]!r} ({exc})"
    return text, None


def submission_problems(folder: Path) -> list[str]:
    """Why a submission cannot be graded as it is (empty: it can), each with the fix."""
    problems = []
    links = links_in(folder)
    if links:
        shown = ", ".join(links[:5]) + (f" and {len(links) - 5} more" if len(links) > 5 else "")
        problems.append(f"the submission holds symbolic links ({shown}); a submission must hold "
                        "plain files only, so nothing of it was graded: submit again without them")
    special = special_files_in(folder)
    if special:
        shown = ", ".join(special[:5]) + (f" and {len(special) - 5} more" if len(special) > 5 else "")
        problems.append(f"the submission holds files the grader does not read ({shown}); a "
                        "submission must hold plain files only: submit again without them")
    _, problem = read_timestamp(folder)
    if problem:
        problems.append(f"{problem}; the exchange writes it at submission: collect the "
                        "submission again (or correct the file by hand) and grade again")
    return problems
