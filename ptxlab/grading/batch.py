"""Autograde every collected submission of an assignment with parallel workers, resumably.

Each worker (:mod:`ptxlab.grading.worker`) is a process that imports nbgrader once and grades
one student at a time; the learner's code runs in a sandboxed kernel below it. This module hands
students to workers, enforces a wall-clock limit per submission (a worker past it is killed with
everything below it, and replaced), and appends every finished student to a ledger
(``<course>/grading/<assignment>/ledger.jsonl``) only after nbgrader has committed the grades.
A rerun skips the students in the ledger whose submission has not changed, so an interrupted
batch continues where it stopped and loses nothing.
"""
from __future__ import annotations

import errno
import json
import os
import selectors
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from . import worker_process
from .outcome import INFRASTRUCTURE, StudentOutcome
from .submission_files import read_timestamp

__all__ = ["BatchOptions", "BatchResult", "BatchBusy", "GraderDiskFull", "Ledger", "discover_submissions",
           "grade_batch", "default_workers", "Progress"]


def default_workers() -> int:
    """One more worker than the cores this process may use: a worker waits for its notebook's
    kernel about half the time, so one more keeps every core busy (on the 2-core machine, 40
    submissions took 42 s with 2 workers, 33-38 s with 3, 40 s with 4)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores) + 1


@dataclass
class BatchOptions:
    course_root: Path
    assignment: str
    workers: int = field(default_factory=default_workers)
    force: bool = False                 # regrade students already in the ledger
    retry_failed: bool = False          # regrade students whose last attempt timed out/crashed
    submission_timeout_s: float = 1800.0
    grading_config: Path | None = None
    students: list[str] | None = None   # only these (default: every collected submission)
    progress: TextIO | None = None      # where the progress bar goes (None: nowhere)
    #: Run once the workers are starting, before anyone is graded (the preflight, while the
    #: workers import nbgrader); an exception it raises stops the batch with nobody graded.
    #: On a cluster each worker runs the preflight itself instead (``preflight``).
    before_grading: Callable[[], None] | None = None
    #: A Dask scheduler's address: grade on its workers (:mod:`ptxlab.grading.cluster`);
    #: ``None`` grades with worker processes on this machine.
    scheduler: str | None = None
    #: On a cluster: each worker starts one sandboxed kernel and one launch before it grades.
    preflight: bool = True

    @property
    def out_dir(self) -> Path:
        return Path(self.course_root) / "grading" / self.assignment


@dataclass
class BatchResult:
    outcomes: list[StudentOutcome]      # one per collected student, graded now or before
    graded_now: int
    skipped: int
    interrupted: bool
    wall_s: float


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


def worker_command(opts: BatchOptions) -> list[str]:
    """The command line of one grading worker (:mod:`ptxlab.grading.worker`)."""
    return worker_process.worker_command(opts.course_root, opts.assignment, opts.grading_config)


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
        if todo and opts.scheduler:
            from .cluster import grade_on_cluster

            grade_on_cluster(opts, todo, submissions, finish)
        elif todo:
            _grade_here(opts, todo, submissions, finish)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    ordered = [results[s] for s in submissions if s in results]
    return BatchResult(ordered, graded_now=finished_now, skipped=skipped,
                       interrupted=interrupted, wall_s=time.monotonic() - t0)


def _grade_here(opts: BatchOptions, todo: list[str], submissions: dict[str, str],
                finish: Callable[[StudentOutcome, int], None]) -> None:
    """Grade ``todo`` with worker processes on this machine; ``finish`` each student."""
    n_workers = max(1, min(opts.workers, len(todo)))
    log = open(opts.out_dir / "workers.log", "a")
    workers: list[worker_process.WorkerProcess] = []
    pending = list(todo)
    interrupted = False
    sel = selectors.DefaultSelector()
    deaths: dict[str, int] = {}

    def done(outcome: StudentOutcome) -> None:
        finish(outcome, sum(1 for w in workers if w.student))

    def start_worker(index: int) -> worker_process.WorkerProcess:
        w = worker_process.WorkerProcess(worker_command(opts), index, log)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def replace(w: worker_process.WorkerProcess) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        workers[workers.index(w)] = start_worker(w.index)

    worker_process.remove_stale_scratch()
    try:
        workers.extend(start_worker(i) for i in range(n_workers))
        if opts.before_grading is not None:
            try:
                opts.before_grading()
            except BaseException:
                for w in workers:
                    w.kill()
                workers.clear()
                raise
        while pending or any(w.student for w in workers):
            for w in workers:
                if w.student is None and pending:
                    w.send(pending.pop(0))
            for key, _ in sel.select(timeout=0.5):
                w: worker_process.WorkerProcess = key.data
                msg = w.read_message()
                if msg is None:                         # the worker died under a submission
                    student, took = w.student, time.monotonic() - w.started
                    if student is not None:
                        # The learner's code runs in a kernel of its own, not in the worker: a
                        # dead worker is the machine's fault. Once more on a fresh worker; then
                        # "not graded", never a 0, and the next run tries again.
                        deaths[student] = deaths.get(student, 0) + 1
                        if deaths[student] <= worker_process.WORKER_DEATH_RETRIES:
                            pending.insert(0, student)
                        else:
                            done(worker_process.death_outcome(
                                student, deaths[student], w.proc.poll(), took,
                                submissions.get(student, "")))
                    w.student = None
                    replace(w)
                    continue
                if msg.get("ready"):
                    continue
                w.student = None
                done(StudentOutcome.from_json(msg))
            now = time.monotonic()
            for w in list(workers):
                if w.student and now - w.started > opts.submission_timeout_s:
                    student = w.student
                    replace(w)
                    done(worker_process.record_lost_submission(
                        opts.course_root, opts.assignment, opts.grading_config, student,
                        "timeout", worker_process.timeout_reason(opts.submission_timeout_s),
                        now - w.started, submissions.get(student, "")))
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        for w in workers:               # every idle worker winds down at once, not in turn
            if not (w.student or interrupted):
                w.ask_to_stop()
        for w in workers:
            if w.student or interrupted:
                w.kill()
            else:
                w.close()
        sel.close()
        log.close()
