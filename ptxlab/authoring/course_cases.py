"""The course's solutions as data: every solution cell with the exercise it answers, and every
kernel solution as a :class:`ptxlab.run.backends.KernelCase`.

The solutions live in the notebooks' text forms (``course/text/*.py``): a solution cell defines
the answer (a function, or ``NAME = r\"\"\"<CUDA>\"\"\"`` for a kernel) and checks it with
``<alias>.<exercise>.check(NAME)``, where ``<alias>`` is a module of ``ptxlab.exercises`` the
notebook imports. This module reads those cells and finds the exercise each one answers, so the
CPU-vs-GPU comparison runs exactly the kernels learners are asked to write, and the mutation
harness (:mod:`ptxlab.authoring.mutants`) varies exactly the answers they are asked to give. Nothing
here lists the exercises: a new solution cell is found by reading the text forms.
"""
from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..run import sources
from ..run.backends import KernelCase
from .course_notebooks import percent_cells
from ..teach.exercises.base import Exercise
from ..teach.exercises.kernel_exercise import KernelExercise

__all__ = ["SolutionCell", "solution_cells", "kernel_cases", "solution_kernels", "TEXT_DIR"]

TEXT_DIR = sources.PROJECT_ROOT / "course" / "text"
_CHECK = re.compile(r"\b(\w+)\.(\w+)\.check\((\w+)\)")
_SOURCE = re.compile(r'^(\w+) = r"""(.*?)"""', re.S | re.M)


@dataclass(frozen=True)
class SolutionCell:
    """One solution cell of a notebook's text form and the exercise it answers.

    ``code`` is the cell as written (without its ``# %%`` header); ``line`` is the line of the
    text form where ``code`` starts; ``answer_name`` is what the cell passes to ``check``;
    ``hidden_tested`` says whether a test cell grades the exercise with ``hidden=True``."""

    notebook: str
    cell_id: str
    line: int
    code: str
    exercise: Exercise
    answer_name: str
    hidden_tested: bool

    def kernel_source(self) -> str | None:
        """The CUDA source the cell assigns to ``answer_name``, or ``None`` for another answer."""
        return dict(_SOURCE.findall(self.code)).get(self.answer_name)


def _exercise_modules(text: str) -> dict[str, str]:
    """``alias -> module`` for every ``from ptxlab.exercises import MODULE [as ALIAS]``."""
    out = {}
    for cell in percent_cells(text):
        if cell.kind == "markdown" or cell.code.lstrip().startswith("%"):
            continue          # a magic cell (``%load_ext``, ``%%cuda``) is not Python
        out.update(_imported_exercises(cell.code))
    return out


def _imported_exercises(code: str) -> dict[str, str]:
    out = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module in ("ptxlab.exercises",
                                                                "ptxlab.teach.exercises"):
            for name in node.names:
                out[name.asname or name.name] = name.name
    return out


def solution_cells(text_dir: Path = TEXT_DIR) -> list[SolutionCell]:
    """Every solution cell of the course that checks an exercise, in course order."""
    out = []
    for path in sorted(text_dir.glob("*.py")):
        text = path.read_text()
        modules = _exercise_modules(text)
        cells = percent_cells(text)
        tests = "".join(c.code for c in cells if c.kind == "tests")
        for kind, opts, line, code in cells:
            if kind != "solution":
                continue
            for alias, attribute, answer in _CHECK.findall(code):
                if alias not in modules:
                    continue
                module = importlib.import_module(f"ptxlab.teach.exercises.{modules[alias]}")
                exercise = getattr(module, attribute, None)
                if not isinstance(exercise, Exercise):
                    continue
                hidden = re.search(rf"\b{alias}\.{attribute}\.grade\(\s*\w+\s*,\s*hidden\s*=\s*"
                                   r"True\s*\)", tests) is not None
                out.append(SolutionCell(path.stem, opts.get("id", ""), line, code, exercise,
                                        answer, hidden))
    return out


def exercise_home(exercise: Exercise) -> tuple[str, str]:
    """``(module, name)``: where under ``ptxlab.teach.exercises`` a notebook imports
    ``exercise`` from."""
    import pkgutil

    from ..teach import exercises as package
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if value is exercise:
                return module.__name__, name
    raise LookupError(f"no exercise module holds {exercise.key}")


def solution_kernels(text_dir: Path = TEXT_DIR) -> list[tuple[str, KernelExercise, str]]:
    """``(notebook, exercise, solution source)`` for every kernel exercise in the course."""
    return [(cell.notebook, cell.exercise, cell.kernel_source())
            for cell in solution_cells(text_dir)
            if isinstance(cell.exercise, KernelExercise) and cell.kernel_source() is not None]


def kernel_cases(rng: np.random.Generator, small: bool = True) -> list[KernelCase]:
    """One case per run of every kernel exercise (visible runs; with ``small=False`` the hidden
    runs too). ``compare`` names the output argument, which must agree bit for bit."""
    cases = []
    for notebook, exercise, source in solution_kernels():
        runs = list(exercise.visible())
        if not small:
            runs += exercise.hidden_cases(rng)
        for run in runs:
            cases.append(KernelCase(
                name=f"{notebook}:{exercise.key} ({run.label})", source=source,
                kernel=exercise.kernel_name, grid=tuple(run.grid), block=tuple(run.block),
                args=[a.copy() if isinstance(a, np.ndarray) else a for a in run.args],
                shared_mem=run.shared_mem,
                compare=tuple(getattr(run, "compare", (run.out_index,))),
                options=tuple(getattr(run, "options", ()))))
    return cases
