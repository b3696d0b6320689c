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
    n_workers = max(1, min(opts.workers, len(todo)))
    log = open(opts.out_dir / "workers.log", "a")
    workers: list[worker_handle.WorkerProcess] = []
    pending = list(todo)
    interrupted = False
    sel = selectors.DefaultSelector()
    deaths: dict[str, int] = {}

    def done(outcome: StudentOutcome) -> None:
        finish(outcome, sum(1 for w in workers if w.student))

    def start_worker(index: int) -> worker_handle.WorkerProcess:
        w = worker_handle.WorkerProcess(worker_command(opts), index, log, pool_size=n_workers)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    def replace(w: worker_handle.WorkerProcess) -> None:
        sel.unregister(w.proc.stdout)
        w.kill()
        workers[workers.index(w)] = start_worker(w.index)

    worker_handle.remove_stale_scratch()
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
                w: worker_handle.WorkerProcess = key.data
                msg = w.read_message()
                if msg is None:                         # the worker died under a submission
                    student, took = w.student, time.monotonic() - w.started
                    if student is not None:
                        # The learner's code runs in a kernel of its own, not in the worker: a
                        # dead worker is the machine's fault. Once more on a fresh worker; then
                        # "not graded", never a 0, and the next run tries again.
                        deaths[student] = deaths.get(student, 0) + 1
                        if deaths[student] <= worker_handle.WORKER_DEATH_RETRIES:
                            pending.insert(0, student)
                        else:
                            done(worker_handle.death_outcome(
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
                if w.student and now - w.started > worker_handle.watchdog_s(
                        opts.submission_timeout_s):
                    student = w.student
                    replace(w)
                    done(worker_handle.record_lost_submission(
                        opts.course_root, opts.assignment, opts.grading_config, student,
                        "timeout", worker_handle.timeout_reason(opts.submission_timeout_s),
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
