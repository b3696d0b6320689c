"""The judge: verdicts computed in the grader, from answers the sandbox hands back as data.

The notebook of a submission runs in the sandbox (the learner's feedback shows their own
outputs), but it holds no answer and decides nothing. In the grader's own process, which never
runs learner code:

* every ``<exercise>.grade(<answer>)`` call of a test cell (trusted text: nbgrader restores the
  test cells before the notebook runs) becomes an :class:`AnswerSlot`;
* for each slot the judge draws the questions (:func:`ptxlab.teach.answers.questions`): the
  inputs the exercise asks about, from a seed drawn secretly for this run -- inputs only;
* right after each test cell has run, the sandbox is asked those questions
  (:func:`hand_back_code`) and replies with the answers' values as plain data (a kernel's source
  as an exact ``str``), so a later cell that rebinds an answer changes nothing;
* every slot is judged by the exercise's own code against the replies
  (:func:`ptxlab.teach.answers.judge`); kernel sources are compiled and launched here, through
  the grader's isolated launch path, on values drawn fresh for this run;
* an answer that reaches the course's reference implementations, or a text answer that is not a
  plain ``str``, is flagged for a person (:mod:`ptxlab.grading.reference_use`);
* each test cell's outputs are replaced by the judge's report, an error when it failed, so
  nbgrader's own ``SaveAutoGrades`` writes the judge's scores to the gradebook and the feedback
  shows the judge's words.
"""
from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nbformat.notebooknode import NotebookNode

from ..run.errors import ServiceUnavailable
from ..teach.answers import AnswerSlot, judge
from ..teach.checks import CheckResult
from ..teach.nbgrader_cells import grade_id, is_graded, is_solution
from .sandbox_client import MIME_TYPE, _PendingVerdict
from .reference_use import (Finding, flagged_answers, import_statements, include_findings,
                            reference_names)
from .verdict_file import JudgeVerdict

__all__ = ["AnswerSlot", "CellVerdict", "answer_slots", "exercise_aliases", "hand_back_code",
           "read_replies", "judge_notebook", "write_verdicts", "new_seed", "new_token",
           "VERDICT_ERROR", "FLAGGED_ERROR", "code_sources", "is_test_cell", "grade_id",
           "GradingPlan", "PLAN_KEY", "note_grade_lines_outside_tests"]

#: Error names the grader writes into a failed test cell.
VERDICT_ERROR = "GraderVerdict"
FLAGGED_ERROR = "FlaggedForReview"
_PACKAGE_ALIASES = {"ptxlab.exercises": "ptxlab.teach.exercises"}


def new_seed() -> int:
    """A seed for one answer's hidden cases and kernel values: fresh every grading run, and one
    per answer, so what one answer is asked says nothing of another's inputs."""
    return secrets.randbits(62)


def code_sources(nb: NotebookNode | dict) -> list[str]:
    return [c.get("source", "") for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def is_test_cell(cell) -> bool:
    """An autograded test cell (not an answer cell)."""
    return _is_test_cell(cell)


def _is_test_cell(cell) -> bool:
    return cell.get("cell_type") == "code" and is_graded(cell) and not is_solution(cell) \
        and grade_id(cell) is not None


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
                slots.append(AnswerSlot(grade_id(cell), aliases[alias], attr,
                                        answer, hidden))
    return slots


def new_token() -> str:
    """A fresh token for one hand-back: its replies are read from the cell that ran it."""
    return secrets.token_hex(16)


def hand_back_code(requests: Sequence[dict], token: str) -> str:
    """The one cell the grader runs in the notebook's kernel right after a test cell: the
    client answers the judge's questions (``requests``) and hands the replies back."""
    data = json.dumps(list(requests))
    return (f"__import__('ptxlab').hand_back(get_ipython().user_ns, {data!r}, {token!r})\n")


#: The longest reply text the grader parses: the client sends at most 50,000 calls of small
#: values and texts of at most 1 MiB, far below this. A longer text is not read at all.
MAX_REPLY_CHARS = 32 << 20
#: The most lists and objects a reply may hold: parsing expands each into a Python object many
#: times its two characters, so a text of nothing but brackets is refused before it is parsed.
MAX_REPLY_CONTAINERS = 1 << 20


def reply_text_problem(text: str) -> str | None:
    """Why a reply text is not parsed (too long, too many lists), or ``None``."""
    if len(text) > MAX_REPLY_CHARS:
        return (f"the answers handed back were {len(text) >> 20} MiB, over the "
                f"{MAX_REPLY_CHARS >> 20} MiB limit")
    if text.count("[") + text.count("{") > MAX_REPLY_CONTAINERS:
        return "the answers handed back held more lists than any answer of the course can"
    return None


def read_replies(outputs: Sequence[dict], token: str) -> tuple[dict[str, dict] | None, str]:
    """``({slot key: reply}, "")`` from a hand-back cell's outputs if they came back whole, else
    ``(None, why)``. Only texts under the limits are parsed: any display the notebook makes can
    carry the reply's type, and parsing a crafted one must cost the grader neither its memory
    nor its stack."""
    why = ""
    for out in outputs:
        data = (out.get("data") or {}).get(MIME_TYPE) if out.get("output_type") in (
            "display_data", "execute_result") else None
        if isinstance(data, str):
            problem = reply_text_problem(data)
            if problem:
                why = why or problem
                continue
            try:
                data = json.loads(data)
            except (ValueError, RecursionError):
                why = why or "the answers handed back were not readable data"
                continue
        if isinstance(data, dict) and data.get("token") == token and isinstance(
                data.get("replies"), dict):
            return {str(k): v for k, v in data["replies"].items() if isinstance(v, dict)}, ""
    return None, why


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
            lines.append("[FLAGGED] a person will grade this answer (it reaches the course's "
                         "reference implementation, or is not plain data):")
            lines += ["  - " + f.describe() for f in self.flagged[:5]]
        return "\n".join(lines)

    def reason(self) -> str:
        """One line for the class's table."""
        if self.flagged:
            return "flagged for manual grading: " + self.flagged[0].describe()
        failing = [r for r in self.results if not r.passed]
        return failing[0].message if failing else "passed"

    def causes(self) -> list[str]:
        """The mistakes its failed checks name (one each, in order, no repeats), for the
        teacher's view of the class."""
        named = [r.named_cause() for r in self.results]
        return list(dict.fromkeys(c for c in named if c))

    def summary(self) -> JudgeVerdict:
        """The verdict as the judge's verdict file keeps it (:mod:`ptxlab.grading.verdict_file`)."""
        return JudgeVerdict(self.passed, tuple(f.describe() for f in self.flagged),
                            tuple(sorted({f.grade_id for f in self.flagged if f.grade_id})),
                            tuple(self.causes()))


def _recorded_source(record: dict | None, slot: AnswerSlot) -> str | None:
    entry = ((record or {}).get("answers") or {}).get(slot.key)
    data = entry.get("data") if isinstance(entry, dict) else None
    return data if isinstance(data, str) else None


def judge_notebook(nb: NotebookNode, slots: Sequence[AnswerSlot], record: dict | None,
                   seed: int | dict[str, int], trusted_sources: set[str],
                   on_judged: Callable[[AnswerSlot], None] | None = None,
                   lost: str | dict[str, str] | None = None) -> list[CellVerdict]:
    """The grader's verdict on every test cell that grades answers.

    Flags come first: a flagged answer is not judged (its kernel is never compiled here)."""
    test_index: dict[str, int] = {}
    for i, cell in enumerate(nb.cells):
        if _is_test_cell(cell):
            for slot in slots:
                if slot.cell == grade_id(cell):
                    test_index.setdefault(slot.answer, i)
    ref = reference_names(code_sources(nb))
    flags = flagged_answers(nb.cells, trusted_sources, ref, test_index)
    for slot in slots:          # a text answer that was not a plain str is not judged
        entry = ((record or {}).get("answers") or {}).get(slot.key)
        if isinstance(entry, dict) and entry.get("refused"):
            finding = Finding(-1, f"`{slot.answer}`", 1, str(entry.get("data") or "")[:60],
                              str(entry["refused"])[:200])
            if finding not in flags.setdefault(slot.answer, []):
                flags[slot.answer].append(finding)
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
            why = lost.get(slot.key) if isinstance(lost, dict) else lost
            slot_seed = seed[slot.key] if isinstance(seed, dict) else seed
            result = judge(slot, record, slot_seed, *([why] if why else []))
        except ServiceUnavailable:
            raise               # the machine failed: this notebook gets no verdict, no 0
        except Exception as exc:  # an exercise the installed package does not have
            result = CheckResult(slot.attr, False, 0.0, f"the grader could not judge this "
                                 f"exercise ({type(exc).__name__}: {exc})", status="error")
        verdict.results.append(result)
        if on_judged is not None:
            on_judged(slot)
    return list(by_cell.values())


def write_verdicts(nb: NotebookNode, verdicts: Sequence[CellVerdict],
                   seed: int | dict[str, int]) -> None:
    """Each judged test cell's outputs become the grader's report (an error when it failed)."""
    by_id = {v.grade_id: v for v in verdicts}
    for cell in nb.cells:
        if not _is_test_cell(cell):
            continue
        verdict = by_id.get(grade_id(cell))
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
        cell_seed = ({k: v for k, v in seed.items() if k.split("|")[0] in verdict.answers}
                     if isinstance(seed, dict) else seed)
        # who decided, and from which seed; the reasons, flags and causes the grader reads
        # back are in the verdict file (:mod:`ptxlab.grading.verdict_file`), not here
        meta["verdict"] = {"by": "grader", "passed": verdict.passed, "seed": cell_seed}


def note_grade_lines_outside_tests(nb: NotebookNode) -> None:
    """A cell that is not one of the assignment's test cells (a test cell copied and pasted, or
    the learner's own ``.grade(...)`` line) gets no verdict: the client's placeholder error
    there becomes a note saying where those answers are graded."""
    pending = _PendingVerdict.__name__
    for cell in nb.cells:
        outputs = cell.get("outputs") or []
        if cell.get("cell_type") != "code" or _is_test_cell(cell) or not any(
                o.get("output_type") == "error" and o.get("ename") == pending for o in outputs):
            continue
        cell.outputs = [o for o in outputs if o.get("ename") != pending] + [NotebookNode(
            output_type="stream", name="stdout",
            text="[grader] not one of the assignment's test cells (a copy of one?): the "
                 "answers it names are graded in the assignment's own test cells\n")]


def trusted_cell_sources(source_notebook: NotebookNode | dict) -> set[str]:
    """The code cells of the instructor's notebook that are not answers: a cell of the
    submission equal to one of them is not the learner's code."""
    return {c.get("source", "") for c in source_notebook.get("cells", [])
            if c.get("cell_type") == "code" and not is_solution(c)}


@dataclass
class GradingPlan:
    """What the judge asks one notebook, and what came back: shared by the grading steps
    through nbconvert's ``resources`` (``resources[PLAN_KEY]``), written in one direction --
    :class:`~ptxlab.grading.judge_steps.DrawQuestions` plans, the sandboxed execution fills in
    the replies, :class:`~ptxlab.grading.judge_steps.JudgeAnswers` judges."""

    seeds: dict[str, int]                               # slot key -> its secret seed
    slots: list[AnswerSlot]
    trusted: set[str]
    asked: dict[str, list[dict] | None]                 # slot key -> questions (None: data)
    replies: dict[str, dict] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # slot key -> why no reply came

    def seed_of(self, slot: AnswerSlot) -> int:
        return self.seeds[slot.key]

    def slots_of(self, cell) -> list[AnswerSlot]:
        """The slots to ask about right after ``cell`` has run (its test cell's)."""
        gid = grade_id(cell) if _is_test_cell(cell) else None
        return [s for s in self.slots if gid and s.cell == gid and s.key not in self.replies]

    def requests(self, slots: Sequence[AnswerSlot],
                 questions: dict[str, list[dict]] | None = None) -> list[dict]:
        """The requests for ``slots``: the answer's name and the inputs to ask it about."""
        out, seen = [], set()
        for slot in slots:
            if slot.key in seen:
                continue
            seen.add(slot.key)
            asked = (questions or {}).get(slot.key, self.asked.get(slot.key))
            out.append({"key": slot.key, "answer": slot.answer, "questions": asked})
        return out

    def record(self) -> dict:
        """The replies in the shape :func:`ptxlab.teach.answers.judge` reads."""
        return {"answers": dict(self.replies)}

    def why_lost(self) -> dict[str, str]:
        """Why each slot without a reply has none."""
        default = ("the notebook stopped before this answer's test cell ran (see the cell that "
                   "stopped it)")
        return {s.key: self.lost.get(s.key) or default for s in self.slots
                if s.key not in self.replies}


#: Where the plan of a notebook is kept in nbconvert's ``resources``.
PLAN_KEY = "ptxlab_grading_plan"
