"""One grading worker process (:mod:`ptxlab.grading.grading_worker`) seen from the process that drives it.

The batch on one machine (:mod:`ptxlab.grading.batch`) drives several at once; a Dask worker
(:mod:`ptxlab.grading.dask_task`) drives one per task slot. Either way a worker gets a
scratch folder of its own, is killed with everything below it when a submission runs past its
limit, and is replaced when it dies: the same rules wherever the grading runs.
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
from pathlib import Path
from typing import TextIO

from ..run import sources
from .disk_share import unmount_scratch
from .kernel_boot import _mount_points
from .launch_service_pool import WORKERS_ENV
from .outcome import StudentOutcome

__all__ = ["WorkerProcess", "worker_command", "remove_stale_scratch", "record_lost_submission",
           "death_outcome", "timeout_reason", "watchdog_s", "SCRATCH_PREFIX",
           "WORKER_DEATH_RETRIES", "GRADER_ALLOWANCE_S"]

#: Each worker's temporary files (its kernels' private folders, its launch service's socket)
#: live in a folder of its own, ``ptxlab-grading-<driver pid>-<worker>-<n>``, removed with the
#: worker: a killed worker cleans nothing up itself.
SCRATCH_PREFIX = "ptxlab-grading-"

#: How many times a submission is handed to a fresh worker after its worker died under it.
WORKER_DEATH_RETRIES = 1

#: Seconds a worker has, past the submission limit, for the grader's own steps (judging the
#: answers read before the limit, saving the grades) before it is stopped from outside.
GRADER_ALLOWANCE_S = 600.0


def worker_command(course_root: Path, assignment: str, grading_config: Path | None = None,
                   db_url: str | None = None,
                   submission_timeout_s: float | None = None) -> list[str]:
    """The command line of one grading worker (``submission_timeout_s``: what one notebook's
    cells may take together; the worker stops the notebook there and grades what ran)."""
    cmd = [sys.executable, "-m", "ptxlab.grading.grading_worker", str(Path(course_root).resolve()),
           assignment]
    if grading_config:
        cmd += ["--grading-config", str(grading_config)]
    if db_url:
        cmd += ["--db-url", db_url]
    if submission_timeout_s:
        cmd += ["--submission-timeout", f"{submission_timeout_s:g}"]
    return cmd


def watchdog_s(submission_timeout_s: float) -> float:
    """When a worker still grading one submission is stopped from outside: the submission
    limit (which the worker enforces on the notebook itself) and the grader's own steps after
    it (the judge's launches, each under its own limit, and nbgrader's saving)."""
    return submission_timeout_s + GRADER_ALLOWANCE_S


def mounts_under(folder: Path) -> list[Path]:
    """Mount points inside ``folder`` (deepest first), from this process's mount table."""
    root = str(folder.resolve()) + "/"
    return sorted((Path(p) for p in _mount_points() if p.startswith(root)),
                  key=lambda p: len(p.parts), reverse=True)


def remove_stale_scratch() -> None:
    """Scratch folders of drivers that are gone (killed, or the machine restarted)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = folder.name[len(SCRATCH_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            for mounted in mounts_under(folder):     # a killed worker's sized scratch areas
                unmount_scratch(mounted)
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:   # another user's live batch
            pass


class WorkerProcess:
    """One worker process and the student it is grading."""

    _started = 0

    def __init__(self, command: list[str], index: int, log: TextIO | int | None,
                 pool_size: int = 1):
        env = dict(os.environ)
        # the workers of this machine divide its GPU's memory among their launch services
        env[WORKERS_ENV] = str(max(1, pool_size))
        WorkerProcess._started += 1
        self.scratch = Path(tempfile.gettempdir()) / (
            f"{SCRATCH_PREFIX}{os.getpid()}-{index}-{WorkerProcess._started}")
        self.scratch.mkdir(mode=0o700)
        env["TMPDIR"] = str(self.scratch)
        package_root = str(sources.PROJECT_ROOT)
        env["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.index = index
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=env, text=True, bufsize=1,
                                     start_new_session=True)
        self.student: str | None = None
        self.started = 0.0

    def send(self, student: str) -> None:
        self.student, self.started = student, time.monotonic()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"student": student}) + "\n")
        self.proc.stdin.flush()

    def read_message(self) -> dict | None:
        """The worker's next line as data; ``None`` when it died (its output ended)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def wait_outcome(self, timeout_s: float) -> StudentOutcome | None | str:
        """Block until the student sent by :meth:`send` is graded: its outcome, ``None`` if the
        worker died under it, or ``"timeout"`` past ``timeout_s`` (the worker still runs)."""
        assert self.proc.stdout is not None
        deadline = self.started + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                msg = self.read_message()
                if msg is None:
                    return None
                if not msg.get("ready"):
                    self.student = None
                    return StudentOutcome.from_json(msg)

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
            for mounted in mounts_under(self.scratch):   # a killed kernel's sized scratch area
                unmount_scratch(mounted)
            shutil.rmtree(self.scratch, ignore_errors=True)
            if not self.scratch.exists():
                return
            time.sleep(0.1)


def record_lost_submission(course_root: Path, assignment: str, grading_config: Path | None,
                           student: str, status: str, reason: str, duration: float,
                           submitted_at: str, db_url: str | None = None) -> StudentOutcome:
    """A submission whose worker was killed past its limit: zeros in the gradebook, and why."""
    from nbgrader.api import Gradebook

    from .outcome import SubmissionVerdicts, read_outcome, record_failure
    from .grading_worker import load_grading_config

    cfg = load_grading_config(Path(course_root), grading_config)
    course_id = cfg.CourseDirectory.get("course_id", "default_course")
    outcome = StudentOutcome(student=student, status=status, reason=reason,
                             duration_s=round(duration, 3), submitted_at=submitted_at)
    with Gradebook(db_url or cfg.CourseDirectory.db_url, course_id) as gb:
        record_failure(gb, assignment, student)
        # no verdicts: the judge that could have written them (and signed them for its own
        # process) was killed with its worker
        outcome.score, outcome.max_score, outcome.checks = read_outcome(
            gb, Path(course_root), assignment, student, verdicts=SubmissionVerdicts())
    return outcome


def death_outcome(student: str, deaths: int, exit_status: int | None, took_s: float,
                  submitted_at: str) -> StudentOutcome:
    """A student whose grading process died under it too often: not graded, never a 0."""
    return StudentOutcome.not_graded(
        student, f"the grading process died {deaths} times under it (last exit status "
                 f"{exit_status})", duration_s=round(took_s, 3), submitted_at=submitted_at)


def timeout_reason(limit_s: float) -> str:
    """The row of a submission whose worker was stopped from outside (``limit_s``: the
    submission limit)."""
    return (f"grading this submission took longer than {watchdog_s(limit_s):g} s (the "
            f"submission limit of {limit_s:g} s, and {GRADER_ALLOWANCE_S:g} s for the grader's "
            "own steps after it) and was stopped")
