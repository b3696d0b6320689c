"""The instructor's side of the course: isolated kernel launches, the grading sandbox, batch
autograding with nbgrader, and the reports it writes.

Submodules are imported on demand; importing this package loads neither nbgrader nor CuPy.
"""
from __future__ import annotations

__all__ = ["isolation", "sandbox", "batch", "report", "cli"]
