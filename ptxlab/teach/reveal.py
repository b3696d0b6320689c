"""A solution shown to a learner stuck after the last hint, and marked in their progress.

``ex.<exercise>.reveal()`` is the only way the course shows a solution: the hints lead up to it
without giving it. The solution is read from the course's source notebook in a checkout (a
class's students have none, and the installed package carries no solutions), and the progress
records that it was revealed.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Protocol

from ..run import sources
from . import progress_store
from .graded import graded_outside
from .nbgrader_cells import is_solution

__all__ = ["reveal", "solution_text"]


class _Revealable(Protocol):
    key: str
    title: str
    hints: tuple
    _hints_shown: int


def _attribute_of(exercise: _Revealable) -> str | None:
    """The name a notebook calls ``exercise`` by (``ex.<name>``), from the module that defines
    it, which is loaded since the exercise exists."""
    module = sys.modules.get(f"{__package__}.exercises.{exercise.key.split('.', 1)[0]}")
    if module is None:
        return None
    return next((name for name, value in vars(module).items() if value is exercise), None)


def solution_text(attribute: str, notebook: str, course: Path) -> str | None:
    """The instructor's solution of ``ex.<attribute>`` from the course's source notebook: the
    solution cell followed by that exercise's ``check`` or ``grade``."""
    nb = json.loads((course / "source" / notebook / f"{notebook}.ipynb").read_text())
    cells = nb["cells"]
    call = re.compile(rf"\bex\.{re.escape(attribute)}\.(check|grade)\(")
    for i, cell in enumerate(cells):
        if not is_solution(cell):
            continue
        following = []
        for later in cells[i + 1:]:
            if is_solution(later):
                break
            following.append("".join(later.get("source", "")))
        if any(call.search(text) for text in following):
            text = "".join(cell["source"])
            m = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.DOTALL)
            return m.group(1).rstrip() if m else text
    return None


def reveal(exercise: _Revealable, course: Path | None = None) -> str | None:
    """The solution of ``exercise`` once every hint was shown, from the course's source.

    Prints it (and returns it), marks it as revealed in the progress, or says why not."""
    if graded_outside():
        print("No solutions while grading.")
        return None
    left = len(exercise.hints) - exercise._hints_shown
    if left > 0:
        print(f"Take the hints first: {left} left (call .hint()). The solution is for when "
              "they are all used.")
        return None
    course = Path(course or sources.PROJECT_ROOT / "course")
    attribute, notebook = _attribute_of(exercise), progress_store.notebook_of(exercise.key)
    found = None
    if attribute is not None and notebook is not None:
        try:
            found = solution_text(attribute, notebook, course)
        except OSError:
            found = None
    if found is None:
        print("No solution can be shown here: the course's source notebooks are not on this "
              "machine (a class's notebooks come without them; ask your teacher).")
        return None
    progress_store.mark_revealed(exercise.key)
    marked = " (your progress marks it as revealed)" if progress_store.progress_file() else ""
    print(f"The solution of '{exercise.title}'{marked}:\n")
    print(found)
    return found
