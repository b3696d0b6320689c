"""A notebook cell's nbgrader metadata, read in one place.

nbgrader keeps what it knows of a cell in ``cell.metadata["nbgrader"]``: its grade id, whether
it is an answer (``solution``) or a test (``grade``) cell. The course tools and the grader read
it from notebooks of any origin, a learner's included, so every reader here takes the file's
data as data of any shape: a missing or malformed section reads as "no nbgrader metadata".

Pure functions of a cell (a :class:`nbformat.NotebookNode` or the plain ``dict`` of a notebook
read as JSON); nothing here imports nbgrader.
"""
from __future__ import annotations

from typing import Any

__all__ = ["nbgrader_meta", "grade_id", "is_graded", "is_solution"]


def nbgrader_meta(cell: Any) -> dict:
    """``cell.metadata["nbgrader"]`` when it is a mapping, else ``{}`` (the same object, so a
    course tool may write to it)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    section = meta.get("nbgrader") if isinstance(meta, dict) else None
    return section if isinstance(section, dict) else {}


def grade_id(cell: Any) -> str | None:
    """The cell's grade id, where it has a usable one (a non-empty string)."""
    gid = nbgrader_meta(cell).get("grade_id")
    return gid if isinstance(gid, str) and gid else None


def is_graded(cell: Any) -> bool:
    """Whether nbgrader grades the cell (a test cell, or an answer cell with points)."""
    return bool(nbgrader_meta(cell).get("grade"))


def is_solution(cell: Any) -> bool:
    """Whether the cell is one the learner answers in."""
    return bool(nbgrader_meta(cell).get("solution"))
