"""What one student got for an assignment, and why, read back after nbgrader has graded it.

The score comes from the gradebook (nbgrader's own record); the reason for each lost point, the
flags, backends and named mistakes come from the judge's verdict file beside each autograded
notebook (:mod:`ptxlab.grading.verdict_file`), read once per submission
(:class:`SubmissionVerdicts`): the error a failing test cell printed (the checks word these as
"lane 9: expected 272, got 18.0"), or a note that the cell is missing. A submission nbgrader
could not grade at all gets zeros in the gradebook (:func:`record_failure`), so every student
has a row and a score.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import verdict_file
from .verdict_file import NotebookVerdicts, VerdictsMissing, short_error

__all__ = ["CheckOutcome", "StudentOutcome", "INFRASTRUCTURE", "SubmissionVerdicts",
           "read_outcome", "record_failure", "short_error", "record_flags"]

#: The status of a submission the machine failed to grade (never a 0: a rerun grades it).
INFRASTRUCTURE = "infrastructure"
#: The reason of a lost check whose notebook has no verdict file the grader wrote.
NO_VERDICTS = ("the grader's verdicts of this notebook were not found (a fault of the machine, "
               "not of the submission)")


@dataclass
class CheckOutcome:
    """One graded test cell."""

    notebook: str
    grade_id: str
    score: float
    max_score: float
    reason: str = ""
    backend: str = ""              # where its learner kernels ran: gpu, cpu (or "" for none)
    causes: tuple[str, ...] = ()   # the mistakes the grader's checks named (the judge's record)

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


@dataclass
class StudentOutcome:
    """One student's result, as it goes into the CSV and the summary."""

    student: str
    status: str                    # graded | failed | timeout | crashed | infrastructure
    score: float = 0.0
    max_score: float = 0.0
    reason: str = ""
    duration_s: float = 0.0
    submitted_at: str = ""
    checks: list[CheckOutcome] = field(default_factory=list)
    #: Seconds each grading step took (:mod:`ptxlab.grading.step_times`), for the ledger.
    steps_s: dict[str, float] = field(default_factory=dict)

    @classmethod
    def not_graded(cls, student: str, cause: str, **fields) -> "StudentOutcome":
        """A row for a submission the machine failed to grade: no score, and why."""
        return cls(student=student, status=INFRASTRUCTURE,
                   reason=f"not graded (infrastructure): {cause}; the next 'ptxlab grade' "
                          "run grades it", **fields)

    @property
    def counted(self) -> bool:
        """Whether this row is a grade: an ``infrastructure`` row is not (the machine failed,
        not the submission; no zeros were written and the next run grades it)."""
        return self.status != INFRASTRUCTURE

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "StudentOutcome":
        checks = [CheckOutcome(**c) for c in data.get("checks", [])]
        return cls(**{**data, "checks": checks})


@dataclass
class SubmissionVerdicts:
    """The judge's verdict files of one submission, read once: what the row, the flags and the
    checks are built from, without parsing the autograded notebooks again."""

    notebooks: dict[str, NotebookVerdicts] = field(default_factory=dict)
    #: autograded notebook -> why it has no verdicts this grader wrote (a fault of the machine)
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, course_root: Path, assignment: str, student: str,
             autograded_dir: str = "autograded") -> "SubmissionVerdicts":
        """The verdicts of every autograded notebook of ``student``'s ``assignment``."""
        folder = Path(course_root) / autograded_dir / student / assignment
        found = cls()
        for path in sorted(folder.glob("*.ipynb")):
            try:
                found.notebooks[path.stem] = verdict_file.load(
                    folder, path.stem, student=student, assignment=assignment)
            except VerdictsMissing as exc:
                found.missing[path.stem] = exc.why
        return found

    def fault(self) -> str | None:
        """The machine's failure to keep the judge's verdicts, in words, or ``None``."""
        return "; ".join(f"the judge's verdict file of {name}.ipynb was {why}"
                         for name, why in sorted(self.missing.items())) or None

    def cells(self, notebook: str) -> dict[str, verdict_file.CellRecord]:
        held = self.notebooks.get(notebook)
        return held.cells if held is not None else {}

    def run_notes(self) -> list[str]:
        """What the row says of the notebooks' runs: where one was stopped at the submission
        limit and what was graded from before it."""
        return [n for name in sorted(self.notebooks) for n in self.notebooks[name].run_notes]

    def other_errors(self) -> list[str]:
        """The learner's own cells that failed, without points of their own."""
        return [e for name in sorted(self.notebooks) for e in self.notebooks[name].other_errors]


def read_outcome(gradebook, course_root: Path, assignment: str, student: str,
                 autograded_dir: str = "autograded", verdicts: SubmissionVerdicts | None = None
                 ) -> tuple[float, float, list[CheckOutcome]]:
    """``(score, max_score, checks)`` of one submission from an open nbgrader ``Gradebook``
    and the judge's verdicts (read here when not given)."""
    if verdicts is None:
        verdicts = SubmissionVerdicts.read(course_root, assignment, student, autograded_dir)
    submission = gradebook.find_submission(assignment, student)
    checks: list[CheckOutcome] = []
    for nb in submission.notebooks:
        path = Path(course_root) / autograded_dir / student / assignment / f"{nb.name}.ipynb"
        cells = verdicts.cells(nb.name)
        for grade in nb.grades:
            if grade.max_score == 0:
                continue
            score = float(grade.score or 0.0)
            cell = cells.get(grade.name)
            reason = ""
            if score < grade.max_score:
                if not path.exists():
                    reason = "notebook missing from the submission or not gradable"
                elif grade.auto_score is None:
                    reason = "test cell missing from the submission (deleted?)"
                elif nb.name in verdicts.missing:
                    reason = NO_VERDICTS
                else:
                    reason = (cell.reason if cell is not None else "") or "test did not pass"
            checks.append(CheckOutcome(nb.name, grade.name, score, float(grade.max_score), reason,
                                       cell.backend if cell is not None else "",
                                       cell.causes if cell is not None and score < grade.max_score
                                       else ()))
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


def record_flags(gradebook, course_root: Path, assignment: str, student: str,
                 autograded_dir: str = "autograded", verdicts: SubmissionVerdicts | None = None
                 ) -> list[str]:
    """Mark the grades the grader flagged (an answer that reaches the course's reference) as
    needing a person, with the quoted line as the answer cell's comment; returns their ids."""
    if verdicts is None:
        verdicts = SubmissionVerdicts.read(course_root, assignment, student, autograded_dir)
    flagged = []
    submission = gradebook.find_submission(assignment, student)
    for nb in submission.notebooks:
        for gid, cell in verdicts.cells(nb.name).items():
            if not cell.flags:
                continue
            try:
                grade = gradebook.find_grade(gid, nb.name, assignment, student)
            except Exception:               # not a graded cell: nothing to flag there
                continue
            grade.needs_manual_grade = True
            flagged.append(gid)
            note = "Flagged for manual grading: " + "; ".join(cell.flags[:3])
            for answer_cell in cell.flagged_cells:
                try:
                    comment = gradebook.find_comment(answer_cell, nb.name, assignment, student)
                except Exception:          # not an answer cell nbgrader keeps comments for
                    continue
                comment.auto_comment = note[:2000]
    gradebook.db.commit()
    return flagged
