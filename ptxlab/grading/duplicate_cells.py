"""Copied cells: a cell that appears more than once is graded as its first copy.

Copying a cell in Jupyter copies its nbgrader metadata, grade id included, so a learner who
copy-pastes a test cell to run it again, or an answer cell to try a variant, hands in a notebook
with one grade id several times. nbgrader's own ``DeduplicateIds`` keeps the *last* copy and
leaves an empty ``nbgrader`` entry on the others, which its metadata check then refuses
(``SchemaTooOldError``): the whole notebook would get 0.

:class:`KeepFirstCopies` runs in its place, in the sanitizing steps before anything reads the
grade ids: the first copy in the notebook keeps the cell's identity, and every later copy
becomes a plain cell (its code still runs, as the learner wrote it; only its grading identity
goes). :func:`copy_notes` words the same finding for the student's row.
"""
from __future__ import annotations

from collections import Counter

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from ..teach.nbgrader_cells import grade_id

__all__ = ["KeepFirstCopies", "duplicated_cells", "copy_notes"]


def duplicated_cells(nb: NotebookNode | dict) -> dict[str, int]:
    """``{grade id: how many cells carry it}`` for every grade id on more than one cell."""
    cells = nb.get("cells") if isinstance(nb, dict) else None
    counts = Counter(gid for gid in map(grade_id, cells if isinstance(cells, list) else [])
                     if gid is not None)
    return {gid: n for gid, n in counts.items() if n > 1}


def copy_notes(nb: NotebookNode | dict) -> list[str]:
    """One line per copied cell, for the student's row."""
    return [f"cell {gid} appears {n} times; the first copy was graded"
            for gid, n in duplicated_cells(nb).items()]


class KeepFirstCopies(NbGraderPreprocessor):
    """Every later copy of a cell with a grade id loses its nbgrader metadata; the first keeps
    it."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        seen: set[str] = set()
        for index, cell in enumerate(nb.cells):
            gid = grade_id(cell)
            if gid is None:
                continue
            if gid in seen:
                self.log.warning("cell %s appears more than once: the copy at cell %d runs "
                                 "as a plain cell, the first copy is graded", gid, index + 1)
                del cell.metadata["nbgrader"]
            seen.add(gid)
        return nb, resources
