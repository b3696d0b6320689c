"""A learner's progress, the name the notebooks use (``from ptxlab import progress``).

What each ``check`` said is kept by :mod:`ptxlab.teach.progress_store`, shown by
:mod:`ptxlab.teach.progress_report` (:func:`show` in a notebook, ``ptxlab progress`` in a
terminal), and a solution is revealed, after the last hint, by :mod:`ptxlab.teach.reveal`. This
module only gathers their public names in one place.
"""
from __future__ import annotations

from .progress_report import ExerciseProgress, notebook_progress, picture_svg, show, text_report
from .progress_store import (ATTEMPTED, NOT_STARTED, NOTEBOOK_OF_MODULE, PASSED,
                             PROGRESS_FILE_ENV, progress_file, record)
from .reveal import reveal

__all__ = ["record", "reveal", "show", "text_report", "notebook_progress", "picture_svg",
           "progress_file", "ExerciseProgress", "NOTEBOOK_OF_MODULE", "PROGRESS_FILE_ENV",
           "PASSED", "ATTEMPTED", "NOT_STARTED"]
