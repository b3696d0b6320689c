"""A learner's progress, kept where they work: what each ``check`` said, exercise by exercise.

Every ``ex.<exercise>.check(...)`` run in a learner's workspace (the folder ``ptxlab open``
made) writes its result into the workspace's ``.ptxlab/progress.json``
(``$PTXLAB_PROGRESS_FILE`` names another file; outside a workspace nothing is written). :func:`show` in any notebook and ``ptxlab progress`` in a
terminal list each notebook's exercises as passed, attempted or not started, with a small
picture. A learner stuck after the last hint may :func:`reveal` the solution of one exercise,
read from the course's source in a checkout (a class's students have none, and the installed
package carries no solutions); the progress says which were revealed.
"""
from __future__ import annotations

import html
import importlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..run import sources

__all__ = ["record", "reveal", "show", "text_report", "notebook_progress", "progress_file",
           "NOTEBOOK_OF_MODULE", "PROGRESS_FILE_ENV"]

PROGRESS_FILE_ENV = "PTXLAB_PROGRESS_FILE"
#: Exercise module (``ptxlab.exercises.<name>``) -> the notebook that teaches it.
NOTEBOOK_OF_MODULE = {
    "basics": "01_warps_lanes_smem", "ldmatrix": "02_ldmatrix",
    "ldmatrix_trans": "03_ldmatrix_trans", "stmatrix": "04_stmatrix",
    "movmatrix": "05_movmatrix", "mma": "06_mma", "banks": "07_banks", "capstone": "08_capstone",
    "blackwell": "09_blackwell_forms", "layout_fit": "10_layout_fit",
}
PASSED, ATTEMPTED, NOT_STARTED = "passed", "attempted", "not started"
_COLOURS = {PASSED: "#2e7d32", ATTEMPTED: "#f9a825", NOT_STARTED: "#d0d0d0"}
_MARKS = {PASSED: "■", ATTEMPTED: "◧", NOT_STARTED: "□"}


def progress_file(start: Path | None = None) -> Path | None:
    """The progress file of the workspace holding ``start`` (the current folder), if any."""
    chosen = os.environ.get(PROGRESS_FILE_ENV)
    if chosen:
        return Path(chosen)
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".ptxlab" / "course-digest").is_file():      # made by ptxlab open
            return folder / ".ptxlab" / "progress.json"
    return None


def _load(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _update(key: str, change) -> None:
    """Apply ``change`` to one exercise's entry; progress never breaks a check."""
    try:
        path = progress_file()
        if path is None:
            return
        data = _load(path)
        entry = data.setdefault("exercises", {}).setdefault(key, {})
        change(entry)
        _save(path, data)
    except OSError:
        pass


def record(key: str, passed: bool) -> None:
    """What a check of exercise ``key`` said (a pass is never undone by a later attempt)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S")

    def change(entry: dict) -> None:
        entry["attempts"] = entry.get("attempts", 0) + 1
        entry["last"] = now
        if passed:
            entry.setdefault("first_passed", now)
        entry["status"] = PASSED if passed or entry.get("status") == PASSED else ATTEMPTED

    _update(key, change)


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
    key: str
    title: str
    status: str
    attempts: int
    revealed: bool


def notebook_progress(path: Path | None = None) -> dict[str, list[ExerciseProgress]]:
    """Each notebook's exercises, in course order, with what the learner did."""
    entries = _load(path or progress_file()).get("exercises", {})
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


def show(path: Path | None = None):
    """The progress picture in a notebook (text elsewhere)."""
    table = notebook_progress(path)
    try:
        from IPython.display import HTML, display
    except ImportError:
        print(text_report(path))
        return None
    display(HTML(picture_svg(table)))
    return None


def _solution_text(exercise, attribute: str, notebook: str, course: Path) -> str | None:
    """The instructor's solution for ``exercise`` from the course's source notebook."""
    nb = json.loads((course / "source" / notebook / f"{notebook}.ipynb").read_text())
    cells = nb["cells"]
    call = re.compile(rf"\bex\.{re.escape(attribute)}\.(check|grade)\(")
    for i, cell in enumerate(cells):
        if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        following = []
        for later in cells[i + 1:]:
            if later.get("metadata", {}).get("nbgrader", {}).get("solution"):
                break
            following.append("".join(later.get("source", "")))
        if any(call.search(text) for text in following):
            text = "".join(cell["source"])
            m = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.DOTALL)
            return m.group(1).rstrip() if m else text
    return None


def reveal(exercise, course: Path | None = None) -> str | None:
    """The solution of ``exercise`` once every hint was shown, from the course's source.

    Prints it (and returns it), marks it as revealed in the progress, or says why not."""
    from .exercises.base import graded_outside

    if graded_outside():
        print("No solutions while grading.")
        return None
    left = len(exercise.hints) - exercise._hints_shown
    if left > 0:
        print(f"Take the hints first: {left} left (call .hint()). The solution is for when "
              "they are all used.")
        return None
    course = Path(course or sources.PROJECT_ROOT / "course")
    found = None
    place = next(((notebook, attribute) for notebook, exercises in _exercises_by_notebook().items()
                  for attribute, value in exercises if value is exercise), None)
    if place is not None:
        try:
            found = _solution_text(exercise, place[1], place[0], course)
        except OSError:
            found = None
    if found is None:
        print("No solution can be shown here: the course's source notebooks are not on this "
              "machine (a class's notebooks come without them; ask your teacher).")
        return None
    _update(exercise.key, lambda entry: entry.update(revealed=True))
    marked = " (your progress marks it as revealed)" if progress_file() else ""
    print(f"The solution of '{exercise.title}'{marked}:\n")
    print(found)
    return found
