"""The first grading step: what a submission says about itself in ``ptxlab`` metadata is dropped.

The grader writes there later -- who judged each test cell and with which seed, each cell's
kernel launches, the notebook's backends, a stop at the submission limit -- and the feedback and
the grader's own steps read it. A submission is a file the student wrote, so any such entry in
it was written by the student: left in place it would be read as the grader's (a planted
verdict, a forged backend, a value of the wrong type that stops the scoring). What the row, the
flags and the class summary are built from is not in the notebook at all but in the judge's
signed verdict file (:mod:`ptxlab.grading.verdict_file`).
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
