"""Moving one submission's grading between machines, as data: folders and gradebook rows.

On a cluster (:mod:`ptxlab.grading.dask_pool`) the head keeps the only gradebook. A worker grades
in a course of its own, whose gradebook holds the assignment's definitions and nothing of any
student (:func:`template_gradebook`); what grading wrote there for one student is read out
(:func:`export_grades`) and written into the head's gradebook (:func:`import_grades`), exactly
the fields nbgrader's autograde steps and the grader's own flags set.
"""
from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

__all__ = ["pack_folder", "unpack_folder", "template_gradebook", "export_grades",
           "import_grades", "submission_extensions"]


def pack_folder(folder: Path) -> bytes:
    """``folder``'s tree as tar bytes; links are stored as links, never followed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        tar.add(str(folder), arcname=".", recursive=True)
    return buffer.getvalue()


def unpack_folder(data: bytes, dest: Path, *, keep_links: bool = False) -> None:
    """Recreate a packed tree as ``dest`` (replacing what was there).

    ``keep_links``: a submission's links are recreated as links (the grader refuses them with
    its usual reason, and nothing follows them); otherwise a member that is not a plain file or
    folder, or would land outside ``dest``, is refused.
    """
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        shutil.rmtree(dest) if dest.is_dir() and not dest.is_symlink() else dest.unlink()
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(str(dest), filter="tar" if keep_links else "data")
            return
        for member in tar.getmembers():   # Pythons without extraction filters
            parts = Path(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (
                    member.isfile() or member.isdir() or (keep_links and member.issym())):
                raise ValueError(f"refusing to unpack {member.name!r}")
        tar.extractall(str(dest))


def template_gradebook(source_url: str, course_id: str, assignment: str, dest: Path) -> Path:
    """A new SQLite gradebook at ``dest`` with ``assignment``'s definitions only (its due date,
    notebooks and cells, as ``nbgrader generate_assignment`` stored them): no student, no
    score, no comment."""
    from nbgrader.api import Gradebook

    import sqlite3

    from sqlalchemy import text

    dest = Path(dest)
    if dest.exists():
        dest.unlink()
    with Gradebook(source_url, course_id) as src:
        # The schema's version, written first: a gradebook without one asks the alembic
        # command for it (seconds).
        version = src.db.execute(text("SELECT version_num FROM alembic_version")).scalar()
        with sqlite3.connect(dest) as db:
            db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
            db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (version,))
        db.close()
        with Gradebook(f"sqlite:///{dest}", course_id) as out:
            _copy_definitions(src, out, assignment)
    return dest


def _copy_definitions(src, out, assignment: str) -> None:
    """One assignment's definitions from gradebook ``src`` into ``out``."""
    a = src.find_assignment(assignment)
    out.update_or_create_assignment(a.name, duedate=a.duedate)
    for nb in a.notebooks:
        out.update_or_create_notebook(nb.name, a.name)
        for cell in nb.grade_cells:
            out.update_or_create_grade_cell(cell.name, nb.name, a.name,
                                            max_score=cell.max_score, cell_type=cell.cell_type)
        for cell in nb.solution_cells:
            out.update_or_create_solution_cell(cell.name, nb.name, a.name)
        for cell in nb.task_cells:
            out.update_or_create_task_cell(cell.name, nb.name, a.name,
                                           max_score=cell.max_score, cell_type=cell.cell_type)
        for cell in nb.source_cells:
            out.update_or_create_source_cell(cell.name, nb.name, a.name,
                                             cell_type=cell.cell_type, locked=cell.locked,
                                             source=cell.source, checksum=cell.checksum)


def submission_extensions(db_url: str, course_id: str, assignment: str) -> dict[str, float]:
    """Each student's deadline extension for ``assignment`` in seconds (late penalties depend
    on it), for the students who have one."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        return {sub.student.id: sub.extension.total_seconds()
                for sub in gb.find_assignment(assignment).submissions
                if sub.extension is not None}


def export_grades(db_url: str, course_id: str, assignment: str, student: str) -> dict[str, Any]:
    """What autograding wrote for ``student``: the submission's timestamp, each notebook's
    late penalty and flag, each grade's automatic score and review mark, each automatic
    comment."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        sub = gb.find_submission(assignment, student)
        return {
            "timestamp": sub.timestamp.isoformat() if sub.timestamp else None,
            "notebooks": {nb.name: {
                "late_submission_penalty": nb.late_submission_penalty,
                "flagged": bool(nb.flagged),
                "grades": {g.name: {"auto_score": g.auto_score,
                                    "needs_manual_grade": bool(g.needs_manual_grade)}
                           for g in nb.grades},
                "comments": {c.name: c.auto_comment for c in nb.comments},
            } for nb in sub.notebooks},
        }


def import_grades(db_url: str, course_id: str, assignment: str, student: str,
                  grades: dict[str, Any]) -> None:
    """Write :func:`export_grades`' data into the head's gradebook, as autograde would have.

    A grade an instructor already scored by hand keeps that score and is marked for review, as
    nbgrader's ``SaveAutoGrades`` does.
    """
    from datetime import datetime

    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        gb.update_or_create_student(student)
        stamp = grades.get("timestamp")
        kwargs = {"timestamp": datetime.fromisoformat(stamp)} if stamp else {}
        sub = gb.update_or_create_submission(assignment, student, **kwargs)
        by_name = {nb.name: nb for nb in sub.notebooks}
        for name, data in grades["notebooks"].items():
            nb = by_name[name]
            nb.late_submission_penalty = data["late_submission_penalty"]
            nb.flagged = data["flagged"]
            for grade in nb.grades:
                got = data["grades"].get(grade.name)
                if got is None:
                    continue
                grade.auto_score = got["auto_score"]
                grade.needs_manual_grade = got["needs_manual_grade"] or grade.manual_score is not None
            for comment in nb.comments:
                if comment.name in data["comments"]:
                    comment.auto_comment = data["comments"][comment.name]
        gb.db.commit()
