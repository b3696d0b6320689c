"""A failure of the machine is never a student's 0.

A notebook kernel that did not start, a locked gradebook or a grading worker that died is
retried; when it still fails, the student is listed "not graded (infrastructure)" with no score
written to the gradebook, and the next ``ptxlab grade`` run grades them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402

from ptxlab.grading import batch, local_pool, options, report, grading_worker as worker  # noqa: E402
from ptxlab.grading.outcome import INFRASTRUCTURE, StudentOutcome  # noqa: E402


@pytest.mark.parametrize("log, cause", [
    ("RuntimeError: Kernel died before replying to kernel_info", "did not start"),
    ("RuntimeError: Kernel didn't respond in 60 seconds", "did not start in time"),
    ("sqlite3.OperationalError: database is locked", "gradebook was locked"),
    ("OSError: [Errno 28] No space left on device", "disk was full"),
])
def test_machine_failures_are_recognised(log, cause):
    assert cause in worker.infrastructure_cause("[ERROR] ...\n" + log)


@pytest.mark.parametrize("log", [
    "nbgrader.preprocessors.checkcellmetadata: Checksum for grade cell receive_tests has changed!",
    "nbformat.reader.NotJSONError: Notebook does not appear to be JSON",
    "DeadKernelError: Kernel died",                # during a cell: the learner's code
    "CellTimeoutError: A cell timed out while it was being executed",
])
def test_a_submissions_own_faults_are_not_the_machines(log):
    assert worker.infrastructure_cause(log) is None


@pytest.fixture
def course_with_alice(tmp_path, monkeypatch):
    """A released ps1 and one collected submission (the release itself), graded without the
    sandbox so the test needs no bwrap."""
    pytest.importorskip("nbgrader")
    monkeypatch.setenv("PTXLAB_SANDBOX", "none")
    # Graded in this process: no spare kernel may outlive the test.
    monkeypatch.setenv("PTXLAB_PRESTART_KERNELS", "0")
    root = fixture_course.make_course(tmp_path / "course")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root,
                                  env=fixture_course.grading_env(PTXLAB_SANDBOX="none"))
    assert gen.returncode == 0, gen.stderr[-2000:]
    sub = root / "submitted" / "alice" / "ps1"
    sub.mkdir(parents=True)
    for f in (root / "release" / "ps1").iterdir():
        (sub / f.name).write_bytes(f.read_bytes())
    (sub / "timestamp.txt").write_text("2026-11-23 10:00:00")
    yield root
    from ptxlab.grading.execute import shutdown_spare_kernels
    shutdown_spare_kernels()


def test_a_kernel_that_did_not_start_is_retried(course_with_alice, monkeypatch):
    monkeypatch.setattr(worker, "INFRA_RETRY_WAIT_S", (0.0, 0.0))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    real, calls = grader.api.autograde, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return {"success": False, "log": "[ERROR] RuntimeError: Kernel died before replying "
                                             "to kernel_info", "error": ""}
        return real(*args, **kwargs)

    monkeypatch.setattr(grader.api, "autograde", flaky)
    outcome = grader.grade("alice")
    assert len(calls) == 2 and outcome.status == "graded", outcome


def test_a_machine_that_keeps_failing_writes_no_zero(course_with_alice, monkeypatch):
    monkeypatch.setattr(worker, "INFRA_RETRY_WAIT_S", (0.0, 0.0))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    monkeypatch.setattr(grader.api, "autograde", lambda *a, **k: {
        "success": False, "log": "sqlite3.OperationalError: database is locked", "error": ""})

    def no_zeros(*a, **k):
        raise AssertionError("zeros were written for a submission the machine failed to grade")

    monkeypatch.setattr(worker, "record_failure", no_zeros)
    outcome = grader.grade("alice")
    assert outcome.status == INFRASTRUCTURE and not outcome.counted
    assert "not graded (infrastructure): the gradebook was locked, 3 attempts" in outcome.reason


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
