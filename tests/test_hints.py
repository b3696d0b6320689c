"""The hints lead up to a solution without giving it: ``reveal()`` is the only way to see it,
and it marks the exercise as revealed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxlab.teach import progress_report, reveal

COURSE = Path(__file__).resolve().parents[1] / "course"
EXERCISES = [(notebook, attribute, ex)
             for notebook, found in progress_report._exercises_by_notebook().items()
             for attribute, ex in found if ex.hints]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _returned(solution: str) -> list[str]:
    """What the solution's function returns, each expression squashed (kernels: none)."""
    return [_squash(m.group(1)) for m in re.finditer(r"^\s*return\s+(.+)$", solution, re.M)
            if len(_squash(m.group(1))) >= 6]


@pytest.mark.parametrize("notebook,attribute,ex", EXERCISES,
                         ids=[ex.key for _, _, ex in EXERCISES])
def test_no_hint_is_the_solution(notebook, attribute, ex):
    solution = reveal.solution_text(attribute, notebook, COURSE)
    assert solution, f"{ex.key}: no solution cell found in the course's source"
    hints = _squash(" ".join(ex.hints))
    returned = _returned(solution)
    if returned:          # a function: its answer is what it returns, all of it
        assert not all(r in hints for r in returned), \
            f"{ex.key}: the hints spell out the solution ({returned})"
    else:                 # a kernel (or a choice): most of its statements are the answer
        lines = [_squash(line) for line in solution.splitlines()
                 if len(_squash(line)) > 12 and not line.strip().startswith(("//", "#"))]
        given = [line for line in lines if line in hints]
        assert len(given) <= max(1, len(lines) // 3), \
            f"{ex.key}: the hints give {len(given)} of the solution's {len(lines)} lines"
