"""The mutation harness over every exercise of the course: no plausible wrong answer may pass the
notebook's visible check and then fail the hidden tests (an escape), and the harness can see one.

``test_no_mutant_escapes`` runs the whole harness (``ptxlab.authoring.mutants``, as
``tools/course/course_mutants.py`` does for the report, without the extra evidence seeds): every
mutant of every solution cell of ``course/text/*.py``.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import backends
from ptxlab.authoring import mutants
from ptxlab.authoring.course_cases import SolutionCell, solution_cells
from ptxlab.teach.exercises.base import ChoiceExercise, FunctionExercise
from ptxlab.teach.exercises.kernel_exercise import KernelExercise


#: Escapes accepted for now, as ``(exercise key, the mutant's new line)``: none. A listed escape
#: that is gone fails too, so the list only shrinks; any other escape fails.
KNOWN_ESCAPES: set[tuple[str, str]] = set()


def assert_no_escapes(results: list[mutants.ExerciseResult]) -> None:
    """Fail on any escape not in :data:`KNOWN_ESCAPES`, naming each with its line, its diff and
    what the hidden check said; fail too on a known escape that is gone (every mutant of its
    exercise was run and it did not escape)."""
    found = {(r.key, " ".join(d for d in o.diff if d.startswith("+"))): (r, o)
             for r in results for o in r.escapes}
    new = [f"{r.key} (course/text/{r.notebook}.py line {o.line}, {o.operator}):\n    "
           + "\n    ".join(o.diff) + "\n    hidden: " + o.hidden_says.replace("\n", "\n    ")
           for key, (r, o) in found.items() if key not in KNOWN_ESCAPES]
    assert not new, f"{len(new)} mutants pass the visible check and fail the hidden tests:\n" \
                    + "\n".join(new)
    complete = {r.key for r in results if not r.sampled}
    gone = sorted(k for k in KNOWN_ESCAPES - set(found) if k[0] in complete)
    assert not gone, f"these no longer escape, take them off KNOWN_ESCAPES: {gone}"


RUN_COURSE = ("import pickle, sys; from ptxlab.authoring import mutants; "
              "open(sys.argv[1], 'wb').write(pickle.dumps("
              "mutants.run_course(workers=2, evidence=False, progress=None)))")


def test_no_mutant_escapes():
    ok, why = backends.cpu_available()
    if not ok:
        pytest.skip(f"the CPU model runs the kernel exercises' mutants: {why}")
    # the whole course, two worker processes; its wall time is in reports/course/MUTANTS.md.
    # Run from a child process: a process pool leaves multiprocessing's resource tracker behind
    # in the process that made it, and other tests check that pytest's process has no children.
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.pickle"
        subprocess.run([sys.executable, "-c", RUN_COURSE, str(out)], check=True, timeout=1500)
        results = pickle.loads(out.read_bytes())
    assert len(results) >= 40 and all(r.run for r in results)
    assert_no_escapes(results)


# ---------------------------------------------------------------------------------------------
# The harness sees what it is meant to see
# ---------------------------------------------------------------------------------------------

def _toy_cell(exercise, code: str, name: str = "f") -> SolutionCell:
    return SolutionCell("toy", "toy", 1, code, exercise, name, hidden_tested=True)


TOY_SOLUTION = """def f(x):
    ### BEGIN SOLUTION
    return x % 8
    ### END SOLUTION


ex.toy.check(f);
"""


def _toy(visible: range) -> FunctionExercise:
    """``x % 8`` checked on ``visible``; the hidden cases go up to 64."""
    return FunctionExercise(key="toy.mod8", title="x mod 8", arg_names=("x",),
                            reference=lambda x: x % 8, visible=lambda: [(x,) for x in visible],
                            hidden_cases=lambda rng: [(int(x),) for x in rng.integers(0, 64, 20)])


def test_a_planted_escape_is_found():
    # visible inputs 0..7 only: `return x` (dropping % 8) passes them and fails the hidden ones
    res = mutants.run_cell(_toy_cell(_toy(range(8)), TOY_SOLUTION), evidence=False)
    escaped = {tuple(o.diff) for o in res.escapes}
    assert ("- return x % 8", "+ return x") in escaped, [o.diff for o in res.escapes]
    assert res.killed and res.made == res.run


def test_widening_the_visible_cases_kills_the_escape():
    res = mutants.run_cell(_toy_cell(_toy(range(16)), TOY_SOLUTION), evidence=False)
    assert not res.escapes and res.killed


def test_an_escape_fails_the_course_test():
    # the course test names a planted escape with its diff and the hidden check's words
    res = mutants.run_cell(_toy_cell(_toy(range(8)), TOY_SOLUTION), evidence=False)
    with pytest.raises(AssertionError, match=r"(?s)toy\.mod8 .*\+ return x\n *hidden: \(self"):
        assert_no_escapes([res])


def test_a_known_escape_that_is_gone_fails(monkeypatch):
    # once the visible cases kill a listed escape, the list must shrink
    res = mutants.run_cell(_toy_cell(_toy(range(16)), TOY_SOLUTION), evidence=False)
    monkeypatch.setitem(globals(), "KNOWN_ESCAPES", {("toy.mod8", "+ return x")})
    with pytest.raises(AssertionError, match="take them off KNOWN_ESCAPES"):
        assert_no_escapes([res])
    res = mutants.run_cell(_toy_cell(_toy(range(8)), TOY_SOLUTION), evidence=False)
    with pytest.raises(AssertionError, match=r"\+ return x % 16"):     # listed: not reported
        assert_no_escapes([res])


def test_python_mutants_cover_the_operators():
    code = """def rows(lane, base, stride):
    ### BEGIN SOLUTION
    row = lane % 16
    return base + row * 128 + (lane // 16) * 16, row
    ### END SOLUTION
"""
    made, stillborn = mutants.make_mutants(_toy_cell(_toy(range(8)), code, "rows"))
    news = {" ".join(m.diff) for m in made}
    assert stillborn == 0 and len(news) == len(made)            # distinct
    expect = ["+ row = lane // 16", "+ row = lane % 8", "+ row = lane // 8",   # lane families
              "(lane // 16) * 32", "(lane // 16) * 17", "(lane // 16) * 8",    # constants
              "+ return (row, base + row * 128 + lane // 16 * 16)",            # tuple swap
              "+ return base + (lane // 16) * 16, row",                         # term dropped
              "+ return (row * 128) + (lane // 16) * 16, row",                  # base dropped
              "(base // 128 + row) * 128",                                      # absolute
              "(base + row * 128 ^ lane // 16 * 16), row"]                      # operator
    for piece in expect:
        assert any(piece in n for n in news), (piece, sorted(news))
    assert all(m.line >= 3 for m in made)          # only the solution region changes


def test_choice_mutants_are_the_other_options():
    ex = ChoiceExercise(key="toy.choice", title="pick", correct="b",
                        explanations={k: k for k in "abcd"})
    code = 'def pick():\n    ### BEGIN SOLUTION\n    return "b"\n    ### END SOLUTION\n'
    cell = _toy_cell(ex, code, "pick")
    made, _ = mutants.make_mutants(cell)
    assert sorted(m.operator for m in made) == [f"option {o!r} instead of 'b'" for o in "acd"]
    res = mutants.run_cell(cell, evidence=False)
    assert res.killed == 3 and not res.escapes and not res.both_accept


KERNEL = r'''
extern "C" __global__ void k(const unsigned short* a, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 128; i += 32) tile[(i / 8) * sld + i % 8] = a[i];
    __syncwarp();
    unsigned r0, r1;
    // BEGIN SOLUTION
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile))
                          + (lane % 16) * sld * 2;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    // END SOLUTION
    out[lane * 2] = r0;
    out[lane * 2 + 1] = r1;
}
'''


def test_kernel_mutants_cover_the_operators():
    cell = _toy_cell(KernelExercise(key="toy.k", title="k", kernel_name="k"),
                     f'K = r"""{KERNEL}"""\nex.k.check(K)\n', "K")
    assert mutants.kind_of(cell) == "kernel"
    made, _ = mutants.make_mutants(cell)
    ops = {m.operator for m in made}
    news = " ".join(" ".join(m.diff) for m in made)
    for what in ("removed `.trans`", "deleted `__syncwarp();`", "dropped `* 2`",
                 "swapped `%0` and `%1` in `{%0, %1}`", "`lane % 16` -> `lane / 16`",
                 "`lane % 16` -> `lane % 8`", "off by one: `lane % 16` -> `lane % 16 + 1`",
                 "`+` -> `^`", "`16` -> `17`", "`2` -> `4`"):
        assert what in ops, (what, sorted(ops))
    assert "i < 128" not in news           # outside the solution region: only barriers change
    assert all("static_cast<unsigned>" in m.answer for m in made if "static_cast" not in
               " ".join(m.diff))


def test_a_kernel_that_does_not_compile_is_stillborn():
    cell = _toy_cell(KernelExercise(key="toy.k", title="k", kernel_name="k"),
                     f'K = r"""{KERNEL}"""\nex.k.check(K)\n', "K")
    broken = mutants.Mutant("broken", KERNEL.replace("unsigned r0, r1;", "unsigned r0 r1;"),
                            ("- x", "+ y"), 1)
    out = mutants.classify(cell, broken)
    assert out.stillborn and out.hidden is None and not out.visible


def test_a_runaway_answer_is_a_rejection(monkeypatch):
    monkeypatch.setattr(mutants, "TIME_LIMIT_S", 0.2)

    def slow(x):
        while True:
            np.sum(np.arange(10))
    ok, says = mutants._verdict(_toy(range(8)), slow, False, None)
    assert not ok and "ran over" in says


# ---------------------------------------------------------------------------------------------
# Named mistakes: every kernel exercise names the cause of the wrong kernels learners write
# ---------------------------------------------------------------------------------------------

_CELLS = {c.exercise.key: c for c in solution_cells()}
#: The notebooks whose kernel exercises must each have named mistakes.
_NAMED_NOTEBOOKS = ("02_", "03_", "04_", "05_", "06_", "07_", "08_", "09_", "10_")


def test_every_kernel_exercise_has_named_mistakes():
    kernels = {key for key, c in _CELLS.items() if mutants.kind_of(c) == "kernel"
               and c.notebook.startswith(_NAMED_NOTEBOOKS)}
    named = {m.key for m in mutants.NAMED_MISTAKES}
    assert kernels and kernels <= named, sorted(kernels - named)
    assert named <= set(_CELLS), sorted(named - set(_CELLS))


@pytest.mark.parametrize("mistake", mutants.NAMED_MISTAKES,
                         ids=[f"{m.key.split('.')[-1]}: {m.kind}" for m in mutants.NAMED_MISTAKES])
def test_a_named_mistake_gets_its_cause(mistake):
    ok, why = backends.cpu_available()
    if not ok:
        pytest.skip(f"the CPU model runs the kernels: {why}")
    res = mutants.named_mistake_result(_CELLS[mistake.key], mistake)
    report, advice = res.report(max_lines=2), res.advice
    assert not res.passed and mistake.says in report, report
    if mistake.alone:       # a compile error or a hang: its own message, nothing after it
        assert advice == [] or (len(advice) == 1 and advice[0].startswith("compiler says")), \
            report
    # the cause is short, and no line of the report hides which lane or cell it is about
    assert all(len(a) <= 400 or a.startswith("compiler says") for a in advice), report


def test_a_kernel_that_is_right_whatever_the_spelling_passes():
    # the stride written the other way round is no mistake: nothing matches its text
    cell = _CELLS["ldmatrix.a_operand_kernel"]
    source = cell.kernel_source().replace("(lane % 16) * sld * 2", "(lane % 16) * (2 * sld)")
    assert cell.exercise.evaluate(source).passed
