"""Answers as data: what a learner's answer *gives*, recorded in the notebook, judged elsewhere.

A graded notebook runs in the grader's sandbox, where learner code could rewrite any Python
object -- the checker included. So the sandbox never judges. It only *records*: for each
exercise, the answer's values on the inputs the exercise asks about (drawn from a seed the grader
chose for this run), or the answer itself when it is data (a choice, a CUDA source). The grader
then runs the same exercise in its own process with :class:`Replay` in place of the learner's
function: every call is answered from the record, so the comparison, the score and the message
come from code the learner never touched, and a value the record lacks is simply wrong.

:func:`record_answers` runs in the notebook's kernel; :func:`judge` in the grader.
"""
from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import CheckResult, _exception_text
from .exercises.base import Exercise, grading_seed

__all__ = ["AnswerSlot", "Recorder", "Replay", "record_answers", "judge", "to_plain",
           "MIME_TYPE", "MAX_RECORDED_CALLS"]

#: The display type the recorded answers leave the notebook's kernel under.
MIME_TYPE = "application/x-ptxlab-answers+json"
#: A record longer than this is cut: no exercise asks that many questions.
MAX_RECORDED_CALLS = 50_000
#: Longest text that leaves the sandbox as itself (a kernel source is compiled up to 1 MiB);
#: a longer one arrives as a description of its length, never cut into another answer.
_MAX_TEXT = 1 << 20
_OPAQUE = "__ptxlab_opaque__"


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
        return self.text

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return _Opaque(str(value.get(_OPAQUE, "object")), str(value.get("text", "")))
    if isinstance(value, list):
        return tuple(_from_plain(v) for v in value)
    return value


def _key(args: tuple, kwargs: dict) -> str:
    return json.dumps([to_plain(list(args)), to_plain(sorted(kwargs.items()))])


class RecordedError(Exception):
    """An exception the learner's function raised in the sandbox, replayed as its text."""

    def __init__(self, text: str):
        super().__init__(text)
        self.recorded_text = text


class Recorder:
    """Stands in for the learner's function in the sandbox: calls it and writes down each
    question and answer (or what it raised)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.calls: dict[str, Any] = {}

    def __call__(self, *args, **kwargs):
        key = _key(args, kwargs)
        try:
            out = self.fn(*args, **kwargs)
        except NotImplementedError:
            self._note(key, {"raised": "NotImplementedError"})
            raise
        except Exception as exc:
            self._note(key, {"raised": type(exc).__name__[:60],
                             "text": _exception_text(exc)[:500]})
            raise
        self._note(key, {"value": to_plain(out)})
        return out

    def _note(self, key: str, entry: dict) -> None:
        if len(self.calls) < MAX_RECORDED_CALLS:
            self.calls.setdefault(key, entry)


class Replay:
    """Stands in for the learner's function in the grader: answers from the record only."""

    def __init__(self, calls: dict[str, Any]):
        self.calls = calls if isinstance(calls, dict) else {}
        self.missing = 0

    def __call__(self, *args, **kwargs):
        entry = self.calls.get(_key(args, kwargs))
        if not isinstance(entry, dict):
            self.missing += 1
            raise RecordedError("no answer was recorded for this input (the notebook stopped "
                                "or changed the exercise before the grader asked)")
        if "value" in entry:
            return _from_plain(entry["value"])
        if entry.get("raised") == "NotImplementedError":
            raise NotImplementedError()
        raise RecordedError(str(entry.get("text") or entry.get("raised") or "an exception"))


# ---------------------------------------------------------------------------------------------
# In the sandbox
# ---------------------------------------------------------------------------------------------

def _record_one(slot: AnswerSlot, namespace: dict) -> dict:
    if slot.answer not in namespace:
        return {"missing": True}
    answer = namespace[slot.answer]
    if not callable(answer):
        return {"data": to_plain(answer)}
    recorder = Recorder(answer)
    try:
        slot.exercise().evaluate(recorder, slot.hidden)
    except Exception:          # what was asked before the failure is recorded; the rest is not
        pass
    return {"calls": recorder.calls}


def record_answers(namespace: dict, slots: Iterable[AnswerSlot | dict], seed: int) -> dict:
    """The answers of ``namespace`` (the notebook's variables) for every slot, as data.

    Runs in the notebook's kernel; the exercises ask their questions exactly as the grader's
    replay will (same seed, same code), so every question the grader asks has its answer."""
    out: dict[str, dict] = {}
    with grading_seed(seed):
        for slot in slots:
            slot = slot if isinstance(slot, AnswerSlot) else AnswerSlot.from_json(slot)
            try:
                out[slot.key] = _record_one(slot, namespace)
            except Exception as exc:          # a broken answer is a recorded failure
                out[slot.key] = {"error": _exception_text(exc)[:500]}
    return {"seed": int(seed), "answers": out}


def display_answers(namespace: dict, slots: list[dict], seed: int) -> None:
    """Record the answers and hand them to the grader as one display message."""
    from IPython.display import display

    display({MIME_TYPE: record_answers(namespace, slots, seed)}, raw=True)


# ---------------------------------------------------------------------------------------------
# In the grader
# ---------------------------------------------------------------------------------------------

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
    answer: Any = (_from_plain(entry["data"]) if "data" in entry
                   else Replay(entry.get("calls") or {}))
    if isinstance(answer, tuple):
        answer = list(answer)
    with grading_seed(seed):
        return exercise._safe_evaluate(answer, slot.hidden)
