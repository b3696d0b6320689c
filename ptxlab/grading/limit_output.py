"""A cap on the bytes of each graded cell's output, images included.

nbgrader's ``LimitOutput`` counts lines: a cell that shows a few huge images (or one line of a
hundred megabytes) passes it, and the graded notebook, the feedback and the gradebook's copy grow
by that much for every student who does it. This keeps each cell's outputs within
``max_bytes_per_cell``: text is cut, an output that does not fit is replaced by a note saying
what was removed.
"""
from __future__ import annotations

import json

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

__all__ = ["LimitOutputBytes"]


def _size(output) -> int:
    return len(json.dumps(output, default=str))


def _note(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stderr", text=f"[grader] {text}\n")


class LimitOutputBytes(NbGraderPreprocessor):
    """Keep each cell's outputs within ``max_bytes_per_cell`` bytes (0: no limit)."""

    max_bytes_per_cell = Integer(1_000_000, config=True,
                                 help="bytes of output a graded cell may keep (0: no limit)")

    def preprocess_cell(self, cell, resources, cell_index):
        limit = self.max_bytes_per_cell
        if limit <= 0 or cell.get("cell_type") != "code" or not cell.get("outputs"):
            return cell, resources
        total = sum(_size(o) for o in cell.outputs)
        if total <= limit:
            return cell, resources
        kept, used = [], 0
        for out in cell.outputs:
            size = _size(out)
            if used + size <= limit:
                kept.append(out)
                used += size
                continue
            room = limit - used
            if out.get("output_type") == "stream" and room > 200:
                text = out.get("text", "")
                text = text if isinstance(text, str) else "".join(text)
                out.text = text[: room - 200]
                kept.append(out)
            break
        kept.append(_note(f"this cell's output was {total / 1e6:.1f} MB; the grader keeps "
                          f"{limit / 1e6:.1f} MB of it, so the rest was removed"))
        cell.outputs = kept
        return cell, resources
