"""What a grading batch is asked and what it answers, and the one interface that grades it.

:class:`BatchOptions` (the instructor's request), :class:`BatchResult` (every student's
outcome) and :class:`GradingPool`, which both places that grade implement: worker processes on
this machine (:class:`~ptxlab.grading.local_pool.LocalPool`) and a Dask cluster
(:class:`~ptxlab.grading.dask_pool.DaskPool`). :mod:`ptxlab.grading.batch` drives either through
it, so data flows one way: batch -> pool -> workers, never back up by import.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, TextIO

from .outcome import StudentOutcome

__all__ = ["BatchOptions", "BatchResult", "GradingPool", "Finish", "default_workers"]

#: What a pool calls for each finished student: ``(outcome, students still running)``.
Finish = Callable[[StudentOutcome, int], None]


def default_workers() -> int:
    """One more worker than the cores this process may use: a worker waits for its notebook's
    kernel about half the time, so one more keeps every core busy (on the 2-core machine, 40
    submissions took 42 s with 2 workers, 33-38 s with 3, 40 s with 4)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores) + 1


@dataclass
class BatchOptions:
    course_root: Path
    assignment: str
    workers: int = field(default_factory=default_workers)
    force: bool = False                 # regrade students already in the ledger
    retry_failed: bool = False          # regrade students whose last attempt timed out/crashed
    submission_timeout_s: float = 1800.0
    grading_config: Path | None = None
    students: list[str] | None = None   # only these (default: every collected submission)
    progress: TextIO | None = None      # where the progress bar goes (None: nowhere)
    #: Run once the workers are starting, before anyone is graded (the preflight, while the
    #: workers import nbgrader); an exception it raises stops the batch with nobody graded.
    #: On a cluster each worker runs the preflight itself instead (``preflight``).
    before_grading: Callable[[], None] | None = None
    #: A Dask scheduler's address: grade on its workers (:mod:`ptxlab.grading.dask_pool`);
    #: ``None`` grades with worker processes on this machine.
    scheduler: str | None = None
    #: On a cluster: each worker starts one sandboxed kernel and one launch before it grades.
    preflight: bool = True

    @property
    def out_dir(self) -> Path:
        return Path(self.course_root) / "grading" / self.assignment


@dataclass
class BatchResult:
    outcomes: list[StudentOutcome]      # one per collected student, graded now or before
    graded_now: int
    skipped: int
    interrupted: bool
    wall_s: float


class GradingPool(Protocol):
    """Somewhere students are graded."""

    def grade(self, todo: list[str], submissions: dict[str, str], finish: Finish) -> None:
        """Grade every student of ``todo`` (``submissions``: student -> submission time) and
        ``finish`` each as soon as it is graded; ``KeyboardInterrupt`` leaves the rest."""
