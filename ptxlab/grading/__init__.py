"""The instructor's side of the course: the grading sandbox, batch autograding with nbgrader,
and the reports it writes. Learner kernels are launched through :mod:`ptxlab.run.backends`.

Which side of the sandbox each module is on:

* **inside the sandbox** of a graded notebook: :mod:`~ptxlab.grading.sandbox_client` (the whole
  ``ptxlab`` the notebook sees: no answer in it) and :mod:`~ptxlab.grading.kernel_boot` (the
  kernel's limits, before IPython starts);
* **the grader, one notebook**: :mod:`~ptxlab.grading.duplicate_cells` (a copied cell graded as
  its first copy), :mod:`~ptxlab.grading.judge_steps` (the judge's questions before, its
  verdicts after), :mod:`~ptxlab.grading.execute` (the notebook run in the sandbox, answers
  asked after each test cell, within :mod:`~ptxlab.grading.run_limits`' cell and submission
  limits), :mod:`~ptxlab.grading.judge` (verdicts from the replies, kept beside the autograded
  notebook by :mod:`~ptxlab.grading.verdict_file`), :mod:`~ptxlab.grading.backend_notes`,
  :mod:`~ptxlab.grading.kernel_manager`, :mod:`~ptxlab.grading.client_package` and
  :mod:`~ptxlab.grading.sandbox` (what the sandbox shows);
* **the grader, one student per request**: :mod:`~ptxlab.grading.grading_worker` (a process
  running nbgrader), :mod:`~ptxlab.grading.worker_handle` (that process seen from its driver);
* **the batch**: :mod:`~ptxlab.grading.batch` (ledger, progress) over a pool,
  :mod:`~ptxlab.grading.local_pool` or :mod:`~ptxlab.grading.dask_pool` (with
  :mod:`~ptxlab.grading.dask_task` on each Dask worker), all behind
  :mod:`~ptxlab.grading.options`; :mod:`~ptxlab.cli.grade` and
  :mod:`~ptxlab.grading.report` for the instructor.

Submodules are imported on demand; importing this package loads neither nbgrader nor CuPy.
"""
