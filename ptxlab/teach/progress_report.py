"""A learner's progress as a report: each notebook's exercises as passed, attempted or not
started, as text (``ptxlab progress``) or as a picture (:func:`show` in a notebook).

The report reads the exercises (to list every one of the course, in order) and the store; the
exercises never read the report.
"""
from __future__ import annotations

import html
import importlib
from dataclasses import dataclass
from pathlib import Path

from .progress_store import (ATTEMPTED, NOT_STARTED, NOTEBOOK_OF_MODULE, PASSED, load_entries,
                             progress_file)

__all__ = ["ExerciseProgress", "notebook_progress", "text_report", "picture_svg", "show"]

_COLOURS = {PASSED: "#2e7d32", ATTEMPTED: "#f9a825", NOT_STARTED: "#d0d0d0"}
_MARKS = {PASSED: "■", ATTEMPTED: "◧", NOT_STARTED: "□"}


def _exercises_by_notebook() -> dict[str, list]:
    from .exercises.base import Exercise

    found = {}
    for module_name, notebook in NOTEBOOK_OF_MODULE.items():
        module = importlib.import_module(f"{__package__}.exercises.{module_name}")
        found[notebook] = [(name, value) for name, value in vars(module).items()
                           if isinstance(value, Exercise)]
    return found


@dataclass
class ExerciseProgress:
    """One exercise in the report."""

    key: str
    title: str
    status: str
    attempts: int
    revealed: bool


def notebook_progress(path: Path | None = None) -> dict[str, list[ExerciseProgress]]:
    """Each notebook's exercises, in course order, with what the learner did."""
    entries = load_entries(path)
    table = {}
    for notebook, exercises in _exercises_by_notebook().items():
        rows = []
        for _, ex in exercises:
            entry = entries.get(ex.key, {})
            rows.append(ExerciseProgress(ex.key, ex.title, entry.get("status", NOT_STARTED),
                                         entry.get("attempts", 0), bool(entry.get("revealed"))))
        table[notebook] = rows
    return table


def _counts(rows: list[ExerciseProgress]) -> str:
    n = {s: sum(r.status == s for r in rows) for s in (PASSED, ATTEMPTED, NOT_STARTED)}
    revealed = sum(r.revealed for r in rows)
    return (f"{n[PASSED]} passed, {n[ATTEMPTED]} attempted, {n[NOT_STARTED]} not started"
            + (f", {revealed} solution{'s' if revealed > 1 else ''} revealed" if revealed else ""))


def text_report(path: Path | None = None, detail: bool = True) -> str:
    """The progress as text: a row of marks per notebook, then each exercise."""
    lines = [f"Progress ({path or progress_file() or 'no workspace here'}): {_MARKS[PASSED]} passed  "
             f"{_MARKS[ATTEMPTED]} attempted  {_MARKS[NOT_STARTED]} not started  (* revealed)"]
    for notebook, rows in notebook_progress(path).items():
        marks = "".join(_MARKS[r.status] for r in rows)
        lines.append(f"{notebook:<20} {marks:<8} {_counts(rows)}")
        if detail:
            for r in rows:
                lines.append(f"    {_MARKS[r.status]}{'*' if r.revealed else ' '} {r.title}"
                             + (f" ({r.attempts} checks)" if r.attempts else ""))
    return "\n".join(lines)


def picture_svg(table: dict[str, list[ExerciseProgress]]) -> str:
    """One row of squares per notebook: green passed, amber attempted, grey not started; a
    revealed solution is crossed."""
    size, gap, label_w = 18, 4, 170
    width = label_w + max(len(r) for r in table.values()) * (size + gap) + 220
    height = len(table) * (size + gap) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">']
    for row, (notebook, rows) in enumerate(table.items()):
        y = row * (size + gap)
        parts.append(f'<text x="0" y="{y + 13}">{html.escape(notebook)}</text>')
        for col, r in enumerate(rows):
            x = label_w + col * (size + gap)
            parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" rx="3" '
                         f'fill="{_COLOURS[r.status]}"><title>{html.escape(r.title)}: '
                         f'{r.status}{", solution revealed" if r.revealed else ""}</title></rect>')
            if r.revealed:
                parts.append(f'<line x1="{x + 3}" y1="{y + 3}" x2="{x + size - 3}" '
                             f'y2="{y + size - 3}" stroke="#000" stroke-width="2"/>')
        x = label_w + len(rows) * (size + gap) + 8
        parts.append(f'<text x="{x}" y="{y + 13}" fill="#555">{html.escape(_counts(rows))}</text>')
    y = len(table) * (size + gap) + 16
    for i, status in enumerate((PASSED, ATTEMPTED, NOT_STARTED)):
        x = i * 110
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" rx="2" '
                     f'fill="{_COLOURS[status]}"/><text x="{x + 16}" y="{y}">{status}</text>')
    parts.append("</svg>")
    return "".join(parts)


def show(path: Path | None = None) -> None:
    """The progress picture in a notebook (text elsewhere)."""
    table = notebook_progress(path)
    try:
        from IPython.display import HTML, display
    except ImportError:
        print(text_report(path))
        return None
    display(HTML(picture_svg(table)))
    return None
