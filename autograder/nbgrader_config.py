"""Grading settings of PTX Matrix Lab, loaded on top of the course's own nbgrader_config.py.

``course/nbgrader_config.py`` loads this file when it finds it beside the course (or where
``$PTXLAB_GRADING_CONFIG`` points), so stock ``nbgrader autograde`` in the course root grades
with it; ``ptxlab grade`` always loads it. Every setting can be changed by environment
variables, so one file serves the server, CI and a laptop:

================================  =======  ===================================================
variable                          default  meaning
================================  =======  ===================================================
``PTXLAB_SANDBOX``                bwrap    ``bwrap``: learner kernels run in the sandbox;
                                           ``none``: limits only (trusted notebooks, no bwrap)
``PTXLAB_CELL_TIMEOUT_S``         120      wall-clock limit of one notebook cell (and of
                                           one reading of a test cell's answers); set here
                                           only, the course's config leaves it alone
``PTXLAB_KERNEL_MEMORY_MB``       4096     memory limit of a notebook's kernel
``PTXLAB_KERNEL_DISK_MB``         512      what a notebook's working folder may hold, MiB;
                                           past it its cell gets "Disk quota exceeded"
``PTXLAB_SANDBOX_WATCH_S``        0.1      how often the grader measures each sandbox from
                                           outside (memory of all its processes, all it
                                           wrote, its processes); ``0``: never (trusted only)
``PTXLAB_LIMIT_ENFORCEMENT``      auto     ``auto``: memory (tmpfs and shared memory
                                           included), processes and an equal CPU share are
                                           held by the kernel's cgroup controllers per
                                           submission where this account may make groups,
                                           else by the watch; ``cgroup``: refuse to grade
                                           without them; ``watch``: the watch alone
``PTXLAB_KERNEL_MEMORY_MODE``     auto     ``address_space``, ``resident`` or ``auto``
                                           (resident when the kernel gets a GPU)
``PTXLAB_LAUNCH_TIMEOUT_S``       60       wall-clock limit of one learner kernel launch (at
                                           most half the cell limit is used)
``PTXLAB_LAUNCH_MEMORY_MB``       4096     host memory of one isolated kernel launch
``PTXLAB_LAUNCH_GPU_MEMORY_MB``   0        GPU memory a worker's launches may allocate (0: an
                                           equal share of 90% of the GPU per worker)
``PTXLAB_WARM_LAUNCHES``          on       ``on``: a worker's launches run in one warm launch
                                           service (one CUDA context, one compile cache),
                                           cleared between students; ``off``: a fresh process
                                           per launch; ``auto``: on only when kernels get a GPU
``PTXLAB_SANDBOX_HIDE``                    more paths the sandbox must hide (``:``-separated)
``PTXLAB_SANDBOX_UID``            60000    the uid (``UID`` or ``UID:GID``) each sandbox runs
                                           as when the grader is root (unused otherwise)
``PTXLAB_GRADING_GPU``            1        ``0`` keeps the GPU out of the sandbox
``PTXLAB_PRESTART_KERNELS``       1        ``0``: start each notebook's kernel on demand
``PTXLAB_MAX_OUTPUT_KB``          1000     output a graded cell keeps, kB (images included)
``PTXLAB_VERDICTS``               grader   ``grader``: every test cell's verdict is computed by
                                           the judge from the answers the notebook hands back
                                           as data, and the notebook's ``ptxlab`` is the client
                                           only (no answer in the sandbox); ``notebook``: the
                                           test cells decide, as in stock nbgrader
================================  =======  ===================================================
"""
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file


def _env(name, default):
    return os.environ.get(name) or default


# nbgrader's autograde steps. Data flows one way, one step per job:
#   DropLearnerMetadata  the submission's own "ptxlab" metadata goes (only the grader writes it)
#   DrawQuestions     the judge plans: which answers the test cells grade, a secret seed for
#                     this run, the inputs each answer will be asked about (inputs only)
#   SandboxedExecute  the notebook runs in the sandbox, holding no answer (its ptxlab is the
#                     client only); right after each test cell its answers are asked the
#                     judge's questions and reply with plain data
#   JudgeAnswers      the judge computes every verdict from the replies, in the grader
#                     (kernel answers launched here on fresh values), into the test cells
#   BackendNotes      the feedback says where the kernels ran
# then nbgrader's own steps save the judge's scores.
#
# Before them, nbgrader's sanitizing steps, with one change: a cell that appears more than once
# (copied and pasted) is graded as its first copy, the later copies as plain cells
# (KeepFirstCopies), where nbgrader's DeduplicateIds would leave metadata its own check refuses.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "ptxlab.grading.duplicate_cells.KeepFirstCopies",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "ptxlab.grading.learner_metadata.DropLearnerMetadata",
    "ptxlab.grading.judge_steps.DrawQuestions",
    "ptxlab.grading.execute.SandboxedExecute",
    "ptxlab.grading.judge_steps.JudgeAnswers",
    "ptxlab.grading.backend_notes.BackendNotes",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "ptxlab.grading.limit_output.LimitOutputBytes",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Links in a student's inbound submission are collected as links (and refused when graded),
# never followed with the grader's rights.
c.ExchangeFactory.collect = "ptxlab.grading.exchange.LinkSafeCollect"
c.ExchangeFactory.release_feedback = "ptxlab.grading.exchange.LinkSafeReleaseFeedback"

# The one place the cell limit is set (autograder/README.md, "Limits", documents this figure).
# A grading run's cells are the learner's Python: kernel answers are launched by the judge, under
# the launch limit, outside the cell. Ten cells stopped at it fit well within --submission-timeout.
c.Execute.timeout = int(_env("PTXLAB_CELL_TIMEOUT_S", "120"))
c.Execute.interrupt_on_timeout = True
c.SandboxedExecute.kill_grace_s = 5
c.SandboxedExecute.prestart_kernels = _env("PTXLAB_PRESTART_KERNELS", "1") == "1"
c.SandboxedExecute.verdicts_by_grader = _env("PTXLAB_VERDICTS", "grader") != "notebook"
c.DrawQuestions.verdicts_by_grader = c.SandboxedExecute.verdicts_by_grader

c.SandboxedKernelManager.sandbox_mode = _env("PTXLAB_SANDBOX", "bwrap")
c.SandboxedKernelManager.gpu = _env("PTXLAB_GRADING_GPU", "1") == "1"
c.SandboxedKernelManager.kernel_memory_mb = int(_env("PTXLAB_KERNEL_MEMORY_MB", "4096"))
c.SandboxedKernelManager.disk_quota_mb = int(_env("PTXLAB_KERNEL_DISK_MB", "512"))
c.SandboxedKernelManager.watch_interval_s = float(_env("PTXLAB_SANDBOX_WATCH_S", "0.1"))
# Memory, processes and CPU share held by the kernel's cgroup controllers, per submission,
# where this account may make groups ('auto'); 'cgroup' refuses to grade without them.
c.SandboxedKernelManager.limit_enforcement = _env("PTXLAB_LIMIT_ENFORCEMENT", "auto")
c.SandboxedKernelManager.kernel_memory_mode = _env("PTXLAB_KERNEL_MEMORY_MODE", "auto")
c.SandboxedKernelManager.launch_timeout_s = float(_env("PTXLAB_LAUNCH_TIMEOUT_S", "60"))
c.SandboxedKernelManager.launch_memory_mb = int(_env("PTXLAB_LAUNCH_MEMORY_MB", "4096"))
c.SandboxedKernelManager.launch_gpu_memory_mb = int(_env("PTXLAB_LAUNCH_GPU_MEMORY_MB", "0"))
c.SandboxedKernelManager.launch_service = _env("PTXLAB_WARM_LAUNCHES", "on")
# The configured course root (source/, submitted/, the gradebook) and exchange are hidden
# automatically; nbgrader's default exchange and any path named here are hidden too.
c.SandboxedKernelManager.hidden_paths = (
    [p for p in _env("PTXLAB_SANDBOX_HIDE", "").split(":") if p] + ["/srv/nbgrader/exchange"])

# A notebook that prints a million lines keeps its first lines only.
c.LimitOutput.max_lines = 200
c.LimitOutputBytes.max_bytes_per_cell = int(_env("PTXLAB_MAX_OUTPUT_KB", "1000")) * 1000
# ... and the grader never holds more than four times that of a cell while it runs.
c.GradingExecute.max_output_bytes = 4 * int(_env("PTXLAB_MAX_OUTPUT_KB", "1000")) * 1000
c.LimitOutput.max_traceback = 60
