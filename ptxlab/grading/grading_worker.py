"""A long-lived grading worker: imports nbgrader once, then autogrades one student per request.

``python -m ptxlab.grading.grading_worker COURSE_ROOT ASSIGNMENT [--grading-config FILE]`` reads
JSON requests from stdin, one per line (``{"student": "alice"}``), and answers each with one JSON
line on stdout: a :class:`~ptxlab.grading.outcome.StudentOutcome`. nbgrader's log of each
student goes to ``<course>/grading/<assignment>/logs/<student>.log``.

Starting nbgrader costs seconds; a worker pays it once for many submissions. The learner's code
never runs here: nbgrader runs it in a sandboxed notebook kernel (see
:mod:`ptxlab.grading.execute`), so a worker survives every submission it grades.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path

from ..run import sources
from .outcome import (StudentOutcome, SubmissionVerdicts, read_outcome, record_failure,
                      record_flags, short_error)
from .submission_files import read_timestamp, submission_problems
from . import gradebook_engines, step_times
from .machine_faults import FaultRecorder, machine_fault

__all__ = ["load_grading_config", "SubmissionGrader", "default_grading_config", "main"]


def default_grading_config() -> Path | None:
    """``autograder/nbgrader_config.py`` of this checkout, or ``$PTXLAB_GRADING_CONFIG``."""
    env = os.environ.get("PTXLAB_GRADING_CONFIG")
    if env:
        return Path(env)
    candidate = sources.PROJECT_ROOT / "autograder" / "nbgrader_config.py"
    return candidate if candidate.exists() else None


def load_grading_config(course_root: Path, grading_config: Path | None = None,
                        db_url: str | None = None):
    """nbgrader configuration: the grading settings, then the course's own file on top
    (``db_url``, when given, names the gradebook whatever the files say)."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    course_root = Path(course_root).resolve()
    cfg = Config()
    files = [grading_config or default_grading_config(), course_root / "nbgrader_config.py"]
    for path in files:
        if path is not None and Path(path).exists():
            path = Path(path).resolve()
            cfg.merge(PyFileConfigLoader(path.name, path=str(path.parent)).load_config())
    cfg.CourseDirectory.root = str(course_root)
    if db_url:
        cfg.CourseDirectory.db_url = db_url
    elif "db_url" not in cfg.CourseDirectory:
        # Workers share one SQLite gradebook: wait for a busy lock instead of failing.
        cfg.CourseDirectory.db_url = f"sqlite:///{course_root / 'gradebook.db'}?timeout=120"
    return cfg


class SubmissionGrader:
    """Autogrades single submissions of one assignment through nbgrader's own API."""

    def __init__(self, course_root: Path, assignment: str, grading_config: Path | None = None,
                 db_url: str | None = None, submission_timeout_s: float | None = None):
        from nbgrader.apps.api import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        gradebook_engines.share_engines()       # nbgrader's SQL compiled once, not per student
        self.course_root = Path(course_root).resolve()
        self.assignment = assignment
        self.config = load_grading_config(self.course_root, grading_config, db_url)
        if submission_timeout_s:
            # the notebook's run stops there itself, and what ran before it is graded
            self.config.SandboxedExecute.submission_timeout_s = float(submission_timeout_s)
        self.coursedir = CourseDirectory(config=self.config)
        self.api = NbGraderAPI(coursedir=self.coursedir, config=self.config)
        self.log_dir = self.course_root / "grading" / assignment / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def _submitted_dir(self, student: str) -> Path:
        return Path(self.coursedir.format_path(self.coursedir.submitted_directory, student,
                                               self.assignment))

    def submitted_at(self, student: str) -> str:
        """The submission's ``timestamp.txt`` as written (the ledger compares it verbatim)."""
        return read_timestamp(self._submitted_dir(student))[0]

    def _copy_notes(self, student: str) -> list[str]:
        """The row's words for cells the student's notebooks hold more than once."""
        import nbformat

        from .duplicate_cells import copy_notes

        notes = []
        for path in sorted(self._submitted_dir(student).glob("*.ipynb")):
            try:
                notes += copy_notes(nbformat.read(str(path), as_version=4))
            except Exception:        # an unreadable notebook says so in its own words
                continue
        return notes

    def _unreadable_notebooks(self, student: str) -> list[str]:
        import nbformat

        problems = []
        for path in sorted(self._submitted_dir(student).glob("*.ipynb")):
            try:
                nb = nbformat.read(str(path), as_version=4)
                nbformat.validate(nb)
            except Exception as exc:
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                problems.append(f"{path.name} is not a valid notebook ({text[:200]})")
        return problems

    def _autograde(self, student: str) -> tuple[dict, FaultRecorder]:
        """nbgrader's autograde of one student (as ``NbGraderAPI.autograde`` runs it), with the
        exceptions it raised kept beside its log: the machine's failures are told from those."""
        from nbgrader.converters import Autograde
        from nbgrader.utils import capture_log, temp_attrs

        faults = FaultRecorder()
        with temp_attrs(self.coursedir, assignment_id=self.assignment, student_id=student):
            app = Autograde(coursedir=self.coursedir, parent=self.api)
            app.force, app.create_student = True, True
            start = app.start

            def start_and_keep_what_escapes():
                try:
                    return start()
                except BaseException as exc:     # capture_log formats it as text: keep it too
                    faults.raised.append(exc)
                    raise

            app.start = start_and_keep_what_escapes
            app.log.addHandler(faults)
            try:
                return capture_log(app), faults
            finally:
                app.log.removeHandler(faults)

    def grade(self, student: str) -> StudentOutcome:
        from nbgrader.api import Gradebook

        t0 = time.monotonic()
        refused = submission_problems(self._submitted_dir(student))
        if refused:                 # its files are not followed, its bad timestamp not parsed
            return self._refused(student, refused, t0)
        unreadable = self._unreadable_notebooks(student)
        for attempt in range(1 + len(INFRA_RETRY_WAIT_S)):
            step_times.start_submission()
            started = time.monotonic()
            result, faults = self._autograde(student)
            autograde_s = time.monotonic() - started
            log_text = (result.get("log") or "") + ("\n" + result["error"] if result.get("error") else "")
            cause = None if result["success"] else faults.fault()
            verdicts = self._verdicts(student) if result["success"] else None
            cause = cause or (verdicts.fault() if verdicts is not None else None)
            if cause is None:
                break
            print(f"{student}: the machine failed to grade it ({cause}); attempt {attempt + 1}",
                  file=sys.stderr)
            if attempt < len(INFRA_RETRY_WAIT_S):
                time.sleep(INFRA_RETRY_WAIT_S[attempt])
        (self.log_dir / f"{student}.log").write_text(log_text)
        if cause is not None:      # never a 0: no zeros in the gradebook, and the next run retries
            return StudentOutcome.not_graded(
                student, f"{cause}, {1 + len(INFRA_RETRY_WAIT_S)} attempts",
                submitted_at=self.submitted_at(student),
                duration_s=round(time.monotonic() - t0, 3))
        outcome = StudentOutcome(student=student, status="graded" if result["success"] else "failed",
                                 submitted_at=self.submitted_at(student))
        ours = step_times.taken()
        # nbgrader's own part of autograde: its database, its copies, its other steps
        outcome.steps_s = {**ours, "nbgrader": round(max(0.0, autograde_s - sum(ours.values())), 3)}
        read_started = time.monotonic()
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            if not result["success"]:
                record_failure(gb, self.assignment, student)
            else:
                record_flags(gb, self.course_root, self.assignment, student,
                             autograded_dir=self.coursedir.autograded_directory,
                             verdicts=verdicts)
            outcome.score, outcome.max_score, outcome.checks = read_outcome(
                gb, self.course_root, self.assignment, student,
                autograded_dir=self.coursedir.autograded_directory, verdicts=verdicts)
        if verdicts is not None:          # graded: the verdicts were read above
            outcome.reason = self._graded_reason(outcome, verdicts)
        else:
            outcome.reason = "; ".join(unreadable) or _nbgrader_error(log_text)
        copies = self._copy_notes(student)
        if copies:
            outcome.reason += " (note: " + "; ".join(copies) + ")"
        outcome.steps_s["scores read"] = round(time.monotonic() - read_started, 3)
        outcome.duration_s = round(time.monotonic() - t0, 3)
        return outcome

    def _verdicts(self, student: str) -> SubmissionVerdicts:
        """The judge's verdict files of ``student``'s autograded notebooks, read once."""
        return SubmissionVerdicts.read(self.course_root, self.assignment, student,
                                       self.coursedir.autograded_directory)

    @staticmethod
    def _graded_reason(outcome: StudentOutcome, verdicts: SubmissionVerdicts) -> str:
        """The row of a graded submission: each lost check and why, then what explains them
        (a run stopped at the submission limit, the learner's own cells that failed)."""
        lost = [c for c in outcome.checks if not c.passed]
        reason = ("; ".join(f"{c.grade_id}: {c.reason}" for c in lost) if lost
                  else "all tests passed")
        notes = verdicts.other_errors()
        if notes:
            reason += " (also failed, without points of their own: " + "; ".join(notes) + ")"
        return reason + "".join(f" ({stop})" for stop in verdicts.run_notes())

    def _refused(self, student: str, problems: list[str], t0: float) -> StudentOutcome:
        """A submission not handed to nbgrader at all: 0 in the gradebook, flagged for a look."""
        from nbgrader.api import Gradebook

        (self.log_dir / f"{student}.log").write_text("not graded: " + "; ".join(problems) + "\n")
        outcome = StudentOutcome(student=student, status="failed",
                                 submitted_at=self.submitted_at(student), reason="; ".join(problems))
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            gb.update_or_create_student(student)       # as autograde --create would
            record_failure(gb, self.assignment, student)
            # nothing was judged: an earlier run's autograded folder says nothing of this one
            outcome.score, outcome.max_score, outcome.checks = read_outcome(
                gb, self.course_root, self.assignment, student,
                autograded_dir=self.coursedir.autograded_directory,
                verdicts=SubmissionVerdicts())
        outcome.duration_s = round(time.monotonic() - t0, 3)
        return outcome


#: Seconds to wait before each new attempt at a submission the machine failed to grade.
INFRA_RETRY_WAIT_S = (2.0, 5.0)
#: What nbgrader raises on top of the real cause ("Please see the above traceback").
_WRAPPERS = ("NbGraderException",)


def _nbgrader_error(log_text: str) -> str:
    """The most telling line of a failed nbgrader run: the cause, not nbgrader's wrapper."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    # Every "Name: message" line, as (the name's last part, message, written unqualified).
    raised = []
    for line in lines:
        if ":" in line and not line.startswith(("File ", "[", "^", "~")):
            name, _, msg = line.partition(":")
            if name.replace(".", "").replace("_", "").isalnum():
                raised.append((name.split(".")[-1], msg, name[:1].isupper()))
    causes = [(name, msg) for name, msg, plain in raised if plain]
    # the last exception that is not the wrapper, written unqualified if there is one, else
    # qualified (``jsonschema.exceptions.ValidationError``)
    for name, msg in [*reversed(causes), *((n, m) for n, m, _ in reversed(raised))]:
        if name not in _WRAPPERS:
            return "nbgrader could not grade it: " + _cause_in_words(name, msg)
    last = causes[-1:] or [(name, msg) for name, msg, _ in raised[-1:]]
    if last:                                 # the exception at the end of a traceback
        return "nbgrader could not grade it: " + short_error(*last[0])
    errors = [l for l in lines if l.startswith("[ERROR]")]
    return ("nbgrader could not grade it: " + errors[0][8:200]) if errors else \
        "nbgrader could not grade it (see the log)"


def _cause_in_words(name: str, msg: str) -> str:
    """nbgrader's own errors in words a person can act on, the rest as they came."""
    m = re.search(r"Inconsistent checksums for cell (\S+)", msg)
    if m:
        return (f"the cell '{m.group(1)}' of the notebook was changed in a way the grader cannot "
                "restore (its type, metadata or id edited): fetch the assignment again and copy "
                "the answers into it")
    if "nbgrader metadata may be corrupted" in msg:
        return ("a cell's nbgrader metadata was edited so that the notebook no longer validates "
                "(a grade id, points or cell type changed): fetch the assignment again and copy "
                "the answers into it")
    return short_error(name, msg)


def skip_unused_imports() -> None:
    """Keep out of this process what nbgrader would import and never use here.

    ``jsonschema`` (under ``nbformat``) builds a parser for the ``iri`` string format from a
    grammar when ``rfc3987_syntax`` is installed -- about a second per process; the notebook
    schema has no such format, so the checker is not needed.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def _exit_with_parent() -> None:
    """Stop, with the kernels below, when the process that drives this worker is gone.

    A driver killed outright (a Dask worker lost with its machine's job, a head killed with
    SIGKILL) cannot stop its workers; a worker left behind would grade on for nobody.
    """
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                try:
                    if os.getpgid(0) == os.getpid():   # a group of its own: it and its kernels
                        os.killpg(0, signal.SIGKILL)
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    skip_unused_imports()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course_root", type=Path)
    parser.add_argument("assignment")
    parser.add_argument("--grading-config", type=Path, default=None)
    parser.add_argument("--db-url", default=None, help="the gradebook (default: the course's)")
    parser.add_argument("--submission-timeout", type=float, default=None, metavar="SECONDS",
                        help="what one notebook's cells may take together (default: no limit)")
    args = parser.parse_args(argv)
    _exit_with_parent()
    # Results go to the original stdout; everything else printed here or by the processes
    # started below (nbgrader, notebook kernels) goes to stderr.
    results = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    grader = SubmissionGrader(args.course_root, args.assignment, args.grading_config, args.db_url,
                              args.submission_timeout)
    results.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        student = request["student"]
        try:
            outcome = grader.grade(student)
        except Exception as exc:  # nbgrader itself failed (database, disk): report, go on
            text = traceback.format_exc()
            print(text, file=sys.stderr)
            cause = machine_fault(exc)
            if cause is not None:
                outcome = StudentOutcome.not_graded(student, cause)
            else:
                outcome = StudentOutcome(
                    student=student, status="failed",
                    reason=f"grading failed: {short_error(type(exc).__name__, str(exc))}")
        results.write(json.dumps(outcome.to_json()) + "\n")
    from .execute import shutdown_spare_kernels
    shutdown_spare_kernels()
    return 0


if __name__ == "__main__":
    sys.exit(main())
