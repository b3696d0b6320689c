"""The two time limits of a graded notebook's run, and the words a row gives them.

* the **cell limit** (nbgrader's ``Execute.timeout``, ``PTXLAB_CELL_TIMEOUT_S``): one cell, or
  one reading of a test cell's answers by the grader;
* the **submission limit** (``SandboxedExecute.submission_timeout_s``, ``ptxlab grade
  --submission-timeout``): all of the notebook's cells and readings together.

Whichever runs out first interrupts the running cell, and the cell says which limit it was and
its figure (never the bare ``KeyboardInterrupt`` the interrupt raises). The submission limit also
ends the run there: the cells after it are not run, and every answer read before it is judged
and keeps its points. Where the run ended is kept in the notebook's grader metadata
(:data:`STOP_KEY`), from which the student's row names the limit and what was graded.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..teach.nbgrader_cells import grade_id

if TYPE_CHECKING:                 # the row's readers import this module without nbformat
    from nbformat.notebooknode import NotebookNode

__all__ = ["RunClock", "CELL_TIMEOUT", "SUBMISSION_TIMEOUT", "STOP_KEY", "cell_name",
           "cell_limit_reason", "submission_limit_reason", "timeout_output", "reword_interrupt",
           "record_stop", "stop_note"]

#: The error names a cell stopped at a limit shows.
CELL_TIMEOUT = "CellTimeout"
SUBMISSION_TIMEOUT = "SubmissionTimeout"
#: Where the run's end at the submission limit is kept: ``nb.metadata.ptxlab[STOP_KEY]``.
STOP_KEY = "stopped_at_limit"
#: What the errors of an interrupt look like before they are worded (the kernel's and nbgrader's).
INTERRUPT_ERRORS = ("KeyboardInterrupt", "CellTimeoutError")
#: A limit this close to its deadline counts as the submission limit's doing.
_SLACK_S = 0.5


def cell_name(cell, index: int) -> str:
    """How a row names a cell: its place in the notebook (from 1) and its grade id."""
    gid = grade_id(cell)
    return f"cell {index + 1}" + (f" ({gid})" if gid else "")


def cell_limit_reason(limit_s: float) -> str:
    return (f"ran past the cell limit of {limit_s:g} s and was interrupted (an endless loop, or "
            "a very slow answer?)")


def submission_limit_reason(limit_s: float) -> str:
    return (f"the submission limit of {limit_s:g} s (all of the notebook's cells together) ran "
            "out while this cell ran: it was interrupted, and the cells after it were not run")


class RunClock:
    """One notebook run's submission deadline: each cell's timeout is the cell limit or what is
    left of the submission limit, whichever is shorter, and a stopped cell is told which."""

    def __init__(self, cell_limit_s: float | None, submission_limit_s: float | None,
                 clock: Callable[[], float] = time.monotonic):
        self.cell_limit_s = cell_limit_s if cell_limit_s and cell_limit_s > 0 else None
        self.submission_limit_s = (submission_limit_s if submission_limit_s
                                   and submission_limit_s > 0 else None)
        self._clock = clock
        self._deadline = (clock() + self.submission_limit_s
                          if self.submission_limit_s is not None else None)

    def left_s(self) -> float | None:
        """Seconds left of the submission limit (``None``: no such limit)."""
        return None if self._deadline is None else self._deadline - self._clock()

    def expired(self) -> bool:
        left = self.left_s()
        return left is not None and left <= 0

    def timeout_for(self, cell_timeout: float | None) -> int | None:
        """The timeout of the next cell: the cell limit, cut to what is left (at least 1 s)."""
        left = self.left_s()
        if left is None:
            return None if cell_timeout is None else int(cell_timeout)
        cut = max(1, math.ceil(left))
        return cut if cell_timeout is None else min(int(cell_timeout), cut)

    def which_fired(self) -> str:
        """``"submission"`` when the submission limit is (about) spent, else ``"cell"``."""
        left = self.left_s()
        return "submission" if left is not None and left <= _SLACK_S else "cell"

    def reason(self, which: str) -> str:
        """The words for a cell stopped by limit ``which``."""
        if which == "submission" and self.submission_limit_s is not None:
            return submission_limit_reason(self.submission_limit_s)
        return cell_limit_reason(self.cell_limit_s or 0)


def timeout_output(clock: RunClock, which: str) -> NotebookNode:
    """The error output of a cell stopped at limit ``which``."""
    from nbformat.notebooknode import NotebookNode

    ename = SUBMISSION_TIMEOUT if which == "submission" else CELL_TIMEOUT
    evalue = clock.reason(which)
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def reword_interrupt(cell: NotebookNode, clock: RunClock, which: str) -> None:
    """Replace the interrupt's errors in ``cell`` by one that names the limit."""
    outputs = [o for o in cell.get("outputs") or []
               if not (o.get("output_type") == "error" and o.get("ename") in INTERRUPT_ERRORS)]
    outputs.append(timeout_output(clock, which))
    cell.outputs = outputs


def record_stop(nb: NotebookNode, limit_s: float, where: str, graded: Sequence[str]) -> None:
    """Keep, in the grader's metadata, that the run ended at the submission limit ``where``
    (``"in cell 7 (receive)"``) and which test cells were graded from what ran before it."""
    from nbformat.notebooknode import NotebookNode

    meta = nb.metadata.setdefault("ptxlab", NotebookNode())
    meta[STOP_KEY] = {"limit_s": limit_s, "where": where, "graded": list(graded)}


def stop_note(nb: NotebookNode | dict) -> str | None:
    """The row's words for a run that ended at the submission limit, or ``None``."""
    meta = (nb.get("metadata") or {}).get("ptxlab") if isinstance(nb, dict) else None
    stop = meta.get(STOP_KEY) if isinstance(meta, dict) else None
    if not isinstance(stop, dict) or not isinstance(stop.get("limit_s"), (int, float)):
        return None
    listed = stop.get("graded")
    graded = [g for g in listed if isinstance(g, str)] if isinstance(listed, list) else []
    where = str(stop.get("where") or "in a cell")[:120]
    return (f"the notebook's cells together ran past the submission limit of "
            f"{stop['limit_s']:g} s and were stopped {where}; "
            + ("the answers that ran before it were graded: " + ", ".join(graded)
               if graded else "no answer had run before it"))
