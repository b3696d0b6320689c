"""``ptxlab grade --scheduler ADDRESS``: the head's side of grading on a Dask cluster.

The head keeps everything that must exist once: the ledger, the gradebook, the CSV and the
summary (written by :mod:`ptxlab.grading.batch` and :mod:`ptxlab.cli.grade` as on one
machine). Every task carries the course (each worker unpacks it once) and one student's
submitted folder, as data;
each Dask worker grades in its own sandbox on its own GPU or CPU model
(:mod:`ptxlab.grading.dask_task`) and sends back data. A worker that dies mid-submission
loses nothing: Dask runs the task again on another worker, and the student is written only when
a result arrives. A worker whose preflight fails is taken out of the cluster.
"""
from __future__ import annotations

import gzip
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from . import transfer
from .dask_task import CourseBundle, WorkerUnfit, grade_submission
from .grading_worker import load_grading_config
from .options import BatchOptions, Finish
from .outcome import StudentOutcome

__all__ = ["DaskPool", "make_bundle", "grade_on_cluster"]

#: Seconds to wait for a first worker once the scheduler answers (how long to wait for the
#: scheduler itself is Dask's own setting, ``distributed.comm.timeouts.connect``).
WORKER_WAIT_S = 120.0


class DaskPool:
    """The workers of the Dask scheduler ``opts.scheduler``."""

    def __init__(self, opts: BatchOptions):
        self.opts = opts

    def grade(self, todo: list[str], submissions: dict[str, str], finish: Finish) -> None:
        grade_on_cluster(self.opts, todo, submissions, finish)


def make_bundle(opts: BatchOptions, course_id: str, db_url: str) -> CourseBundle:
    """The course as a worker needs it: its config, the assignment's source and definitions."""
    import io
    import tarfile

    root = Path(opts.course_root)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        config = root / "nbgrader_config.py"
        if config.is_file():
            tar.add(str(config), arcname="nbgrader_config.py")
        tar.add(str(root / "source" / opts.assignment), arcname=f"source/{opts.assignment}")
    with tempfile.TemporaryDirectory(prefix="ptxlab-template-") as tmp:
        template = transfer.template_gradebook(db_url, course_id, opts.assignment,
                                               Path(tmp) / "gradebook.db")
        gradebook = gzip.compress(template.read_bytes(), compresslevel=6)
    grading_config = Path(opts.grading_config).read_text() if opts.grading_config else None
    return CourseBundle(course_id=course_id, assignment=opts.assignment,
                        course_files=buffer.getvalue(), gradebook=gradebook,
                        grading_config=grading_config,
                        submission_timeout_s=opts.submission_timeout_s, preflight=opts.preflight)


def grade_on_cluster(opts: BatchOptions, todo: list[str], submissions: dict[str, str],
                     finish: Callable[[StudentOutcome, int], None]) -> None:
    """Grade ``todo`` on the workers of the Dask scheduler ``opts.scheduler``."""
    from distributed import Client, wait

    cfg = load_grading_config(Path(opts.course_root), opts.grading_config)
    course_id = cfg.CourseDirectory.get("course_id", "default_course")
    db_url = cfg.CourseDirectory.db_url
    root = Path(opts.course_root)
    log = open(opts.out_dir / "workers.log", "a")

    client = Client(opts.scheduler)
    futures: dict = {}           # future -> student
    try:
        _wait_for_a_worker(client, opts.scheduler)
        # Sent with every task (a few hundred kB; each worker unpacks it once): no copy of it
        # can be lost with a worker.
        bundle = make_bundle(opts, course_id, db_url)
        extensions = transfer.submission_extensions(db_url, course_id, opts.assignment)
        unfit: dict[str, str] = {}
        pending = list(todo)

        def submit_next(threads: int) -> None:
            while pending and len(futures) < max(2, 2 * threads):
                student = pending.pop(0)
                packed = transfer.pack_folder(root / "submitted" / student / opts.assignment)
                future = client.submit(
                    grade_submission, bundle, student, packed, submissions.get(student, ""),
                    extensions.get(student),
                    key=f"ptxlab-grade-{opts.assignment}-{student}-{uuid.uuid4().hex[:8]}",
                    pure=False)
                futures[future] = student

        idle_since = None
        while pending or futures:
            threads = sum(client.nthreads().values())    # one question to the scheduler a round
            submit_next(threads)
            try:
                done = wait(list(futures), timeout=5, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                done = set()
            for future in done:
                student = futures.pop(future)
                outcome = _receive(future, student, opts, course_id, db_url, submissions, log)
                if isinstance(outcome, WorkerUnfit):
                    _retire(client, outcome, unfit, log)
                    pending.insert(0, student)
                else:
                    finish(outcome, min(len(futures), threads))
            if threads:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > WORKER_WAIT_S:
                # No worker left (every one unfit, or gone): what is left is not graded, and
                # the next run grades it.
                why = "no grading worker was left to grade it" + (
                    ": " + "; ".join(f"{w}: {p}" for w, p in unfit.items()) if unfit else "")
                for future, student in list(futures.items()) + [(None, s) for s in pending]:
                    if future is not None:
                        future.cancel()
                    finish(StudentOutcome.not_graded(student, why,
                                                     submitted_at=submissions.get(student, "")), 0)
                futures.clear()
                pending.clear()
    except KeyboardInterrupt:
        for future in futures:
            future.cancel()
        raise
    finally:
        log.close()
        client.close()


def _wait_for_a_worker(client, scheduler: str) -> None:
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except TimeoutError:
        raise OSError(f"no worker joined within {WORKER_WAIT_S:g} s (start them with "
                      f"'dask worker {scheduler} --nthreads 1')") from None


def _retire(client, unfit: WorkerUnfit, known: dict[str, str], log) -> None:
    """Take a worker that cannot grade out of the cluster, and say so once."""
    if unfit.address in known:
        return
    known[unfit.address] = unfit.problem
    print(f"{unfit}: it is taken out of the cluster, its students go to the other workers",
          file=sys.stderr)
    log.write(f"{time.strftime('%F %T')} {unfit}; retired\n")
    log.flush()
    try:
        client.retire_workers([unfit.address], close_workers=True)
    except Exception as exc:   # already gone
        log.write(f"{time.strftime('%F %T')} retiring {unfit.address}: {exc}\n")


def _receive(future, student: str, opts: BatchOptions, course_id: str, db_url: str,
             submissions: dict[str, str], log) -> StudentOutcome | WorkerUnfit:
    """One finished task: its outcome, written where the head keeps it, or the worker that
    could not grade it."""
    from distributed.client import FutureCancelledError

    stamp = submissions.get(student, "")
    try:
        result = future.result()
    except WorkerUnfit as exc:
        return exc
    except FutureCancelledError:
        return StudentOutcome.not_graded(student, "its grading task was cancelled",
                                         submitted_at=stamp)
    except Exception as exc:        # the machine's fault: never a 0, the next run retries
        name = type(exc).__name__
        why = ("the grading workers died under it too often" if name == "KilledWorker"
               else f"the grading worker failed: {name}: {exc}")
        log.write(f"{time.strftime('%F %T')} {student}: {why}\n")
        log.flush()
        return StudentOutcome.not_graded(student, why, submitted_at=stamp)
    outcome = StudentOutcome.from_json(result["outcome"])
    root = Path(opts.course_root)
    if outcome.counted:
        transfer.import_grades(db_url, course_id, opts.assignment, student, result["grades"])
        if result.get("autograded") is not None:
            transfer.unpack_folder(result["autograded"],
                                   root / "autograded" / student / opts.assignment)
    logs = opts.out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{student}.log").write_text(result.get("log", ""))
    log.write(f"{time.strftime('%F %T')} {student}: {outcome.status} on {result.get('worker')}\n")
    log.flush()
    return outcome
