"""Autograde every collected submission of an assignment with parallel workers, resumably.

The students are graded by a :class:`~ptxlab.grading.options.GradingPool`: worker processes on
this machine (:mod:`ptxlab.grading.local_pool`) or a Dask cluster's workers
(:mod:`ptxlab.grading.dask_pool`), both behind the same ``grade`` call. This module picks which,
and appends every finished student to a ledger
(``<course>/grading/<assignment>/ledger.jsonl``) only after nbgrader has committed the grades.
A rerun skips the students in the ledger whose submission has not changed, so an interrupted
batch continues where it stopped and loses nothing.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path
from typing import Callable, TextIO

from .options import BatchOptions, BatchResult, GradingPool
from .outcome import INFRASTRUCTURE, StudentOutcome
from .submission_files import read_timestamp

__all__ = ["BatchBusy", "GraderDiskFull", "Ledger", "discover_submissions", "grade_batch", "Progress",
           "pool_for"]


class Ledger:
    """Append-only record of finished students; the last line for a student wins."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> dict[str, StudentOutcome]:
        done: dict[str, StudentOutcome] = {}
        if not self.path.exists():
            return done
        with open(self.path) as fh:
            for line in fh:
                try:
                    outcome = StudentOutcome.from_json(json.loads(line))
                except (ValueError, TypeError):
                    continue            # a line cut short by a crash: that student is regraded
                done[outcome.student] = outcome
        return done

    def append(self, outcome: StudentOutcome) -> None:
        """Add one student; on a full disk, leave the ledger as it was (no half line) and raise
        :class:`GraderDiskFull`, which stops the batch cleanly."""
        with open(self.path, "a") as fh:
            size = fh.tell()
            try:
                fh.write(json.dumps(outcome.to_json()) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                try:
                    os.truncate(self.path, size)
                except OSError:
                    pass       # a cut line is skipped by load(): that student is graded again
                raise GraderDiskFull(self.path, outcome.student) from None


class GraderDiskFull(OSError):
    """The disk that holds the grading folder is full: the batch stops, the ledger keeps every
    student finished so far, and the next run continues with the rest."""

    def __init__(self, ledger: Path, student: str):
        super().__init__(errno.ENOSPC, f"the disk holding {ledger.parent} is full: grading "
                         f"stopped before {student} could be recorded; every student recorded "
                         "before is kept in the ledger. Free some space and run the same "
                         "command again: it grades the rest")


def discover_submissions(course_root: Path, assignment: str) -> dict[str, str]:
    """``student -> submission timestamp`` of every collected submission (``submitted/``)."""
    found: dict[str, str] = {}
    base = Path(course_root) / "submitted"
    if not base.is_dir():
        return found
    for student_dir in sorted(base.iterdir()):
        sub = student_dir / assignment
        if sub.is_dir() and not sub.is_symlink() and not student_dir.is_symlink():
            # A timestamp that does not read is that student's problem (the worker says so),
            # never the batch's.
            found[student_dir.name] = read_timestamp(sub)[0]
    return found


class Progress:
    """A one-line progress bar on a terminal; a line every few percent elsewhere."""

    def __init__(self, stream: TextIO | None, total: int):
        self.stream, self.total, self.done, self.t0 = stream, total, 0, time.monotonic()
        self._tty = bool(stream and hasattr(stream, "isatty") and stream.isatty())
        self._last_pct = -1

    def update(self, outcome: StudentOutcome | None, running: int) -> None:
        if outcome is not None:
            self.done += 1
        if not self.stream or not self.total:
            return
        pct = int(100 * self.done / self.total)
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        width = 30
        bar = "#" * int(width * self.done / self.total) + "-" * (width - int(width * self.done / self.total))
        last = ""
        if outcome:
            got = (f"{outcome.score:g}/{outcome.max_score:g}" if outcome.counted
                   else "not graded (infrastructure)")
            last = f" last: {outcome.student} {got}"
        line = (f"[{bar}] {self.done}/{self.total} {pct:3d}%  {running} running  "
                f"{elapsed:5.0f}s elapsed, ~{eta:4.0f}s left{last}")
        if self._tty:
            self.stream.write("\r" + line[:150].ljust(150))
        elif pct // 5 != self._last_pct // 5 or self.done == self.total:
            self.stream.write(line + "\n")
        self._last_pct = pct
        self.stream.flush()

    def close(self) -> None:
        if self._tty and self.stream:
            self.stream.write("\n")
            self.stream.flush()


class BatchBusy(RuntimeError):
    """Another ``ptxlab grade`` is grading this assignment of this course right now."""


def _lock(out_dir: Path):
    """An exclusive lock on the assignment's grading folder, held while the batch runs."""
    import fcntl

    fh = open(out_dir / ".lock", "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise BatchBusy(f"another 'ptxlab grade' is grading {out_dir.name} of this course "
                        "(wait for it, or stop it: the next run continues where it stopped)")
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def pool_for(opts: BatchOptions) -> GradingPool:
    """Where the students are graded: worker processes here, or a Dask cluster's workers."""
    if opts.scheduler:
        from .dask_pool import DaskPool

        return DaskPool(opts)
    from .local_pool import LocalPool

    return LocalPool(opts)


def _terminate_as_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def grade_batch(opts: BatchOptions,
                on_outcome: Callable[[StudentOutcome], None] | None = None) -> BatchResult:
    """Grade what is not graded yet; return every student's outcome (old and new).

    SIGINT and SIGTERM stop the batch cleanly: the students in flight are left ungraded (not in
    the ledger), so the next run grades them.
    """
    out_dir = opts.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(out_dir)
    previous = None
    try:
        try:
            previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
        except ValueError:  # not the main thread: leave signals alone
            previous = None
        return _grade_batch(opts, on_outcome)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        lock.close()


def _grade_batch(opts: BatchOptions,
                 on_outcome: Callable[[StudentOutcome], None] | None) -> BatchResult:
    t0 = time.monotonic()
    out_dir = opts.out_dir
    ledger = Ledger(out_dir / "ledger.jsonl")
    submissions = discover_submissions(opts.course_root, opts.assignment)
    if opts.students is not None:
        missing = [s for s in opts.students if s not in submissions]
        if missing:
            raise ValueError(f"no collected submission of {opts.assignment!r} for: {', '.join(missing)}")
        submissions = {s: submissions[s] for s in opts.students}
    done = ledger.load()
    todo: list[str] = []
    for student, stamp in submissions.items():
        prev = done.get(student)
        fresh = prev is not None and prev.submitted_at == stamp
        retry = prev is not None and (prev.status == INFRASTRUCTURE or (
            opts.retry_failed and prev.status in ("timeout", "crashed")))
        if opts.force or not fresh or retry:
            todo.append(student)
    skipped = len(submissions) - len(todo)
    results = {s: done[s] for s in submissions if s in done and s not in todo}
    progress = Progress(opts.progress, len(todo))
    finished_now = 0

    def finish(outcome: StudentOutcome, running: int) -> None:
        """A student is graded: into the ledger first, then the progress and the caller."""
        nonlocal finished_now
        finished_now += 1
        ledger.append(outcome)
        results[outcome.student] = outcome
        progress.update(outcome, running)
        if on_outcome:
            on_outcome(outcome)

    interrupted = False
    try:
        if todo:
            pool_for(opts).grade(todo, submissions, finish)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    ordered = [results[s] for s in submissions if s in results]
    return BatchResult(ordered, graded_now=finished_now, skipped=skipped,
                       interrupted=interrupted, wall_s=time.monotonic() - t0)
