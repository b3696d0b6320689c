"""Sandboxed execution: nbgrader's Execute step, hardened for grading untrusted notebooks.

:class:`SandboxedExecute` replaces nbgrader's ``Execute`` preprocessor in ``autograde`` (see
``autograder/nbgrader_config.py``, which lists the grading steps around it). It is the only step
that talks to learner code, and only through the notebook's kernel:

* every notebook kernel is started by
  :class:`~ptxlab.grading.kernel_manager.SandboxedKernelManager`, inside the sandbox with its
  limits, with the client-only ``ptxlab`` (:mod:`ptxlab.grading.client_package`);
* right after each test cell has run, the judge's questions for it (planned by
  :class:`~ptxlab.grading.judge_steps.DrawQuestions`) are put to the notebook and its replies,
  plain data, are kept for :class:`~ptxlab.grading.judge_steps.JudgeAnswers` -- so the answers
  judged are the ones the test cell saw, whatever a later cell rebinds;
* a kernel that dies (a crash, the memory limit) or will not stop after a cell's timeout no
  longer throws the whole submission away, as stock nbgrader does: the cell gets an error
  output saying what happened, the cells after it are marked as not run, and nbgrader goes on to
  save the grades of everything that did run;
* every kernel works in a private folder that receives copies of the submission's files (links
  are not copied); files the notebook writes there are discarded with the kernel, so learner
  code never writes into ``autograded/``, where nbgrader then saves the graded notebook;
* a kernel is stopped as soon as its notebook has run (no graceful-shutdown wait), and the
  kernel for the next notebook is already starting while this one runs (a *spare*, in a fresh
  sandbox of its own), so no notebook waits for a kernel to boot.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import time
from pathlib import Path

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer

from . import disk_share, judge, run_limits, step_times
from .machine_faults import KernelStartFailed
from .backend_notes import LAUNCHES_KEY
from .kernel_manager import SandboxedKernelManager, effective_launch_timeout
from .launch_service_pool import shutdown_launch_services
from .sandbox_client import OFF_STOP_NOTE
from .stop_notes import kernel_stop_reason
from ..run.errors import UntrustedFile
from ..run.launch_log import read_launch_log
from ..teach import answers

__all__ = ["SandboxedExecute", "SandboxedKernelManager", "KERNEL_DIED", "KERNEL_STOPPED",
           "NOT_RUN", "effective_launch_timeout", "shutdown_spare_kernels", "FOLLOW_UP_ROUNDS"]

#: The first words of the error names this module writes into a notebook.
KERNEL_DIED = "KernelDied"
#: The kernel stopped itself at one of its limits and said why (its stop note).
KERNEL_STOPPED = "KernelStopped"
NOT_RUN = "NotRun"
UNTRUSTED_FILE = "UntrustedFile"
#: Output the grader keeps of the cell that hands the answers back (their values as data, at most
#: ``judge.MAX_REPLY_CHARS``, and what the answer functions print while they are asked).
HARVEST_OUTPUT_BYTES = 64_000_000
#: How many more times a test cell's answers are asked when the exercise's questions depend on
#: the replies (none of the course's do; the rounds are a bound, not a loop).
FOLLOW_UP_ROUNDS = 2
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


class SandboxedExecute(Execute):
    """nbgrader's Execute with sandboxed kernels, the judge's questions asked after each test
    cell, and a submission that survives its kernel."""

    kill_grace_s = Integer(5, config=True,
                           help="seconds a timed-out cell gets to stop after the interrupt")
    prestart_kernels = Bool(True, config=True,
                            help="start the next notebook's kernel while this one runs")
    verdicts_by_grader = Bool(True, config=True,
                              help="compute every test cell's verdict in the grader from the "
                                   "answers the notebook hands back as data (learner code "
                                   "never judges itself); off: the test cells' own outcome, "
                                   "as stock nbgrader")
    submission_timeout_s = Float(0.0, config=True,
                                 help="seconds all of a notebook's cells may take together "
                                      "(0: no limit); past it the running cell is "
                                      "interrupted, the rest is not run, and what ran before "
                                      "is graded")
    #: The notebook being run is judged outside (its test cells grade exercises): its kernel
    #: gets the client-only ``ptxlab``. A notebook whose tests are plain code keeps the real
    #: package, and its test cells decide, as in stock nbgrader.
    _judged_outside = False

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
            km.graded_outside = self._judged_outside
            if self.timeout:
                km.cell_timeout_s = float(self.timeout)
        return km

    def preprocess(self, nb: NotebookNode, resources=None, km=None):
        # nbconvert's ExecutePreprocessor.preprocess, with the cell loop made to survive a lost
        # kernel. Leaving setup_kernel() shuts the kernel down, a dead or stuck one included.
        from nbclient import NotebookClient

        plan: judge.GradingPlan | None = (resources or {}).get(judge.PLAN_KEY)
        self._judged_outside = bool(self.verdicts_by_grader and plan is not None and plan.slots)
        started = time.perf_counter()
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
        launches = self.resources.setdefault(LAUNCHES_KEY, [])
        with self._kernel_started():
            step_times.add("kernel start", time.perf_counter() - started)
            cells_started = time.perf_counter()
            handed_back = self._run_cells(plan, resources, launches)
            step_times.add("notebook cells", time.perf_counter() - cells_started - handed_back)
            step_times.add("answers handed back", handed_back)
            stopping = time.perf_counter()
        step_times.add("kernel stop", time.perf_counter() - stopping)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run_cells(self, plan: judge.GradingPlan | None, resources, launches: list) -> float:
        """Run the notebook's cells in order, the judge's questions right after each test cell,
        until the end, a lost kernel or the submission limit; returns the seconds spent
        handing answers back."""
        self._clock = run_limits.RunClock(self.timeout, self.submission_timeout_s)
        self._timed_out: dict[int, tuple[NotebookNode, str]] = {}
        handed_back = 0.0
        # A notebook judged outside launches nothing (its ptxlab is the client): the grader
        # reads no file of its sandbox.
        log_path = None if self._judged_outside else getattr(self.km, "launch_log", None)
        offset = 0
        for index, cell in enumerate(self.nb.cells):
            if self._clock.expired():
                self._stop_at_submission_limit(index, plan, ran=False)
                break
            try:
                self.preprocess_cell(cell, resources, index)
            except (DeadKernelError, CellTimeoutError) as exc:
                self._give_up_from(index, exc)
                if self._stopped_by(cell) == "submission":
                    self._stop_at_submission_limit(index, plan, ran=True)
                else:
                    _lose_unread(plan, "the notebook's kernel was lost before the test cell "
                                       "of this answer ran (see the cell that stopped it)")
                break
            finally:
                log_path, offset = self._read_launches(log_path, offset, index, launches)
            if _ran_code(cell) and self._past_a_limit(index, plan):
                break
            if self._stopped_by(cell) == "submission":
                self._stop_at_submission_limit(index, plan, ran=True)
                break
            due = plan.slots_of(cell) if plan is not None and self._judged_outside else []
            if due:
                asked = time.perf_counter()
                self._ask(plan, due, run_limits.cell_name(cell, index))
                handed_back += time.perf_counter() - asked
                # the hand-back ran the notebook's code too: measured now, blamed on its cell
                if self._past_a_limit(index, plan):
                    break
                if self._clock.expired():
                    self._stop_at_submission_limit(index, plan, ran=True)
                    break
        return handed_back

    def _read_launches(self, log_path: Path | None, offset: int, index: int,
                       launches: list) -> tuple[Path | None, int]:
        """The kernel launches cell ``index`` recorded in the launch log (read as untrusted);
        ``(None, offset)`` once the notebook replaced its log."""
        if log_path is None:
            return None, offset
        try:
            records, offset = read_launch_log(log_path, offset)
        except UntrustedFile as exc:    # the notebook replaced its log
            self.nb.cells[index].setdefault("outputs", []).append(
                _error_output(UNTRUSTED_FILE, f"the launch log {exc.reason}; "
                              "it is not read any more"))
            return None, offset
        if records:
            launches.append((index, records))
        return log_path, offset

    # -- the two time limits ------------------------------------------------------------------

    def _get_timeout(self, cell):
        # Each cell gets the cell limit, or what is left of the submission limit if less.
        timeout = super()._get_timeout(cell)
        clock = getattr(self, "_clock", None)
        return timeout if clock is None or cell is None else clock.timeout_for(timeout)

    async def _async_handle_timeout(self, timeout, cell=None):
        # Which limit ran out is decided here, when it does, and the cell says so later.
        clock = getattr(self, "_clock", None)
        if clock is not None and cell is not None:
            self._timed_out[id(cell)] = (cell, clock.which_fired())   # the cell kept: its id too
        return await super()._async_handle_timeout(timeout, cell)

    def _stopped_by(self, cell) -> str | None:
        """Which limit stopped ``cell`` (``"cell"``, ``"submission"``), or ``None``."""
        entry = getattr(self, "_timed_out", {}).get(id(cell))
        return entry[1] if entry is not None and entry[0] is cell else None

    def _stop_at_submission_limit(self, index: int, plan: judge.GradingPlan | None, *,
                                  ran: bool) -> None:
        """End the run at the submission limit, in cell ``index`` (``ran``) or before it: the
        cells after it are marked as not run, the answers not read yet say why, and the test
        cells graded from what ran before it are named for the row."""
        limit = self._clock.submission_limit_s or 0
        name = run_limits.cell_name(self.nb.cells[index], index)
        where = f"in {name}" if ran else f"before {name}"
        for later in self.nb.cells[index + 1 if ran else index:]:
            if later.cell_type == "code":
                later.outputs = [_error_output(
                    NOT_RUN, f"not run: the submission limit of {limit:g} s ran out {where}")]
        if plan is not None and self._judged_outside:
            why = (f"the submission limit of {limit:g} s ran out {where}, before this answer "
                   "was read")
            plan.lost.update({s.key: plan.lost.get(s.key) or why for s in plan.slots
                              if s.key not in plan.replies})
            unread = {s.cell for s in plan.slots if s.key not in plan.replies}
            graded = [judge.grade_id(c) for c in self.nb.cells[:index + 1]
                      if judge.is_test_cell(c) and judge.grade_id(c) not in unread]
        else:                           # the test cells decide: those that ran to their end
            graded = [judge.grade_id(c) for c in self.nb.cells[:index] if judge.is_test_cell(c)]
        run_limits.record_stop(self.nb, limit, where, graded)
        self.log.warning("Submission limit of %g s reached %s", limit, where)

    @contextlib.contextmanager
    def _kernel_started(self):
        """nbclient's ``setup_kernel`` with the kernel's first reply awaited: a kernel that dies
        or stays silent before any of the notebook's code ran is the machine's failure
        (:class:`KernelStartFailed`), told apart by its type from what the notebook did."""
        booted = False
        try:
            with self.setup_kernel(cleanup_kc=True):
                assert self.kc
                try:
                    info_msg = self.wait_for_reply(self.kc.kernel_info())
                except Exception as exc:
                    raise KernelStartFailed(f"{type(exc).__name__}: {exc}") from exc
                assert info_msg
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                booted = True
                yield
        except Exception as exc:
            if booted or isinstance(exc, KernelStartFailed):
                raise
            raise KernelStartFailed(f"{type(exc).__name__}: {exc}") from exc

    def on_cell_executed(self, **kwargs):
        # A cell stopped at a limit says which limit and its figure, not the interrupt.
        cell = kwargs.get("cell")
        which = self._stopped_by(cell)
        if which is not None:
            super().on_cell_executed(**kwargs)
            run_limits.reword_interrupt(cell, self._clock, which)
            return None
        # In a notebook judged outside, a cell (never a test cell) that stopped only at a
        # picture or a run switched off for grading ends with the client's note, not an error
        # the feedback would blame on the learner.
        if (self._judged_outside and cell is not None and not judge.is_test_cell(cell)
                and _stopped_at_off(cell)):
            return None
        return super().on_cell_executed(**kwargs)

    # -- the judge's questions, put to the notebook ---------------------------------------------

    def _ask(self, plan: judge.GradingPlan, slots: list[answers.AnswerSlot],
             after: str = "") -> None:
        """Put the judge's questions for ``slots`` to the notebook now (right after their test
        cell, named ``after``) and keep its replies in ``plan``; ask again, at most
        :data:`FOLLOW_UP_ROUNDS` times, where the exercise's next questions depend on the
        replies."""
        questions: dict[str, list[dict]] | None = None
        for _ in range(1 + FOLLOW_UP_ROUNDS):
            requests = plan.requests(slots, questions)
            replies, lost = self._hand_back(requests, after)
            if replies is None:
                plan.lost.update({s.key: lost or "" for s in slots})
                return
            for slot in slots:
                reply = replies.get(slot.key)
                if reply is None:
                    continue
                old = plan.replies.get(slot.key)
                if isinstance(old, dict) and isinstance(old.get("calls"), dict) and isinstance(
                        reply.get("calls"), dict):
                    reply = {"calls": {**reply["calls"], **old["calls"]}}
                plan.replies[slot.key] = reply
            questions = {}
            for slot in slots:
                more = answers.missing_questions(slot, plan.replies.get(slot.key),
                                                  plan.seed_of(slot))
                if more:
                    questions[slot.key] = more
            slots = [s for s in slots if s.key in questions]
            if not slots:
                return

    def _hand_back(self, requests: list[dict],
                   after: str = "") -> tuple[dict[str, dict] | None, str | None]:
        """Run the hand-back cell: ``(replies, None)``, or ``(None, why there are none)``."""
        from nbformat.v4 import new_code_cell

        token = judge.new_token()
        try:
            if not run_sync(self.km.is_alive)():
                why = getattr(self, "_lost_why", None) or _kernel_stop_note(self.km)
                return None, ("the notebook's kernel was lost before its answers could be "
                              "read" + (f": {why}" if why else " (see the cell that stopped it)"))
            cell = new_code_cell(judge.hand_back_code(requests, token))
            self.nb.cells.append(cell)     # nbclient writes the cell back at its index
            self._harvest_index = len(self.nb.cells) - 1
            try:
                self.execute_cell(cell, len(self.nb.cells) - 1, store_history=False)
            finally:
                cell = self.nb.cells.pop()
        except Exception as exc:   # a dead or stuck kernel, an error the notebook caused
            self.log.warning("could not read the notebook's answers: %s", exc)
            return None, (
                self._reading_stopped(requests, after,
                                      self._stopped_by(cell) or self._clock.which_fired())
                + ", and did not stop when interrupted" if isinstance(exc, CellTimeoutError)
                else f"reading the notebook's answers failed ({type(exc).__name__})")
        which = self._stopped_by(cell)
        if which is not None:
            return None, self._reading_stopped(requests, after, which)
        replies, unread = judge.read_replies(cell.get("outputs", []), token)
        if replies is not None:
            return replies, None
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        return None, ("the notebook did not hand its answers back" + (
            f" ({errors[0].get('ename')}: {str(errors[0].get('evalue'))[:120]})" if errors else
            f" ({unread})" if unread else
            " (did a cell replace the notebook's display machinery?)"))

    def _reading_stopped(self, requests: list[dict], after: str, which: str) -> str:
        """Why the answers of ``requests`` were not read: the limit ``which`` ran out."""
        names = ", ".join(dict.fromkeys(f"`{r.get('answer')}`" for r in requests))
        right_after = f", right after {after}," if after else ""
        if which == "submission":
            return (f"the submission limit of {self._clock.submission_limit_s:g} s ran out while "
                    f"the grader read {names}{right_after.rstrip(',')}")
        return (f"reading {names}{right_after} ran past the cell limit of {self.timeout:g} s "
                "and was interrupted: an endless loop, or a very slow answer?")

    def _spare_key(self, nb: NotebookNode) -> str:
        name = self.kernel_name or nb.metadata.get("kernelspec", {}).get("name") or ""
        settings = {k: dict(self.config.get(k, {})) for k in ("SandboxedKernelManager",)}
        return json.dumps([name, self.timeout, self.extra_arguments, settings,
                           self._judged_outside], sort_keys=True, default=str)

    def _new_manager(self, kernel_name: str, judged_outside: bool) -> SandboxedKernelManager:
        kw = {"kernel_name": kernel_name} if kernel_name else {}
        km = SandboxedKernelManager(config=self.config, **kw)
        km.graded_outside = judged_outside
        if self.timeout:
            km.cell_timeout_s = float(self.timeout)
        return km

    def _start_spare(self, key: str) -> None:
        """Start a kernel for the next notebook of the same kind; a failure costs nothing."""
        if key in _SPARES:
            return
        kind = json.loads(key)
        km = self._new_manager(kind[0], bool(kind[-1]))
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
        disk_share.copy_submission(Path(source), km.workdir)
        km.hand_over(km.workdir)            # the sandbox's own account may change its files
        return km

    def _past_a_limit(self, index: int, plan: judge.GradingPlan | None) -> bool:
        """Whether the grader's measure after cell ``index`` stopped the sandbox (its disk
        quota filled in that cell, say): the cell then says why, the later ones did not run."""
        check = getattr(self.km, "limit_reached_now", None)
        if check is None or not check():
            return False
        self._give_up_from(index, DeadKernelError("stopped by the grader at a limit"))
        _lose_unread(plan, "the notebook's kernel was stopped at a limit before the test cell "
                           "of this answer ran (see the cell that passed it)")
        return True

    def _give_up_from(self, index: int, exc: Exception) -> None:
        """Record why cell ``index`` failed and mark every later code cell as not run."""
        ename = KERNEL_DIED
        if isinstance(exc, DeadKernelError):
            note = _kernel_stop_note(self.km)
            # A kernel stopped at its own limit (memory, disk quota) is the submission's
            # fault and names itself on the student's row, even after the last test cell.
            ename = KERNEL_STOPPED if note else KERNEL_DIED
            why = note or (
                "the notebook's kernel died while running this cell (a crash, os._exit, the "
                "memory limit of the grading sandbox, or writing on past its disk quota)")
        else:
            clock = getattr(self, "_clock", None)
            stopped = self._stopped_by(self.nb.cells[index])
            which = stopped or "cell"
            if clock is not None and stopped:   # the interrupt's own error, if any, in words
                run_limits.reword_interrupt(self.nb.cells[index], clock, which)
            limit = (f"the submission limit of {clock.submission_limit_s:g} s"
                     if clock is not None and which == "submission" else
                     f"the cell limit of {self.timeout:g} s")
            why = (f"this cell ran past {limit} and did not stop when interrupted, so its "
                   "kernel was stopped")
        self._lost_why = why
        cell = self.nb.cells[index]
        cell.setdefault("outputs", []).append(_error_output(ename, why))
        for later in self.nb.cells[index + 1:]:
            if later.cell_type == "code":
                later.outputs = [_error_output(
                    NOT_RUN, f"not run: the kernel was lost in an earlier cell ({why})")]
        self.log.warning("Kernel lost in cell %d: %s", index, why)


def _ran_code(cell: NotebookNode) -> bool:
    """Whether running ``cell`` ran any code (nbclient skips text cells and blank code cells):
    the sandbox is measured again only after one that did."""
    source = cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else str(source)
    return cell.get("cell_type") == "code" and bool(text.strip())


def _stopped_at_off(cell: NotebookNode) -> bool:
    """The cell's last output is the client's line saying it stopped at something off."""
    outputs = cell.get("outputs") or []
    last = outputs[-1] if outputs else {}
    return (last.get("output_type") == "stream"
            and str(last.get("text", "")).lstrip().startswith(OFF_STOP_NOTE))


def _lose_unread(plan: judge.GradingPlan | None, why: str) -> None:
    """Every answer of ``plan`` not read yet is lost, for ``why``."""
    if plan is not None:
        plan.lost.update({s.key: why for s in plan.slots if s.key not in plan.replies})


def _kernel_stop_note(km) -> str:
    """Why the kernel stopped, worded by the grader (its stop note may only select one of the
    grader's reasons; anything else is quoted as the notebook's words), or ``""``."""
    return kernel_stop_reason(km)


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
