"""The judge's two grading steps, around the sandboxed execution (``autograder/nbgrader_config.py``):

1. :class:`DrawQuestions`, before the notebook runs: which answers the test cells grade (read
   with the instructor's imports), a seed per answer drawn secretly for this run, and the
   questions each answer will be asked -- inputs only. Kept as a :class:`~ptxlab.grading.judge.GradingPlan` in
   ``resources``; the sandboxed execution puts the questions to the notebook right after each
   test cell and keeps the replies there.
2. :class:`JudgeAnswers`, after it: every verdict from the replies, computed here (kernel
   answers compiled and launched through the grader's isolated launch path, on values drawn
   for this run), written into the test cells for nbgrader's ``SaveAutoGrades``, and every
   graded cell's verdict kept in ``<notebook>.verdicts.json`` beside the autograded notebook
   (:mod:`~ptxlab.grading.verdict_file`), which the worker reads back once.

Both run in the grader's process and never run learner code.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from nbgrader.preprocessors import NbGraderPreprocessor
from nbformat.notebooknode import NotebookNode
from traitlets import Bool

from . import judge, step_times, verdict_file
from .backend_notes import LAUNCHES_KEY
from .kernel_manager import SandboxedKernelManager
from ..run.backends import SERVICE_REQUIRED_ENV
from ..run.isolation import MEMORY_ENV, TIMEOUT_ENV
from ..run.launch_client import SERVICE_ENV, SESSION_ENV
from ..run.launch_log import LAUNCH_LOG_ENV, read_launch_log
from ..teach import answers
from ..teach.graded import GRADED_BY_GRADER_ENV

__all__ = ["DrawQuestions", "JudgeAnswers", "grader_launches"]


def _source_notebook(config, resources) -> Path | None:
    """The instructor's version of this notebook (``source/``, else ``release/``)."""
    info = (resources or {}).get("nbgrader") or {}
    if not info.get("assignment") or not info.get("notebook"):
        return None
    from nbgrader.coursedir import CourseDirectory

    cd = CourseDirectory(config=config)
    for folder in (cd.source_directory, cd.release_directory):
        path = Path(cd.format_path(folder, ".", info["assignment"])) / f"{info['notebook']}.ipynb"
        if path.is_file():
            return path
    return None


def _as_released(source_nb: NotebookNode, config) -> set[str]:
    """The instructor's code cells as the learner got them (hidden tests cleared, as nbgrader's
    ``generate_assignment`` clears them): a test cell the learner copied and pasted holds that
    text, and is the instructor's code, not the learner's."""
    import copy

    from nbgrader.preprocessors import ClearHiddenTests

    try:
        released, _ = ClearHiddenTests(config=config).preprocess(copy.deepcopy(source_nb), {})
    except RuntimeError:           # a hidden-test region nbgrader itself would refuse
        return set()
    return judge.trusted_cell_sources(released)


class DrawQuestions(NbGraderPreprocessor):
    """Plan what the judge asks this notebook: slots, secret seeds, the questions."""

    verdicts_by_grader = Bool(True, config=True,
                              help="compute every test cell's verdict in the grader from the "
                                   "answers the notebook hands back as data; off: the test "
                                   "cells' own outcome, as stock nbgrader")

    def preprocess(self, nb: NotebookNode, resources: dict):
        with step_times.timed("draw questions"):
            return self._plan(nb, resources)

    def _plan(self, nb: NotebookNode, resources: dict):
        resources = resources if resources is not None else {}
        resources.pop(judge.PLAN_KEY, None)
        if not self.verdicts_by_grader:
            return nb, resources
        path = _source_notebook(self.config, resources)
        if path is None:
            slots = judge.answer_slots(nb, judge.exercise_aliases(judge.code_sources(nb)))
            trusted: set[str] = set()
        else:
            import nbformat

            source = nbformat.read(str(path), as_version=4)
            slots = judge.answer_slots(nb, judge.exercise_aliases(judge.code_sources(source)))
            trusted = judge.trusted_cell_sources(source) | _as_released(source, self.config)
        if not slots:
            return nb, resources
        seeds = {slot.key: judge.new_seed() for slot in slots}
        asked = {}
        for slot in slots:
            try:
                asked[slot.key] = answers.questions(slot, seeds[slot.key])
            except Exception as exc:   # an exercise this installation lacks: judged as such
                self.log.warning("no questions for %s: %s", slot.key, exc)
                asked[slot.key] = None
        resources[judge.PLAN_KEY] = judge.GradingPlan(seeds, slots, trusted, asked)
        return nb, resources


class JudgeAnswers(NbGraderPreprocessor):
    """Judge the replies here, write the verdicts into the test cells, and keep every graded
    cell's verdict in the verdict file beside the autograded notebook."""

    def preprocess(self, nb: NotebookNode, resources: dict):
        with step_times.timed("judge"):
            resources = resources if resources is not None else {}
            results = self._judge(nb, resources)
            _keep_verdicts(nb, resources, results)
            return nb, resources

    def _judge(self, nb: NotebookNode, resources: dict) -> list[judge.CellVerdict]:
        plan: judge.GradingPlan | None = resources.get(judge.PLAN_KEY)
        if plan is None:
            return []
        log_dir = Path(tempfile.mkdtemp(prefix="ptxlab-verdict-"))
        log_path, offset = log_dir / "launches.jsonl", 0
        by_cell: dict[str, list[dict]] = {}

        def collect(slot: answers.AnswerSlot) -> None:
            nonlocal offset
            records, offset = read_launch_log(log_path, offset)
            by_cell.setdefault(slot.cell, []).extend(
                {**r, "route": f"grader, {r.get('route', '')}".rstrip(", ")} for r in records)

        try:
            with self._grader_launches(log_path):
                results = judge.judge_notebook(nb, plan.slots, plan.record(), plan.seeds,
                                               plan.trusted, on_judged=collect,
                                               lost=plan.why_lost())
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        judge.write_verdicts(nb, results, plan.seeds)
        judge.note_grade_lines_outside_tests(nb)
        launches = resources.setdefault(LAUNCHES_KEY, [])
        launches.extend((gid, records) for gid, records in by_cell.items() if records)
        return results

    def _grader_launches(self, log_path: Path):
        return grader_launches(self.config, log_path, warn=self.log.warning)


def _keep_verdicts(nb: NotebookNode, resources: dict,
                   results: list[judge.CellVerdict]) -> Path | None:
    """Write the notebook's verdict file into the folder nbgrader autogrades it in (and writes
    it to): the judge's verdicts, and the notebook's own outcome of the graded cells it did not
    judge (all of them where the test cells decide). The notebook has run and its kernel is
    gone: every verdict is known. Outside nbgrader's autograde (no folder,
    no student) there is nowhere to write."""
    info = resources.get("nbgrader") or {}
    folder = (resources.get("metadata") or {}).get("path")
    if not folder or not info.get("notebook") or not info.get("student"):
        return None
    record = verdict_file.notebook_verdicts(nb, str(info["notebook"]),
                                            {v.grade_id: v.summary() for v in results},
                                            resources.get(LAUNCHES_KEY) or [])
    return verdict_file.save(Path(folder), record, student=str(info["student"]),
                             assignment=str(info.get("assignment") or ""))


def grader_launches(config, log_path: Path, *, warn=None):
    """The environment in which the grader launches kernel answers: isolated, each launch's
    record appended to ``log_path``, through the grader's sandboxed launch service (always on
    for this). Learner code is compiled and run only in the service's sandbox, in a session of
    its own (the executor cleared for it): never in this process, never in an unsandboxed child. A
    service that cannot start makes each launch a fault of the machine (ServiceUnavailable:
    the submission is not graded, and the next run grades it), never a student's 0."""
    km = SandboxedKernelManager(config=config)
    cell_timeout = (config.get("Execute", {}) if config is not None else {}).get("timeout")
    if cell_timeout:
        km.cell_timeout_s = float(cell_timeout)
    env = {"PTXLAB_ISOLATE": "1", TIMEOUT_ENV: f"{km.launch_timeout():g}",
           MEMORY_ENV: str(km.launch_memory_mb), LAUNCH_LOG_ENV: str(log_path),
           SERVICE_ENV: None, GRADED_BY_GRADER_ENV: None, SERVICE_REQUIRED_ENV: "1",
           SESSION_ENV: "judge-" + secrets.token_hex(16)}
    try:
        env[SERVICE_ENV] = km.launch_service_socket(dict(os.environ), km.service_hidden_paths(),
                                                    km.launch_timeout(), mode="on")
    except Exception as exc:    # noqa: BLE001 - each launch then says the service is missing
        if warn is not None:
            warn("no launch service for the grader's launches: %s", exc)
    return _environment(env)


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
