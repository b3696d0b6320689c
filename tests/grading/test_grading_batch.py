"""``ptxlab grade`` as an instructor runs it: a progress bar, an interruption in the middle and a
rerun that loses nothing, a resubmission graded again, one run at a time per assignment, and
the CSV, summary and plot it writes (the report writers also on their own, without nbgrader).
"""
from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))
import cases as corpus  # noqa: E402
import course as fixture_course  # noqa: E402

from ptxlab.grading.batch import Ledger, Progress  # noqa: E402
from ptxlab.grading.outcome import CheckOutcome, StudentOutcome  # noqa: E402
from ptxlab.grading.report import (kernel_backend, most_common_failures, score_histogram,  # noqa: E402
                                   write_csv, write_plot, write_summary)

CASES = {c.name: c for c in corpus.CASES}
CLASS = [(f"st{i}", CASES["good_a" if i % 3 else "bad_wrong_formula"]) for i in range(6)]


def _outcome(student, score, reason="", backend="cpu", status="graded"):
    checks = [CheckOutcome("ps1", "test_a", 2.0 if score >= 2 else 0.0, 2.0,
                           "" if score >= 2 else reason, backend),
              CheckOutcome("ps1", "test_b", max(0.0, score - 2), 3.0,
                           "" if score >= 5 else "lane 8: expected 256, got 16", backend)]
    return StudentOutcome(student, status, float(score), 5.0,
                          reason or "all tests passed", 1.0, "t", checks)


def test_reports_from_outcomes(tmp_path):
    outcomes = [_outcome("a", 5), _outcome("b", 2), _outcome("c", 0, "NameError: x"),
                _outcome("d", 0, "nbgrader could not grade it", backend="", status="failed")]
    csv_path = write_csv(outcomes, tmp_path / "grades.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert [r["student"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[1]["failed_checks"] == "test_b" and rows[1]["percent"] == "40.0"
    assert rows[0]["kernel_backend"] == "cpu" and rows[3]["kernel_backend"] == ""
    assert dict(score_histogram(outcomes))["0-9%"] == 2
    top = most_common_failures(outcomes)
    assert top[0][0] == ("ps1", "test_b") and top[0][1] == 3
    assert top[0][2] == "lane 8: expected 256, got 16"
    plot = write_plot(outcomes, tmp_path / "scores.png", "ps1")
    summary = write_summary(outcomes, tmp_path / "summary.md", assignment="ps1", wall_s=3.0,
                            workers=2, plot=plot).read_text()
    assert "| ps1/test_b | 3 | lane 8: expected 256, got 16 |" in summary
    assert "CPU backend (PTX interpreter) for 3 students" in summary
    assert "| d | failed |" in summary
    if plot is not None:
        assert plot.read_bytes()[:4] == b"\x89PNG" and "![score distribution](scores.png)" in summary
    assert kernel_backend(_outcome("e", 5, backend="gpu")) == "gpu"


def test_progress_bar_on_a_terminal_and_in_a_log():
    class Tty(StringIO):
        def isatty(self):
            return True

    tty, log = Tty(), StringIO()
    for stream in (tty, log):
        bar = Progress(stream, 20)
        for i in range(20):
            bar.update(_outcome(f"s{i}", 5), running=2)
        bar.close()
    assert tty.getvalue().count("\r") == 20 and "[##############################] 20/20 100%" in tty.getvalue()
    lines = log.getvalue().splitlines()
    assert 2 <= len(lines) <= 21 and lines[-1].startswith("[##############################] 20/20")
    assert "last: s19 5/5" in lines[-1]


def test_ledger_ignores_a_line_cut_short(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.append(_outcome("a", 5))
    with open(ledger.path, "a") as fh:
        fh.write('{"student": "b", "sta')          # the machine died while writing
    assert list(ledger.load()) == ["a"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    pytest.importorskip("nbgrader")
    root = fixture_course.make_course(tmp_path_factory.mktemp("batch") / "course")
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="20")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, case in CLASS:
        corpus.write_submission(root, student, case)
    return root, env


def _grade_cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "ptxlab.cli", "grade", "ps1", "--workers", "1", *extra]


def test_interrupted_batch_resumes_without_losing_anything(course):
    root, env = course
    ledger_path = root / "grading" / "ps1" / "ledger.jsonl"
    started = time.time()
    proc = subprocess.Popen(_grade_cmd(), cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if ledger_path.exists() and len(ledger_path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"the batch ended before it could be interrupted: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)                 # Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "run the same command again" in err
    # Nothing of the interrupted batch left on disk: its workers' folders (their kernels'
    # copies of submissions) went with them.
    tmp = Path(tempfile.gettempdir())
    assert not list(tmp.glob(f"ptxlab-grading-{proc.pid}-*"))
    left = [p for pattern in ("ptxlab-kernel-*", "ptxlab-launch-*", "ptxlab-grading-*/*")
            for p in tmp.glob(pattern) if p.stat().st_mtime >= started]
    assert not left, left
    stale = tmp / "ptxlab-grading-999999999-0-1"     # of a head killed outright (no such pid)
    (stale / "ptxlab-kernel-x").mkdir(parents=True, exist_ok=True)
    (stale / "ptxlab-kernel-x" / "ps1.ipynb").write_text("a student's copy")
    first = Ledger(ledger_path).load()
    assert 2 <= len(first) < len(CLASS)
    # Progress went to stderr while it ran.
    assert "/6" in err and "running" in err

    again = subprocess.run(_grade_cmd("--workers", "2"), cwd=root, env=env, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not stale.exists(), "the next batch clears what a killed one left"
    assert f"graded {len(CLASS) - len(first)} now, {len(first)} already graded" in again.stdout
    done = Ledger(ledger_path).load()
    assert set(done) == {s for s, _ in CLASS}
    for o in done.values():                        # each row says where its time went
        assert {"kernel start", "notebook cells", "nbgrader", "scores read"} <= set(o.steps_s)
        assert 0 < sum(o.steps_s.values()) <= o.duration_s + 0.01, (o.steps_s, o.duration_s)
    for student in first:                          # nothing graded twice, nothing lost
        assert done[student] == first[student]
    lines = [json.loads(l)["student"] for l in ledger_path.read_text().splitlines()]
    assert len(lines) == len(set(lines)) == len(CLASS)
    rows = {r["student"]: r for r in csv.DictReader(open(root / "grading" / "ps1" / "grades.csv"))}
    assert set(rows) == {s for s, _ in CLASS}
    good = {float(rows[s]["score"]) for s, case in CLASS if case.name == "good_a"}
    bad = {float(rows[s]["score"]) for s, case in CLASS if case.name != "good_a"}
    assert len(good) == 1 and max(bad) < min(good), rows
    summary = (root / "grading" / "ps1" / "summary.md").read_text()
    assert "6 submissions: 6 graded" in summary and "Most common failing checks" in summary

    # Nothing changed: nothing to grade. A resubmission: only that student.
    same = subprocess.run(_grade_cmd(), cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert "graded 0 now, 6 already graded" in same.stdout, same.stdout + same.stderr
    corpus.write_submission(root, "st0", CASES["good_b"], timestamp="2026-11-21 09:00:00.000000 UTC")
    resub = subprocess.run(_grade_cmd(), cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert "graded 1 now, 5 already graded" in resub.stdout, resub.stdout + resub.stderr


def test_one_batch_at_a_time(course):
    root, env = course
    import fcntl
    lock_path = root / "grading" / "ps1" / ".lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)   # as a running batch holds it
        r = subprocess.run(_grade_cmd(), cwd=root, env=env, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 2 and "another 'ptxlab grade' is grading ps1" in r.stderr


def test_unknown_student_and_wrong_folder_are_clear(course, tmp_path):
    root, env = course
    r = subprocess.run(_grade_cmd("--student", "nobody"), cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "no collected submission of 'ps1' for: nobody" in r.stderr
    r = subprocess.run(_grade_cmd(), cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "does not look like an nbgrader course root" in r.stderr


def test_missing_sandbox_stops_before_grading(course):
    root, env = course
    r = subprocess.run(_grade_cmd("--force"), cwd=root, env={**env, "PTXLAB_BWRAP": "/nonexistent/bwrap"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs bubblewrap" in r.stderr and "graded" not in r.stdout
