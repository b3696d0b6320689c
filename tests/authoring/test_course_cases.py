"""Every kernel exercise of the course is found with its solution, so the CPU-vs-GPU comparison
(``measure/gpu/compare_backends.py``) covers exactly the kernels learners are asked to write."""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np

import ptxlab.exercises
from ptxlab.authoring import course_cases
from ptxlab.exercises.base import Exercise
from ptxlab.exercises.kernel_exercise import KernelExercise


def _declared_exercises() -> list[Exercise]:
    out = []
    for info in pkgutil.iter_modules(ptxlab.exercises.__path__):
        module = importlib.import_module(f"ptxlab.exercises.{info.name}")
        out += [v for v in vars(module).values() if isinstance(v, Exercise)]
    return out


def test_every_exercise_that_runs_a_kernel_is_a_kernel_exercise():
    odd = [e.key for e in _declared_exercises()
           if hasattr(e, "kernel_name") and not isinstance(e, KernelExercise)]
    assert not odd, f"these run kernels outside KernelExercise, so no comparison sees them: {odd}"


def test_every_kernel_exercise_has_its_solution_found():
    declared = {e.key for e in _declared_exercises() if isinstance(e, KernelExercise)}
    found = {e.key for _, e, _ in course_cases.solution_kernels()}
    assert declared and declared == found, (declared - found, found - declared)


def test_cases_cover_visible_and_hidden_runs():
    small = course_cases.kernel_cases(np.random.default_rng(0), small=True)
    full = course_cases.kernel_cases(np.random.default_rng(0), small=False)
    assert len(full) > len(small) >= len(course_cases.solution_kernels())
    assert all(c.compare for c in full)
