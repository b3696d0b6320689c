"""Checks of a learner's answers, with reports a learner can act on.

Three kinds of answer are checked here, each against data from :mod:`ptxlab.model.layouts` or
results of :mod:`ptxlab.model.emulator`, never against a hand-written answer:

* an **address formula**: a Python function of the lane (and the tile's parameters) giving the
  shared-memory byte address that lane hands to ldmatrix/stmatrix;
* a **fragment formula**: a function ``(lane, reg, half) -> (row, col)`` saying which element
  a lane's register half holds;
* a **kernel**: CUDA source with inline PTX, run through :func:`ptxlab.run.backends.launch` and
  compared with the emulator.

Every check returns a :class:`CheckResult` (passed, score, per-lane diffs, a message and advice)
and never lets bad input escape as a traceback: exceptions, floats, NaN, wrong lengths and
unfinished (``NotImplementedError``) answers all become a clear result.
"""
from __future__ import annotations

import math
import re
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model import layouts
from ..run.failure import Failure, lanes_text, number_runs
from . import diagnosis
from .mistakes import Mistake, known_mistake
from .tiles import Placement, Tile

__all__ = [
    "CheckResult", "LaneDiff", "AddressTask", "check_addresses", "check_fragment",
    "check_choice", "evaluate_lanes", "not_implemented", "combine", "NOT_IMPLEMENTED",
    "is_unfinished_source", "check_kernel_outputs", "check_tile_outputs",
]

NOT_IMPLEMENTED = "not implemented yet"
_MAX_LINES = 4


@dataclass
class LaneDiff:
    """One wrong answer: where (lane, and register/half where it matters), what and why."""

    lane: int
    got: str
    expected: str
    where: str = ""
    note: str = ""

    def line(self) -> str:
        if self.lane < 0:
            place = self.where or "input"
        else:
            place = f"lane {self.lane}" + (f" {self.where}" if self.where else "")
        text = f"{place} gave {self.got}, expected {self.expected}"
        return text + (f": {self.note}" if self.note else "")


#: What a teacher reads for each kind of failure a launch can end in.
_FAILURE_NAMES = {
    "compile": "a kernel that does not compile",
    "race": "a race between warps in shared memory (a byte one warp writes and another "
            "touches, no barrier between)",
    "barrier": "a barrier reached by only part of the block",
    "hang": "a kernel that never finishes",
    "undefined": "two lanes of one stmatrix naming the same row",
    "assert": "a device-side assert that failed",
    "fault": "a kernel that faults",
}


@dataclass
class CheckResult:
    """The outcome of one check; ``bool(result)`` is ``passed``."""

    name: str
    passed: bool
    score: float
    message: str
    status: str = "checked"            # checked | not_implemented | invalid | error
    diffs: list[LaneDiff] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    wrong_lanes: list[int] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    #: what the launch ended in, as the model recorded it where it happened (None: it ran)
    failure: Failure | None = None

    def __bool__(self) -> bool:
        return self.passed

    def named_cause(self) -> str | None:
        """The mistake this failed check names, in a few words a teacher can count: the cause
        the diagnosis proved (``details["cause"]``), else what the launch ended in; ``None``
        when the check names none (or passed)."""
        if self.passed:
            return None
        cause = self.details.get("cause")
        if isinstance(cause, str) and cause.strip():
            return cause.strip()
        if self.failure is None:
            return None
        if self.failure.bad_access:
            return "a kernel access outside its memory, or misaligned"
        return _FAILURE_NAMES.get(self.failure.kind.value)

    def report(self, max_lines: int = _MAX_LINES) -> str:
        """The human report: a verdict, a few wrong lanes, and what to change."""
        mark = "PASSED" if self.passed else ("NOT DONE" if self.status == "not_implemented"
                                              else "FAILED")
        lines = [f"[{mark}] {self.name}: {self.message}"]
        shown = self.diffs[:max_lines]
        lines += ["  - " + d.line() for d in shown]
        if len(self.diffs) > len(shown):
            unit = self.details.get("diff_unit")       # what one line counts, when it matters
            lines.append(f"  ... and {len(self.diffs) - len(shown)} more"
                         + (f" {unit}" if unit else ""))
        lines += ["  => " + a for a in self.advice]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"CheckResult(name={self.name!r}, passed={self.passed}, "
                f"score={self.score:.2f}, status={self.status!r})")

    def as_dict(self) -> dict:
        """A JSON-friendly form (for graders and reports)."""
        return {"name": self.name, "passed": self.passed, "score": round(self.score, 4),
                "status": self.status, "message": self.message,
                "wrong_lanes": list(self.wrong_lanes), "advice": list(self.advice),
                "diffs": [d.line() for d in self.diffs[:32]]}


def not_implemented(name: str) -> CheckResult:
    return CheckResult(name, False, 0.0, f"{NOT_IMPLEMENTED}: replace the "
                       "`raise NotImplementedError()` with your answer", status="not_implemented")


def combine(name: str, results: Sequence[CheckResult]) -> CheckResult:
    """Many cases into one: passes when all pass; reports the first failing case."""
    if not results:
        raise ValueError("combine() needs at least one result")
    score = float(np.mean([r.score for r in results]))
    failing = [r for r in results if not r.passed]
    if len(results) == 1:
        return results[0]
    if not failing:
        # What the cases noticed on the way (the CPU model's diagnostics), said once.
        noticed = list(dict.fromkeys(a for r in results for a in r.advice))
        return CheckResult(name, True, 1.0, f"all {len(results)} cases right", advice=noticed,
                           details={"cases": len(results)})
    first = failing[0]
    msg = first.message
    if len(results) > 1:
        msg = f"{len(failing)} of {len(results)} cases wrong; first: {first.message}"
    return CheckResult(name, False, score, msg, status=first.status, diffs=first.diffs,
                       advice=first.advice, wrong_lanes=first.wrong_lanes,
                       details={**first.details, "cases": len(results),
                                "failing": len(failing)})


# ---------------------------------------------------------------------------------------------
# Calling learner code safely
# ---------------------------------------------------------------------------------------------

class _Unfinished(Exception):
    """The learner's function still raises NotImplementedError."""


@dataclass
class _LaneValues:
    values: list            # per call: the validated value (int / tuple of ints) or None
    problems: list[str]     # per call: "" or what was wrong with the returned value
    float_seen: bool = False


def _exception_text(exc: BaseException) -> str:
    """``TypeError: ...`` plus the learner's line, when it can be found."""
    recorded = getattr(exc, "recorded_text", None)
    if isinstance(recorded, str):       # raised in the notebook, replayed by the grader
        return recorded
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(tb):
        if "ptxlab" not in frame.filename.replace("\\", "/").split("/")[-2:][0]:
            where = f" (line {frame.lineno}: {frame.line.strip()})" if frame.line else ""
            break
    return f"{type(exc).__name__}: {exc}{where}"


def _as_int(value) -> tuple[int | None, str, bool]:
    """Validate one returned number: ``(int or None, problem text, was_a_float)``."""
    if isinstance(value, (bool, np.bool_)):
        return None, f"returned a boolean ({value}), not a number", False
    if isinstance(value, (int, np.integer)):
        return int(value), "", False
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return None, "returned NaN", True
        if math.isinf(f):
            return None, f"returned {f}", True
        if f != math.floor(f):
            return None, (f"returned {f!r}, not a whole number (use // for integer "
                          "division, not /)"), True
        return int(f), "", True
    if value is None:
        return None, "returned None (did you forget `return`?)", False
    if isinstance(value, np.ndarray) and value.size == 1:
        return _as_int(value.reshape(()).item())
    return None, f"returned {type(value).__name__} {value!r:.40}, not an integer", False


def evaluate_lanes(fn: Callable, calls: Sequence[tuple], arity: int = 1) -> _LaneValues:
    """Call ``fn(*args)`` for every tuple in ``calls``; validate ints (or ``arity``-tuples).

    Raises :class:`_Unfinished` when ``fn`` raises ``NotImplementedError``; any other exception
    becomes a per-call problem text.
    """
    values, problems, floats = [], [], False
    for args in calls:
        try:
            out = fn(*args)
        except NotImplementedError:
            raise _Unfinished() from None
        except Exception as exc:  # the learner's bug, reported per call
            values.append(None)
            problems.append("raised " + _exception_text(exc))
            continue
        if arity == 1:
            v, prob, fl = _as_int(out)
            floats |= fl
            values.append(v)
            problems.append(prob)
            continue
        if isinstance(out, np.ndarray):
            out = out.tolist()
        if not isinstance(out, (tuple, list)) or len(out) != arity:
            got = (f"{type(out).__name__} of length {len(out)}" if isinstance(out, (tuple, list))
                   else f"{out!r:.40}")
            values.append(None)
            problems.append(f"returned {got}; expected a tuple of {arity} integers")
            continue
        parts, prob = [], ""
        for x in out:
            v, p, fl = _as_int(x)
            floats |= fl
            if p:
                prob = p
                break
            parts.append(v)
        values.append(tuple(parts) if not prob else None)
        problems.append(prob)
    return _LaneValues(values, problems, floats)


def _check_callable(fn, name: str, args: Sequence[str]) -> CheckResult | None:
    if fn is None:
        return not_implemented(name)
    if not callable(fn):
        return CheckResult(name, False, 0.0, f"expected a function of ({', '.join(args)}), got "
                           f"{type(fn).__name__} {fn!r:.40}", status="invalid")
    return None


# ---------------------------------------------------------------------------------------------
# Address formulas
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AddressTask:
    """One case of an address exercise: the tile in shared memory, the instruction form, and
    the arguments the learner's function receives after ``lane``."""

    placement: Placement
    base: int
    stride: int
    args: tuple
    trans: bool = False
    label: str = ""
    #: The instruction the addresses are for: what the PTX ISA allows in ignored lanes differs.
    instruction: str = "ldmatrix"

    @property
    def tile(self) -> Tile:
        return self.placement.tile(self.base, self.stride)

    @property
    def num(self) -> int:
        return self.placement.num

    def describe(self) -> str:
        return self.label or (f".x{self.num}{'.trans' if self.trans else ''}, "
                              f"base {self.base}, row stride {self.stride} B")


def _where_is(task: AddressTask, addr: int) -> str:
    """Name the place an address points at, in the tile's terms."""
    tile = task.tile
    role = task.placement.decode(tile, addr)
    if role is not None:
        return f"row {role[1]} of matrix {role[0]}"
    pos = tile.locate(addr)
    if pos is not None:
        return f"tile row {pos[0]}, column {pos[1]} (not the start of a matrix row)"
    if addr % layouts.ROW_BYTES:
        return f"{addr} (not 16-byte aligned)"
    if addr < tile.base or addr >= tile.end:
        return f"{addr} (outside the tile, which spans bytes {tile.base}..{tile.end - 1})"
    return f"{addr} (inside the tile's row padding)"


def _address_advice(task: AddressTask, got: np.ndarray, exp: np.ndarray, lanes: np.ndarray) -> list[str]:
    """Recognise the usual mistakes from the whole pattern of wrong lanes."""
    advice: list[str] = []
    g, e = got[lanes], exp[lanes]
    base = task.base
    if np.array_equal(g, e - base):
        return ["every address is off by exactly `base`: add the tile's base address"]
    if np.array_equal(g - base, (e - base) // 2) and np.any(e != base):
        return ["your addresses are half the right size: addresses are in bytes, and each "
                "element is 2 bytes (the row stride is already in bytes)"]
    if np.array_equal(g - base, (e - base) * 2) and np.any(e != base):
        return ["your offsets are twice too large: the row stride is already in bytes, do "
                "not multiply it by the element size again"]
    pattern = _row_pattern_advice(task, got, exp, lanes)
    if pattern:                 # one cause: the whole answer's shape says it
        return pattern
    mis = [int(l) for l in lanes if got[l] % layouts.ROW_BYTES]
    if mis:
        advice.append(f"{lanes_text(mis)} "
                      f"{'gives' if len(mis) == 1 else 'give'} addresses that are not "
                      "multiples of 16: "
                      "every row address must be 16-byte aligned (a row is 8 x 16-bit = 16 B)")
    roles = [task.placement.decode(task.tile, int(a)) for a in g]
    want = [layouts.address_role(int(l), task.num) for l in lanes]
    decoded = [(r, w, int(l)) for r, w, l in zip(roles, want, lanes) if r is not None]
    if decoded and len(decoded) == len(lanes):
        same_row = all(r[1] == w[1] for r, w, _ in decoded)
        same_mat = all(r[0] == w[0] for r, w, _ in decoded)
        if same_row and not same_mat:
            mats = {r[0] for r, _, _ in decoded}
            if mats == {0}:
                advice.append("every lane points into matrix 0: your matrix offset ignores "
                              "lane // 8 (lanes 8i..8i+7 give the rows of matrix i)")
            else:
                pairs = sorted({(w[0], r[0]) for r, w, _ in decoded if r[0] != w[0]})
                i, j = pairs[0]
                advice.append(f"matrices are in the wrong places: lanes {8 * i}-{8 * i + 7} "
                              f"must point at {task.placement.describe_matrix(i)}, yours point "
                              f"at matrix {j}")
        elif same_mat and not same_row:
            advice.append("you hit the right matrix but the wrong row: the row inside a "
                          "matrix is lane % 8")
    elif any(r is None for r in roles):
        outside = [int(l) for l, r in zip(lanes, roles) if r is None]
        advice.append(f"{lanes_text(outside)} do not point at the start "
                      "of any matrix "
                      f"row of the tile ({task.placement.what}); rows start at base + "
                      "row * stride + column * 2 with the column a matrix's first column")
    return advice


def _row_pattern_advice(task: AddressTask, got: np.ndarray, exp: np.ndarray,
                        lanes: np.ndarray) -> list[str]:
    """Mistakes seen in the shape of the whole answer rather than in one lane: the row a lane
    *holds* used as the row it *addresses*, every row shifted by the same amount, every lane
    giving its neighbour's row."""
    active = np.flatnonzero(exp >= 0)
    g, e = got[active], exp[active]
    groups = active // 4
    by_group = {int(q): set(g[groups == q].tolist()) for q in set(groups.tolist())}
    if (all(len(v) == 1 for v in by_group.values()) and len({x for v in by_group.values()
                                                              for x in v}) > 1
            and len(set(e.tolist())) > len(by_group)):
        return ["your address changes only with lane // 4, which is the row whose *elements* a "
                "lane holds in the fragment, not the row whose *address* it gives: the address "
                "of row r of matrix i comes from lane 8i + r, so the row inside a matrix is "
                "lane % 8 (lanes 8i..8i+7 give matrix i)"]
    if len(lanes) != len(active):
        return []
    delta = set((g - e).tolist())
    if len(delta) == 1:
        d = delta.pop()
        if task.stride and d % task.stride == 0 and abs(d) // task.stride < 16:
            k = d // task.stride
            return [f"every address is {abs(k)} row{'s' if abs(k) > 1 else ''} "
                    f"{'further down' if k > 0 else 'higher up'} than it should be (off by "
                    f"{d:+d} bytes = {k:+d} * stride): row r of a matrix starts at "
                    "base + r * stride, with rows counted from 0"]
        if d % layouts.ROW_BYTES == 0 and abs(d) < task.stride:
            return [f"every address is {abs(d)} bytes ({abs(d) // 2} elements) too far to the "
                    f"{'right' if d > 0 else 'left'}: the column offset of a matrix is its first "
                    "column * 2 bytes"]
    n = len(active)
    for step in (1, -1):
        neighbour = {int(active[i]): int(exp[active[(i + step) % n]]) for i in range(n)}
        if n > 2 and all(got[l] == neighbour[l] for l in neighbour):
            sign = "+" if step > 0 else "-"
            return [f"each lane gives the row lane {sign} 1 should give (lane r points at row "
                    f"r {sign} 1): the row lane r addresses is r % 8 of matrix r // 8, counted "
                    "from 0"]
    tile = task.tile
    at = [tile.locate(int(x)) if x >= 0 else None for x in got]
    want = [tile.locate(int(x)) if x >= 0 else None for x in exp]
    shift = diagnosis.row_shift_cause(
        [a[0] if a else None for a in at], [w[0] if w else None for w in want],
        [a[1] if a else None for a in at], [w[1] if w else None for w in want], tile.rows)
    return [shift] if shift else []


def _one_address_case(fn: Callable, task: AddressTask, name: str,
                      mistakes: Sequence[Mistake]) -> CheckResult:
    calls = [(lane, *task.args) for lane in range(layouts.WARP_SIZE)]
    lv = evaluate_lanes(fn, calls)
    exp = task.placement.expected_addresses(task.tile)
    active = exp >= 0
    diffs: list[LaneDiff] = []
    wrong: list[int] = []
    got = np.full(layouts.WARP_SIZE, -1, dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        v, prob = lv.values[lane], lv.problems[lane]
        if v is not None:
            got[lane] = v
        if not active[lane]:
            continue
        role = layouts.address_role(lane, task.num)
        want = f"row {role[1]} of matrix {role[0]} (address {int(exp[lane])})"
        if prob:
            wrong.append(lane)
            diffs.append(LaneDiff(lane, prob, want))
        elif v != exp[lane]:
            wrong.append(lane)
            where = _where_is(task, v)
            got_text = where if where.startswith(str(v)) else f"{where} (address {v})"
            diffs.append(LaneDiff(lane, got_text, want))
    n_active = int(active.sum())
    score = 1.0 - len(wrong) / n_active
    advice: list[str] = []
    ignored_bad = [l for l in range(layouts.WARP_SIZE) if not active[l]
                   and lv.values[l] is not None and (lv.values[l] % layouts.ROW_BYTES
                                                     or not task.tile.base <= lv.values[l] < task.tile.end)]
    if not wrong:
        msg = f"all {n_active} row addresses right ({task.describe()})"
        if ignored_bad and task.instruction == "ldmatrix":
            advice.append(f"note: {lanes_text(ignored_bad)} are ignored by .x{task.num}, "
                          "but code compiled for .target sm_75 or lower must give every lane a "
                          "valid address (PTX ISA); the usual fix is to repeat the lower lanes' "
                          "addresses")
        if lv.float_seen:
            advice.append("note: your function returns floats; use // so it returns integers")
        return CheckResult(name, True, 1.0, msg, advice=advice)
    if any(lv.problems[l] for l in wrong):
        first = next(lv.problems[l] for l in wrong if lv.problems[l])
        advice.append(f"your function {first.split(' (line')[0]}; fix that first")
    else:
        known = known_mistake(mistakes, calls, got, where=active)
        if known is not None:
            advice.append(known)
        else:
            advice += _address_advice(task, got, exp, np.array(wrong))
    msg = f"{len(wrong)} of {n_active} address lanes wrong ({task.describe()})"
    return CheckResult(name, False, score, msg, diffs=diffs, advice=advice, wrong_lanes=wrong,
                       details={"got": got.tolist(), "expected": exp.tolist()})


def check_addresses(fn: Callable, tasks: Sequence[AddressTask], *, name: str = "addresses",
                    mistakes: Sequence[Mistake] = (),
                    arg_names: Sequence[str] = ("lane",)) -> CheckResult:
    """Check a per-lane address function against every task; the first failing task is reported."""
    bad = _check_callable(fn, name, arg_names)
    if bad is not None:
        return bad
    try:
        results = [_one_address_case(fn, t, name, mistakes) for t in tasks]
    except _Unfinished:
        return not_implemented(name)
    return combine(name, results)


# ---------------------------------------------------------------------------------------------
# Fragment formulas
# ---------------------------------------------------------------------------------------------

def check_fragment(fn: Callable, layout: layouts.FragmentLayout, *, name: str = "fragment",
                   to_answer: Callable[[int, int, int], tuple] | None = None,
                   answer_names: Sequence[str] = ("row", "col"),
                   arg_names: Sequence[str] = ("lane", "reg", "half"),
                   mistakes: Sequence[Mistake] = ()) -> CheckResult:
    """Check ``fn(lane, reg, elem) -> answer`` for every element a warp holds in ``layout``.

    ``to_answer(matrix, row, col)`` turns the layout's coordinates into the answer's (default:
    ``(row, col)``, or ``(matrix, row, col)`` when there are several matrices).
    """
    bad = _check_callable(fn, name, arg_names)
    if bad is not None:
        return bad
    if to_answer is None:
        to_answer = (lambda m, r, c: (r, c)) if layout.matrices == 1 else (lambda m, r, c: (m, r, c))
    keys = [(lane, reg, e) for lane in range(layouts.WARP_SIZE) for reg in range(layout.regs)
            for e in range(layout.elems_per_reg)]
    expected = [tuple(int(x) for x in to_answer(*layout.element(*k))) for k in keys]
    arity = len(expected[0])
    calls = [k[: len(arg_names)] for k in keys]
    try:
        lv = evaluate_lanes(fn, calls, arity)
    except _Unfinished:
        return not_implemented(name)
    elem_word = "half" if layout.elem_bits == 16 else ("byte" if layout.elem_bits == 8 else "elem")
    diffs, wrong_keys = [], []
    for k, v, prob, exp in zip(keys, lv.values, lv.problems, expected):
        if v == exp:
            continue
        wrong_keys.append(k)
        where = _where_reg(layout, k, elem_word)
        got = prob or _coord_text(answer_names, v)
        diffs.append(LaneDiff(k[0], got, _coord_text(answer_names, exp), where=where))
    total = len(keys)
    if not wrong_keys:
        return CheckResult(name, True, 1.0, f"all {total} elements placed right ({layout.name})")
    advice = _fragment_advice(keys, lv.values, expected, wrong_keys, lv.problems, answer_names,
                              elem_word, calls, mistakes, fn)
    dups = _duplicates(keys, lv.values)
    if dups:
        advice.append(dups)
    wrong_lanes = sorted({k[0] for k in wrong_keys})
    return CheckResult(name, False, 1.0 - len(wrong_keys) / total,
                       f"{len(wrong_keys)} of {total} elements wrong ({layout.name})",
                       diffs=diffs, advice=advice, wrong_lanes=wrong_lanes)


def _where_reg(layout: layouts.FragmentLayout, key: tuple, elem_word: str) -> str:
    if layout.elems_per_reg == 1:
        return f"reg {key[1]}"
    return f"reg {key[1]} {elem_word} {key[2]}"


def _coord_text(names: Sequence[str], v) -> str:
    if v is None:
        return "nothing"
    return "(" + ", ".join(f"{n} {x}" for n, x in zip(names, v)) + ")"


def _duplicates(keys, values) -> str:
    seen: dict = {}
    for k, v in zip(keys, values):
        if v is None:
            continue
        if v in seen:
            return (f"two places claim the same element {v}: lane {seen[v][0]} reg {seen[v][1]} "
                    f"and lane {k[0]} reg {k[1]}; every element is held exactly once")
        seen[v] = k
    return ""


def _fragment_advice(keys, values, expected, wrong_keys, problems, names, elem_word, calls,
                     mistakes, fn) -> list[str]:
    prob = next((p for p in problems if p), "")
    if prob:
        return [f"your function {prob.split(' (line')[0]}; fix that first"]
    got_map = dict(zip(keys, values))
    exp_map = dict(zip(keys, expected))
    known = known_mistake(mistakes, calls, values, convert=tuple)
    if known is not None:
        return [known]
    advice = []
    wrong = set(wrong_keys)
    if len(names) >= 2 and all(got_map[k] is not None and tuple(got_map[k][-2:]) ==
                               tuple(exp_map[k][-2:])[::-1] for k in keys):
        return [f"{names[-2]} and {names[-1]} are swapped everywhere: that is the transposed "
                "layout"]
    for pos, label in ((1, "register"), (2, elem_word)):
        vals = Counter(k[pos] for k in keys)
        bad = Counter(k[pos] for k in wrong)
        if len(vals) > 1 and 0 < len(bad) < len(vals) and all(bad[v] == vals[v] for v in bad):
            advice.append(f"only {label}s {sorted(bad)} are wrong, {label}s "
                          f"{sorted(set(vals) - set(bad))} are right: look at how the {label} "
                          "number moves you through the matrix")
    shifted = _shifted_coordinate(keys, got_map, exp_map, names, elem_word)
    if shifted:
        return [shifted]
    right = [n for i, n in enumerate(names)
             if all(got_map[k] is not None and got_map[k][i] == exp_map[k][i] for k in keys)]
    if right:
        wrong_names = [n for n in names if n not in right]
        advice.append(f"every {' and '.join(right)} you gave is right; the mistake is in the "
                      f"{' and '.join(wrong_names)}")
    return advice


def _shifted_coordinate(keys, got_map, exp_map, names, elem_word) -> str:
    """One coordinate off by the same amount everywhere, perhaps wrapping at its range or at an
    8x8 block (the others right): ``(lane // 4 + 1) % 8`` for a row. Said with the lane and
    register that show it."""
    if any(got_map[k] is None for k in keys):
        return ""
    halves = any(k[2] for k in keys)
    for i, name in enumerate(names):
        others = [j for j in range(len(names)) if j != i]
        if not all(got_map[k][j] == exp_map[k][j] for k in keys for j in others):
            continue
        g = {k: got_map[k][i] for k in keys}
        e = {k: exp_map[k][i] for k in keys}
        for size in dict.fromkeys((max(e.values()) + 1, 8)):
            if any(g[k] // size != e[k] // size for k in keys if size == 8):
                continue
            shifts = {(g[k] - e[k]) % size for k in keys}
            if len(shifts) != 1 or shifts == {0}:
                continue
            d = shifts.pop()
            d = d - size if d > size // 2 else d
            wrapped = [k for k in keys if g[k] != e[k] + d]
            k = (wrapped or keys)[0]
            where = f"lane {k[0]} reg {k[1]}" + (f" {elem_word} {k[2]}" if halves else "")
            wrap = (f", wrapping at {'each 8x8 block' if size == 8 else size}" if wrapped
                    else "")
            return (f"every {name} you gave is {abs(d)} {'more' if d > 0 else 'less'} than it "
                    f"should be{wrap}: {where} gives {name} {g[k]} where {e[k]} belongs; the "
                    "rest is right")
        return ""
    return ""


# ---------------------------------------------------------------------------------------------
# Multiple choice ("spot the bug")
# ---------------------------------------------------------------------------------------------

def check_choice(answer, correct, explanations: dict, *, name: str = "choice") -> CheckResult:
    """A one-word or one-number answer; each wrong option has its own explanation."""
    if answer is None or answer is Ellipsis:
        return not_implemented(name)
    norm = str(answer).strip().lower().strip("().'\"")
    if norm == str(correct).lower():
        return CheckResult(name, True, 1.0, f"right: {explanations.get(correct, '')}".rstrip(": "))
    if norm not in {str(k).lower() for k in explanations}:
        options = ", ".join(repr(k) for k in explanations)
        return CheckResult(name, False, 0.0, f"{answer!r} is not one of the options {options}",
                           status="invalid")
    why = next(v for k, v in explanations.items() if str(k).lower() == norm)
    return CheckResult(name, False, 0.0, f"not {answer!r}: {why}")


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------

_STUB = re.compile(r"raise\s+NotImplementedError|YOUR CODE HERE")


def is_unfinished_source(source) -> bool:
    """True when kernel source still holds the exercise's placeholder."""
    return source is None or source is Ellipsis or bool(_STUB.search(str(source)))


def check_kernel_outputs(name: str, got_regs: np.ndarray, exp_regs: np.ndarray, *,
                         describe_value: Callable[[int], str] | None = None,
                         unit: str = "reg", elem_bits: int = 16, backend: str = "",
                         suspects: Sequence[diagnosis.Suspect] = (),
                         loaded_from: Placement | None = None) -> CheckResult:
    """Compare a warp's output words ``(32, n)`` with the emulator's; name each wrong half.

    ``describe_value(v)`` turns a 16-bit value back into "element (r, c) of matrix m" when the
    inputs were filled with distinct ids, so a wrong lane says *which* element it got. The
    cause comes from evidence (:func:`ptxlab.teach.diagnosis.register_cause`): registers in
    another order, or the output of one of ``suspects`` (plausible mistakes, emulated).
    """
    got = np.asarray(got_regs, dtype=np.uint64).reshape(np.shape(exp_regs))
    exp = np.asarray(exp_regs, dtype=np.uint64)
    bad = got != exp
    where_backend = f" on {backend}" if backend else ""
    if not bad.any():
        return CheckResult(name, True, 1.0, f"all {exp.size} output words match the emulator"
                           + where_backend)
    diffs = []
    for lane, reg in zip(*np.nonzero(bad)):
        g, e = int(got[lane, reg]), int(exp[lane, reg])
        if describe_value and elem_bits == 16:
            parts_g = [describe_value((g >> s) & 0xFFFF) for s in (0, 16)]
            parts_e = [describe_value((e >> s) & 0xFFFF) for s in (0, 16)]
            for h in range(2):
                if parts_g[h] != parts_e[h]:
                    diffs.append(LaneDiff(int(lane), parts_g[h], parts_e[h],
                                          where=f"{unit} {int(reg)} half {h}"))
        else:
            diffs.append(LaneDiff(int(lane), f"0x{g:08x}", f"0x{e:08x}", where=f"{unit} {int(reg)}"))
    wrong_lanes = sorted({int(l) for l in np.nonzero(bad)[0]})
    n_bad = int(bad.sum())
    by_half = bool(describe_value) and elem_bits == 16
    counted = (f" ({len(diffs)} of {2 * bad.size} 16-bit halves)" if by_half else "")
    cause = diagnosis.register_cause(got, exp, suspects, describe=describe_value, unit=unit,
                                     loaded_from=loaded_from)
    return CheckResult(name, False, 1.0 - n_bad / bad.size,
                       f"{n_bad} of {bad.size} output words{counted} differ from the emulator"
                       f"{where_backend}", diffs=diffs, wrong_lanes=wrong_lanes,
                       advice=[cause] if cause else [], 
                       details={"diff_unit": "wrong halves" if by_half else "wrong words",
                                "cause": cause or ""})


# ---------------------------------------------------------------------------------------------
# Matrices a kernel stored to memory
# ---------------------------------------------------------------------------------------------

def check_tile_outputs(name: str, got_tile: np.ndarray, exp_tile: np.ndarray, *,
                       describe_value: Callable[[int], str] | None = None, what: str = "tile",
                       row_names: Callable[[int], str] | None = None,
                       cell_source: Callable[[int, int], str] | None = None,
                       value_source: Callable[[int], str | None] | None = None,
                       unwritten: int | None = None,
                       mistakes: Sequence[tuple[np.ndarray | None, str]] = (),
                       backend: str = "") -> CheckResult:
    """Compare a matrix of 16-bit values that a kernel stored, ``(rows, cols)``, with the
    emulator's; name each wrong cell by its place and by the element it holds.

    A store goes wrong a whole row at a time (a row address is one lane's), so whole rows are
    recognised too: a row still holding ``unwritten`` (the kernel's fill value) was never
    stored; a row holding another row's data names that row through ``row_names``;
    ``cell_source(r, c)`` names the lane and register that must store cell (r, c), and
    ``value_source(v)`` the lane and register that held value ``v`` (``"from lane 4's d1"``), so a wrong cell says where
    its value came from and where the right one is (not the owner of the place). ``mistakes``
    are the tiles that known wrong kernels store (computed with the emulator), with advice.
    """
    exp = np.asarray(exp_tile).astype(np.uint16)
    got = np.asarray(got_tile).astype(np.uint16).reshape(exp.shape)
    bad = got != exp
    where_backend = f" on {backend}" if backend else ""
    if not bad.any():
        return CheckResult(name, True, 1.0, f"all {exp.size} stored elements match the emulator"
                           + where_backend)
    name_of = describe_value or (lambda v: f"0x{int(v):04x}")

    def came_from(v: int) -> str:
        src = value_source(v) if value_source else None
        return name_of(v) + (f" ({src})" if src else "")

    def belongs(r: int, c: int) -> str:
        return name_of(int(exp[r, c])) + (f" (from {cell_source(r, c)})" if cell_source
                                          else "")
    diffs = [LaneDiff(-1, came_from(int(got[r, c])), belongs(int(r), int(c)),
                      where=f"{what}[{r}][{c}]")
             for r, c in zip(*np.nonzero(bad))]
    hit = diagnosis.first_match(got, [diagnosis.Suspect(tile, text) for tile, text in mistakes])
    r, c = (int(x) for x in np.argwhere(bad)[0])
    proof = (f"{what}[{r}][{c}] holds {name_of(int(got[r, c]))} where "
             f"{name_of(int(exp[r, c]))} belongs")
    cause = diagnosis.with_proof(hit.cause, proof) if hit else ""
    advice = [cause] if hit else _tile_row_advice(got, exp, bad, what, row_names, unwritten)
    wrong_rows = sorted({int(r) for r in np.nonzero(bad)[0]})
    empty = [r for r in wrong_rows if unwritten is not None and np.all(got[r] == unwritten)]
    n_bad = int(bad.sum())
    return CheckResult(name, False, 1.0 - n_bad / bad.size,
                       f"{n_bad} of {bad.size} stored elements differ from the emulator"
                       f"{where_backend}, in rows {number_runs(wrong_rows)} of the {what}",
                       diffs=diffs, advice=advice,
                       details={"wrong_rows": wrong_rows, "cause": cause,
                                "diff_unit": "wrong cells" + (
                                    f" (rows {number_runs(empty)} never written)" if empty
                                    else "")})


def _tile_row_advice(got: np.ndarray, exp: np.ndarray, bad: np.ndarray, what: str,
                     row_names: Callable[[int], str] | None, unwritten: int | None) -> list[str]:
    """Whole-row patterns of a wrong stored matrix: rows never written, rows in the wrong place."""
    advice: list[str] = []
    rows = sorted({int(r) for r in np.nonzero(bad)[0]})
    empty = [r for r in rows if unwritten is not None and np.all(got[r] == unwritten)]
    if empty:
        advice.append(f"rows {number_runs(empty)} of the {what} were never written: no lane's "
                      "row address points at them")
    where_from = {exp[r].tobytes(): r for r in range(exp.shape[0])}
    moved = [(r, where_from[got[r].tobytes()]) for r in rows
             if r not in empty and got[r].tobytes() in where_from]
    if moved:
        r, src = moved[0]
        who = f" ({row_names(src)})" if row_names else ""
        advice.append(f"{len(moved)} row(s) hold another row's data: row {r} of the {what} holds "
                      f"row {src}{who}; check which row each lane's address points at and which "
                      "register the asm's list stores there")
    if exp.shape[0] == exp.shape[1] and np.array_equal(got, exp.T):
        advice.append(f"the {what} came out transposed: one transposition too many or too few "
                      "(.trans and movmatrix each turn every 8x8 block around)")
    return advice
