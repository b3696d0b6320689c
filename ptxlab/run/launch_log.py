"""The launch log: one JSON line per isolated kernel launch, read back by the grader.

Every launch that runs isolated appends a record (kernel, backend, device, outcome, seconds,
route) to the file named by ``$PTXLAB_LAUNCH_LOG``, so the graded notebook can say where each
check's kernels ran. The file lies in a folder the notebook's sandbox can write: the grader
reads it as untrusted (:mod:`ptxlab.run.untrusted_files`), never following a link, never
blocking on a FIFO, never reading more than :data:`MAX_LOG_BYTES`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .untrusted_files import read_regular

__all__ = ["LAUNCH_LOG_ENV", "MAX_LOG_BYTES", "append_launch_record", "read_launch_log"]

#: The file every isolated kernel launch appends its record to (set in the grading kernel).
LAUNCH_LOG_ENV = "PTXLAB_LAUNCH_LOG"
#: Most of the log the grader reads (a record is about 200 bytes).
MAX_LOG_BYTES = 8 * 2**20


def append_launch_record(record: dict) -> None:
    """Add one launch's record to ``$PTXLAB_LAUNCH_LOG`` (nothing when it is not set)."""
    path = os.environ.get(LAUNCH_LOG_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:  # the record is a courtesy; the launch's own result stands
        return
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def read_launch_log(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """The launch records appended to ``path`` since byte ``offset``, and the new offset.

    Raises :class:`~ptxlab.run.errors.UntrustedFile` when the log was replaced by a link, a
    FIFO or another special file, or grew past :data:`MAX_LOG_BYTES`; a missing log has no
    records.
    """
    path = Path(path)
    try:
        data = read_regular(path, max_bytes=MAX_LOG_BYTES - offset, root=path.parent,
                            offset=offset)
    except FileNotFoundError:
        return [], offset
    records = []
    complete = data[: data.rfind(b"\n") + 1]
    for line in complete.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records, offset + len(complete)
