"""A cap on the bytes of each graded cell's output, images included.

nbgrader's ``LimitOutput`` counts lines: a cell that shows a few huge images (or one line of a
hundred megabytes) passes it, and the graded notebook, the feedback and the gradebook's copy grow
by that much for every student who does it. This keeps each cell's outputs within
``max_bytes_per_cell``: text is cut, an output that does not fit is removed, and a note on
stderr says what was removed.

Cutting never hides that a cell failed. nbgrader's ``SaveAutoGrades`` scores a test cell the
judge does not decide from its outputs (an error or a stderr stream: no points), so:

* the cell's errors stay, in their places (a huge message or traceback shortened; the first
  error always, the others while they fit in half the cap), with room kept for them before
  anything else is kept: learner code that prints past the cap and then fails still shows its
  error, and the feedback says why;
* the note is on stderr, which nbgrader scores as a failure: what was cut away (a stderr stream,
  an ``execute_result`` read as partial credit) can never leave a better score than the cell
  had as it ran. A test cell cut here therefore scores no points, whatever it printed before
  (the note says so). A test cell the judge decides holds the judge's report by then, with an
  error where it failed, and that error stays too.
"""
from __future__ import annotations

import json

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

__all__ = ["LimitOutputBytes"]

#: An error output over this many bytes is shortened in a cut cell, to its name, the first
#: characters of its message and the last lines of its traceback (at most about 25 kB).
ERROR_BYTES = 50_000
ERROR_TEXT_CHARS = 2_000
TRACEBACK_LINES = 20
TRACEBACK_LINE_CHARS = 1_000
#: Bytes kept for the note (always written at the end of a cut cell).
_NOTE_ROOM = 400


def _size(output) -> int:
    return len(json.dumps(output, default=str))


def _note(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stderr", text=f"[grader] {text}\n")


def _short(text, chars: int) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= chars else text[:chars] + f" ... [{len(text) - chars} characters cut]"


def _shortened_error(out) -> NotebookNode:
    """The error output ``out`` with a huge message or traceback shortened; its name stays."""
    tb = out.get("traceback") or []
    tb = [tb] if isinstance(tb, str) else list(tb)
    if len(tb) > TRACEBACK_LINES:
        tb = [f"... [{len(tb) - TRACEBACK_LINES} traceback lines cut]"] + tb[-TRACEBACK_LINES:]
    return NotebookNode(output_type="error", ename=_short(out.get("ename", ""), 200),
                        evalue=_short(out.get("evalue", ""), ERROR_TEXT_CHARS),
                        traceback=[_short(line, TRACEBACK_LINE_CHARS) for line in tb])


def _kept_errors(outputs, limit: int) -> dict[int, NotebookNode]:
    """``{index: shortened error}``: every error of the cell while they fit in half the cap,
    the first one always (it is the cell's own, and the evidence it failed)."""
    kept, used = {}, 0
    for i, out in enumerate(outputs):
        if out.get("output_type") != "error":
            continue
        err = _shortened_error(out) if _size(out) > ERROR_BYTES else out
        size = _size(err)
        if kept and used + size > limit // 2:
            continue
        kept[i] = err
        used += size
    return kept


def _cut_stream(out, room: int):
    """The stream ``out`` with its text cut to fit ``room`` bytes, or ``None``."""
    text = out.get("text", "")
    text = text if isinstance(text, str) else "".join(text)
    head = _size(NotebookNode(output_type="stream", name=out.get("name", ""), text=""))
    n = room - head
    while n > 0:
        size = len(json.dumps(text[:n]))
        if head + size <= room:
            break
        n = min(n - 1, n * (room - head) // size)
    if n <= 0:
        return None
    return NotebookNode(output_type="stream", name=out.get("name", "stdout"), text=text[:n])


def _cut(outputs, limit: int) -> list:
    """The outputs kept within ``limit`` bytes (the note's room aside): every error kept, and
    as much of the rest, in order, as fits around them."""
    errors = _kept_errors(outputs, limit)
    room = limit - _NOTE_ROOM - sum(_size(e) for e in errors.values())
    kept, full = [], False
    for i, out in enumerate(outputs):
        if i in errors:
            kept.append(errors[i])
            continue
        if full or out.get("output_type") == "error":
            continue
        size = _size(out)
        if size <= room:
            kept.append(out)
            room -= size
            continue
        full = True           # nothing after this output but the errors
        if out.get("output_type") == "stream" and room > 200:
            cut = _cut_stream(out, room)
            if cut is not None:
                kept.append(cut)
    return kept


class LimitOutputBytes(NbGraderPreprocessor):
    """Keep each cell's outputs within ``max_bytes_per_cell`` bytes (0: no limit), its errors
    always."""

    max_bytes_per_cell = Integer(1_000_000, config=True,
                                 help="bytes of output a graded cell may keep (0: no limit)")

    def preprocess_cell(self, cell, resources, cell_index):
        limit = self.max_bytes_per_cell
        if limit <= 0 or cell.get("cell_type") != "code" or not cell.get("outputs"):
            return cell, resources
        total = sum(_size(o) for o in cell.outputs)
        if total <= limit:
            return cell, resources
        kept = _cut(cell.outputs, limit)
        kept.append(_note(f"this cell's output was {total / 1e6:.1f} MB; the grader keeps "
                          f"{limit / 1e6:.1f} MB of it, so the rest was removed (a cell cut "
                          f"here scores no points; its errors are kept)"))
        cell.outputs = kept
        return cell, resources
