"""Whether this process is a notebook the grader runs.

The grader computes every verdict outside the notebook, from the answers it records; inside,
``check`` and ``grade`` only say so and no solution is shown. The grader sets the variable in
the kernel it starts; the exercises and the progress read it here, so neither has to ask the
other.
"""
from __future__ import annotations

import os

__all__ = ["GRADED_BY_GRADER_ENV", "graded_outside"]

#: Set to ``1`` in a graded notebook's kernel.
GRADED_BY_GRADER_ENV = "PTXLAB_GRADED_OUTSIDE"


def graded_outside() -> bool:
    """True in a notebook the grader runs: the verdicts are computed outside it."""
    return os.environ.get(GRADED_BY_GRADER_ENV) == "1"
