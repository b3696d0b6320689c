"""How long each grading step took for the submission being graded.

The grading steps (:mod:`ptxlab.grading.judge_steps`, :mod:`ptxlab.grading.execute`) run inside
the grading worker's process, one submission at a time; each adds its time here, and the
worker (:mod:`ptxlab.grading.grading_worker`) reads the total into the student's row of the
ledger (``steps_s``), where a benchmark, or an instructor wondering why grading is slow, finds
it. Data flows one way: steps write, the worker reads once per submission and starts afresh.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["start_submission", "timed", "add", "taken"]

_steps: dict[str, float] = {}


def start_submission() -> None:
    """Forget the last submission's times."""
    _steps.clear()


def add(step: str, seconds: float) -> None:
    """Count ``seconds`` more for ``step``."""
    _steps[step] = _steps.get(step, 0.0) + seconds


@contextlib.contextmanager
def timed(step: str) -> Iterator[None]:
    """Count the time the block takes for ``step`` (also when it raises)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        add(step, time.perf_counter() - t0)


def taken() -> dict[str, float]:
    """``{step: seconds}`` of the submission graded since :func:`start_submission`."""
    return {step: round(s, 3) for step, s in _steps.items()}
