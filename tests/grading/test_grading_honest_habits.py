"""Honest habits graded by ``ptxlab grade`` on the course's own ``02_ldmatrix``: copy-pasted
cells, an answer too slow for the cell limit, a notebook too slow for the submission limit.

None of them is an opaque 0: a copied cell is graded as its first copy and the row says so; a
cell stopped at a limit names the limit and its figure; answers read before the submission limit
ran out keep their points, and the row says which. The parts without a grading run are fast
(:func:`test_copies_of_every_shape_validate`, the copies nbgrader's own checks refused;
:func:`test_each_cell_gets_what_is_left_of_the_submission_limit`).
"""
from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import attacks  # noqa: E402
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")

ASSIGNMENT = attacks.ASSIGNMENT
CELL_LIMIT_S = 15
SUBMISSION_LIMIT_S = 30
#: Each of these cells stays under the cell limit; together they pass the submission limit.
SLOW_CELLS = 4
SLOW_CELL_S = 10
ALL_TESTS = attacks.TESTS
READ_BEFORE_LIMIT = ("receive_tests", "side_by_side_rows_tests")


def _index(nb: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb["cells"])
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _copy(grade_id: str, times: int = 1, to_end: bool = False,
          markdown: bool = False) -> Callable[[dict], dict]:
    """The cell ``grade_id`` copied ``times`` times (metadata and all, as Jupyter's copy and
    paste does), right below it or at the end of the notebook, as code or turned to markdown."""
    def edit(nb: dict) -> dict:
        at = _index(nb, grade_id)
        for _ in range(times):
            copy = json.loads(json.dumps(nb["cells"][at]))
            copy.pop("id", None)
            if markdown:
                copy = {"cell_type": "markdown", "metadata": copy["metadata"],
                        "source": copy["source"]}
            nb["cells"].insert(len(nb["cells"]) if to_end else at + 1, copy)
        return nb
    return edit


def _slow_answer(nb: dict) -> dict:
    cell = nb["cells"][_index(nb, "receive")]
    cell["source"] = "def receive(lane, reg, half):\n    while True:\n        pass\n"
    return nb


def _slow_cell(nb: dict) -> dict:
    cell = nb["cells"][_index(nb, "a_fragment")]
    cell["source"] = attacks._text(cell) + "\nwhile True:\n    pass\n"
    return nb


def _slow_notebook(nb: dict) -> dict:
    at = _index(nb, "side_by_side_rows_tests") + 1
    for _ in range(SLOW_CELLS):
        nb["cells"].insert(at, attacks._code_cell(f"import time\ntime.sleep({SLOW_CELL_S})\n"))
    return nb


COPIES = {
    "copied_test_cell": (_copy("receive_tests"), "receive_tests", 2),
    "copied_answer_thrice": (_copy("a_operand_rows", times=2), "a_operand_rows", 3),
    "copied_test_moved": (_copy("side_by_side_rows_tests", to_end=True),
                          "side_by_side_rows_tests", 2),
    "copied_answer_to_markdown": (_copy("a_fragment", markdown=True), "a_fragment", 2),
}
CLASS = {"good": None, "slow_answer": _slow_answer, "slow_cell": _slow_cell,
         "slow_notebook": _slow_notebook,
         **{name: edit for name, (edit, _, _) in COPIES.items()}}


def _write_class(root: Path) -> None:
    _, solved = attacks.notebooks(root)
    for student, edit in CLASS.items():
        nb = json.loads(json.dumps(solved))
        if edit is not None:
            nb = edit(nb)
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / attacks.NOTEBOOK).write_text(json.dumps(nb))
        (folder / "timestamp.txt").write_text("2026-11-27 09:00:00.000000 UTC")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    env = fixture_course.grading_env(PTXLAB_KERNEL_MEMORY_MB="1024",
                                     PTXLAB_CELL_TIMEOUT_S=str(CELL_LIMIT_S))
    root = fixture_course.released_course(tmp_path_factory.mktemp("habits") / "course",
                                          ASSIGNMENT, env)
    _write_class(root)
    run = fixture_course.ptxlab_grade(
        [ASSIGNMENT, "--workers", "2", "--submission-timeout", str(SUBMISSION_LIMIT_S)],
        root, env)
    assert run.returncode == 0, f"ptxlab grade failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    with open(root / "grading" / ASSIGNMENT / "grades.csv") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return root, rows


def _scores(root: Path, student: str) -> dict[str, float]:
    return {test: score for test, (score, _, _) in attacks.gradebook_grades(root, student).items()}


def test_the_honest_submission_gets_full_marks(graded):
    root, rows = graded
    assert float(rows["good"]["score"]) == 12, rows["good"]


@pytest.mark.parametrize("student", sorted(COPIES))
def test_a_copied_cell_is_graded_as_its_first_copy(graded, student):
    """A copy-pasted test, answer or markdown cell costs nothing, and the row says which cell
    appears more than once."""
    root, rows = graded
    _, grade_id, times = COPIES[student]
    row = rows[student]
    assert row["status"] == "graded" and float(row["score"]) == 12, row
    assert f"cell {grade_id} appears {times} times; the first copy was graded" in row["reason"], row
    nb = json.loads((root / "autograded" / student / ASSIGNMENT / attacks.NOTEBOOK).read_text())
    errors = [o.get("ename") for c in nb["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == [], errors       # a pasted test line is not left with a placeholder error


def test_a_slow_answer_names_the_cell_limit(graded):
    """An answer still running at the cell limit loses its test cell's points, and the row
    says which limit stopped it and its figure, not the interrupt it was stopped with."""
    root, rows = graded
    row = rows["slow_answer"]
    scores = _scores(root, "slow_answer")
    assert scores["receive_tests"] == 0 and float(row["score"]) == 10, (scores, row)
    assert re.search(rf"receive_tests: .*`receive`, right after cell \d+ \(receive_tests\), ran "
                     rf"past the cell limit of {CELL_LIMIT_S} s", row["reason"]), row
    assert "KeyboardInterrupt" not in row["reason"], row


def test_a_slow_cell_names_the_cell_limit(graded):
    """An answer cell that ends in an endless loop is interrupted at the cell limit; the function
    it defined before still keeps its points, and the row names the cell and the limit."""
    root, rows = graded
    row = rows["slow_cell"]
    assert float(row["score"]) == 12, row
    assert f"a_fragment: ran past the cell limit of {CELL_LIMIT_S} s" in row["reason"], row
    assert "KeyboardInterrupt" not in row["reason"], row


def test_answers_read_before_the_submission_limit_keep_their_points(graded):
    """A notebook whose cells each stay under the cell limit but together pass the submission
    limit is stopped there; the answers read before it are graded, and the row names the limit
    and those answers."""
    root, rows = graded
    row = rows["slow_notebook"]
    scores = _scores(root, "slow_notebook")
    assert row["status"] == "graded", row
    for test in ALL_TESTS:
        assert scores[test] == (0 if test not in READ_BEFORE_LIMIT else
                                attacks.gradebook_grades(root, "good")[test][1]), (test, scores)
    assert f"submission limit of {SUBMISSION_LIMIT_S} s" in row["reason"], row
    assert "the answers that ran before it were graded: " + ", ".join(READ_BEFORE_LIMIT) \
        in row["reason"], row


@pytest.mark.parametrize("shape", ["test", "answer", "markdown", "thrice", "moved", "locked"])
def test_copies_of_every_shape_validate(shape):
    """Copies of any nbgrader cell leave a notebook nbgrader's own checks accept, with the
    first copy keeping the cell's identity."""
    from nbformat import from_dict
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
    from nbgrader.nbgraderformat import MetadataValidator
    from nbgrader.preprocessors import DeduplicateIds

    from ptxlab.grading.duplicate_cells import KeepFirstCopies, duplicated_cells

    def meta(grade_id, **flags):
        return {"nbgrader": {"grade": False, "solution": False, "locked": False, "task": False,
                             "schema_version": 3, "grade_id": grade_id, **flags}}

    answer = new_code_cell("def f():\n    return 1\n", metadata=meta("f", solution=True))
    test = new_code_cell("assert f() == 1\n", metadata=meta("f_tests", grade=True, points=1,
                                                            locked=True))
    text = new_markdown_cell("Why?", metadata=meta("why", grade=True, solution=True, points=2))
    intro = new_markdown_cell("# Intro", metadata=meta("intro", locked=True))
    cells = [intro, answer, test, text]
    copied = {"test": [test], "answer": [answer], "markdown": [text], "thrice": [test, test],
              "moved": [answer], "locked": [intro]}[shape]
    first = cells.index(copied[0])
    at = len(cells) if shape == "moved" else first + 1
    cells[at:at] = [{**json.loads(json.dumps(c)), "id": f"copy-{n}"} for n, c in enumerate(copied)]
    nb = from_dict(json.loads(json.dumps(new_notebook(cells=cells))))
    grade_id = copied[0]["metadata"]["nbgrader"]["grade_id"]
    assert duplicated_cells(nb) == {grade_id: len(copied) + 1}
    nb, _ = KeepFirstCopies().preprocess(nb, {})
    nb, _ = DeduplicateIds().preprocess(nb, {})
    MetadataValidator().validate_nb(nb)
    keeping = [i for i, c in enumerate(nb.cells)
               if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert keeping == [first]


def test_each_cell_gets_what_is_left_of_the_submission_limit():
    """A cell's timeout is the cell limit, cut to what is left of the submission limit, and a
    stopped cell is told which of the two ran out."""
    from ptxlab.grading.run_limits import RunClock

    now = [100.0]
    clock = RunClock(CELL_LIMIT_S, SUBMISSION_LIMIT_S, clock=lambda: now[0])
    assert clock.timeout_for(CELL_LIMIT_S) == CELL_LIMIT_S and clock.which_fired() == "cell"
    now[0] += SUBMISSION_LIMIT_S - 4.2
    assert clock.timeout_for(CELL_LIMIT_S) == 5 and not clock.expired()
    now[0] += 5
    assert clock.expired() and clock.which_fired() == "submission"
    assert clock.timeout_for(CELL_LIMIT_S) == 1
    assert "submission limit of 30 s" in clock.reason("submission")
    assert RunClock(CELL_LIMIT_S, 0).timeout_for(CELL_LIMIT_S) == CELL_LIMIT_S
