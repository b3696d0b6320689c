"""Answers as data: the learner's answer is *asked*, in the sandbox; it is judged here.

In a grading run the notebook's process holds no answer: its ``ptxlab`` is the client only
(:mod:`ptxlab.grading.sandbox_client`). So the questions come from here. For each graded answer
the judge runs the exercise with :class:`Asker` in place of the learner's function, under a seed
drawn for this run: every input the exercise asks about is written down (inputs only, never an
expected value) and sent into the sandbox, which replies with the answer's values as plain data.
Then the exercise runs again with :class:`Replay` in place of the learner's function: every
call is answered from the replies, so the comparison, the score and the message come from code
the learner never touched, and a value the replies lack is simply wrong.

Everything here runs in the grader; nothing here runs in the sandbox.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import CheckResult, _exception_text
from .exercises.base import Exercise, grading_seed

__all__ = ["AnswerSlot", "Asker", "Replay", "questions", "missing_questions", "judge",
           "too_long_message",
           "to_plain", "text_problem", "MAX_RECORDED_CALLS"]

#: A record longer than this is cut: no exercise asks that many questions.
MAX_RECORDED_CALLS = 50_000
#: Longest text that leaves the sandbox as itself (a kernel source is compiled up to 1 MiB);
#: a longer one arrives as a description of its length, never cut into another answer.
_MAX_TEXT = 1 << 20
_OPAQUE = "__ptxlab_opaque__"
#: A dict answer ({case: answer}) travels as its (key, value) pairs under this key.
_DICT = "__ptxlab_dict__"


@dataclass(frozen=True)
class AnswerSlot:
    """One ``<exercise>.grade(<answer>, hidden=...)`` call of a test cell, resolved."""

    cell: str            # grade id of the test cell
    module: str          # where the exercise object lives, e.g. ``ptxlab.exercises.ldmatrix``
    attr: str            # its name there, e.g. ``receive``
    answer: str          # the notebook variable holding the answer, e.g. ``receive``
    hidden: bool = False

    @property
    def key(self) -> str:
        """Where this slot's answers are kept in a record."""
        return f"{self.answer}|{int(self.hidden)}|{self.module}.{self.attr}"

    def exercise(self) -> Exercise:
        """The exercise object, imported fresh from the installed package."""
        obj = getattr(importlib.import_module(self.module), self.attr)
        if not isinstance(obj, Exercise):
            raise TypeError(f"{self.module}.{self.attr} is not an exercise")
        return obj

    def to_json(self) -> dict:
        return {"cell": self.cell, "module": self.module, "attr": self.attr,
                "answer": self.answer, "hidden": self.hidden}

    @classmethod
    def from_json(cls, data: dict) -> "AnswerSlot":
        return cls(str(data["cell"]), str(data["module"]), str(data["attr"]),
                   str(data["answer"]), bool(data.get("hidden", False)))


def to_plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: numbers, text, lists; anything else as an opaque description.

    Only data leaves the sandbox: an object whose ``__eq__`` always says yes arrives as the
    words ``<type: repr>`` and compares equal to nothing."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else {_OPAQUE: "float", "text": repr(f)}
    if isinstance(value, str):
        if len(value) > _MAX_TEXT:
            return {_OPAQUE: "str", "text": f"a text of {len(value)} characters, more than the "
                                            f"{_MAX_TEXT} the grader reads (is a table or a file "
                                            "pasted into it?)"}
        return value
    if depth < 4 and isinstance(value, (tuple, list)):
        return [to_plain(v, depth + 1) for v in value[:4096]]
    if depth < 4 and type(value) is dict:
        return {_DICT: [[to_plain(k, depth + 1), to_plain(v, depth + 1)]
                        for k, v in list(dict.items(value))[:4096]]}
    if depth < 4 and isinstance(value, np.ndarray) and value.size <= 4096:
        return to_plain(value.tolist(), depth + 1)
    try:
        text = repr(value)[:80]
    except Exception:
        text = "?"
    return {_OPAQUE: type(value).__name__[:40], "text": text}


class _Opaque:
    """A recorded value that was not data: only its description came out of the sandbox."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text or f"<{self.type_name}>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get(_DICT), list):
        pairs = [p for p in value[_DICT] if isinstance(p, list) and len(p) == 2]
        try:
            return {_from_plain(k): _from_plain(v) for k, v in pairs}
        except TypeError:            # a key that cannot be a dict key: not data
            return _Opaque("dict", "a dict whose keys are not numbers or text")
    if isinstance(value, dict):
        return _Opaque(str(value.get(_OPAQUE, "object")), str(value.get("text", "")))
    if isinstance(value, list):
        return tuple(_from_plain(v) for v in value)
    return value


def _key(args: tuple, kwargs: dict) -> str:
    """The text naming one call. A call of plain ints only (a lane, a register: most of the
    judge's thousands of lookups per notebook) skips :func:`to_plain`, which gives the same."""
    if not kwargs and all(type(a) is int for a in args):
        return f"[[{', '.join(map(str, args))}], []]"         # json.dumps([list(args), []])
    return json.dumps([to_plain(list(args)), to_plain(sorted(kwargs.items()))])


class RecordedError(Exception):
    """An exception the learner's function raised in the sandbox, replayed as its text."""

    def __init__(self, text: str):
        super().__init__(text)
        self.recorded_text = text


class _Unasked(Exception):
    """What :class:`Asker` answers: the exercise goes on to its next question. Its text is
    given (as a replayed error's is), so the checks do not look for the learner's line in
    its traceback: nobody reads it, and a draw raises it thousands of times."""

    recorded_text = "not asked yet"


class Asker:
    """Stands in for the learner's function while the judge finds out what the exercise asks:
    writes each input down and answers none."""

    def __init__(self) -> None:
        self.questions: dict[str, dict] = {}

    def __call__(self, *args, **kwargs):
        self.note(args, kwargs)
        raise _Unasked("not asked yet")

    def note(self, args: tuple, kwargs: dict) -> None:
        key = _key(args, kwargs)
        if key not in self.questions and len(self.questions) < MAX_RECORDED_CALLS:
            self.questions[key] = {"key": key, "args": to_plain(list(args)),
                                   "kwargs": {str(k): to_plain(v) for k, v in kwargs.items()}}

class Replay:
    """Stands in for the learner's function in the grader: answers from the replies only."""

    def __init__(self, calls: dict[str, Any], asker: Asker | None = None):
        self.calls = calls if isinstance(calls, dict) else {}
        self.missing = 0
        self.asker = asker           # notes each input the replies lack

    def __call__(self, *args, **kwargs):
        entry = self.calls.get(_key(args, kwargs))
        if not isinstance(entry, dict):
            self.missing += 1
            if self.asker is not None:
                self.asker.note(args, kwargs)
            raise RecordedError("no answer was recorded for this input (the notebook stopped "
                                "or changed the exercise before the grader asked)")
        if "value" in entry:
            return _from_plain(entry["value"])
        if entry.get("raised") == "NotImplementedError":
            raise NotImplementedError()
        raise RecordedError(str(entry.get("text") or entry.get("raised") or "an exception"))


# ---------------------------------------------------------------------------------------------
# In the grader
# ---------------------------------------------------------------------------------------------

def questions(slot: AnswerSlot, seed: int) -> list[dict] | None:
    """The inputs the exercise asks an answer function about under ``seed`` (each as
    ``{"key", "args", "kwargs"}``), or ``None`` when it asks none (its answer is data: a
    kernel's source, a choice). Computed here; only inputs ever go to the sandbox."""
    asker = Asker()
    with grading_seed(seed):
        try:
            slot.exercise().evaluate(asker, slot.hidden)
        except Exception:        # the exercise stops at an unanswered question: asked so far
            pass
    return list(asker.questions.values()) or None


def missing_questions(slot: AnswerSlot, entry: dict, seed: int) -> list[dict]:
    """The inputs the exercise asks once it sees the replies in ``entry`` that they lack (an
    exercise whose next question depends on an answer)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("calls"), dict):
        return []
    asker = Asker()
    with grading_seed(seed):
        try:
            slot.exercise().evaluate(Replay(entry["calls"], asker), slot.hidden)
        except Exception:
            pass
    return list(asker.questions.values())


def text_problem(text: object) -> str:
    """Why a text answer (a kernel's source) cannot be judged as it came, or ``""``: its bytes
    are what a compiler reads, so a NUL (where a compiler stops reading) or a character with no
    UTF-8 bytes makes what is inspected and what is compiled two different things."""
    if not isinstance(text, str):
        return ""
    if "\x00" in text:
        return "the answer's text holds a NUL character: the compiler would stop reading there"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the answer's text is not valid UTF-8 text (position {exc.start})"
    return ""


def too_long_message(entry: dict) -> str:
    """Why a text answer the sandbox described by its length alone (it is over the limit the
    grader reads) is not judged: nothing of it left the sandbox, so nothing of it is compiled."""
    size = entry.get("too_long")
    size = size if type(size) is int else "too many"
    return (f"the answer's text (a kernel source?) is {size} characters, more than the "
            f"{_MAX_TEXT} the grader reads: it was not compiled or judged (is a table or a "
            "file pasted into it?)")


def judge(slot: AnswerSlot, record: dict | None, seed: int,
          lost: str = "the notebook stopped before its answers could be read") -> CheckResult:
    """The verdict on one slot from the recorded answers, computed here with the exercise's own
    code; the learner's function is never called. ``lost`` says why there is no record."""
    exercise = slot.exercise()
    entry = (record or {}).get("answers", {}).get(slot.key) if isinstance(record, dict) else None
    if record is None or not isinstance(entry, dict):
        return CheckResult(exercise.title, False, 0.0, f"no answer reached the grader: {lost}",
                           status="error")
    if entry.get("missing"):
        return CheckResult(exercise.title, False, 0.0, f"the notebook has no `{slot.answer}`: "
                           "keep the name the exercise gives", status="invalid")
    if "error" in entry:
        return CheckResult(exercise.title, False, 0.0, f"reading your answer failed: "
                           f"{entry['error']}", status="error")
    if "refused" in entry:
        return CheckResult(exercise.title, False, 0.0, str(entry["refused"])[:300],
                           status="invalid")
    if "too_long" in entry:
        return CheckResult(exercise.title, False, 0.0, too_long_message(entry),
                           status="invalid")
    problem = text_problem(entry.get("data"))
    if problem:
        return CheckResult(exercise.title, False, 0.0, problem, status="invalid")
    answer: Any = (_from_plain(entry["data"]) if "data" in entry
                   else Replay(entry.get("calls") or {}))
    if isinstance(answer, tuple):
        answer = list(answer)
    with grading_seed(seed):
        return exercise._safe_evaluate(answer, slot.hidden)
