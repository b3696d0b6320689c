"""The exercise kinds of the course: one class per kind of answer, one ``check`` for all.

Every exercise offers the same three calls, so a notebook reads the same everywhere:

* ``ex.check(answer)``: immediate feedback; prints the report and returns the
  :class:`ptxlab.teach.checks.CheckResult`.
* ``ex.hint()``: the next hint, one more each call.
* ``ex.grade(answer, hidden=False)``: for nbgrader test cells; raises ``AssertionError`` with
  the report when the answer is wrong. ``hidden=True`` runs the wider cases (random bases and
  strides, every ``.num``, other shapes) that the hidden tests use.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import checks, progress_store
from .. import reveal as _reveal
from ..checks import AddressTask, CheckResult
from ..graded import GRADED_BY_GRADER_ENV, graded_outside  # noqa: F401 - the exercises' names
from ..mistakes import Mistake, known_mistake
from ...run.errors import ServiceUnavailable

#: Seed of the hidden cases in self-study: fixed, so a learner's result can be reproduced. The
#: grader draws a fresh seed for every notebook it grades (:func:`grading_seed`).
HIDDEN_SEED = 20261122

_SEED: contextvars.ContextVar[int | None] = contextvars.ContextVar("ptxlab_hidden_seed",
                                                                  default=None)


@contextlib.contextmanager
def grading_seed(seed: int) -> Iterator[None]:
    """Hidden cases (and the values kernels are fed) drawn from ``seed`` instead of the fixed
    self-study seed: inputs no answer could have been written for."""
    token = _SEED.set(int(seed))
    try:
        yield
    finally:
        _SEED.reset(token)


def hidden_rng() -> np.random.Generator:
    """The generator of the hidden cases: the grading run's seed, else :data:`HIDDEN_SEED`."""
    seed = _SEED.get()
    return np.random.default_rng(HIDDEN_SEED if seed is None else seed)


def fresh_rng() -> np.random.Generator | None:
    """A generator for inputs chosen fresh by the grader, or ``None`` outside grading."""
    seed = _SEED.get()
    return None if seed is None else np.random.default_rng([seed, 1])


@dataclass
class Exercise:
    """Common behaviour: hints, printing, grading. Subclasses define :meth:`evaluate`."""

    key: str
    title: str
    hints: Sequence[str] = ()
    _hints_shown: int = field(default=0, init=False, repr=False)

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:  # pragma: no cover
        raise NotImplementedError

    def _safe_evaluate(self, answer, hidden: bool) -> CheckResult:
        try:
            return self.evaluate(answer, hidden)
        except NotImplementedError:
            return checks.not_implemented(self.title)
        except ServiceUnavailable:
            raise                 # the machine failed, not the answer: no verdict at all
        except Exception as exc:  # a bug in the answer that escaped the per-lane guards
            return CheckResult(self.title, False, 0.0,
                               f"checking your answer raised {type(exc).__name__}: {exc}",
                               status="error")

    def check(self, answer, *, quiet: bool = False) -> CheckResult | None:
        """Check ``answer`` on the visible cases and print what to fix."""
        if graded_outside():
            if not quiet:
                print(f"{self.title}: the grader checks this answer (see the test cell below)")
            return None
        result = self._safe_evaluate(answer, False)
        progress_store.record(self.key, result.passed)
        if not quiet:
            print(result.report())
            if not result.passed and self.hints and self._hints_shown < len(self.hints):
                print(f"  (stuck? call .hint() on this exercise for hint "
                      f"{self._hints_shown + 1} of {len(self.hints)})")
            elif not result.passed and self.hints:
                print("  (still stuck after every hint? .reveal() shows the solution)")
        return result

    def grade(self, answer, hidden: bool = False) -> None:
        """For test cells: silent on success, ``AssertionError`` with the report otherwise.

        In a graded notebook this only says that the grader computes the verdict: it records
        the answer's values on inputs of its own choosing and compares them outside the
        notebook, so nothing in the notebook can change a grade."""
        if graded_outside():
            print(f"{self.title}: your answer was recorded; the grader checks it")
            return
        result = self._safe_evaluate(answer, hidden)
        if not result.passed:
            raise AssertionError(result.report())
        print(f"{self.title}: passed" + (" (hidden cases)" if hidden else ""))

    def hint(self) -> None:
        """Print the next hint (they get more specific each time)."""
        if not self.hints:
            print("No hints for this one: re-read the explanation above.")
            return
        i = min(self._hints_shown, len(self.hints) - 1)
        print(f"Hint {i + 1} of {len(self.hints)}: {self.hints[i]}")
        self._hints_shown = min(self._hints_shown + 1, len(self.hints))

    def reveal(self) -> str | None:
        """The solution, once every hint was shown (from the course's source, in a checkout);
        the progress records it. The hints never give the solution: this is where it is."""
        return _reveal.reveal(self)

    def __repr__(self) -> str:
        return f"<exercise {self.key}: {self.title}>"


@dataclass(repr=False)
class AddressExercise(Exercise):
    """A Python function ``fn(lane, *params)`` returning the byte address a lane supplies."""

    arg_names: Sequence[str] = ("lane", "base", "stride")
    visible: Callable[[], list[AddressTask]] = list
    hidden_cases: Callable[[np.random.Generator], list[AddressTask]] = lambda rng: []
    mistakes: Sequence[Mistake] = ()

    def tasks(self, hidden: bool) -> list[AddressTask]:
        tasks = list(self.visible())
        if hidden:
            tasks += self.hidden_cases(hidden_rng())
        return tasks

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        return checks.check_addresses(answer, self.tasks(hidden), name=self.title,
                                      mistakes=self.mistakes, arg_names=self.arg_names)


@dataclass(repr=False)
class FragmentExercise(Exercise):
    """A function ``fn(lane, reg, half) -> coordinates`` for one or more fragment layouts.

    ``cases`` yields ``(layout, to_answer, extra_args)``: the learner's function is called as
    ``fn(lane, reg, half, *extra_args)``, and so is each known mistake.
    """

    arg_names: Sequence[str] = ("lane", "reg", "half")
    answer_names: Sequence[str] = ("row", "col")
    visible: Callable[[], list[tuple]] = list
    hidden_cases: Callable[[], list[tuple]] = list
    mistakes: Sequence[Mistake] = ()

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if answer is None:
            return checks.not_implemented(self.title)
        cases = list(self.visible()) + (list(self.hidden_cases()) if hidden else [])
        results = []
        for layout, to_answer, extra in cases:
            fn, mistakes = answer, self.mistakes
            if extra:   # the answer and the known mistakes both take the case's extra arguments
                e = tuple(extra)
                if callable(answer):
                    fn = lambda *a, _e=e: answer(*a, *_e)  # noqa: E731
                mistakes = [(lambda *a, _m=m, _e=e: _m(*a, *_e), text)
                            for m, text in self.mistakes]
            res = checks.check_fragment(fn, layout, name=self.title, to_answer=to_answer,
                                        answer_names=self.answer_names,
                                        arg_names=self.arg_names[:3], mistakes=mistakes)
            if res.status == "not_implemented":
                return res
            if extra and not res.passed:
                res.message += f" with {', '.join(f'{n}={v}' for n, v in zip(self.arg_names[3:], extra))}"
            results.append(res)
        return checks.combine(self.title, results)


@dataclass(repr=False)
class ChoiceExercise(Exercise):
    """Pick one option (a letter or a number); every wrong option explains itself."""

    correct: str = ""
    explanations: dict = field(default_factory=dict)

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if callable(answer):
            try:
                answer = answer()
            except NotImplementedError:
                return checks.not_implemented(self.title)
            except Exception as exc:
                return CheckResult(self.title, False, 0.0, f"your answer function raised "
                                   f"{type(exc).__name__}: {exc}", status="invalid")
        return checks.check_choice(answer, self.correct, self.explanations, name=self.title)


@dataclass(repr=False)
class FunctionExercise(Exercise):
    """A plain function of a few integers, checked on a table of inputs (warm-up exercises)."""

    arg_names: Sequence[str] = ()
    reference: Callable = lambda *a: None
    visible: Callable[[], list[tuple]] = list
    hidden_cases: Callable[[np.random.Generator], list[tuple]] = lambda rng: []
    describe: Callable[[tuple], str] = lambda args: str(args)
    mistakes: Sequence[Mistake] = ()

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if answer is None:
            return checks.not_implemented(self.title)
        if not callable(answer):
            return CheckResult(self.title, False, 0.0, f"expected a function of "
                               f"({', '.join(self.arg_names)}), got {type(answer).__name__}",
                               status="invalid")
        inputs = list(self.visible())
        if hidden:
            inputs += self.hidden_cases(hidden_rng())
        try:
            lv = checks.evaluate_lanes(answer, inputs)
        except checks._Unfinished:
            return checks.not_implemented(self.title)
        diffs = []
        got_all = []
        for args, v, prob in zip(inputs, lv.values, lv.problems):
            exp = int(self.reference(*args))
            got_all.append(v)
            if prob or v != exp:
                diffs.append(checks.LaneDiff(-1, prob or str(v), str(exp)))
                diffs[-1].where = self.describe(args)
        if not diffs:
            return CheckResult(self.title, True, 1.0, f"all {len(inputs)} inputs right")
        known = known_mistake(self.mistakes, inputs, got_all, convert=int)
        advice = [known] if known is not None else []
        res = CheckResult(self.title, False, 1 - len(diffs) / len(inputs),
                          f"{len(diffs)} of {len(inputs)} inputs wrong", diffs=diffs,
                          advice=advice)
        return res
