"""nbgrader configuration of the PTX Matrix Lab course (this folder is the course root).

Assignments are the folders of ``source/``; each holds one notebook, generated from its text form
in ``text/`` by ``tools/course/course_build.py``. Learner code only calls the ``ptxlab`` package, so a
released notebook needs nothing beside it.

The grading settings (sandboxed kernels, time and memory limits, isolated kernel launches) live
in ``autograder/nbgrader_config.py`` and nowhere else (this file sets none of them, so the
limits its table documents are the ones that hold); they are loaded at the end when that file is
found beside this folder or at ``$PTXLAB_GRADING_CONFIG``, so the stock ``nbgrader autograde``
grades with them too. A copy of this file elsewhere, without either, is plain nbgrader.
"""
import os
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

_grading = Path(os.environ.get("PTXLAB_GRADING_CONFIG") or HERE.parent / "autograder" / "nbgrader_config.py")
if _grading.is_file():
    load_subconfig(str(_grading))  # noqa: F821 - provided by nbgrader when it loads this file

