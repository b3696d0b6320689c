"""Naming a learner's known mistake: the exercises' bank of wrong answers, matched.

An exercise whose answer is a function (an address per lane, a fragment's coordinates, a
swizzle, a warm-up formula) may carry ``mistakes``: pairs of a function that answers the way a
learner making one usual mistake would, and what to tell that learner. When an answer is wrong,
each known mistake is run on the same inputs; the first whose answers are the learner's,
everywhere, names the cause. Only an exact match counts, so a cause is never guessed (a wrong
guess teaches worse than silence, as in :mod:`ptxlab.teach.diagnosis`, which does the same for
the outputs of kernels).

Pure functions: the callers compute the learner's answers, call :func:`known_mistake`, and word
the rest of their report themselves.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["Mistake", "known_mistake", "same_answers"]

#: A known mistake: a function answering as a learner who makes it would, and its advice.
Mistake = tuple[Callable[..., Any], str]


def _as_given(value: Any) -> Any:
    return value


def same_answers(fn: Callable[..., Any], calls: Sequence[tuple], got: Sequence[Any], *,
                 convert: Callable[[Any], Any] | None = None,
                 where: np.ndarray | None = None) -> bool:
    """Whether ``fn(*calls[i])`` answers ``got[i]`` for every ``i``.

    ``convert`` turns each of ``fn``'s answers into the learner's form first (``tuple`` for
    coordinates, ``int`` for a number), since the mistakes are written loosely. ``where`` (a
    boolean mask) compares only those places, the rest being answers the check ignores (the
    lanes whose address an ``.x1`` ldmatrix never reads); ``fn`` must still answer every call.
    A mistake that raises, on any call, is not the learner's: it cannot have given the answer.
    """
    try:
        if where is None:
            to = convert or _as_given
            # lazily: the first differing answer settles it
            return all(to(fn(*args)) == want for args, want in zip(calls, got))
        answers = np.array([fn(*args) for args in calls])
        return bool(np.array_equal(answers[where], np.asarray(got)[where]))
    except Exception:
        return False


def known_mistake(mistakes: Iterable[Mistake], calls: Sequence[tuple], got: Sequence[Any], *,
                  convert: Callable[[Any], Any] | None = None,
                  where: np.ndarray | None = None) -> str | None:
    """The advice of the first of ``mistakes`` that gives the learner's answers ``got`` on
    ``calls`` (see :func:`same_answers`), or ``None`` when none does. First, not best: the bank
    is ordered, and an exercise lists the more telling mistake first."""
    for fn, text in mistakes:
        if same_answers(fn, calls, got, convert=convert, where=where):
            return text
    return None
