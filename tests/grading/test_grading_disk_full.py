"""A full disk under the grading folder stops the batch cleanly: no traceback, no half line in
the ledger, every student finished before it kept, and the next run continues from there."""
from __future__ import annotations

import argparse
import errno
import json
import os

import pytest

from ptxlab.cli import grade as cli
from ptxlab.grading import batch, local_pool
from ptxlab.grading.outcome import StudentOutcome

_FSYNC = os.fsync


def _outcome(student: str) -> StudentOutcome:
    return StudentOutcome(student=student, status="graded", score=12, max_score=12,
                          reason="all tests passed", submitted_at="2026-11-26 09:00:00 UTC")


def _full_after(monkeypatch, n_ok: int) -> None:
    """``os.fsync`` of the ledger fails with ENOSPC after ``n_ok`` successful appends."""
    real, calls = _FSYNC, {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > n_ok:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)
    monkeypatch.setattr(batch.os, "fsync", fsync)


def test_a_full_disk_leaves_the_ledger_whole(tmp_path, monkeypatch):
    ledger = batch.Ledger(tmp_path / "ledger.jsonl")
    ledger.append(_outcome("alice"))
    _full_after(monkeypatch, 0)
    with pytest.raises(batch.GraderDiskFull, match="disk holding .* is full.*run the same command"):
        ledger.append(_outcome("bob"))
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["student"] for line in lines] == ["alice"]
    assert set(ledger.load()) == {"alice"}


def _course(tmp_path):
    course = tmp_path / "course"
    for student in ("alice", "bob", "carol"):
        sub = course / "submitted" / student / "ps1"
        sub.mkdir(parents=True)
        (sub / "timestamp.txt").write_text("2026-11-26 09:00:00 UTC")
    (course / "source").mkdir()
    return course


def test_the_batch_stops_with_a_message_and_the_next_run_continues(tmp_path, monkeypatch, capsys):
    course = _course(tmp_path)
    graded: list[str] = []

    def grade_here(opts, todo, submissions, finish):
        for student in todo:
            graded.append(student)
            finish(_outcome(student), 0)
    monkeypatch.setattr(local_pool, "_grade_here", grade_here)
    _full_after(monkeypatch, 1)
    args = argparse.Namespace(course=course, assignment="ps1", workers=1, force=False,
                              retry_failed=False, submission_timeout=60.0, grading_config=None,
                              students=None, quiet=True, no_preflight=True, scheduler=None)
    assert cli.run(args) == 3
    err = capsys.readouterr().err
    assert "is full" in err and "Traceback" not in err
    ledger = course / "grading" / "ps1" / "ledger.jsonl"
    assert [json.loads(x)["student"] for x in ledger.read_text().splitlines()] == ["alice"]
    monkeypatch.setattr(batch.os, "fsync", _FSYNC)             # space again
    graded.clear()
    assert cli.run(args) == 0
    assert graded == ["bob", "carol"]                          # alice is not graded twice
