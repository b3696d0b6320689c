"""nbgrader's Execute step, hardened for grading untrusted notebooks.

:class:`GradingExecute` replaces nbgrader's ``Execute`` preprocessor in ``autograde`` (see
``autograder/nbgrader_config.py``). It changes three things:

* every notebook kernel is started by :class:`SandboxedKernelManager`: inside the bubblewrap
  sandbox (:mod:`ptxlab.grading.sandbox`), with its own connection folder, Unix-socket transport
  (no network), a clean environment, memory and file-size limits, and every learner kernel
  launch sent to an isolated child (``PTXLAB_ISOLATE=1``);
* a kernel that dies (a crash, the memory limit) or will not stop after a cell's timeout no
  longer throws the whole submission away, as stock nbgrader does: the cell gets an error
  output saying what happened, the cells after it are marked as not run, and nbgrader goes on to
  save the grades of everything that did run;
* a kernel is stopped as soon as its notebook has run (no graceful-shutdown wait).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer, List, Unicode

from . import sandbox
from .isolation import MEMORY_ENV, TIMEOUT_ENV

__all__ = ["GradingExecute", "SandboxedKernelManager", "KERNEL_DIED", "NOT_RUN"]

#: The first words of the error names this module writes into a notebook.
KERNEL_DIED = "KernelDied"
NOT_RUN = "NotRun"

#: Environment variables passed into the sandbox (everything else, tokens included, is dropped).
_ENV_KEEP_PREFIXES = ("LANG", "LC_", "CUDA_", "CUPY_", "NVIDIA_", "PTXLAB_", "NBGRADER_")
_ENV_KEEP = {"PATH", "TERM", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHASHSEED"}


def _sandbox_env(env: dict[str, str], *, workdir: Path) -> dict[str, str]:
    kept = {k: v for k, v in env.items()
            if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    kept.update({
        "HOME": "/tmp/home",
        "MPLCONFIGDIR": "/tmp/home/.matplotlib",
        "CUPY_CACHE_DIR": "/tmp/home/.cupy",
        "IPYTHONDIR": "/tmp/home/.ipython",
        "JUPYTER_RUNTIME_DIR": "/tmp/home/.jupyter-runtime",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })
    return kept


class SandboxedKernelManager(AsyncKernelManager):
    """Starts a Python kernel inside the grading sandbox, whatever kernelspec the notebook names."""

    sandbox_mode = Unicode("bwrap", config=True,
                           help="'bwrap' (the sandbox) or 'none' (limits only: trusted code)")
    hidden_paths = List(Unicode(), config=True,
                        help="paths the kernel must not see even if a whitelisted mount holds them")
    gpu = Bool(True, config=True, help="give the kernel the NVIDIA device nodes")
    kernel_memory_mb = Integer(4096, config=True,
                               help="address-space limit of the kernel process, MiB (0: none)")
    file_size_mb = Integer(256, config=True, help="largest file the kernel may write, MiB")
    launch_timeout_s = Float(60.0, config=True,
                             help="wall-clock limit of one isolated kernel launch, seconds")
    launch_memory_mb = Integer(4096, config=True,
                               help="resident-memory limit of one isolated kernel launch, MiB")

    _private_dir: Path | None = None

    async def _async_pre_start_kernel(self, **kw):
        self._private_dir = Path(tempfile.mkdtemp(prefix="ptxlab-kernel-"))
        self.connection_file = str(self._private_dir / "kernel.json")
        if self.sandbox_mode == "bwrap":
            # No network inside: the kernel and the grader talk over Unix sockets.
            self.transport = "ipc"
            self.ip = str(self._private_dir / "kernel-ipc")
        if self.kernel_spec is not None:
            # Signals to the sandbox's process do not reach the kernel inside it; ask the kernel
            # to interrupt itself (an interrupt_request on the control channel) instead.
            self.kernel_spec.interrupt_mode = "message"
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        workdir = Path(kw.get("cwd") or os.getcwd()).resolve()
        env = dict(kw.get("env") or os.environ)
        boot = [sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", *kernel_cmd[1:]]
        limits = {"memory_mb": self.kernel_memory_mb, "file_size_mb": self.file_size_mb}
        inner_env = _sandbox_env(env, workdir=workdir)
        inner_env.update({
            sandbox.KERNEL_LIMITS_ENV: json.dumps(limits),
            "PTXLAB_ISOLATE": "1",
            TIMEOUT_ENV: f"{self.launch_timeout_s:g}",
            MEMORY_ENV: str(self.launch_memory_mb),
        })
        if self.sandbox_mode == "bwrap":
            policy = sandbox.SandboxPolicy(
                workdir=workdir, private_dir=self._private_dir,
                hidden=[Path(p) for p in self.hidden_paths] + _course_paths_of(workdir),
                gpu=self.gpu)
            kernel_cmd = sandbox.sandbox_argv(policy, boot, env=inner_env)
            kw["env"] = {"PATH": env.get("PATH", "/usr/bin:/bin")}
        elif self.sandbox_mode == "none":
            kernel_cmd = boot
            kw["env"] = {**env, **inner_env, "HOME": env.get("HOME", "/tmp")}
        else:
            raise ValueError(f"SandboxedKernelManager.sandbox_mode must be 'bwrap' or 'none', "
                             f"got {self.sandbox_mode!r}")
        return kernel_cmd, kw

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

    cleanup_resources = _async_cleanup_resources


def _course_paths_of(workdir: Path) -> list[Path]:
    """The course root, guessed from ``<root>/autograded/<student>/<assignment>``."""
    parts = workdir.parts
    if len(parts) >= 4 and parts[-3] == "autograded":
        return [Path(*parts[:-3])]
    return []


class GradingExecute(Execute):
    """nbgrader's Execute with sandboxed kernels and a submission that survives its kernel."""

    kill_grace_s = Integer(5, config=True,
                           help="seconds a timed-out cell gets to stop after the interrupt")

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        # A graded notebook's kernel has nothing to save: stop it at once rather than wait
        # seconds for a graceful exit.
        kwargs.setdefault("shutdown_kernel", "immediate")
        super().__init__(*args, **kwargs)
        self.iopub_timeout = max(self.iopub_timeout, self.kill_grace_s)

    def preprocess(self, nb: NotebookNode, resources=None, km=None):
        # nbconvert's ExecutePreprocessor.preprocess, with the cell loop made to survive a lost
        # kernel. Leaving setup_kernel() shuts the kernel down, a dead or stuck one included.
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        with self.setup_kernel():
            assert self.kc
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            assert info_msg
            self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            for index, cell in enumerate(self.nb.cells):
                try:
                    self.preprocess_cell(cell, resources, index)
                except (DeadKernelError, CellTimeoutError) as exc:
                    self._give_up_from(index, exc)
                    break
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _give_up_from(self, index: int, exc: Exception) -> None:
        """Record why cell ``index`` failed and mark every later code cell as not run."""
        if isinstance(exc, DeadKernelError):
            why = ("the notebook's kernel died while running this cell (a crash, os._exit, or "
                   "the memory limit of the grading sandbox)")
        else:
            why = (f"this cell ran past the {self.timeout} s limit and did not stop when "
                   "interrupted, so its kernel was stopped")
        cell = self.nb.cells[index]
        cell.setdefault("outputs", []).append(_error_output(KERNEL_DIED, why))
        for later in self.nb.cells[index + 1:]:
            if later.cell_type == "code":
                later.outputs = [_error_output(
                    NOT_RUN, f"not run: the kernel was lost in an earlier cell ({why})")]
        self.log.warning("Kernel lost in cell %d: %s", index, why)


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])
