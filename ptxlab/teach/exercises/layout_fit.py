"""Exercises of the notebook on the layout-fit rule: will a copy lower to ldmatrix/stmatrix (and
with which ``.num`` and ``.trans``, or why not), its per-lane address formula, which CuTe atom is
which form, and fixing a trap kernel.

Every expected answer comes from :func:`ptxlab.model.layout_fit.fit_copy`, the emulator or
:mod:`ptxlab.model.cute_atoms`, never written out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ...model import cute_atoms, emulator
from ...model.layout_fit import fit_copy
from .. import checks
from ..checks import CheckResult
from . import cases
from .base import ChoiceExercise, Exercise, FunctionExercise
from .kernel_exercise import KernelExercise, KernelRun

#: The m8n8 fragment over an 8 x 8*num tile of 16-bit elements (element index m + 8n).
FRAGMENT = {1: "((4,8),2):((16,1),8)", 2: "((4,8),(2,2)):((16,1),(8,64))",
            4: "((4,8),(2,4)):((16,1),(8,64))"}


@dataclass(frozen=True)
class FitCase:
    """One copy to judge: the register side, the shared side, the element type, the direction."""

    name: str
    reg: str
    smem: str
    dtype: str = "f16"
    direction: str = "load"

    def expected(self) -> tuple:
        """``(num, trans)`` when it lowers, else ``(reason,)``: the rule's own answer."""
        fit = fit_copy(self.reg, self.smem, self.dtype, self.direction)
        return (fit.num, fit.trans) if fit.fits else (fit.reason,)


FIT_CASES: tuple[FitCase, ...] = (
    FitCase("A", FRAGMENT[4], "(8,32):(32,1)"),
    FitCase("B", FRAGMENT[2], "(8,16):(1,8)"),
    FitCase("C", FRAGMENT[2], "(8,16):(24,1)", direction="store"),
    FitCase("D", FRAGMENT[2], "(8,16):(20,1)"),
    FitCase("E", FRAGMENT[2], "(8,16):(16,1)", dtype="f64"),
    FitCase("F", "(32,4):(4,1)", "(8,16):(16,1)"),
)


def _as_answer(value) -> tuple | None:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            return (int(value[0]), bool(value[1]))
        except (TypeError, ValueError):
            return None
    if isinstance(value, (tuple, list)) and len(value) == 1 and isinstance(value[0], str):
        return (value[0],)
    return None


@dataclass(repr=False)
class FitQuiz(Exercise):
    """A dict ``{case name: (num, trans) or "reason"}`` judged against the layout-fit rule."""

    cases: tuple[FitCase, ...] = ()
    reason_words: dict = field(default_factory=dict)

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if callable(answer):
            try:
                answer = answer()
            except NotImplementedError:
                return checks.not_implemented(self.title)
        if not isinstance(answer, dict):
            return CheckResult(self.title, False, 0.0, f"expected a dict {{case: answer}}, got "
                               f"{type(answer).__name__}", status="invalid")
        diffs, advice = [], []
        for case in self.cases:
            exp = case.expected()
            got = _as_answer(answer.get(case.name))
            if got == exp:
                continue
            shown = "no answer" if case.name not in answer else repr(answer.get(case.name))
            want = f"(num={exp[0]}, trans={exp[1]})" if len(exp) == 2 else repr(exp[0])
            diffs.append(checks.LaneDiff(-1, shown, want))
            diffs[-1].where = f"case {case.name}"
            if len(exp) == 1 and exp[0] in self.reason_words:
                advice.append(f"case {case.name}: {self.reason_words[exp[0]]}")
        if not diffs:
            return CheckResult(self.title, True, 1.0, f"all {len(self.cases)} copies judged right")
        return CheckResult(self.title, False, 1 - len(diffs) / len(self.cases),
                           f"{len(diffs)} of {len(self.cases)} copies judged wrong",
                           diffs=diffs, advice=advice[:2])


will_it_fit = FitQuiz(
    key="layout_fit.will_it_fit",
    title="will this copy lower to ldmatrix/stmatrix? with which .num, .trans?",
    cases=FIT_CASES,
    reason_words={
        "aligned": "count the bytes from one row start to the next: is it a multiple of 16?",
        "dtype": "which element widths do ldmatrix/stmatrix move, directly or as 16-bit "
                 "units? where would the two 32-bit halves of one element land?",
        "register": "is each lane's pair of values two neighbours of one row of the tile?",
        "contiguous": "are the 8 elements of a fragment row next to each other in shared "
                      "memory?",
    },
    hints=(
        "First the type: the .b16 forms move 16-bit elements, and 8- or 32-bit ones as 16-bit "
        "units (two bytes side by side, or an element's two halves) when those line up; "
        "64-bit elements never fit, and .trans of 8-bit data needs the sm_100a-class .b8 forms.",
        "Then the register side: lane t must hold two neighbours of row t // 4 of an 8x8 block.",
        "Then the shared side: a fragment row contiguous gives no .trans, a fragment column "
        "contiguous gives .trans; every row start must be a multiple of 16 bytes; the widest "
        ".num that the values fill wins.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2. The address formula the rule emits, for an x4 load of a padded tile
# ---------------------------------------------------------------------------------------------


def fit_address(lane: int, base: int, pitch: int) -> int:
    """The byte address lane ``lane`` gives for the x4 load of an 8x32 f16 tile whose rows are
    ``pitch`` elements apart, the tile at byte ``base`` (from the fit rule's addresses)."""
    return int(base + _x4_addresses(int(pitch))[lane])


@lru_cache(maxsize=None)
def _x4_addresses(pitch: int) -> tuple[int, ...]:
    return tuple(int(a) for a in fit_copy(FRAGMENT[4], f"(8,32):({pitch},1)").addresses[0])


def _pitch_cases(rng: np.random.Generator) -> list[tuple]:
    params = []
    for _ in range(3):
        pitch = 8 * int(rng.integers(4, 13))
        params.append((16 * int(rng.integers(0, 64)), pitch))
    return cases.every_lane(params)


fit_addresses = FunctionExercise(
    key="layout_fit.addresses",
    title="the address formula of an x4 load with padded rows",
    arg_names=("lane", "base", "pitch"),
    reference=fit_address,
    visible=lambda: cases.every_lane(((0, 32), (512, 40))),
    hidden_cases=_pitch_cases,
    describe=lambda a: f"lane {a[0]}, base {a[1]}, pitch {a[2]}",
    mistakes=(
        (lambda lane, base, pitch: base + (lane % 8) * pitch + (lane // 8) * 16,
         "the pitch counts elements and addresses count bytes: a row is 2 * pitch bytes"),
        (lambda lane, base, pitch: base + (lane % 8) * 2 * pitch + (lane // 8) * 8,
         "matrix i starts 8 elements = 16 bytes into the row"),
        (lambda lane, base, pitch: base + (lane % 8) * 64 + (lane // 8) * 16,
         "64 bytes per row is right only without padding: use the pitch"),
    ),
    hints=("Lane t names row t % 8 of matrix t // 8; which column does matrix i start at?",
           "The pitch counts f16 elements; an address counts bytes."),
)

# ---------------------------------------------------------------------------------------------
# 3. Which CuTe atom is ldmatrix.m8n8.x4.trans.b16?
# ---------------------------------------------------------------------------------------------

_ATOM_OPTIONS = {"a": ("ldmatrix", 4, False), "b": ("ldmatrix", 4, True),
                 "c": ("stmatrix", 4, True), "d": ("ldmatrix", 2, True)}
CUTE_QUESTION = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"


def _atom_explanations() -> dict[str, str]:
    out = {}
    for k, (op, num, trans) in _ATOM_OPTIONS.items():
        atom = cute_atoms.copy_atom(op, num, trans)
        out[k] = f"{atom.name} is {atom.instruction}"
    return out


def _atom_correct() -> str:
    return next(k for k, (op, num, trans) in _ATOM_OPTIONS.items()
                if cute_atoms.copy_atom(op, num, trans).instruction == CUTE_QUESTION)


cute_atom = ChoiceExercise(
    key="layout_fit.cute_atom",
    title=f"which CuTe atom is {CUTE_QUESTION}?",
    correct=_atom_correct(),
    explanations=_atom_explanations(),
    hints=("CuTe names an atom after the value it moves per lane: U32 for whole registers "
           "(no .trans), U16 for 16-bit halves (.trans moves halves between lanes).",
           "The count is the number of such values per lane: x4 moves 4 registers = 8 halves."),
)

# ---------------------------------------------------------------------------------------------
# 4. Kernel: fix the stride trap (an 8x16 tile, two matrices side by side, one ldmatrix.x2)
# ---------------------------------------------------------------------------------------------

X2_KERNEL_NAME = "load_8x16"


@lru_cache(maxsize=None)
def _x2_addresses(ld: int) -> np.ndarray:
    """The fit rule's addresses of one ldmatrix.x2 of an 8x16 tile with rows ``ld`` elements
    apart (read-only: the search costs more than the launch it checks)."""
    addresses = np.array(fit_copy(FRAGMENT[2], f"(8,16):({ld},1)").addresses[0])
    addresses.setflags(write=False)
    return addresses


def x2_run(ld: int, values: np.ndarray | None = None) -> KernelRun:
    """An 8x16 f16 tile (default: ids ``16r + c``) staged with rows ``ld`` elements apart; the
    expected registers are the emulator's ldmatrix.x2 with the fit rule's addresses."""
    tile = (np.arange(128) if values is None else np.asarray(values)).astype(np.uint16)
    smem = np.zeros((8, ld), dtype=np.uint16)
    smem[:, :16] = tile.reshape(8, 16)
    expected = emulator.ldmatrix(smem.reshape(-1).view(np.uint8), _x2_addresses(ld), num=2)
    names = {int(v): f"tile element ({i // 16}, {i % 16})" for i, v in enumerate(tile)}
    return KernelRun(label=f"tile row stride {ld} elements",
                     args=[tile, np.int32(ld), np.zeros(64, dtype=np.uint32)], out_index=2,
                     expected=expected, shared_mem=8 * ld * 2,
                     describe_value=lambda v: names.get(int(v), f"value {int(v)}"))


x2_kernel = KernelExercise(
    key="layout_fit.x2_kernel",
    title="kernel: one ldmatrix.x2 of an 8x16 tile (the stride trap fixed)",
    kernel_name=X2_KERNEL_NAME,
    visible=lambda: [x2_run(16), x2_run(24)],
    hidden_cases=lambda rng: [x2_run(8 * int(rng.integers(2, 7)), rng.permutation(128))
                              for _ in range(2)],
    advice_for=((lambda src: "x2" not in src, "load both matrices with one ldmatrix...x2"),),
    hints=("Lane t names row t % 8 of matrix t / 8 (lanes 16-31 repeat lanes 0-15).",
           "Matrix 1 is columns 8-15: 8 elements = 16 bytes into the row; rows are ld * 2 "
           "bytes apart.",
           "addr = s_tile + (lane % 8) * ld * 2 + ((lane / 8) % 2) * 16"),
)

