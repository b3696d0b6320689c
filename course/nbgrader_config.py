"""nbgrader configuration of the PTX Matrix Lab course (this folder is the course root).

Assignments are the folders of ``source/``; each holds one notebook, generated from its text form
in ``text/`` by ``scripts/course_build.py``. Learner code only calls the ``ptxlab`` package, so a
released notebook needs nothing beside it.
"""
from pathlib import Path

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

HERE = Path(__file__).resolve().parent

c.CourseDirectory.root = str(HERE)
c.CourseDirectory.course_id = "ptx-matrix-lab"
# The text forms hold the solutions: never release anything but the notebooks.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*", "*.py"]

# What a learner sees where a solution was: running the cell still defines the function, and
# calling it raises NotImplementedError, which every check reports as "not implemented yet".
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Kernel cells run on the CPU model where there is no GPU; leave them time.
c.Execute.timeout = 600
