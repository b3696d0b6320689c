"""What a Dask worker runs to grade one submission of a course whose gradebook lives on the head.

The head (:mod:`ptxlab.grading.dask_pool`) sends a :class:`CourseBundle` once (the course's
``nbgrader_config.py``, the assignment's ``source/`` folder, a gradebook with the assignment's
definitions and no student) and, per task, one student's submitted folder. This worker unpacks
the course into a private folder, runs its own preflight, and grades with the same worker
processes, sandbox, limits and retries as ``ptxlab grade`` on one machine. It returns data
only: the student's outcome, the grades to write into the head's gradebook, the graded folder
and the log. It keeps nothing of a student after the task.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import transfer, worker_handle
from .outcome import StudentOutcome

__all__ = ["CourseBundle", "WorkerUnfit", "grade_submission"]


@dataclass(frozen=True)
class CourseBundle:
    """Everything a worker needs of a course to grade one assignment (the head builds it)."""

    course_id: str
    assignment: str
    course_files: bytes           # nbgrader_config.py and source/<assignment>/, packed
    gradebook: bytes              # SQLite file, gzipped: the assignment's definitions only
    grading_config: str | None    # the head's --grading-config text (None: the worker's own)
    submission_timeout_s: float
    preflight: bool

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.course_id, self.assignment, self.grading_config or ""):
            h.update(part.encode() + b"\0")
        h.update(self.course_files)
        h.update(self.gradebook)
        return h.hexdigest()[:16]


class WorkerUnfit(RuntimeError):
    """This worker cannot grade (its preflight failed): the head grades elsewhere."""

    def __init__(self, address: str, problem: str):
        super().__init__(address, problem)
        self.address, self.problem = address, problem

    def __str__(self) -> str:
        return f"the grading worker {self.address} cannot grade: {self.problem}"


def worker_address() -> str:
    """This Dask worker's address (the host name outside a Dask worker)."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return socket.gethostname()


class _LocalCourse:
    """The bundle unpacked on this machine, and the worker processes grading in it."""

    def __init__(self, bundle: CourseBundle):
        self.bundle = bundle
        worker_handle.remove_stale_scratch()
        self.root = Path(tempfile.gettempdir()) / (
            f"{worker_handle.SCRATCH_PREFIX}{os.getpid()}-course-{bundle.digest}")
        transfer.unpack_folder(bundle.course_files, self.root)
        self.root.chmod(0o700)
        self.gradebook = self.root / "gradebook.db"
        self.gradebook.write_bytes(gzip.decompress(bundle.gradebook))
        self.db_url = f"sqlite:///{self.gradebook}?timeout=120"
        self.grading_config: Path | None = None
        if bundle.grading_config is not None:
            self.grading_config = self.root / ".grading_config.py"
            self.grading_config.write_text(bundle.grading_config)
        self.out_dir = self.root / "grading" / bundle.assignment
        (self.out_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._idle: list[worker_handle.WorkerProcess] = []
        self._lock = threading.Lock()
        self._started = 0
        self._idle.append(self._take())      # it imports nbgrader while the preflight runs
        self.problem: str | None = None
        if bundle.preflight:
            from .preflight import run_preflight

            check = run_preflight(self.root, self.grading_config,
                                  assignment=bundle.assignment)
            if not check.ok:
                self.problem = check.problem
                for w in self._idle:
                    w.kill()
                self._idle.clear()

    def _take(self) -> worker_handle.WorkerProcess:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._started += 1
            index = self._started
        command = worker_handle.worker_command(self.root, self.bundle.assignment,
                                                self.grading_config, self.db_url,
                                                self.bundle.submission_timeout_s)
        log = open(self.out_dir / "workers.log", "a")
        try:
            return worker_handle.WorkerProcess(command, index, log)
        finally:
            log.close()             # the child keeps its own copy of the descriptor

    def _give_back(self, w: worker_handle.WorkerProcess) -> None:
        with self._lock:
            self._idle.append(w)

    def forget(self, student: str) -> None:
        """Nothing of an earlier grading of ``student`` may leak into this one."""
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.db_url, self.bundle.course_id) as gb:
            try:
                gb.remove_submission(self.bundle.assignment, student)
            except MissingEntry:
                pass
        for folder in ("submitted", "autograded"):
            shutil.rmtree(self.root / folder / student, ignore_errors=True)

    def grade(self, student: str, submitted_at: str) -> StudentOutcome:
        """One student, with the rules of the batch on one machine: a worker that dies is
        replaced and the student tried once more; a worker still grading well past the
        submission limit (which it enforces on the notebook) is stopped, and the student gets
        a timeout."""
        deaths = 0
        limit = self.bundle.submission_timeout_s
        while True:
            w = self._take()
            w.send(student)
            got = w.wait_outcome(worker_handle.watchdog_s(limit))
            if isinstance(got, StudentOutcome):
                self._give_back(w)
                return got
            took = time.monotonic() - w.started
            exit_status = w.proc.poll()
            w.kill()
            if got == "timeout":
                return worker_handle.record_lost_submission(
                    self.root, self.bundle.assignment, self.grading_config, student, "timeout",
                    worker_handle.timeout_reason(limit), took, submitted_at, self.db_url)
            deaths += 1
            if deaths > worker_handle.WORKER_DEATH_RETRIES:
                return worker_handle.death_outcome(student, deaths, exit_status, took,
                                                    submitted_at)


_courses: dict[str, _LocalCourse] = {}
_courses_lock = threading.Lock()


def _course(bundle: CourseBundle) -> _LocalCourse:
    with _courses_lock:
        course = _courses.get(bundle.digest)
        if course is None:
            course = _courses[bundle.digest] = _LocalCourse(bundle)
        return course


def grade_submission(bundle: CourseBundle, student: str, submission: bytes, submitted_at: str,
                     extension_s: float | None) -> dict[str, Any]:
    """Grade one student's packed submission; return the outcome and what the head writes.

    Raises :class:`WorkerUnfit` when this worker cannot grade at all.
    """
    course = _course(bundle)
    if course.problem is not None:
        raise WorkerUnfit(worker_address(), course.problem)
    course.forget(student)
    transfer.unpack_folder(submission, course.root / "submitted" / student / bundle.assignment,
                           keep_links=True)
    if extension_s is not None:
        from datetime import timedelta

        from nbgrader.api import Gradebook

        with Gradebook(course.db_url, bundle.course_id) as gb:
            gb.update_or_create_student(student)
            gb.update_or_create_submission(bundle.assignment, student,
                                           extension=timedelta(seconds=extension_s))
    outcome = course.grade(student, submitted_at)
    result: dict[str, Any] = {"outcome": outcome.to_json(), "worker": worker_address()}
    log = course.out_dir / "logs" / f"{student}.log"
    result["log"] = log.read_text(errors="replace") if log.exists() else ""
    if outcome.counted:
        result["grades"] = transfer.export_grades(course.db_url, bundle.course_id,
                                                  bundle.assignment, student)
        graded = course.root / "autograded" / student / bundle.assignment
        result["autograded"] = transfer.pack_folder(graded) if graded.is_dir() else None
    course.forget(student)
    log.unlink(missing_ok=True)
    return result
