"""Verdicts computed by the grader, from answers the notebook hands back as data.

The notebook of a submission still runs in the sandbox (the learner's feedback shows their own
outputs), but its test cells no longer decide anything. After the last cell, the grader asks the
notebook's kernel for its answers (:func:`harvest_code`): each answer function's values on the
inputs of a seed drawn for this run, each kernel's source, each choice. Then, in the grader's own
process, which never runs learner code:

* every ``<exercise>.grade(<answer>)`` call of a test cell is judged by the exercise's own code
  against the recorded values (:func:`ptxlab.teach.answers.judge`); kernel sources are compiled
  and launched here, through the grader's isolated launch path, on values the notebook never saw;
* an answer that reaches the course's reference implementations is flagged for a person
  (:mod:`ptxlab.grading.reference_use`);
* each test cell's outputs are replaced by the grader's report, an error when it failed, so
  nbgrader's own ``SaveAutoGrades`` writes the grader's scores to the gradebook and the feedback
  shows the grader's words.

The test cells themselves are trusted text: nbgrader restores them from the gradebook before
the notebook runs (its checksums), so which exercise grades which answer is the instructor's.
"""
from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nbformat.notebooknode import NotebookNode

from ..run.errors import ServiceUnavailable
from ..teach.answers import MIME_TYPE, AnswerSlot, judge
from ..teach.checks import CheckResult
from .reference_use import (Finding, flagged_answers, import_statements, include_findings,
                            reference_names)

__all__ = ["AnswerSlot", "CellVerdict", "answer_slots", "exercise_aliases", "harvest_code",
           "read_record", "judge_notebook", "write_verdicts", "new_seed", "VERDICT_ERROR",
           "FLAGGED_ERROR", "code_sources"]

#: Error names the grader writes into a failed test cell.
VERDICT_ERROR = "GraderVerdict"
FLAGGED_ERROR = "FlaggedForReview"
_PACKAGE_ALIASES = {"ptxlab.exercises": "ptxlab.teach.exercises"}


def new_seed() -> int:
    """A seed for one notebook's hidden cases and kernel values: fresh every grading run."""
    return secrets.randbits(62)


def code_sources(nb: NotebookNode | dict) -> list[str]:
    return [c.get("source", "") for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def _nbgrader(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def _is_test_cell(cell) -> bool:
    meta = _nbgrader(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) \
        and not meta.get("solution") and bool(meta.get("grade_id"))


def exercise_aliases(sources: Sequence[str]) -> dict[str, str]:
    """``{alias: module}`` for ``from ptxlab.exercises import ldmatrix as ex`` and the like."""
    out: dict[str, str] = {}
    for node in import_statements(sources):
        if isinstance(node, ast.ImportFrom) and (node.module or "") in (
                "ptxlab.exercises", "ptxlab.teach.exercises"):
            for a in node.names:
                out[a.asname or a.name] = f"ptxlab.teach.exercises.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                name = a.name
                for short, full in _PACKAGE_ALIASES.items():
                    if name.startswith(short + "."):
                        name = full + name[len(short):]
                if name.startswith("ptxlab.teach.exercises.") and a.asname:
                    out[a.asname] = name
    return out


def _grade_calls(source: str) -> list[tuple[str, str, str, bool]]:
    """``(alias, exercise attr, answer name, hidden)`` for each ``alias.attr.grade(name, ...)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "grade" and isinstance(node.func.value, ast.Attribute)
                and isinstance(node.func.value.value, ast.Name) and node.args
                and isinstance(node.args[0], ast.Name)):
            continue
        hidden = any(k.arg == "hidden" and isinstance(k.value, ast.Constant) and k.value.value
                     for k in node.keywords) or (
            len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and bool(node.args[1].value))
        calls.append((node.func.value.value.id, node.func.value.attr, node.args[0].id, hidden))
    return calls


def answer_slots(nb: NotebookNode | dict, aliases: dict[str, str]) -> list[AnswerSlot]:
    """Every grade call of the notebook's test cells, resolved to an exercise."""
    slots = []
    for cell in nb.get("cells", []):
        if not _is_test_cell(cell):
            continue
        for alias, attr, answer, hidden in _grade_calls(cell.get("source", "")):
            if alias in aliases:
                slots.append(AnswerSlot(_nbgrader(cell)["grade_id"], aliases[alias], attr,
                                        answer, hidden))
    return slots


def harvest_code(slots: Sequence[AnswerSlot], seed: int) -> str:
    """The one cell the grader runs in the notebook's kernel after the last cell."""
    data = json.dumps([s.to_json() for s in slots])
    return ("import json as _ptxlab_json\n"
            "from ptxlab.teach.answers import display_answers as _ptxlab_display_answers\n"
            f"_ptxlab_display_answers(get_ipython().user_ns, _ptxlab_json.loads({data!r}), "
            f"{int(seed)})\n")


def read_record(outputs: Sequence[dict], seed: int) -> dict | None:
    """The answers among the harvest cell's outputs, if they came back whole."""
    for out in outputs:
        data = (out.get("data") or {}).get(MIME_TYPE) if out.get("output_type") in (
            "display_data", "execute_result") else None
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                continue
        if isinstance(data, dict) and data.get("seed") == seed and isinstance(
                data.get("answers"), dict):
            return data
    return None


@dataclass
class CellVerdict:
    """The grader's verdict on one test cell."""

    grade_id: str
    results: list[CheckResult] = field(default_factory=list)
    flagged: list[Finding] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.flagged and bool(self.results) and all(r.passed for r in self.results)

    def report(self) -> str:
        seen, lines = set(), []
        for r in self.results:
            text = r.report()
            if text not in seen:
                seen.add(text)
                lines.append(text)
        if self.flagged:
            lines.append("[FLAGGED] this answer reaches the course's reference implementation, "
                         "so a person will grade it:")
            lines += ["  - " + f.describe() for f in self.flagged[:5]]
        return "\n".join(lines)

    def reason(self) -> str:
        """One line for the class's table."""
        if self.flagged:
            return "flagged for manual grading: " + self.flagged[0].describe()
        failing = [r for r in self.results if not r.passed]
        return failing[0].message if failing else "passed"


def _recorded_source(record: dict | None, slot: AnswerSlot) -> str | None:
    entry = ((record or {}).get("answers") or {}).get(slot.key)
    data = entry.get("data") if isinstance(entry, dict) else None
    return data if isinstance(data, str) else None


def judge_notebook(nb: NotebookNode, slots: Sequence[AnswerSlot], record: dict | None,
                   seed: int, trusted_sources: set[str],
                   on_judged: Callable[[AnswerSlot], None] | None = None,
                   lost: str | None = None) -> list[CellVerdict]:
    """The grader's verdict on every test cell that grades answers.

    Flags come first: a flagged answer is not judged (its kernel is never compiled here)."""
    test_index: dict[str, int] = {}
    for i, cell in enumerate(nb.cells):
        if _is_test_cell(cell):
            for slot in slots:
                if slot.cell == _nbgrader(cell)["grade_id"]:
                    test_index.setdefault(slot.answer, i)
    ref = reference_names(code_sources(nb))
    flags = flagged_answers(nb.cells, trusted_sources, ref, test_index)
    for slot in slots:          # a kernel source assembled at run time is read as it arrived
        source = _recorded_source(record, slot)
        if source is not None:
            for line, why in include_findings(source):
                finding = Finding(-1, f"the kernel in `{slot.answer}`", line,
                                  source.splitlines()[line - 1], why)
                if finding not in flags.setdefault(slot.answer, []):
                    flags[slot.answer].append(finding)
    by_cell: dict[str, CellVerdict] = {}
    for slot in slots:
        verdict = by_cell.setdefault(slot.cell, CellVerdict(slot.cell))
        if slot.answer not in verdict.answers:
            verdict.answers.append(slot.answer)
        for finding in flags.get(slot.answer, []):
            if finding not in verdict.flagged:
                verdict.flagged.append(finding)
        if verdict.flagged:
            continue
        try:
            result = judge(slot, record, seed, *([lost] if lost else []))
        except ServiceUnavailable:
            raise               # the machine failed: this notebook gets no verdict, no 0
        except Exception as exc:  # an exercise the installed package does not have
            result = CheckResult(slot.attr, False, 0.0, f"the grader could not judge this "
                                 f"exercise ({type(exc).__name__}: {exc})", status="error")
        verdict.results.append(result)
        if on_judged is not None:
            on_judged(slot)
    return list(by_cell.values())


def write_verdicts(nb: NotebookNode, verdicts: Sequence[CellVerdict], seed: int) -> None:
    """Each judged test cell's outputs become the grader's report (an error when it failed)."""
    by_id = {v.grade_id: v for v in verdicts}
    for cell in nb.cells:
        if not _is_test_cell(cell):
            continue
        verdict = by_id.get(_nbgrader(cell)["grade_id"])
        if verdict is None:
            continue
        text = verdict.report()
        outputs = [NotebookNode(output_type="stream", name="stdout", text=text + "\n")]
        if not verdict.passed:
            ename = FLAGGED_ERROR if verdict.flagged else VERDICT_ERROR
            evalue = verdict.reason()
            outputs.append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                        traceback=[f"{ename}: {evalue}"]))
        cell.outputs = outputs
        meta = cell.setdefault("metadata", NotebookNode()).setdefault("ptxlab", NotebookNode())
        meta["verdict"] = {"by": "grader", "passed": verdict.passed, "seed": seed,
                           "flagged": [f.describe() for f in verdict.flagged],
                           "flagged_cells": sorted({f.grade_id for f in verdict.flagged
                                                    if f.grade_id}),
                           "reason": verdict.reason()}


def trusted_cell_sources(source_notebook: NotebookNode | dict) -> set[str]:
    """The code cells of the instructor's notebook that are not answers: a cell of the
    submission equal to one of them is not the learner's code."""
    return {c.get("source", "") for c in source_notebook.get("cells", [])
            if c.get("cell_type") == "code" and not _nbgrader(c).get("solution")}
