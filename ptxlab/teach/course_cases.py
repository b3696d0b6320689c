"""Every kernel solution of the course as a :class:`ptxlab.run.backends.KernelCase`.

The solutions live in the notebooks' text forms (``course/text/*.py``): a solution cell defines
``NAME = r\"\"\"<CUDA>\"\"\"`` and checks it with ``ex.<exercise>.check(NAME)``. This module reads
those cells, finds the :class:`~ptxlab.teach.exercises.kernel_exercise.KernelExercise` each one
answers, and turns every run of that exercise into a case, so the CPU model and the GPU can be
compared on exactly the code learners are asked to write.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np

from ..run import sources
from ..run.backends import KernelCase
from .exercises.kernel_exercise import KernelExercise

__all__ = ["kernel_cases", "solution_kernels"]

_TEXT_DIR = sources.PROJECT_ROOT / "course" / "text"
_IMPORT = re.compile(r"from ptxlab\.exercises import (\w+) as ex\b")
_SOURCE = re.compile(r'^(\w+) = r"""(.*?)"""', re.S | re.M)


def solution_kernels(text_dir: Path = _TEXT_DIR) -> list[tuple[str, KernelExercise, str]]:
    """``(notebook, exercise, solution source)`` for every kernel exercise in the course."""
    out = []
    for path in sorted(text_dir.glob("*.py")):
        text = path.read_text()
        m = _IMPORT.search(text)
        if not m:
            continue
        module = importlib.import_module(f"ptxlab.teach.exercises.{m.group(1)}")
        for cell in text.split("# %% solution")[1:]:
            cell = cell.split("\n# %%")[0]
            for name, source in _SOURCE.findall(cell):
                call = re.search(rf"ex\.(\w+)\.check\({name}\)", cell)
                if not call:
                    continue
                exercise = getattr(module, call.group(1))
                if isinstance(exercise, KernelExercise):
                    out.append((path.stem, exercise, source))
    return out


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
                compare=tuple(getattr(run, "compare", (run.out_index,)))))
    return cases
