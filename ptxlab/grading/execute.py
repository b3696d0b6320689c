"""nbgrader's Execute step, hardened for grading untrusted notebooks.

:class:`GradingExecute` replaces nbgrader's ``Execute`` preprocessor in ``autograde`` (see
``autograder/nbgrader_config.py``). What it changes:

* every notebook kernel is started by
  :class:`~ptxlab.grading.kernel_manager.SandboxedKernelManager`, inside the sandbox with its
  limits;
* the test cells decide nothing: the grader reads the notebook's answers as data after its last
  cell and judges them itself (:mod:`ptxlab.grading.verdicts`);
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

import atexit
import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer

from . import verdicts
from .kernel_manager import SandboxedKernelManager, effective_launch_timeout
from .launch_service_pool import shutdown_launch_services
from ..run.backends import SERVICE_REQUIRED_ENV
from ..run.errors import UntrustedFile
from ..run.isolation import MEMORY_ENV, TIMEOUT_ENV
from ..run.launch_client import SERVICE_ENV, SESSION_ENV
from ..run.launch_log import LAUNCH_LOG_ENV, read_launch_log
from ..run.untrusted_files import read_regular
from ..teach.graded import GRADED_BY_GRADER_ENV

__all__ = ["GradingExecute", "SandboxedKernelManager", "KERNEL_DIED", "NOT_RUN",
           "effective_launch_timeout", "BACKEND_NOTE_TAG"]

#: The first words of the error names this module writes into a notebook.
KERNEL_DIED = "KernelDied"
NOT_RUN = "NotRun"
UNTRUSTED_FILE = "UntrustedFile"
#: Output the grader keeps of the cell that hands the answers back (their values as data).
HARVEST_OUTPUT_BYTES = 256_000_000
#: Cell tag of the note the grader puts at the top of a graded notebook.
BACKEND_NOTE_TAG = "ptxlab-grading-note"
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

    max_output_bytes = Integer(4_000_000, config=True,
                               help="bytes of output the grader keeps of one cell while it runs "
                                    "(text, images, widget state); what comes past it is "
                                    "dropped as it arrives, never held")

    # -- output kept while it streams in ------------------------------------------------------

    def _output_allowed(self, msg: dict, cell_index: int, outs: list | None) -> bool:
        """Whether this message's output fits in what the cell may still keep; past the limit
        the message is dropped at once (a note says so once per cell)."""
        kept = getattr(self, "_kept_output", None)
        if kept is None:
            kept = self._kept_output = {}
        size = _message_bytes(msg.get("content"))
        used = kept.get(cell_index, 0)
        limit = (HARVEST_OUTPUT_BYTES if cell_index == getattr(self, "_harvest_index", None)
                 else self.max_output_bytes)
        if used >= 0 and used + size <= limit:
            kept[cell_index] = used + size
            return True
        if used >= 0 and outs is not None:
            kept[cell_index] = -1            # the note is written once
            outs.append(NotebookNode(
                output_type="stream", name="stderr",
                text=f"[grader] this cell's output passed {self.max_output_bytes / 1e6:.1f} MB "
                     "while it ran; the rest was dropped\n"))
        return False

    def output(self, outs, msg, display_id, cell_index):
        if not self._output_allowed(msg, cell_index, outs):
            return None
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        if not self._output_allowed(msg, -2, None):
            return None
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        if not self._output_allowed(msg, -3, None):
            return None
        return super().handle_comm_msg(outs, msg, cell_index)

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
        self._kept_output = {}
        self._lost_why = None
        self._check_assign_resources(resources)
        if spare_key is not None and self.prestart_kernels:
            self._start_spare(spare_key)           # boots while this notebook runs
        launches: list[dict] = []
        slots, trusted = self._answer_slots(resources)
        seed, record, lost = verdicts.new_seed(), None, None
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
                        try:
                            records, offset = read_launch_log(log_path, offset)
                        except UntrustedFile as exc:    # the notebook replaced its log
                            self.nb.cells[index].setdefault("outputs", []).append(
                                _error_output(UNTRUSTED_FILE, f"the launch log {exc.reason}; "
                                              "it is not read any more"))
                            records, log_path = [], None
                        if records:
                            _note_cell_backend(self.nb.cells[index], records)
                            launches.extend(records)
            if slots:
                record, lost = self._harvest(slots, seed)
        if slots:
            self._judge(slots, seed, record, lost, trusted, launches)
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

    def _answer_slots(self, resources) -> tuple[list[verdicts.AnswerSlot], set[str]]:
        """What the test cells grade, resolved with the instructor's imports (the notebook's
        own when the instructor's copy is not at hand), and the instructor's code cells (a
        cell of the submission equal to one of them is not the learner's code)."""
        if not self.verdicts_by_grader:
            return [], set()
        path = self._source_notebook(resources)
        if path is None:
            return verdicts.answer_slots(
                self.nb, verdicts.exercise_aliases(verdicts.code_sources(self.nb))), set()
        import nbformat

        source = nbformat.read(str(path), as_version=4)
        aliases = verdicts.exercise_aliases(verdicts.code_sources(source))
        return verdicts.answer_slots(self.nb, aliases), verdicts.trusted_cell_sources(source)

    def _harvest(self, slots: list[verdicts.AnswerSlot],
                 seed: int) -> tuple[dict | None, str | None]:
        """Ask the notebook's kernel for its answers, as data: ``(record, None)``, or
        ``(None, why there is none)``."""
        from nbformat.v4 import new_code_cell

        try:
            if not run_sync(self.km.is_alive)():
                why = getattr(self, "_lost_why", None) or _kernel_stop_note(self.km)
                return None, ("the notebook's kernel was lost before its answers could be "
                              "read" + (f": {why}" if why else " (see the cell that stopped it)"))
            cell = new_code_cell(verdicts.harvest_code(slots, seed))
            self.nb.cells.append(cell)     # nbclient writes the cell back at its index
            self._harvest_index = len(self.nb.cells) - 1
            try:
                self.execute_cell(cell, len(self.nb.cells) - 1, store_history=False)
            finally:
                cell = self.nb.cells.pop()
        except Exception as exc:   # a dead or stuck kernel, an error the notebook caused
            self.log.warning("could not read the notebook's answers: %s", exc)
            return None, (
                f"reading the answers ran past the {self.timeout} s cell limit (is an answer "
                "function very slow?)" if isinstance(exc, CellTimeoutError) else
                f"reading the notebook's answers failed ({type(exc).__name__})")
        record = verdicts.read_record(cell.get("outputs", []), seed)
        if record is not None:
            return record, None
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        return None, ("the notebook did not hand its answers back" + (
            f" ({errors[0].get('ename')}: {str(errors[0].get('evalue'))[:120]})"
            if errors else " (did a cell replace the notebook's display machinery?)"))

    def _judge(self, slots: list[verdicts.AnswerSlot], seed: int, record: dict | None,
               lost: str | None, trusted: set[str], launches: list[dict]) -> None:
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
                results = verdicts.judge_notebook(self.nb, slots, record, seed, trusted,
                                                  on_judged=collect, lost=lost)
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
        for this); where none can run, each of them fails as a fault of the machine
        (``ServiceUnavailable``: the submission is not graded and the next run grades it)."""
        km = self.km if isinstance(self.km, SandboxedKernelManager) else self._new_manager("")
        # Compiled and run only in the service's sandbox, in an executor of their own (a fresh
        # session): never in this process, never in a child of it.
        env = {"PTXLAB_ISOLATE": "1", TIMEOUT_ENV: f"{km.launch_timeout():g}",
               MEMORY_ENV: str(km.launch_memory_mb), LAUNCH_LOG_ENV: str(log_path),
               SERVICE_ENV: None, GRADED_BY_GRADER_ENV: None, SERVICE_REQUIRED_ENV: "1",
               SESSION_ENV: "judge-" + secrets.token_hex(16)}
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
            why = _kernel_stop_note(self.km) or (
                "the notebook's kernel died while running this cell (a crash, os._exit, the "
                "memory limit of the grading sandbox, or writing on past its disk quota)")
        else:
            why = (f"this cell ran past the {self.timeout} s limit and did not stop when "
                   "interrupted, so its kernel was stopped")
        self._lost_why = why
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


def _kernel_stop_note(km) -> str:
    """Why the kernel stopped itself, as it wrote it (a file of its private folder, read as
    untrusted), or ``""``."""
    path = getattr(km, "stop_note", None)
    if path is None:
        return ""
    try:
        return read_regular(path, max_bytes=4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _message_bytes(value, limit: int = 1 << 34) -> int:
    """About how many bytes a message's content holds (its strings and buffers), counted
    without copying anything."""
    total, stack = 0, [value]
    while stack and total < limit:
        item = stack.pop()
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
            total += 8 * len(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            total += 8
    return total


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
