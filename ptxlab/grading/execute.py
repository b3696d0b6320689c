"""nbgrader's Execute step, hardened for grading untrusted notebooks.

:class:`GradingExecute` replaces nbgrader's ``Execute`` preprocessor in ``autograde`` (see
``autograder/nbgrader_config.py``). What it changes:

* every notebook kernel is started by :class:`SandboxedKernelManager`: inside the bubblewrap
  sandbox (:mod:`ptxlab.grading.sandbox`), with its own connection folder, Unix-socket transport
  (no network), a clean environment, memory and file-size limits, and every learner kernel
  launch sent to an isolated child (``PTXLAB_ISOLATE=1``);
* a kernel that dies (a crash, the memory limit) or will not stop after a cell's timeout no
  longer throws the whole submission away, as stock nbgrader does: the cell gets an error
  output saying what happened, the cells after it are marked as not run, and nbgrader goes on to
  save the grades of everything that did run;
* every kernel works in a private folder that receives copies of the submission's files (links
  are not copied); files the notebook writes there are discarded with the kernel, so learner
  code never writes into ``autograded/``, where nbgrader then saves the graded notebook;
* a kernel is stopped as soon as its notebook has run (no graceful-shutdown wait), and the
  kernel for the next notebook is already starting while this one runs (a *spare*, in a fresh
  sandbox of its own), so no notebook waits for a kernel to boot;
* every cell that launched learner kernels gets a line saying where they ran (the GPU, or the
  CPU model on a machine without one), and the notebook a note at the top summing it up, so the
  feedback says which backend graded the kernels.

A learner kernel launch is limited to at most half the cell's time limit, so a kernel that
never finishes is stopped -- and named -- by its own limit before the cell's limit fires.
"""
from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer, List, Unicode

from . import sandbox
from .launch_services import service_socket, shutdown_launch_services, wants_service
from . import verdicts
from ..run.isolation import (LAUNCH_LOG_ENV, MEMORY_ENV, SERVICE_ENV, TIMEOUT_ENV,
                             read_launch_log)
from ..teach.exercises.base import GRADED_BY_GRADER_ENV

__all__ = ["GradingExecute", "SandboxedKernelManager", "KERNEL_DIED", "NOT_RUN",
           "effective_launch_timeout", "BACKEND_NOTE_TAG"]

#: The first words of the error names this module writes into a notebook.
KERNEL_DIED = "KernelDied"
NOT_RUN = "NotRun"
#: Cell tag of the note the grader puts at the top of a graded notebook.
BACKEND_NOTE_TAG = "ptxlab-grading-note"
#: A launch gets at most this share of the cell's time limit.
_LAUNCH_SHARE_OF_CELL = 0.5


def effective_launch_timeout(launch_timeout_s: float, cell_timeout_s: float | None) -> float:
    """The wall-clock limit of one kernel launch: the configured one, but at most half the
    cell's, so a hanging kernel is stopped by its own limit (whose message names the kernel)
    before the cell's limit interrupts the whole cell."""
    if cell_timeout_s is None or cell_timeout_s <= 0:
        return launch_timeout_s
    return max(1.0, min(launch_timeout_s, _LAUNCH_SHARE_OF_CELL * cell_timeout_s))

#: Environment variables passed into the sandbox (everything else, tokens included, is dropped).
_ENV_KEEP_PREFIXES = ("LANG", "LC_", "CUDA_", "CUPY_", "NVIDIA_", "PTXLAB_", "NBGRADER_")
_ENV_KEEP = {"PATH", "TERM", "TZ", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHASHSEED"}


def _sandbox_env(env: dict[str, str], *, home: str = "/tmp/home") -> dict[str, str]:
    """What of ``env`` a sandboxed process keeps, with ``home`` (in the sandbox's private
    ``/tmp`` by default) for every cache and settings folder."""
    kept = {k: v for k, v in env.items()
            if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    kept.update({
        "HOME": home,
        "MPLCONFIGDIR": f"{home}/.matplotlib",
        "CUPY_CACHE_DIR": f"{home}/.cupy",
        "IPYTHONDIR": f"{home}/.ipython",
        "JUPYTER_RUNTIME_DIR": f"{home}/.jupyter-runtime",
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
                               help="memory limit of the kernel process, MiB (0: none)")
    kernel_memory_mode = Unicode("auto", config=True,
                                 help="how the kernel's memory is limited: 'address_space' "
                                      "(RLIMIT_AS), 'resident' (a watchdog on resident memory: "
                                      "CUDA cannot start under an address-space limit) or "
                                      "'auto' (resident when the kernel gets a GPU)")
    launch_gpu_memory_mb = Integer(0, config=True,
                                   help="GPU memory one kernel launch may allocate through "
                                        "CuPy, MiB (0: no limit); sets CUPY_GPU_MEMORY_LIMIT")
    launch_service = Unicode("auto", config=True,
                             help="'on': the worker's kernel launches run in one warm launch "
                                  "service (one CUDA context, one compile cache); 'off': each "
                                  "launch in a child process of its own; 'auto': on when the "
                                  "kernel gets a GPU")
    file_size_mb = Integer(256, config=True, help="largest file the kernel may write, MiB")
    launch_timeout_s = Float(60.0, config=True,
                             help="wall-clock limit of one isolated kernel launch, seconds")
    launch_memory_mb = Integer(4096, config=True,
                               help="resident-memory limit of one isolated kernel launch, MiB")
    cell_timeout_s = Float(None, allow_none=True,
                           help="the notebook cell's time limit (set by GradingExecute)")
    spare = Bool(False, help="started before its notebook is known: the kernel works in an "
                             "empty private folder that receives the notebook's files later")
    graded_outside = Bool(True, help="the grader computes the verdicts from recorded answers "
                                     "(set by GradingExecute): checks in the notebook only "
                                     "say so")

    _private_dir: Path | None = None

    @property
    def workdir(self) -> Path | None:
        """A spare kernel's working folder (``None`` for a kernel started in its notebook's)."""
        return self._private_dir / "work" if (self.spare and self._private_dir) else None

    @property
    def launch_log(self) -> Path | None:
        """The file every isolated launch of this kernel appends its record to."""
        return self._private_dir / "launches.jsonl" if self._private_dir else None

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
        if self.spare:
            self.workdir.mkdir()
            kw["cwd"] = str(self.workdir)
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        workdir = Path(kw.get("cwd") or os.getcwd()).resolve()
        env = dict(kw.get("env") or os.environ)
        boot = [sys.executable, "-m", "ptxlab.grading.kernel_boot", "--", *kernel_cmd[1:]]
        limits = {"memory_mb": self.kernel_memory_mb, "file_size_mb": self.file_size_mb,
                  "memory_mode": self._memory_mode(),
                  # the sandbox's /tmp is a tmpfs: what is written there is memory too
                  "watch_tmp": self.sandbox_mode == "bwrap"}
        launch_timeout = self.launch_timeout()
        if launch_timeout < self.launch_timeout_s:
            self.log.info("kernel launches limited to %g s (half the %g s cell limit) instead "
                          "of %g s", launch_timeout, self.cell_timeout_s, self.launch_timeout_s)
        if self.sandbox_mode == "none":
            # No sandbox, so no private /tmp: the kernel's home is a folder of its own.
            home = self._private_dir / "home"
            home.mkdir(exist_ok=True)
            inner_env = _sandbox_env(env, home=str(home))
        else:
            inner_env = _sandbox_env(env)
        inner_env.update({
            sandbox.KERNEL_LIMITS_ENV: json.dumps(limits),
            "PTXLAB_ISOLATE": "1",
            TIMEOUT_ENV: f"{launch_timeout:g}",
            MEMORY_ENV: str(self.launch_memory_mb),
            LAUNCH_LOG_ENV: str(self.launch_log),
            GRADED_BY_GRADER_ENV: "1" if self.graded_outside else "0",
        })
        if self.launch_gpu_memory_mb > 0:
            inner_env["CUPY_GPU_MEMORY_LIMIT"] = str(self.launch_gpu_memory_mb * 2**20)
        # The course and the exchange, the same for every kernel of the worker (so one launch
        # service serves them all), and the course this notebook's folder lies in.
        configured = self.service_hidden_paths()
        hidden = configured + _course_paths_of(workdir)
        service = self._launch_service_socket(env, configured, launch_timeout)
        if service:
            inner_env[SERVICE_ENV] = service
        if self.sandbox_mode == "bwrap":
            policy = sandbox.SandboxPolicy(
                workdir=workdir, private_dir=self._private_dir, hidden=hidden, gpu=self.gpu,
                sockets=[Path(service)] if service else [], tmp_size_mb=self.kernel_memory_mb)
            kernel_cmd = sandbox.sandbox_argv(policy, boot, env=inner_env)
            kw["env"] = {"PATH": env.get("PATH", "/usr/bin:/bin")}
        elif self.sandbox_mode == "none":
            kernel_cmd = boot
            kw["env"] = {**env, **inner_env}
        else:
            raise ValueError(f"SandboxedKernelManager.sandbox_mode must be 'bwrap' or 'none', "
                             f"got {self.sandbox_mode!r}")
        return kernel_cmd, kw

    def service_hidden_paths(self) -> list[Path]:
        """What no launch service may see: the configured course, exchange and hidden paths."""
        return [Path(p) for p in self.hidden_paths] + self._configured_course_paths()

    def launch_timeout(self) -> float:
        return effective_launch_timeout(self.launch_timeout_s, self.cell_timeout_s)

    def _launch_service_socket(self, env: dict[str, str], hidden: list[Path],
                               launch_timeout: float, mode: str | None = None) -> str | None:
        """This worker's warm launch service, when it is wanted (``mode``, default the
        configured one) and can run."""
        if self.sandbox_mode not in ("bwrap", "none"):
            return None              # the error about the mode comes below
        if not wants_service(mode or self.launch_service, self.gpu):
            return None
        # No sandbox, so no private /tmp: the service's home is a folder of its own.
        service_env = (_sandbox_env(env) if self.sandbox_mode == "bwrap" else _sandbox_env(
            env, home=str(Path(tempfile.gettempdir()) / f"ptxlab-launch-home-{os.getuid()}")))
        if self.launch_gpu_memory_mb > 0:
            service_env["CUPY_GPU_MEMORY_LIMIT"] = str(self.launch_gpu_memory_mb * 2**20)
        # No student's folder is ever in its view.
        return service_socket(sandbox_mode=self.sandbox_mode, gpu=self.gpu,
                              hidden=[h for h in hidden if h.exists()], env=service_env,
                              max_timeout_s=launch_timeout, max_memory_mb=self.launch_memory_mb)

    async def _async_kill_kernel(self, restart: bool = False) -> None:
        # jupyter_client checks every 0.1 s whether the killed kernel is gone; a graded
        # notebook's kernel is killed after every submission, so look more often.
        if not self.has_kernel:
            return
        assert self.provisioner is not None
        await self.provisioner.kill(restart=restart)
        process = getattr(self.provisioner, "process", None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while process is not None and process.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.005)
        if self.has_kernel:
            await self.provisioner.wait()

    def _memory_mode(self) -> str:
        mode = self.kernel_memory_mode
        if mode == "auto":
            return "resident" if (self.gpu and sandbox.gpu_device_nodes()) else "address_space"
        if mode not in ("address_space", "resident"):
            raise ValueError(f"SandboxedKernelManager.kernel_memory_mode must be 'auto', "
                             f"'address_space' or 'resident', got {mode!r}")
        return mode

    def _configured_course_paths(self) -> list[Path]:
        """The course root and the exchange nbgrader was configured with, where they exist."""
        found = []
        for section, key in (("CourseDirectory", "root"), ("Exchange", "root")):
            try:
                value = self.config[section].get(key) if section in self.config else None
            except (AttributeError, KeyError, TypeError):
                value = None
            if value and Path(str(value)).is_dir():
                found.append(Path(str(value)))
        return found

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


#: Spare kernels of this process, by what they were started for (at most one each).
_SPARES: dict[str, SandboxedKernelManager] = {}


def _shutdown_quietly(km: SandboxedKernelManager) -> None:
    try:
        run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # already gone, or the loop is closing at exit
        try:
            proc = getattr(km.provisioner, "process", None)
            if proc is not None:
                proc.kill()
        except Exception:
            pass
        try:
            run_sync(km.cleanup_resources)()
        except Exception:
            pass


def shutdown_spare_kernels() -> None:
    """Stop every spare kernel of this process and its launch service (at the end of a batch,
    and at exit)."""
    while _SPARES:
        _, km = _SPARES.popitem()
        _shutdown_quietly(km)
    shutdown_launch_services()


atexit.register(shutdown_spare_kernels)


class GradingExecute(Execute):
    """nbgrader's Execute with sandboxed kernels and a submission that survives its kernel."""

    kill_grace_s = Integer(5, config=True,
                           help="seconds a timed-out cell gets to stop after the interrupt")
    prestart_kernels = Bool(True, config=True,
                            help="start the next notebook's kernel while this one runs")
    verdicts_by_grader = Bool(True, config=True,
                              help="compute every test cell's verdict in the grader from the "
                                   "answers the notebook hands back as data (learner code "
                                   "never judges itself); off: the test cells' own outcome, "
                                   "as stock nbgrader")

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        # A graded notebook's kernel has nothing to save: stop it at once rather than wait
        # seconds for a graceful exit.
        kwargs.setdefault("shutdown_kernel", "immediate")
        super().__init__(*args, **kwargs)
        self.iopub_timeout = max(self.iopub_timeout, self.kill_grace_s)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if isinstance(km, SandboxedKernelManager):
            km.graded_outside = self.verdicts_by_grader
            if self.timeout:
                km.cell_timeout_s = float(self.timeout)
        return km

    def preprocess(self, nb: NotebookNode, resources=None, km=None):
        # nbconvert's ExecutePreprocessor.preprocess, with the cell loop made to survive a lost
        # kernel. Leaving setup_kernel() shuts the kernel down, a dead or stuck one included.
        from nbclient import NotebookClient

        spare_key = None
        if km is None and self.kernel_manager_class is SandboxedKernelManager:
            # The kernel always works in a private folder holding copies of the notebook's
            # files, never in autograded/: what learner code leaves there (a link where the
            # notebook was, aimed at the gradebook or another student's work) is discarded
            # with the kernel, before nbgrader writes the graded notebook.
            spare_key = self._spare_key(nb)
            km = self._take_spare(spare_key, resources)
            if km is None:
                self._start_spare(spare_key)
                km = self._take_spare(spare_key, resources)
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        if spare_key is not None and self.prestart_kernels:
            self._start_spare(spare_key)           # boots while this notebook runs
        launches: list[dict] = []
        slots, seed, record = self._answer_slots(resources), verdicts.new_seed(), None
        with self.setup_kernel(cleanup_kc=True):
            assert self.kc
            info_msg = self.wait_for_reply(self.kc.kernel_info())
            assert info_msg
            self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
            log_path = getattr(self.km, "launch_log", None)
            offset = 0
            for index, cell in enumerate(self.nb.cells):
                try:
                    self.preprocess_cell(cell, resources, index)
                except (DeadKernelError, CellTimeoutError) as exc:
                    self._give_up_from(index, exc)
                    break
                finally:
                    if log_path is not None:
                        records, offset = read_launch_log(log_path, offset)
                        if records:
                            _note_cell_backend(self.nb.cells[index], records)
                            launches.extend(records)
            if slots:
                record = self._harvest(slots, seed)
        if slots:
            self._judge(slots, seed, record, launches)
        _note_notebook_backend(self.nb, launches)
        self.set_widgets_metadata()
        return self.nb, self.resources

    # -- verdicts by the grader ----------------------------------------------------------------

    def _source_notebook(self, resources) -> Path | None:
        """The instructor's version of this notebook (``source/``, else ``release/``)."""
        info = (resources or {}).get("nbgrader") or {}
        if not info.get("assignment") or not info.get("notebook"):
            return None
        from nbgrader.coursedir import CourseDirectory

        cd = CourseDirectory(config=self.config)
        for folder in (cd.source_directory, cd.release_directory):
            path = Path(cd.format_path(folder, ".", info["assignment"])) / f"{info['notebook']}.ipynb"
            if path.is_file():
                return path
        return None

    def _answer_slots(self, resources) -> list[verdicts.AnswerSlot]:
        """What the test cells grade, resolved with the instructor's imports (the notebook's
        own when the instructor's copy is not at hand)."""
        if not self.verdicts_by_grader:
            return []
        source = self._source_notebook(resources)
        self._trusted_sources = verdicts.trusted_cell_sources(source)
        import nbformat

        given = (verdicts.code_sources(nbformat.read(str(source), as_version=4))
                 if source is not None else verdicts.code_sources(self.nb))
        return verdicts.answer_slots(self.nb, verdicts.exercise_aliases(given))

    def _harvest(self, slots: list[verdicts.AnswerSlot], seed: int) -> dict | None:
        """Ask the notebook's kernel for its answers, as data; ``None`` when it cannot say."""
        from nbformat.v4 import new_code_cell

        self._harvest_problem = None
        try:
            if not run_sync(self.km.is_alive)():
                self._harvest_problem = ("the notebook's kernel was lost before its answers "
                                         "could be read (see the cell that stopped it)")
                return None
            cell = new_code_cell(verdicts.harvest_code(slots, seed))
            self.nb.cells.append(cell)     # nbclient writes the cell back at its index
            try:
                self.execute_cell(cell, len(self.nb.cells) - 1, store_history=False)
            finally:
                cell = self.nb.cells.pop()
        except Exception as exc:   # a dead or stuck kernel, an error the notebook caused
            self.log.warning("could not read the notebook's answers: %s", exc)
            self._harvest_problem = (
                f"reading the answers ran past the {self.timeout} s cell limit (is an answer "
                "function very slow?)" if isinstance(exc, CellTimeoutError) else
                f"reading the notebook's answers failed ({type(exc).__name__})")
            return None
        record = verdicts.read_record(cell.get("outputs", []), seed)
        if record is None:
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            self._harvest_problem = (
                "the notebook did not hand its answers back" + (
                    f" ({errors[0].get('ename')}: {str(errors[0].get('evalue'))[:120]})"
                    if errors else " (did a cell replace the notebook's display machinery?)"))
        return record

    def _judge(self, slots: list[verdicts.AnswerSlot], seed: int, record: dict | None,
               launches: list[dict]) -> None:
        """Judge the answers here and write the verdicts into the test cells; the grader's
        own kernel launches are added to ``launches``."""
        log_dir = Path(tempfile.mkdtemp(prefix="ptxlab-verdict-"))
        log_path, offset = log_dir / "launches.jsonl", 0
        by_cell: dict[str, list[dict]] = {}

        def collect(slot: verdicts.AnswerSlot) -> None:
            nonlocal offset
            records, offset = read_launch_log(log_path, offset)
            by_cell.setdefault(slot.cell, []).extend(
                {**r, "route": f"grader, {r.get('route', '')}".rstrip(", ")} for r in records)

        try:
            with self._grader_launches(log_path):
                results = verdicts.judge_notebook(self.nb, slots, record, seed,
                                                  getattr(self, "_trusted_sources", set()),
                                                  on_judged=collect,
                                                  lost=getattr(self, "_harvest_problem", None))
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        verdicts.write_verdicts(self.nb, results, seed)
        for cell in self.nb.cells:
            records = by_cell.get(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
            if records:
                _note_cell_backend(cell, records)
                launches.extend(records)

    def _grader_launches(self, log_path: Path):
        """Kernel answers launched by the grader go to its sandboxed launch service (always on
        for this), or, where none can run, to an isolated child per launch."""
        km = self.km if isinstance(self.km, SandboxedKernelManager) else self._new_manager("")
        env = {"PTXLAB_ISOLATE": "1", TIMEOUT_ENV: f"{km.launch_timeout():g}",
               MEMORY_ENV: str(km.launch_memory_mb), LAUNCH_LOG_ENV: str(log_path),
               SERVICE_ENV: None, GRADED_BY_GRADER_ENV: None}
        try:
            service = km._launch_service_socket(dict(os.environ), km.service_hidden_paths(),
                                                km.launch_timeout(), mode="on")
        except Exception as exc:
            self.log.warning("no launch service for the grader's launches: %s", exc)
            service = None
        if service:
            env[SERVICE_ENV] = service
        return _environment(env)

    def _spare_key(self, nb: NotebookNode) -> str:
        name = self.kernel_name or nb.metadata.get("kernelspec", {}).get("name") or ""
        settings = {k: dict(self.config.get(k, {})) for k in ("SandboxedKernelManager",)}
        return json.dumps([name, self.timeout, self.extra_arguments, settings,
                           self.verdicts_by_grader], sort_keys=True, default=str)

    def _new_manager(self, kernel_name: str) -> SandboxedKernelManager:
        kw = {"kernel_name": kernel_name} if kernel_name else {}
        km = SandboxedKernelManager(config=self.config, **kw)
        km.graded_outside = self.verdicts_by_grader
        if self.timeout:
            km.cell_timeout_s = float(self.timeout)
        return km

    def _start_spare(self, key: str) -> None:
        """Start a kernel for the next notebook of the same kind; a failure costs nothing."""
        if key in _SPARES:
            return
        km = self._new_manager(json.loads(key)[0])
        km.spare = True
        try:
            args = list(self.extra_arguments) or ["--HistoryManager.hist_file=:memory:"]
            run_sync(km.start_kernel)(extra_arguments=args)
        except Exception as exc:
            self.log.warning("could not start a spare kernel (%s); kernels start on demand", exc)
            _shutdown_quietly(km)
            return
        _SPARES[key] = km

    def _take_spare(self, key: str, resources) -> SandboxedKernelManager | None:
        """The spare kernel started for notebooks like this one, with the notebook's files."""
        km = _SPARES.pop(key, None)
        if km is None:
            return None
        try:
            alive = run_sync(km.is_alive)()
        except Exception:
            alive = False
        source = (resources or {}).get("metadata", {}).get("path") or ""
        if not alive or km.workdir is None or not source or not os.path.isdir(source):
            _shutdown_quietly(km)
            return None
        _copy_tree(Path(source), km.workdir)
        return km

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


@contextlib.contextmanager
def _environment(changes: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for ``None``, remove) environment variables for the duration of a block."""
    with mock.patch.dict(os.environ):
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _copy_tree(source: Path, dest: Path) -> None:
    """The notebook's folder (the files next to the notebook) into a spare kernel's folder."""
    for item in source.iterdir():
        target = dest / item.name
        if item.is_symlink():
            continue                   # never follow a link out of the submission
        if item.is_dir():
            shutil.copytree(item, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)


def _where(record: dict) -> str:
    backend, device = record.get("backend", ""), record.get("device", "")
    if backend == "gpu":
        return f"the GPU, {device}" if device else "the GPU"
    if backend == "cpu":
        return "the CPU backend (PTX interpreter)"
    return "no backend (the launch failed before one was chosen)"


def _launch_summary(records: list[dict]) -> str:
    """``"the GPU, NVIDIA H100 ... (2 launches of 'load_tile')"``, per place the kernels ran."""
    groups: dict[str, list[dict]] = {}
    for rec in records:
        groups.setdefault(_where(rec), []).append(rec)
    parts = []
    for where, recs in groups.items():
        kernels = ", ".join(dict.fromkeys(f"'{r.get('kernel', '?')}'" for r in recs))
        n = len(recs)
        failed = sum(r.get("outcome") != "ok" for r in recs)
        detail = f"{n} launch{'es' if n != 1 else ''} of {kernels}"
        if failed:
            detail += f", {failed} of them stopped or failed"
        parts.append(f"{where} ({detail})")
    return "; ".join(parts)


def _note_cell_backend(cell: NotebookNode, records: list[dict]) -> None:
    """A line in the cell's output, and its metadata, saying where its kernels ran."""
    cell.setdefault("outputs", []).append(NotebookNode(
        output_type="stream", name="stdout",
        text=f"[grader] the kernels of this cell ran on {_launch_summary(records)}\n"))
    meta = cell.setdefault("metadata", NotebookNode()).setdefault("ptxlab", NotebookNode())
    meta["kernel_launches"] = [
        {k: r.get(k) for k in ("kernel", "backend", "device", "outcome", "seconds", "route")}
        for r in records]


def grading_note(records: list[dict]) -> str:
    """The note at the top of a graded notebook: where its kernels ran, and why there."""
    backends = sorted({r.get("backend", "") for r in records if r.get("backend")})
    summary = _launch_summary(records)
    if backends == ["cpu"]:
        why = next((r.get("reason", "") for r in records if r.get("reason")), "")
        why = why.removeprefix("auto: ").removesuffix("; using the CPU model")
        text = ("**Grading note.** The grading machine has no GPU that could run your kernels"
                + (f" ({why})" if why else "") + ", so they ran on " + summary + ", which "
                "reproduces each PTX instruction's result bit for bit but not its speed.")
    else:
        text = f"**Grading note.** Your kernels ran on {summary}."
    return text


def _note_notebook_backend(nb: NotebookNode, records: list[dict]) -> None:
    """A note at the top of the graded notebook (so in the feedback) naming the backend."""
    nb.cells = [c for c in nb.cells if BACKEND_NOTE_TAG not in c.get("metadata", {}).get("tags", [])]
    if not records:
        return
    backends = sorted({r.get("backend", "") for r in records if r.get("backend")})
    nb.metadata.setdefault("ptxlab", {})["kernel_backends"] = backends
    from nbformat.v4 import new_markdown_cell

    note = new_markdown_cell(grading_note(records), metadata={"tags": [BACKEND_NOTE_TAG]})
    if nb.get("nbformat", 4) == 4 and nb.get("nbformat_minor", 5) < 5:
        note.pop("id", None)           # cell ids exist from nbformat 4.5 on
    nb.cells.insert(0, note)
