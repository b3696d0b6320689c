"""The instructor's side of the course: the grading sandbox, batch autograding with nbgrader,
and the reports it writes. Learner kernels are launched through :mod:`ptxlab.run.backends`.

Submodules are imported on demand; importing this package loads neither nbgrader nor CuPy.
"""
