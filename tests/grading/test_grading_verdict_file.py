"""The judge's verdicts travel in one file beside the autograded notebook, read once.

The judge's step writes ``<notebook>.verdicts.json`` (every graded cell's verdict, reason,
backend, flags and causes; the learner's own failed cells; a stop at the submission limit); the
worker reads it once per submission instead of parsing the autograded notebook again. The
autograded folder also holds what the student submitted, so only a file this grading process
signed is read: a submitted, stale or planted one is never the grader's, and a notebook without
the grader's file is a fault of the machine (not graded, retried), never a 0.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbformat.notebooknode import NotebookNode


from ptxlab.grading import judge, outcome, verdict_file  # noqa: E402
from ptxlab.grading.outcome import INFRASTRUCTURE, SubmissionVerdicts  # noqa: E402
from ptxlab.grading.reference_use import Finding  # noqa: E402
from ptxlab.teach.checks import CheckResult  # noqa: E402

CAUSE = "d0 and d1 exchanged: lane 5 holds row 1's registers"


def _cell(source: str, gid: str | None = None, *, graded: bool = False,
          solution: bool = False, outputs: list | None = None) -> NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if gid:
        cell.metadata["nbgrader"] = {"grade": graded, "grade_id": gid, "points": 2 if graded else 0,
                                     "solution": solution, "locked": not solution}
    cell.outputs = outputs or []
    return cell


def _error(ename: str, evalue: str) -> NotebookNode:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])


def _judged_notebook() -> tuple[NotebookNode, list[judge.CellVerdict]]:
    """A test cell the judge failed (with a cause and a flag), one it passed, a plain test cell
    that decides itself, and a learner's cell that failed on its own."""
    nb = nbformat.v4.new_notebook(cells=[
        _cell("answer = ...", "answer", solution=True),
        _cell("ex.grade(answer)", "judged_fail", graded=True),
        _cell("ex.grade(answer)", "judged_pass", graded=True),
        _cell("assert f(1) == 2", "plain_test", graded=True,
              outputs=[_error("AssertionError", "f(1) gave 3")]),
        _cell("while True: pass", outputs=[_error("ZeroDivisionError", "division by zero")]),
    ])
    flag = Finding(0, "answer", 1, "from ptxlab import layouts", "reaches the reference",
                   grade_id="answer")
    verdicts = [judge.CellVerdict("judged_fail", [CheckResult("c", False, 0.0, "lane 9: wrong",
                                                              details={"cause": CAUSE})],
                                  flagged=[flag]),
                judge.CellVerdict("judged_pass", [CheckResult("c", True, 1.0, "ok")])]
    judge.write_verdicts(nb, verdicts, seed=7)
    return nb, verdicts


def _keep(course: Path, nb: NotebookNode, verdicts: list, launches: list | None = None,
          student: str = "ann") -> Path:
    """What the judge's step does in nbgrader's autograde of ``student``'s notebook ``04``."""
    from ptxlab.grading import judge_steps

    folder = course / "autograded" / student / "04"
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / "04.ipynb"))
    resources = {"nbgrader": {"student": student, "assignment": "04", "notebook": "04"},
                 "metadata": {"path": str(folder)}, "ptxlab_kernel_launches": launches or []}
    return judge_steps._keep_verdicts(nb, resources, verdicts)


def test_the_judge_writes_one_verdict_file_that_the_outcome_reads_back(tmp_path):
    nb, verdicts = _judged_notebook()
    launches = [("judged_fail", [{"backend": "cpu"}, {"backend": "gpu"}]), (2, [{"backend": "gpu"}])]
    path = _keep(tmp_path, nb, verdicts, launches)
    assert path == tmp_path / "autograded" / "ann" / "04" / "04.verdicts.json"
    data = json.loads(path.read_text())
    assert data["schema"] == verdict_file.SCHEMA and len(data["mac"]) == 64
    assert not any("verdict" in c.metadata.get("ptxlab", {}) and "causes" in
                   c.metadata["ptxlab"]["verdict"] for c in nb.cells)   # one place: the file
    read = SubmissionVerdicts.read(tmp_path, "04", "ann")
    assert read.missing == {} and read.fault() is None
    cells = read.cells("04")
    assert set(cells) == {"judged_fail", "judged_pass", "plain_test"}
    fail = cells["judged_fail"]
    assert (fail.by, fail.passed, fail.backend, fail.causes) == ("grader", False, "gpu+cpu",
                                                                 (CAUSE,))
    assert fail.reason.startswith("FlaggedForReview: flagged for manual grading: answer, line 1")
    assert fail.flags == (verdicts[0].flagged[0].describe(),) and fail.flagged_cells == ("answer",)
    assert (cells["judged_pass"].by, cells["judged_pass"].passed) == ("grader", True)
    assert cells["judged_pass"].backend == "gpu"                        # cell index 2
    plain = cells["plain_test"]
    assert (plain.by, plain.passed, plain.reason, plain.points) == (
        "notebook", False, "AssertionError: f(1) gave 3", 2.0)
    assert read.other_errors() == ["cell 5: ZeroDivisionError: division by zero"]
    assert read.run_notes() == []


def _rewrite(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("forge", ["tampered", "other process", "unsigned", "link", "folder",
                                   "huge", "other student", "not json"])
def test_a_verdict_file_this_grader_did_not_write_is_never_read(tmp_path, monkeypatch, forge):
    """Whatever lies at the file's name, unless this process's judge signed it for this
    notebook, reads as missing: never as the grader's flags, causes or reasons."""
    nb, verdicts = _judged_notebook()
    path = _keep(tmp_path, nb, verdicts)
    if forge == "tampered":          # the grader's own file, one cause changed
        _rewrite(path, lambda d: d["cells"][0].update(causes=["the teacher is wrong"]))
    elif forge == "other process":   # signed, but under another grading process's key
        monkeypatch.setattr(verdict_file, "_KEY", b"\0" * 32)
        _keep(tmp_path, nb, verdicts)
        monkeypatch.undo()
    elif forge == "unsigned":
        _rewrite(path, lambda d: d.pop("mac"))
    elif forge == "link":            # a link to a file the grader signed
        real = path.with_name("elsewhere.json")
        path.rename(real)
        path.symlink_to(real)
    elif forge == "folder":
        path.unlink()
        path.mkdir()
    elif forge == "huge":
        path.write_bytes(b" " * (verdict_file.MAX_BYTES + 1))
    elif forge == "other student":  # bob's real file, copied into ann's folder
        bob = _keep(tmp_path, nb, verdicts, student="bob")
        path.write_bytes(bob.read_bytes())
    else:
        path.write_text("[" * 100000)
    with pytest.raises(verdict_file.VerdictsMissing):
        verdict_file.load(path.parent, "04", student="ann", assignment="04")
    read = SubmissionVerdicts.read(tmp_path, "04", "ann")
    assert read.cells("04") == {} and "04" in read.missing
    assert read.fault().startswith("the judge's verdict file of 04.ipynb was ")


def test_the_judge_replaces_what_lies_at_the_files_name_without_writing_through_it(tmp_path):
    """A link at the name (to the course's gradebook, say) is replaced, never written through;
    a folder there is removed."""
    nb, verdicts = _judged_notebook()
    folder = tmp_path / "autograded" / "ann" / "04"
    folder.mkdir(parents=True)
    target = tmp_path / "gradebook.db"
    target.write_bytes(b"the gradebook")
    (folder / "04.verdicts.json").symlink_to(target)
    path = _keep(tmp_path, nb, verdicts)
    assert target.read_bytes() == b"the gradebook" and not path.is_symlink()
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")
    _keep(tmp_path, nb, verdicts)
    assert path.is_file()
    assert verdict_file.load(folder, "04", student="ann", assignment="04").cells
    assert [p.name for p in folder.iterdir() if p.name.startswith(".verdicts-")] == []


def _flagged(grader) -> list[str]:
    from nbgrader.api import Gradebook

    with Gradebook(grader.coursedir.db_url, grader.coursedir.course_id) as gb:
        sub = gb.find_submission("ps1", "alice")
        return [g.name for nb_ in sub.notebooks for g in nb_.grades
                if g.auto_score is not None and g.needs_manual_grade]


def test_a_verdict_file_in_the_submission_is_replaced_and_never_read(course_with_alice):
    """The attack: a submission carrying its own ``ps1.verdicts.json`` (nbgrader copies it into
    the autograded folder), with a flag, a cause for the class summary, a reason and a stop
    note, laid out as the grader's. It is replaced by the judge's file and none of it reaches
    the row, the gradebook or the teacher."""
    from ptxlab.grading import grading_worker as worker

    forged = {"schema": verdict_file.SCHEMA, "student": "alice", "assignment": "ps1",
              "notebook": "ps1", "mac": "0" * 64, "other_errors": ["planted: forged"],
              "run_notes": ["planted stop"],
              "cells": [{"grade_id": gid, "by": "grader", "passed": False, "points": 2.0,
                         "reason": "planted reason", "backend": "planted-gpu",
                         "flags": ["planted"], "flagged_cells": ["address_formula"],
                         "causes": ["the teacher is wrong"]}
                        for gid in ("test_address_visible", "test_kernel")]}
    sub = course_with_alice / "submitted" / "alice" / "ps1"
    (sub / "ps1.verdicts.json").write_text(json.dumps(forged))
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    got = grader.grade("alice")
    assert got.status == "graded", got
    assert "planted" not in got.reason and "forged" not in got.reason, got.reason
    assert all(c.causes == () and "planted" not in c.reason + c.backend
               for c in got.checks), got.checks
    assert _flagged(grader) == []
    folder = course_with_alice / "autograded" / "alice" / "ps1"
    text = (folder / "ps1.verdicts.json").read_text()
    assert "planted" not in text and "teacher is wrong" not in text
    assert verdict_file.load(folder, "ps1", student="alice", assignment="ps1").cells


def test_grading_reads_each_verdict_file_once_and_no_autograded_notebook(course_with_alice,
                                                                       monkeypatch):
    """After nbgrader's autograde, the row, the flags and the checks come from one read of the
    verdict file: the autograded notebook is not parsed again."""
    from ptxlab.grading import grading_worker as worker

    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    loads, parsed, done = [], [], []
    real_load, real_read, real_autograde = verdict_file.load, nbformat.read, grader._autograde
    monkeypatch.setattr(verdict_file, "load", lambda *a, **k: loads.append(a[1]) or
                        real_load(*a, **k))
    monkeypatch.setattr(nbformat, "read", lambda fp, *a, **k: (
        parsed.append(str(fp)) if done else None) or real_read(fp, *a, **k))

    def autograde(student: str):
        graded = real_autograde(student)
        done.append(1)                   # from here on, nothing parses the graded notebook
        return graded

    monkeypatch.setattr(grader, "_autograde", autograde)
    got = grader.grade("alice")
    assert got.status == "graded" and got.checks, got
    assert loads == ["ps1"]
    assert [p for p in parsed if "/autograded/alice/" in p] == []
    assert any("/submitted/alice/" in p for p in parsed)      # the watch does see reads
    assert {c.grade_id: bool(c.reason) for c in got.checks} == {
        "test_address_visible": True, "test_address_hidden": True, "test_kernel": True}


def test_a_missing_verdict_file_is_the_machines_fault_never_a_zero(course_with_alice,
                                                                   monkeypatch):
    """Where the judge's file is not there after nbgrader graded the notebook, the flags and
    the reasons are unknown: the submission is retried and, still without it, listed "not
    graded (infrastructure)" with the reason, no zero written, no crash."""
    from ptxlab.grading import grading_worker as worker

    monkeypatch.setattr(worker, "INFRA_RETRY_WAIT_S", (0.0, 0.0))
    monkeypatch.setattr(verdict_file, "save", lambda *a, **k: None)

    def no_zeros(*a, **k):
        raise AssertionError("zeros were written for a submission the machine failed to grade")

    monkeypatch.setattr(worker, "record_failure", no_zeros)
    grader = worker.SubmissionGrader(course_with_alice, "ps1")
    got = grader.grade("alice")
    assert got.status == INFRASTRUCTURE and not got.counted, got
    assert "the judge's verdict file of ps1.ipynb was not found" in got.reason, got.reason
    assert "3 attempts" in got.reason
    from nbgrader.api import Gradebook

    with Gradebook(grader.coursedir.db_url, grader.coursedir.course_id) as gb:
        checks = outcome.read_outcome(gb, course_with_alice, "ps1", "alice")[2]
    assert checks and all(c.reason == outcome.NO_VERDICTS for c in checks if not c.passed)
