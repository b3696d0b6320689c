"""The teacher's view: the mistakes the grader's checks named, counted across the class by
exercise, from the same records the checks make (no tool a teacher uses says what a class
misunderstood)."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from ptxlab.grading import judge, outcome, report
from ptxlab.grading.outcome import CheckOutcome, StudentOutcome
from ptxlab.run.failure import Failure, FailureKind
from ptxlab.teach.checks import CheckResult

SWAPPED = "d0 and d1 exchanged: lane 5 holds row 1's registers (register 1 has register 0's)"


def _failed(**kw) -> CheckResult:
    return CheckResult("check", False, 0.0, "256 of 256 elements wrong", **kw)


def test_a_failed_check_names_its_cause_from_its_fields():
    assert _failed(details={"cause": SWAPPED}).named_cause() == SWAPPED
    race = _failed(failure=Failure(FailureKind.RACE, "reworded"))
    assert "race between warps" in race.named_cause()
    oob = _failed(failure=Failure(FailureKind.FAULT, "x", bad_access=True))
    assert "outside its memory" in oob.named_cause()
    assert _failed().named_cause() is None
    assert CheckResult("c", True, 1.0, "ok", details={"cause": SWAPPED}).named_cause() is None


def _test_cell(gid: str) -> NotebookNode:
    cell = nbformat.v4.new_code_cell("ex.grade(answer)")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "points": 2, "solution": False,
                                 "locked": True}
    return cell


def test_the_judge_records_the_causes_and_the_outcome_reads_them_back(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[_test_cell("stmatrix_x4"), _test_cell("ok")])
    verdicts = [judge.CellVerdict("stmatrix_x4", [_failed(details={"cause": SWAPPED}),
                                                  _failed(details={"cause": SWAPPED}),
                                                  _failed(failure=Failure(FailureKind.HANG, "x"))]),
                judge.CellVerdict("ok", [CheckResult("c", True, 1.0, "ok")])]
    judge.write_verdicts(nb, verdicts, seed=7)
    causes = _causes_read_back(tmp_path, nb, verdicts)
    assert causes == {"stmatrix_x4": (SWAPPED, "a kernel that never finishes")}


def _causes_read_back(course: Path, nb: NotebookNode,
                      verdicts: list[judge.CellVerdict]) -> dict[str, tuple[str, ...]]:
    """The causes as the worker reads them: the judge's step writes the verdict file beside the
    autograded notebook, and the outcome reads that file back."""
    from ptxlab.grading import judge_steps

    folder = course / "autograded" / "ann" / "04"
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / "04_stmatrix.ipynb"))
    resources = {"nbgrader": {"student": "ann", "assignment": "04", "notebook": "04_stmatrix"},
                 "metadata": {"path": str(folder)}}
    judge_steps._keep_verdicts(nb, resources, verdicts)
    read = outcome.SubmissionVerdicts.read(course, "04", "ann")
    return {gid: cell.causes for gid, cell in read.cells("04_stmatrix").items() if cell.causes}


def _student(name: str, *causes: str, status: str = "graded") -> StudentOutcome:
    checks = [CheckOutcome("04_stmatrix", "stmatrix_x4", 0.0 if causes else 2.0, 2.0,
                           "256 of 256 elements wrong" if causes else "", "", tuple(causes))]
    return StudentOutcome(name, status, checks[0].score, 2.0, checks=checks)


def test_the_summary_ranks_what_the_class_got_wrong(tmp_path):
    outcomes = [_student("ann", SWAPPED), _student("bob", SWAPPED), _student("cy", SWAPPED),
                _student("dee", "a kernel that never finishes"), _student("eve"),
                _student("zed", SWAPPED, status=outcome.INFRASTRUCTURE)]
    ranked = report.class_mistakes(outcomes)
    assert ranked[0] == (("04_stmatrix", "stmatrix_x4"), SWAPPED, 3, "ann")
    assert ranked[1][1:] == ("a kernel that never finishes", 1, "dee")
    text = report.write_summary(outcomes, tmp_path / "summary.md", assignment="04").read_text()
    assert "## What the class got wrong" in text
    assert f"| 04_stmatrix/stmatrix_x4 | {SWAPPED} | 3 | ann |" in text


def test_causes_a_submission_writes_itself_never_reach_the_teacher(tmp_path):
    """A learner's notebook that carries its own ``ptxlab`` verdict metadata (a forged cause
    to put words in the class summary) loses it before grading; only the judge writes it."""
    from ptxlab.grading.learner_metadata import DropLearnerMetadata

    cell = _test_cell("stmatrix_x4")
    cell.metadata["ptxlab"] = {"verdict": {"by": "grader", "causes": ["the teacher is wrong"]}}
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb, _ = DropLearnerMetadata().preprocess(nb, {})
    assert _causes_read_back(tmp_path, nb, []) == {}
