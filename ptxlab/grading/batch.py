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

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from ..run import sources
from .outcome import INFRASTRUCTURE, StudentOutcome
from .submission_files import read_timestamp

__all__ = ["BatchOptions", "BatchResult", "BatchBusy", "Ledger", "discover_submissions",
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
    before_grading: Callable[[], None] | None = None

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
        with open(self.path, "a") as fh:
            fh.write(json.dumps(outcome.to_json()) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


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
    cmd = [sys.executable, "-m", "ptxlab.grading.worker", str(Path(opts.course_root).resolve()),
           opts.assignment]
    if opts.grading_config:
        cmd += ["--grading-config", str(opts.grading_config)]
    return cmd


#: Each worker's temporary files (its kernels' private folders, its launch service's socket)
#: live in a folder of its own, ``ptxlab-grading-<head pid>-<worker>-<n>``, removed with the
#: worker: a killed worker cleans nothing up itself.
_SCRATCH_PREFIX = "ptxlab-grading-"


def _remove_stale_scratch() -> None:
    """Scratch folders of batches whose head is gone (killed, or the machine restarted)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*"):
        pid = folder.name[len(_SCRATCH_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:   # another user's live batch
            pass


class _Worker:
    """One worker process and the student it is grading."""

    _started = 0

    def __init__(self, opts: BatchOptions, index: int, log: TextIO):
        cmd = worker_command(opts)
        env = dict(os.environ)
        _Worker._started += 1
        self.scratch = Path(tempfile.gettempdir()) / (
            f"{_SCRATCH_PREFIX}{os.getpid()}-{index}-{_Worker._started}")
        self.scratch.mkdir(mode=0o700)
        env["TMPDIR"] = str(self.scratch)
        package_root = str(sources.PROJECT_ROOT)
        env["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.index = index
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=env, text=True, bufsize=1,
                                     start_new_session=True)
        self.student: str | None = None
        self.started = 0.0
        self.buffer = ""

    def send(self, student: str) -> None:
        self.student, self.started = student, time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"student": student}) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._remove_scratch()

    def ask_to_stop(self) -> None:
        """End of input: the worker stops its spare kernel and exits (see :meth:`close`)."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def close(self) -> None:
        try:
            self.ask_to_stop()
            self.proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            self.kill()
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        # Sandboxed kernels die with the worker (bwrap --die-with-parent), but may still be
        # letting go of their files: a few tries.
        for _ in range(20):
            shutil.rmtree(self.scratch, ignore_errors=True)
            if not self.scratch.exists():
                return
            time.sleep(0.1)


def _record_lost_worker(opts: BatchOptions, student: str, status: str, reason: str,
                        duration: float, submitted_at: str) -> StudentOutcome:
    """A submission whose worker was killed or died: zeros in the gradebook, and why."""
    from nbgrader.api import Gradebook

    from .outcome import read_outcome, record_failure
    from .worker import load_grading_config

    cfg = load_grading_config(Path(opts.course_root), opts.grading_config)
    course_id = cfg.CourseDirectory.get("course_id", "default_course")
    outcome = StudentOutcome(student=student, status=status, reason=reason,
                             duration_s=round(duration, 3), submitted_at=submitted_at)
    with Gradebook(cfg.CourseDirectory.db_url, course_id) as gb:
        record_failure(gb, opts.assignment, student)
        outcome.score, outcome.max_score, outcome.checks = read_outcome(
            gb, Path(opts.course_root), opts.assignment, student)
    return outcome


#: How many times a submission is handed to a fresh worker after its worker died under it.
WORKER_DEATH_RETRIES = 1


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
    n_workers = max(1, min(opts.workers, len(todo)))
    log = open(out_dir / "workers.log", "a")
    workers: list[_Worker] = []
    pending = list(todo)
    interrupted = False
    sel = selectors.DefaultSelector()

    finished_now = 0
    deaths: dict[str, int] = {}

    def finish(outcome: StudentOutcome) -> None:
        nonlocal finished_now
        finished_now += 1
        ledger.append(outcome)
        results[outcome.student] = outcome
        progress.update(outcome, sum(1 for w in workers if w.student))
        if on_outcome:
            on_outcome(outcome)

    def start_worker(index: int) -> _Worker:
        w = _Worker(opts, index, log)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def replace(w: _Worker) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        workers[workers.index(w)] = start_worker(w.index)

    _remove_stale_scratch()
    try:
        workers.extend(start_worker(i) for i in range(n_workers if todo else 0))
        if todo and opts.before_grading is not None:
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
                w: _Worker = key.data
                line = w.proc.stdout.readline()
                if not line:                            # the worker died under a submission
                    student, took = w.student, time.monotonic() - w.started
                    code = w.proc.poll()
                    if student is not None:
                        # The learner's code runs in a kernel of its own, not in the worker: a
                        # dead worker is the machine's fault. Once more on a fresh worker; then
                        # "not graded", never a 0, and the next run tries again.
                        deaths[student] = deaths.get(student, 0) + 1
                        if deaths[student] <= WORKER_DEATH_RETRIES:
                            pending.insert(0, student)
                        else:
                            finish(StudentOutcome.not_graded(
                                student, f"the grading process died {deaths[student]} times "
                                         f"under it (last exit status {code})",
                                duration_s=round(took, 3),
                                submitted_at=submissions.get(student, "")))
                    w.student = None
                    replace(w)
                    continue
                msg = json.loads(line)
                if msg.get("ready"):
                    continue
                w.student = None
                finish(StudentOutcome.from_json(msg))
            now = time.monotonic()
            for w in list(workers):
                if w.student and now - w.started > opts.submission_timeout_s:
                    student = w.student
                    replace(w)
                    finish(_record_lost_worker(
                        opts, student, "timeout",
                        f"grading this submission took longer than {opts.submission_timeout_s:g} s "
                        "and was stopped", now - w.started, submissions.get(student, "")))
    except KeyboardInterrupt:
        interrupted = True
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
        progress.close()
    ordered = [results[s] for s in submissions if s in results]
    return BatchResult(ordered, graded_now=finished_now, skipped=skipped,
                       interrupted=interrupted, wall_s=time.monotonic() - t0)
