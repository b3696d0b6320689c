"""The first grading step: what a submission says about itself in ``ptxlab`` metadata is dropped.

The grader writes there later -- each test cell's verdict and flags, each cell's kernel launches,
the notebook's backends -- and reads it back when it scores, flags and reports. A submission is
a file the student wrote, so any such entry in it was written by the student: left in place it
would be read as the grader's (a planted flag, a forged backend, a value of the wrong type that
stops the scoring).
"""
from __future__ import annotations

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

__all__ = ["DropLearnerMetadata", "GRADER_KEY"]

#: The metadata key the grader owns, on the notebook and on every cell.
GRADER_KEY = "ptxlab"


class DropLearnerMetadata(NbGraderPreprocessor):
    """Removes the grader's metadata key from the submitted notebook and all its cells."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        nb.metadata.pop(GRADER_KEY, None)
        for cell in nb.cells:
            (cell.get("metadata") or {}).pop(GRADER_KEY, None)
        return nb, resources
