"""Grading with worker processes on this machine: the local :class:`GradingPool`.

Each worker (:mod:`ptxlab.grading.grading_worker`) is a process that imports nbgrader once and
grades one student at a time; the learner's code runs in a sandboxed kernel below it. The pool
hands students to workers, each told the submission limit (it stops the notebook there and
grades what ran), stops from outside a worker still grading well past it
(:func:`~ptxlab.grading.worker_handle.watchdog_s`: killed with everything below it, and
replaced), and replaces a worker that died under a submission (the machine's fault: the student
is tried once more, then left "not graded").
"""
from __future__ import annotations

import selectors
import time

from . import worker_handle
from .options import BatchOptions, Finish
from .outcome import StudentOutcome

__all__ = ["LocalPool", "worker_command"]


def worker_command(opts: BatchOptions) -> list[str]:
    """The command line of one grading worker (:mod:`ptxlab.grading.grading_worker`)."""
    return worker_handle.worker_command(opts.course_root, opts.assignment, opts.grading_config,
                                        submission_timeout_s=opts.submission_timeout_s)


class LocalPool:
    """``opts.workers`` grading worker processes on this machine."""

    def __init__(self, opts: BatchOptions):
        self.opts = opts

    def grade(self, todo: list[str], submissions: dict[str, str], finish: Finish) -> None:
        _grade_here(self.opts, todo, submissions, finish)


def _grade_here(opts: BatchOptions, todo: list[str], submissions: dict[str, str],
                finish: Finish) -> None:
    """Grade ``todo`` with worker processes on this machine; ``finish`` each student."""
    _WorkerRound(opts, todo, submissions, finish).run()


class _WorkerRound:
    """One call's workers and what they have left to grade: the students still to hand out,
    the deaths each student has seen, the selector that wakes on a worker's message."""

    def __init__(self, opts: BatchOptions, todo: list[str], submissions: dict[str, str],
                 finish: Finish):
        self.opts, self.submissions, self.finish = opts, submissions, finish
        self.n_workers = max(1, min(opts.workers, len(todo)))
        self.log = open(opts.out_dir / "workers.log", "a")
        self.workers: list[worker_handle.WorkerProcess] = []
        self.pending = list(todo)
        self.sel = selectors.DefaultSelector()
        self.deaths: dict[str, int] = {}

    def done(self, outcome: StudentOutcome) -> None:
        self.finish(outcome, sum(1 for w in self.workers if w.student))

    def start_worker(self, index: int) -> worker_handle.WorkerProcess:
        w = worker_handle.WorkerProcess(worker_command(self.opts), index, self.log,
                                        pool_size=self.n_workers)
        self.sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def replace(self, w: worker_handle.WorkerProcess) -> None:
        self.sel.unregister(w.proc.stdout)
        w.kill()
        self.workers[self.workers.index(w)] = self.start_worker(w.index)

    def run(self) -> None:
        """Start the workers, run the batch's check while they start, grade until nobody is
        left; whatever ends it, no worker outlives it."""
        worker_handle.remove_stale_scratch()
        interrupted = False
        try:
            self.workers.extend(self.start_worker(i) for i in range(self.n_workers))
            if self.opts.before_grading is not None:
                try:
                    self.opts.before_grading()
                except BaseException:
                    for w in self.workers:
                        w.kill()
                    self.workers.clear()
                    raise
            while self.pending or any(w.student for w in self.workers):
                self.hand_out()
                for key, _ in self.sel.select(timeout=0.5):
                    self.read_from(key.data)
                self.stop_overdue()
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            self.wind_down(interrupted)

    def hand_out(self) -> None:
        for w in self.workers:
            if w.student is None and self.pending:
                w.send(self.pending.pop(0))

    def read_from(self, w: worker_handle.WorkerProcess) -> None:
        """A worker's message: its student's outcome, that it is ready, or its death."""
        msg = w.read_message()
        if msg is None:                         # the worker died under a submission
            self.after_death(w)
            return
        if msg.get("ready"):
            return
        w.student = None
        self.done(StudentOutcome.from_json(msg))

    def after_death(self, w: worker_handle.WorkerProcess) -> None:
        """The learner's code runs in a kernel of its own, not in the worker: a dead worker is
        the machine's fault. Its student once more on a fresh worker; then "not graded", never
        a 0, and the next run tries again."""
        student, took = w.student, time.monotonic() - w.started
        if student is not None:
            self.deaths[student] = self.deaths.get(student, 0) + 1
            if self.deaths[student] <= worker_handle.WORKER_DEATH_RETRIES:
                self.pending.insert(0, student)
            else:
                self.done(worker_handle.death_outcome(
                    student, self.deaths[student], w.proc.poll(), took,
                    self.submissions.get(student, "")))
        w.student = None
        self.replace(w)

    def stop_overdue(self) -> None:
        """A worker still grading well past the submission limit is killed and replaced; its
        student is recorded as timed out."""
        opts, now = self.opts, time.monotonic()
        for w in list(self.workers):
            if w.student and now - w.started > worker_handle.watchdog_s(
                    opts.submission_timeout_s):
                student = w.student
                self.replace(w)
                self.done(worker_handle.record_lost_submission(
                    opts.course_root, opts.assignment, opts.grading_config, student,
                    "timeout", worker_handle.timeout_reason(opts.submission_timeout_s),
                    now - w.started, self.submissions.get(student, "")))

    def wind_down(self, interrupted: bool) -> None:
        """Idle workers are asked to stop, all at once rather than in turn; busy ones (or all,
        after an interrupt) are killed."""
        for w in self.workers:
            if not (w.student or interrupted):
                w.ask_to_stop()
        for w in self.workers:
            if w.student or interrupted:
                w.kill()
            else:
                w.close()
        self.sel.close()
        self.log.close()
