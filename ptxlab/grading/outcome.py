"""What one student got for an assignment, and why, read back after nbgrader has graded it.

The score comes from the gradebook (nbgrader's own record); the reason for each lost point comes
from the autograded notebook: the error a failing test cell printed (the checks word these as
"lane 9: expected 272, got 18.0"), or a note that the cell is missing. A submission nbgrader
could not grade at all gets zeros in the gradebook (:func:`record_failure`), so every student
has a row and a score.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["CheckOutcome", "StudentOutcome", "read_outcome", "record_failure",
           "failing_reasons", "short_error"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REASON_CHARS = 300


@dataclass
class CheckOutcome:
    """One graded test cell."""

    notebook: str
    grade_id: str
    score: float
    max_score: float
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


@dataclass
class StudentOutcome:
    """One student's result, as it goes into the CSV and the summary."""

    student: str
    status: str                    # graded | failed | timeout | crashed
    score: float = 0.0
    max_score: float = 0.0
    reason: str = ""
    duration_s: float = 0.0
    submitted_at: str = ""
    checks: list[CheckOutcome] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "StudentOutcome":
        checks = [CheckOutcome(**c) for c in data.get("checks", [])]
        return cls(**{**data, "checks": checks})


def short_error(ename: str, evalue: str) -> str:
    """``"Name: first line of the message"``, without terminal colours, cut to a readable size."""
    text = _ANSI.sub("", f"{ename}: {evalue}".strip())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = " / ".join(lines[:3])
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def failing_reasons(notebook_path: Path) -> dict[str, str]:
    """``grade_id -> reason`` for every graded cell of an autograded notebook that shows an error."""
    import nbformat

    try:
        nb = nbformat.read(str(notebook_path), as_version=4)
    except Exception:
        return {}
    reasons: dict[str, str] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            continue
        names = {o.get("ename", "") for o in errors}
        if "CellTimeoutError" in names or errors[0].get("ename") == "KeyboardInterrupt":
            reasons[meta.get("grade_id", "?")] = (
                "ran past the cell's time limit and was interrupted (an endless loop?)")
        else:
            # The first error is the test's own.
            reasons[meta.get("grade_id", "?")] = short_error(errors[0].get("ename", ""),
                                                              errors[0].get("evalue", ""))
    return reasons


def read_outcome(gradebook, course_root: Path, assignment: str, student: str,
                 autograded_dir: str = "autograded") -> tuple[float, float, list[CheckOutcome]]:
    """``(score, max_score, checks)`` of one submission from an open nbgrader ``Gradebook``."""
    submission = gradebook.find_submission(assignment, student)
    checks: list[CheckOutcome] = []
    for nb in submission.notebooks:
        path = Path(course_root) / autograded_dir / student / assignment / f"{nb.name}.ipynb"
        reasons = failing_reasons(path) if path.exists() else {}
        for grade in nb.grades:
            if grade.max_score == 0:
                continue
            score = float(grade.score or 0.0)
            reason = ""
            if score < grade.max_score:
                if not path.exists():
                    reason = "notebook missing from the submission or not gradable"
                elif grade.auto_score is None:
                    reason = "test cell missing from the submission (deleted?)"
                else:
                    reason = reasons.get(grade.name, "test did not pass")
            checks.append(CheckOutcome(nb.name, grade.name, score, float(grade.max_score), reason))
    return float(submission.score or 0.0), float(submission.max_score or 0.0), checks


def record_failure(gradebook, assignment: str, student: str) -> None:
    """Give a submission nbgrader could not grade a zero, flagged for an instructor's look.

    The submission and its grades are created if nbgrader did not get that far; grades that
    already have a score keep it.
    """
    submission = gradebook.update_or_create_submission(assignment, student)
    for nb in submission.notebooks:
        for grade in nb.grades:
            if grade.auto_score is None and grade.manual_score is None:
                grade.auto_score = 0.0
                grade.needs_manual_grade = True
    gradebook.db.commit()
