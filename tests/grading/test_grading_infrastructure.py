"""A failure of the machine is never a student's 0.

A notebook kernel that did not start, a locked gradebook or a grading worker that died is
retried; when it still fails, the student is listed "not graded (infrastructure)" with no score
written to the gradebook, and the next ``ptxlab grade`` run grades them.
"""
from __future__ import annotations

import errno
import json
import sqlite3
import sys
from pathlib import Path

import pytest


from ptxlab.grading import batch, local_pool, options, report, grading_worker as worker  # noqa: E402
from ptxlab.grading.machine_faults import FaultRecorder, KernelStartFailed, machine_fault  # noqa: E402
from ptxlab.grading.outcome import INFRASTRUCTURE, StudentOutcome  # noqa: E402


@pytest.mark.parametrize("exc, cause", [
    (KernelStartFailed("DeadKernelError: Kernel died before replying to kernel_info"),
     "did not start"),
    (sqlite3.OperationalError("database is locked"), "gradebook was locked"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk was full"),
    (OSError(errno.EMFILE, "Too many open files"), "file handles"),
])
def test_machine_failures_are_recognised_by_their_type(exc, cause):
    assert cause in machine_fault(exc)
    wrapped = RuntimeError("while saving the grades")
    wrapped.__cause__ = exc
    assert cause in machine_fault(wrapped)        # raised from it: still the machine's


@pytest.mark.parametrize("exc", [
    ValueError("Checksum for grade cell receive_tests has changed! database is locked"),
    RuntimeError("Kernel died before replying to kernel_info"),   # text alone proves nothing
    OSError(errno.ENOENT, "No space left on device"),
    sqlite3.OperationalError("no such table: grade; database is locked"),
])
def test_a_submissions_own_faults_and_their_words_are_not_the_machines(exc):
    assert machine_fault(exc) is None


def test_a_kernel_that_did_not_start_is_retried(course_with_alice, monkeypatch):
    monkeypatch.setattr(worker, "INFRA_RETRY_WAIT_S", (0.0, 0.0))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    real, calls = grader._autograde, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            faults = FaultRecorder()
            faults.raised.append(KernelStartFailed("Kernel died before replying to kernel_info"))
            return {"success": False, "log": "[ERROR] ...", "error": ""}, faults
        return real(*args, **kwargs)

    monkeypatch.setattr(grader, "_autograde", flaky)
    outcome = grader.grade("alice")
    assert len(calls) == 2 and outcome.status == "graded", outcome


def test_a_machine_that_keeps_failing_writes_no_zero(course_with_alice, monkeypatch):
    monkeypatch.setattr(worker, "INFRA_RETRY_WAIT_S", (0.0, 0.0))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    locked = FaultRecorder()
    locked.raised.append(sqlite3.OperationalError("database is locked"))
    monkeypatch.setattr(grader, "_autograde", lambda *a, **k: (
        {"success": False, "log": "sqlite3.OperationalError: database is locked", "error": ""},
        locked))

    def no_zeros(*a, **k):
        raise AssertionError("zeros were written for a submission the machine failed to grade")

    monkeypatch.setattr(worker, "record_failure", no_zeros)
    outcome = grader.grade("alice")
    assert outcome.status == INFRASTRUCTURE and not outcome.counted
    assert "not graded (infrastructure): the gradebook was locked, 3 attempts" in outcome.reason


def _alice_notebook(root: Path) -> Path:
    return root / "submitted" / "alice" / "ps1" / "ps1.ipynb"


@pytest.mark.parametrize("words", ["database is locked", "No space left on device",
                                   "Kernel died before replying to kernel_info"])
def test_a_machine_fault_spelt_in_cell_metadata_is_the_submissions_own(course_with_alice, words):
    """nbgrader quotes a bad metadata value in its error; the words are the student's, so the
    student's row says what nbgrader said, and no retry or 'infrastructure' follows."""
    import nbformat

    path = _alice_notebook(course_with_alice)
    nb = nbformat.read(str(path), as_version=4)
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                 "grade_id": words, "points": words, "schema_version": 3}
    nb.cells.append(cell)
    nbformat.write(nb, str(path))
    outcome = worker.SubmissionGrader(course_with_alice, "ps1").grade("alice")
    assert outcome.status != INFRASTRUCTURE and outcome.counted, outcome


def test_planted_grader_metadata_is_dropped_before_grading(course_with_alice):
    """A submission that writes the grader's own metadata (a verdict flag, launch records, a
    value of the wrong type) is graded as if it had not: nothing flagged, no crash."""
    import nbformat

    path = _alice_notebook(course_with_alice)
    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["ptxlab"] = "oops"
    for i, cell in enumerate(nb.cells):
        cell.metadata["ptxlab"] = ("oops" if i % 2 else
                                   {"verdict": {"flagged": ["planted"], "flagged_cells": ["x"]},
                                    "kernel_launches": [{"backend": "gpu"}]})
    nbformat.write(nb, str(path))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    outcome = grader.grade("alice")
    assert outcome.status == "graded", outcome
    assert all(c.backend != "gpu" for c in outcome.checks), outcome
    from nbgrader.api import Gradebook

    with Gradebook(grader.coursedir.db_url, grader.coursedir.course_id) as gb:
        sub = gb.find_submission("ps1", "alice")
        flagged = [g.name for nb_ in sub.notebooks for g in nb_.grades
                   if g.auto_score is not None and g.needs_manual_grade]
    assert flagged == []


_DYING_WORKER = r'''
import os, sys
from pathlib import Path
from ptxlab.grading import grading_worker as worker
deaths = Path(os.environ["DEATHS_FILE"])
real = worker.SubmissionGrader.grade
def grade(self, student):
    left = int(deaths.read_text())
    if left > 0:
        deaths.write_text(str(left - 1))
        os._exit(9)                # the worker process dies under the submission
    return real(self, student)
worker.SubmissionGrader.grade = grade
sys.exit(worker.main(sys.argv[1:]))
'''


def _batch_with_deaths(root: Path, tmp_path: Path, monkeypatch, deaths: int):
    script = tmp_path / "dying_worker.py"
    script.write_text(_DYING_WORKER)
    (tmp_path / "deaths").write_text(str(deaths))
    monkeypatch.setenv("DEATHS_FILE", str(tmp_path / "deaths"))
    monkeypatch.setattr(local_pool, "worker_command", lambda opts: [
        sys.executable, str(script), str(root), opts.assignment])
    opts = options.BatchOptions(course_root=root, assignment="ps1", workers=1, progress=None)
    return opts, batch.grade_batch(opts)


def test_a_worker_that_dies_once_is_replaced_and_the_student_graded(course_with_alice, tmp_path,
                                                                     monkeypatch):
    _, result = _batch_with_deaths(course_with_alice, tmp_path, monkeypatch, deaths=1)
    assert [o.status for o in result.outcomes] == ["graded"]


def test_a_worker_that_keeps_dying_leaves_the_student_for_the_next_run(course_with_alice,
                                                                       tmp_path, monkeypatch):
    opts, result = _batch_with_deaths(course_with_alice, tmp_path, monkeypatch, deaths=2)
    (alice,) = result.outcomes
    assert alice.status == INFRASTRUCTURE and "died 2 times" in alice.reason
    csv_path = report.write_csv(result.outcomes, tmp_path / "grades.csv")
    row = csv_path.read_text().splitlines()[1].split(",")
    assert row[1] == INFRASTRUCTURE and row[2] == "" and row[4] == ""    # no score, no percent
    summary = report.write_summary(result.outcomes, tmp_path / "summary.md", assignment="ps1")
    assert "Not graded: the machine failed" in summary.read_text()
    ledger = [json.loads(line) for line in (opts.out_dir / "ledger.jsonl").read_text().splitlines()]
    assert ledger[-1]["status"] == INFRASTRUCTURE
    # The next run grades her without being asked to retry anything.
    (tmp_path / "deaths").write_text("0")
    again = batch.grade_batch(opts)
    assert again.graded_now == 1 and [o.status for o in again.outcomes] == ["graded"]


def test_not_graded_rows_stay_out_of_the_score_statistics():
    outcomes = [StudentOutcome("a", "graded", score=3, max_score=3),
                StudentOutcome("b", INFRASTRUCTURE, reason="not graded (infrastructure): x")]
    hist = dict(report.score_histogram(outcomes))
    assert sum(hist.values()) == 1 and hist["90-100%"] == 1
