"""Output limiting must never hide that a test cell failed (``ptxlab/grading/limit_output.py``).

The suspected cheat: learner code called from a test cell that nbgrader's ``SaveAutoGrades``
scores from the cell's own outputs (a plain test cell, one the judge does not decide -- every
test cell of the fixture assignment ``ps1``) prints more than the grader keeps of a cell
(``LimitOutputBytes``, 1 MB) and then fails; if cutting the output dropped the cell's error, the
cell would score as passed. A class of such submissions is graded by ``ptxlab grade`` in the
sandbox beside honest work: every failing cell scores 0, its error survives in the graded
notebook (the feedback says why), and the row names the learner's error. The fast tests below
check the step alone against nbgrader's own scoring rule, over many shapes of output.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import cases as corpus  # noqa: E402

pytest.importorskip("nbgrader")

from nbformat.v4 import new_code_cell, new_notebook, new_output  # noqa: E402

from ptxlab.grading.limit_output import LimitOutputBytes  # noqa: E402

LIMIT = 1_000_000
ADDRESS = corpus.ADDRESS_TESTS
_GOOD_BODY = ("    matrix, row = divmod(lane, 8)\n"
              "    return (8 * (matrix % 2) + row) * row_stride_bytes + 16 * (matrix // 2)\n")


def _formula(prelude: str, before_return: str, returned: str = "") -> str:
    """The learner's formula with ``before_return`` run on each call, then the right answer
    (or ``returned`` where given)."""
    body = _GOOD_BODY if not returned else (
        "    matrix, row = divmod(lane, 8)\n"
        f"    return {returned}\n")
    return (f"{prelude}\ndef ldmatrix_x4_address(lane, row_stride_bytes):\n"
            f"{before_return}{body}")


_RIGHT = "(8 * (matrix % 2) + row) * row_stride_bytes + 16 * (matrix // 2)"
#: name -> (the answer cell, the address tests' must-hold reason, whether its error arrives whole)
CHEATS = {
    # one line of 1.5 MB (nbgrader's LimitOutput counts lines: it keeps all of it), then wrong
    "print_one_line_then_wrong": (_formula(
        "_BIG = 'x' * 1_500_000", "    if lane == 0:\n        print(_BIG)\n",
        f"{_RIGHT} + (lane == 5)"), r"lane 5 .*expected \d+, got \d+", True),
    # 250 lines of 8 kB: LimitOutput keeps 200 of them, still over 1 MB, then it raises
    "print_many_lines_then_raise": (_formula(
        "_LINE = 'z' * 8_000",
        "    if lane == 0:\n        for _ in range(250):\n            print(_LINE)\n"
        "    if lane == 3:\n        raise ValueError('gave up after printing')\n"),
        r"raised ValueError: gave up after printing", True),
    # the error alone is over the limit: its message is 0.9 MB, twice in the traceback
    "huge_error_message": (_formula(
        "", "    if lane == 2:\n        raise ValueError('y' * 900_000)\n"),
        r"lane 2: your function raised ValueError: yyy", True),
    # an error message past what the grader keeps while the cell runs: dropped as it arrives
    "huge_error_past_run_cap": (_formula(
        "", "    if lane == 2:\n        raise ValueError('v' * 3_000_000)\n"),
        "", False),
    # on stderr, then wrong (a stderr stream is a failure to nbgrader too)
    "print_stderr_then_wrong": (_formula(
        "import sys\n_BIG = 'e' * 1_500_000",
        "    if lane == 0:\n        print(_BIG, file=sys.stderr)\n",
        f"{_RIGHT} + (lane == 7)"), r"lane 7 .*expected \d+, got \d+", True),
    # past what the grader keeps of a cell while it runs (4 MB): the rest, the error included,
    # is dropped as it arrives (SandboxedExecute), and a note on stderr says so
    "print_past_run_cap_then_wrong": (_formula(
        "_CHUNK = 'w' * 1_000_000",
        "    if lane == 0:\n        for _ in range(5):\n            print(_CHUNK)\n",
        f"{_RIGHT} + (lane == 9)"), "", False),
}
GOOD = {
    "good_solution": corpus.GOOD_FORMULA,
}


def _roster() -> list[tuple[str, corpus.Case]]:
    out = [(name, corpus.Case(name, name, corpus._formula(src))) for name, src in GOOD.items()]
    out += [(name, corpus.Case(name, name, corpus._formula(src)))
            for name, (src, _, _) in CHEATS.items()]
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    import course as fixture_course

    from ptxlab.grading import sandbox
    try:
        sandbox.bwrap_binary()
    except Exception as exc:
        pytest.skip(f"graded in the sandbox, which cannot start here: {exc} "
                    "(./lab setup --dev installs bubblewrap)")
    root = fixture_course.make_course(tmp_path_factory.mktemp("output_limit") / "course")
    env = fixture_course.grading_env(PTXLAB_KERNEL_MEMORY_MB="1024", PTXLAB_CELL_TIMEOUT_S="60")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, case in _roster():
        corpus.write_submission(root, student, case)
    run = fixture_course.ptxlab_grade(["ps1", "--workers", "2"], root, env)
    assert run.returncode == 0, f"ptxlab grade failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    with open(root / "grading" / "ps1" / "grades.csv") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return {"root": root, "rows": rows}


def _grades(root: Path, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("ps1", "ps1", student)
        return {g.name: float(g.score or 0) for g in nb.grades}


def _graded_cells(root: Path, student: str) -> dict[str, dict]:
    nb = json.loads((root / "autograded" / student / "ps1" / "ps1.ipynb").read_text())
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c["metadata"].get("nbgrader", {}).get("grade")}


def test_the_address_tests_are_scored_from_their_outputs(graded):
    """The fixture's address tests are plain test cells: no judge's verdict, nbgrader's rule."""
    cells = _graded_cells(graded["root"], "good_solution")
    for gid in ADDRESS:
        assert "verdict" not in cells[gid]["metadata"].get("ptxlab", {}), cells[gid]["metadata"]


def test_honest_work_keeps_its_points(graded):
    grades = _grades(graded["root"], "good_solution")
    assert all(grades[t] == corpus.TESTS[t] for t in ADDRESS), grades


@pytest.mark.parametrize("name", list(CHEATS))
def test_a_failing_cell_with_too_much_output_scores_zero(graded, name):
    row = graded["rows"][name]
    assert row["status"] == "graded", row
    grades = _grades(graded["root"], name)
    assert all(grades[t] == 0 for t in ADDRESS), (grades, row["reason"])
    pattern = CHEATS[name][1]
    if pattern:
        assert corpus.reason_matches(pattern, row["reason"]), row["reason"]


@pytest.mark.parametrize("name", [n for n, (_, _, whole) in CHEATS.items() if whole])
def test_the_error_survives_the_cut(graded, name):
    """The graded notebook (what the feedback shows) keeps the cell's error, within the cap."""
    cells = _graded_cells(graded["root"], name)
    for gid in ADDRESS:
        outputs = cells[gid]["outputs"]
        errors = [o for o in outputs if o["output_type"] == "error"]
        assert errors and errors[0]["ename"] == "AssertionError", (gid, outputs[-3:])
        assert sum(len(json.dumps(o)) for o in outputs) <= LIMIT + 2_000, gid
        assert any("[grader]" in "".join(o.get("text", "")) for o in outputs), (gid, outputs[-3:])


# ---------------------------------------------------------------------------------------------
# The step alone, scored by nbgrader's own rule
# ---------------------------------------------------------------------------------------------

def _error(evalue: str = "lane 5: expected 10, got 11", tb_lines: int = 3):
    return new_output("error", ename="AssertionError", evalue=evalue,
                      traceback=[f"frame {i}" for i in range(tb_lines)] + [f"AssertionError: {evalue}"])


def _shapes() -> dict[str, list]:
    big = "x" * 1_500_000
    return {
        "stdout_then_error": [new_output("stream", name="stdout", text=big), _error()],
        "error_message_alone_too_big": [_error("y" * 2_000_000)],
        "traceback_too_big": [new_output("error", ename="IndexError", evalue="deep",
                                         traceback=["t" * 1_000] * 2_000)],
        "image_then_error": [new_output("display_data", data={"image/png": "A" * 3_000_000}),
                             _error()],
        "stderr_then_error": [new_output("stream", name="stderr", text=big), _error()],
        "many_streams_then_error": [new_output("stream", name="stdout", text="s" * 300_000)
                                    for _ in range(6)] + [_error()],
        "stdout_then_stderr": [new_output("stream", name="stdout", text=big),
                               new_output("stream", name="stderr", text="warning\n")],
        "stdout_then_score": [new_output("stream", name="stdout", text=big),
                              new_output("execute_result", data={"text/plain": "1.0"},
                                         execution_count=1, metadata={})],
        "two_errors": [new_output("stream", name="stdout", text=big), _error(), _error("again")],
    }


def _test_cell(outputs: list):
    from nbformat import from_dict

    cell = new_code_cell("check(answer)", outputs=from_dict(json.loads(json.dumps(outputs))))
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                 "grade_id": "t", "points": 2, "schema_version": 3}
    return cell


@pytest.mark.parametrize("shape", list(_shapes()))
def test_cutting_never_raises_a_score(shape):
    """nbgrader's score of the cut cell is never above that of the cell as it ran, and an error
    the cell raised is still there, named as it was, within the cap."""
    from nbgrader.utils import determine_grade

    outputs = _shapes()[shape]
    before = _test_cell(outputs)
    nb = new_notebook(cells=[_test_cell(outputs)])
    out, _ = LimitOutputBytes(max_bytes_per_cell=LIMIT).preprocess(nb, {})
    cell = out.cells[0]
    assert determine_grade(cell)[0] <= determine_grade(before)[0]
    assert sum(len(json.dumps(o)) for o in cell.outputs) <= LIMIT
    had = [o.ename for o in before.outputs if o.output_type == "error"]
    kept = [o.ename for o in cell.outputs if o.output_type == "error"]
    assert kept == had, (had, kept)
    assert "[grader]" in cell.outputs[-1].get("text", "")


def test_a_cell_within_the_cap_is_untouched():
    outputs = [new_output("stream", name="stdout", text="ok\n"), _error()]
    nb = new_notebook(cells=[_test_cell(outputs)])
    out, _ = LimitOutputBytes(max_bytes_per_cell=LIMIT).preprocess(nb, {})
    assert json.loads(json.dumps(out.cells[0].outputs)) == json.loads(json.dumps(outputs))


def test_the_cut_comes_after_the_judge_and_before_the_scores():
    """The step list: the verdict file is written from the outputs as they ran (JudgeAnswers),
    the scores are taken from the cut ones (SaveAutoGrades)."""
    from traitlets.config import Config, PyFileConfigLoader

    config = Config()
    loader = PyFileConfigLoader("nbgrader_config.py", path=str(HERE.parent / "autograder"))
    config.merge(loader.load_config())
    steps = list(config.Autograde.autograde_preprocessors)
    at = {s.rsplit(".", 1)[-1]: i for i, s in enumerate(steps)}
    assert at["JudgeAnswers"] < at["LimitOutput"] < at["LimitOutputBytes"] < at["SaveAutoGrades"]
    assert at["LimitOutputBytes"] == at["SaveAutoGrades"] - 1, steps
