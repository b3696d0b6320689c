"""What one student got for an assignment, and why, read back after nbgrader has graded it.

The score comes from the gradebook (nbgrader's own record); the reason for each lost point comes
from the autograded notebook: the error a failing test cell printed (the checks word these as
"lane 9: expected 272, got 18.0"), or a note that the cell is missing. A submission nbgrader
could not grade at all gets zeros in the gradebook (:func:`record_failure`), so every student
has a row and a score.
"""
from __future__ import annotations

import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..teach.nbgrader_cells import grade_id, is_graded
from .run_limits import CELL_TIMEOUT, SUBMISSION_TIMEOUT, stop_note

__all__ = ["CheckOutcome", "StudentOutcome", "INFRASTRUCTURE", "read_outcome", "record_failure",
           "failing_reasons", "other_cell_errors", "check_backends", "short_error",
           "record_flags", "run_notes"]

#: The status of a submission the machine failed to grade (never a 0: a rerun grades it).
INFRASTRUCTURE = "infrastructure"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_REASON_CHARS = 300
#: Errors of a cell that are not the learner's own and explain nothing beyond the row's other
#: words: the run lost or stopped earlier, or the client's placeholder in a copy of a test line.
_NOT_OWN_ERRORS = ("KernelDied", "NotRun", SUBMISSION_TIMEOUT, "_PendingVerdict")


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


def short_error(ename: str, evalue: str) -> str:
    """``"Name: first line of the message"``, without terminal colours, cut to a readable size."""
    text = _ANSI.sub("", f"{ename}: {evalue}".strip() if str(evalue).strip() else ename)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = " / ".join(lines[:3])
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def _read_notebook(notebook_path: Path):
    """The autograded notebook, parsed once however many readers ask (the last one read is
    kept while the file is unchanged)."""
    try:
        st = Path(notebook_path).stat()
    except OSError:
        return None
    key = (str(notebook_path), st.st_mtime_ns, st.st_size)
    if getattr(_LAST_READ, "key", None) != key:
        _LAST_READ.key, _LAST_READ.nb = key, _parse_notebook(notebook_path)
    return _LAST_READ.nb


#: The last notebook this thread parsed (each grading thread reads its own students).
_LAST_READ = threading.local()


def _parse_notebook(notebook_path: Path):
    import nbformat

    try:
        return nbformat.read(str(notebook_path), as_version=4)
    except Exception:
        return None


def _cell_error(cell) -> str | None:
    """Why a code cell failed, in one line, or ``None`` when it shows no error."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return None
    names = {o.get("ename", "") for o in errors}
    worded = [o for o in errors if o.get("ename") == CELL_TIMEOUT]
    last = cell.get("outputs", [])[-1]
    if last.get("output_type") == "error" and last.get("ename") == "KernelStopped":
        # the grader stopped the sandbox after the cell's own error (a write its full disk
        # refused): the grader's reason, with the limit's figure, says more than the cell's
        return short_error(last.get("ename", ""), last.get("evalue", ""))
    if worded:                         # the grader's words, with the limit's figure
        return _ANSI.sub("", str(worded[0].get("evalue", ""))).strip()[:_REASON_CHARS]
    if "CellTimeoutError" in names or errors[0].get("ename") == "KeyboardInterrupt":
        return "ran past the cell's time limit and was interrupted (an endless loop?)"
    # The first error is the cell's own.
    return short_error(errors[0].get("ename", ""), errors[0].get("evalue", ""))


def failing_reasons(notebook_path: Path) -> dict[str, str]:
    """``grade_id -> reason`` for every graded cell of an autograded notebook that shows an error."""
    nb = _read_notebook(notebook_path)
    if nb is None:
        return {}
    reasons: dict[str, str] = {}
    for cell in nb.cells:
        if not is_graded(cell) or cell.cell_type != "code":
            continue
        why = _cell_error(cell)
        if why:
            reasons[grade_id(cell) or "?"] = why
    return reasons


def _section(cell: dict, key: str) -> dict:
    """``cell.metadata[key]`` when it is a mapping, else ``{}``: what a notebook file holds is
    read as data of any shape, never trusted to be what the grader wrote."""
    meta = cell.get("metadata")
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def check_backends(notebook_path: Path) -> dict[str, str]:
    """``grade_id -> "gpu" | "cpu" | "gpu+cpu"`` for every graded cell that launched learner
    kernels (the grader records each launch in the cell's metadata)."""
    nb = _read_notebook(notebook_path)
    if nb is None:
        return {}
    found: dict[str, str] = {}
    for cell in nb.cells:
        gid = grade_id(cell)
        launches = _section(cell, "ptxlab").get("kernel_launches")
        kinds = sorted({l.get("backend") for l in launches if isinstance(l, dict)
                        and isinstance(l.get("backend"), str)}) if isinstance(launches, list) else []
        if gid and kinds:
            found[gid] = "+".join(sorted(kinds, key=lambda k: k != "gpu"))
    return found


def check_causes(notebook_path: Path) -> dict[str, tuple[str, ...]]:
    """``grade_id -> the mistakes named`` for every graded cell whose verdict the grader
    recorded with causes (the judge writes them beside its verdict, after the learner's own
    metadata is gone)."""
    nb = _read_notebook(notebook_path)
    if nb is None:
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for cell in nb.cells:
        verdict = _section(cell, "ptxlab").get("verdict")
        causes = verdict.get("causes") if isinstance(verdict, dict) else None
        gid = grade_id(cell)
        if gid and isinstance(causes, list):
            named = tuple(c[:_REASON_CHARS] for c in causes if isinstance(c, str) and c)
            if named:
                found[gid] = named
    return found


def other_cell_errors(notebook_path: Path, limit: int = 2) -> list[str]:
    """``"answer_cell: why"`` for the first ungraded code cells that failed (the learner's own
    cells: an endless loop at top level, ``sys.exit()``, a memory error...), which cost no
    points by themselves but explain a grade."""
    nb = _read_notebook(notebook_path)
    if nb is None:
        return []
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_graded(cell):
            continue
        why = _cell_error(cell)
        if why and not why.startswith(_NOT_OWN_ERRORS):
            found.append(f"{grade_id(cell) or f'cell {index + 1}'}: {why}")
    return found[:limit]


def run_notes(notebook_path: Path) -> list[str]:
    """What the row says of the notebook's run as a whole: where it was stopped at the
    submission limit and what was graded from before it."""
    nb = _read_notebook(notebook_path)
    note = stop_note(nb) if nb is not None else None
    return [note] if note else []


def read_outcome(gradebook, course_root: Path, assignment: str, student: str,
                 autograded_dir: str = "autograded") -> tuple[float, float, list[CheckOutcome]]:
    """``(score, max_score, checks)`` of one submission from an open nbgrader ``Gradebook``."""
    submission = gradebook.find_submission(assignment, student)
    checks: list[CheckOutcome] = []
    for nb in submission.notebooks:
        path = Path(course_root) / autograded_dir / student / assignment / f"{nb.name}.ipynb"
        reasons = failing_reasons(path) if path.exists() else {}
        backends = check_backends(path) if path.exists() else {}
        causes = check_causes(path) if path.exists() else {}
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
            checks.append(CheckOutcome(nb.name, grade.name, score, float(grade.max_score), reason,
                                       backends.get(grade.name, ""),
                                       causes.get(grade.name, ()) if score < grade.max_score
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
                 autograded_dir: str = "autograded") -> list[str]:
    """Mark the grades the grader flagged (an answer that reaches the course's reference) as
    needing a person, with the quoted line as the answer cell's comment; returns their ids."""
    flagged = []
    submission = gradebook.find_submission(assignment, student)
    for nb in submission.notebooks:
        path = Path(course_root) / autograded_dir / student / assignment / f"{nb.name}.ipynb"
        if not path.exists():
            continue
        for cell in (_read_notebook(path) or {}).get("cells", []):
            verdict = _section(cell, "ptxlab").get("verdict")
            gid = grade_id(cell)
            if not isinstance(verdict, dict) or not verdict.get("flagged") or not gid:
                continue
            try:
                grade = gradebook.find_grade(gid, nb.name, assignment, student)
            except Exception:               # not a graded cell: nothing to flag there
                continue
            grade.needs_manual_grade = True
            flagged.append(gid)
            flags = verdict["flagged"] if isinstance(verdict["flagged"], list) else []
            note = "Flagged for manual grading: " + "; ".join(str(f) for f in flags[:3])
            cells = verdict.get("flagged_cells")
            for answer_cell in cells if isinstance(cells, list) else []:
                try:
                    comment = gradebook.find_comment(answer_cell, nb.name, assignment, student)
                except Exception:          # not an answer cell nbgrader keeps comments for
                    continue
                comment.auto_comment = note[:2000]
    gradebook.db.commit()
    return flagged
