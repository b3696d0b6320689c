"""A learner's progress: every check remembered in the workspace, shown per notebook, and a
solution revealed only after the last hint (and only where the course's source is)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ptxlab.teach import progress
from ptxlab.teach.exercises import ldmatrix



def _right(lane, reg, half):
    return reg, lane // 4, 2 * (lane % 4) + half


def _wrong(lane, reg, half):
    return reg, lane % 8, 2 * (lane % 4) + half


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A workspace as ``ptxlab open`` leaves it, the notebook's folder as the current one."""
    ws = tmp_path / "ws"
    (ws / ".ptxlab").mkdir(parents=True)
    (ws / ".ptxlab" / "course-digest").write_text("x")
    (ws / "02_ldmatrix").mkdir()
    monkeypatch.chdir(ws / "02_ldmatrix")
    monkeypatch.delenv(progress.PROGRESS_FILE_ENV, raising=False)
    exercise = ldmatrix.receive
    monkeypatch.setattr(exercise, "_hints_shown", 0)
    return ws


def _status(ws: Path) -> dict[str, str]:
    table = progress.notebook_progress(ws / ".ptxlab" / "progress.json")
    return {r.key: r.status for rows in table.values() for r in rows}


def test_checks_are_remembered_and_a_pass_stays_a_pass(workspace, capsys):
    ldmatrix.receive.check(_wrong)
    assert _status(workspace)["ldmatrix.receive"] == progress.ATTEMPTED
    ldmatrix.receive.check(_right)
    ldmatrix.receive.check(_wrong)                  # trying something else later
    status = _status(workspace)
    assert status["ldmatrix.receive"] == progress.PASSED
    assert status["ldmatrix.a_fragment"] == progress.NOT_STARTED
    solutions = sum(t.read_text().count("# %% solution id=")
                    for t in (Path(__file__).resolve().parents[2] / "course" / "text").glob("*.py"))
    assert len(status) == solutions                 # every exercise of the course, listed
    report = progress.text_report(workspace / ".ptxlab" / "progress.json")
    assert "02_ldmatrix" in report and "1 passed, 0 attempted, 5 not started" in report
    assert "(3 checks)" in report
    svg = progress.picture_svg(progress.notebook_progress(workspace / ".ptxlab" / "progress.json"))
    assert svg.count("<rect") >= solutions and "#2e7d32" in svg and "passed" in svg
    cli = subprocess.run([sys.executable, "-m", "ptxlab.cli", "progress", str(workspace),
                          "--brief"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0 and "02_ldmatrix" in cli.stdout and "1 passed" in cli.stdout


def test_the_solution_comes_after_the_last_hint_and_is_marked(workspace, capsys):
    assert ldmatrix.receive.reveal() is None
    assert "Take the hints first: 3 left" in capsys.readouterr().out
    for _ in ldmatrix.receive.hints:
        ldmatrix.receive.hint()
    solution = ldmatrix.receive.reveal()
    assert solution is not None and "lane // 4" in solution
    assert "NotImplementedError" not in solution
    rows = progress.notebook_progress(workspace / ".ptxlab" / "progress.json")["02_ldmatrix"]
    assert next(r for r in rows if r.key == "ldmatrix.receive").revealed
    assert "1 solution revealed" in progress.text_report(workspace / ".ptxlab" / "progress.json")


def test_no_solution_without_the_course_source(workspace, tmp_path, capsys):
    for _ in ldmatrix.receive.hints:
        ldmatrix.receive.hint()
    assert progress.reveal(ldmatrix.receive, course=tmp_path / "no-course") is None
    assert "ask your teacher" in capsys.readouterr().out
    rows = progress.notebook_progress(workspace / ".ptxlab" / "progress.json")["02_ldmatrix"]
    assert not next(r for r in rows if r.key == "ldmatrix.receive").revealed


def test_outside_a_workspace_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(progress.PROGRESS_FILE_ENV, raising=False)
    assert progress.progress_file() is None
    ldmatrix.receive.check(_right, quiet=True)
    assert not list(tmp_path.rglob("progress.json"))
    cli = subprocess.run([sys.executable, "-m", "ptxlab.cli", "progress", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and "no workspace" in cli.stderr


def test_a_graded_notebook_records_and_reveals_nothing(workspace, monkeypatch, capsys):
    from ptxlab.teach.exercises.base import GRADED_BY_GRADER_ENV

    monkeypatch.setenv(GRADED_BY_GRADER_ENV, "1")
    ldmatrix.receive.check(_right)
    for _ in ldmatrix.receive.hints:
        ldmatrix.receive.hint()
    assert ldmatrix.receive.reveal() is None
    assert not (workspace / ".ptxlab" / "progress.json").exists()
