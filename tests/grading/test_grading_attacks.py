"""Attacks on the grader, graded in one batch with honest work by ``ptxlab grade`` on the course's
own ``02_ldmatrix`` (``tests/submissions/attacks.py``).

Every cheat scores 0 on what it cheats or is flagged for a person; every honest submission keeps
its points; the CSV and the gradebook hold every student; nothing the notebooks did reaches the
solutions, the gradebook or another student; nothing is left running or on disk.
"""
from __future__ import annotations

import csv
import hashlib
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import attacks  # noqa: E402
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")

ASSIGNMENT = attacks.ASSIGNMENT
BY_NAME = {a.name: a for a in attacks.ATTACKS}


def _leftovers() -> set[str]:
    tmp = Path(tempfile.gettempdir())
    return {p.name for p in tmp.iterdir()
            if p.name.startswith(("ptxlab-kernel-", "ptxlab-verdict-", "ptxlab-grading-"))}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from ptxlab.grading import sandbox
    try:
        sandbox.bwrap_binary()
    except Exception as exc:
        pytest.skip(f"the attacks are graded in the sandbox, which cannot start here: {exc} "
                    "(./lab setup --dev installs bubblewrap)")
    root = fixture_course.make_course(tmp_path_factory.mktemp("attacks") / "course",
                                      assignment=ASSIGNMENT)
    env = fixture_course.grading_env(PTXLAB_KERNEL_MEMORY_MB="1024", PTXLAB_CELL_TIMEOUT_S="60")
    gen = fixture_course.nbgrader(["generate_assignment", ASSIGNMENT], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    source = root / "source" / ASSIGNMENT / attacks.NOTEBOOK
    source_hash = hashlib.sha256(source.read_bytes()).hexdigest()
    before = _leftovers()
    students = attacks.write_class(root)
    good = root / "submitted" / "good_solution" / ASSIGNMENT / attacks.NOTEBOOK
    good_hash = hashlib.sha256(good.read_bytes()).hexdigest()
    run = fixture_course.ptxlab_grade([ASSIGNMENT, "--workers", "2"], root, env)
    assert run.returncode == 0, f"ptxlab grade failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    with open(root / "grading" / ASSIGNMENT / "grades.csv") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    return {"root": root, "rows": rows, "students": students, "run": run,
            "source_hash": source_hash, "good_hash": good_hash, "source": source, "leftovers_before": before}




def test_the_corpus_is_big_enough():
    cheats = [a for a in attacks.ATTACKS if not a.good]
    assert len(cheats) >= 15
    assert sum(a.good for a in attacks.ATTACKS) >= 2


def test_every_student_has_a_row(graded):
    assert set(graded["rows"]) == set(graded["students"])
    for student, row in graded["rows"].items():
        assert row["score"] != "" and row["reason"].strip(), (student, row)


@pytest.mark.parametrize("name", [a.name for a in attacks.ATTACKS])
def test_attack_outcome(graded, name):
    attack, root, row = BY_NAME[name], graded["root"], graded["rows"][name]
    if attack.reason:
        assert re.search(attack.reason, row["reason"], re.I), row["reason"]
    if attack.refused:
        assert row["status"] == "failed" and float(row["score"]) == 0, row
        return
    assert row["status"] == "graded", row
    attacks.assert_scores(attack, attacks.gradebook_grades(root, name), row["reason"])


def test_every_verdict_came_from_the_grader(graded):
    """No test cell of a graded notebook kept the notebook's own verdict."""
    import nbformat

    root = graded["root"]
    for name, row in graded["rows"].items():
        if row["status"] != "graded":
            continue
        nb = nbformat.read(str(root / "autograded" / name / ASSIGNMENT / attacks.NOTEBOOK),
                           as_version=4)
        tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
                 and not c.metadata.get("nbgrader", {}).get("solution")]
        assert len(tests) == len(attacks.TESTS)
        if name == "tmp_fill" and not any(c.metadata.get("ptxlab", {}).get("verdict")
                                          for c in tests):
            continue            # its kernel died before the answers could be read: all 0
        for cell in tests:
            assert cell.metadata.get("ptxlab", {}).get("verdict", {}).get("by") == "grader", \
                (name, cell.metadata.nbgrader.grade_id)


def test_flags_reach_the_gradebook_with_the_line(graded):
    from nbgrader.api import Gradebook

    root = graded["root"]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        comment = gb.find_comment("receive", attacks.NOTEBOOK[:-6], ASSIGNMENT, "reference_layouts")
        assert "layouts.ldmatrix_fragment" in (comment.auto_comment or ""), comment.auto_comment


def test_nothing_reached_solutions_gradebook_or_neighbours(graded):
    import nbformat

    root = graded["root"]
    assert hashlib.sha256(graded["source"].read_bytes()).hexdigest() == graded["source_hash"]
    with sqlite3.connect(root / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    nb = nbformat.read(str(root / "autograded" / "read_solutions" / ASSIGNMENT / attacks.NOTEBOOK),
                       as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "LEAKED 0" in text, text
    # The student whose notebook was the target of a link kept their own work and marks.
    good = root / "submitted" / "good_solution" / ASSIGNMENT / attacks.NOTEBOOK
    assert not good.is_symlink()
    assert hashlib.sha256(good.read_bytes()).hexdigest() == graded["good_hash"]
    assert float(graded["rows"]["good_solution"]["score"]) == 12


def test_the_sandbox_shows_nothing_that_is_not_the_learners(graded):
    """Not the course root's files (the grader works in it), not the sandbox's options (on its
    first process's command line), not the machine's /etc."""
    import nbformat

    nb = nbformat.read(str(graded["root"] / "autograded" / "look_around" / ASSIGNMENT /
                           attacks.NOTEBOOK), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)
    assert "LOOKED AROUND 0 []" in text, text[-2000:]


def test_a_forged_stop_note_stays_the_students_words(graded):
    """The kernel's stop note became the row's reason word for word: a notebook could write
    "not graded (infrastructure): ..." there. Now it is quoted after whose words they are,
    and the row is graded, with every point the notebook earned before it stopped."""
    row = graded["rows"]["forged_stop_note"]
    assert row["status"] == "graded" and not row["reason"].startswith("not graded"), row
    quoted = row["reason"].index("in the notebook's own words")
    assert "not graded (infrastructure)" not in row["reason"][:quoted], row["reason"]


def test_limits_held(graded):
    root = graded["root"]
    graded_nb = root / "autograded" / "huge_images" / ASSIGNMENT / attacks.NOTEBOOK
    assert graded_nb.stat().st_size < 3 * 2**20, graded_nb.stat().st_size
    # /tmp is a folder of the grader's disk under the kernel's disk quota: the writes stop
    # ("Disk quota exceeded"), or the kernel is stopped at its memory limit.
    row = graded["rows"]["tmp_fill"]
    assert re.search(r"No space left on device|memory|Disk quota exceeded", row["reason"], re.I), row


def test_nothing_left_running_or_on_disk(graded):
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {attacks.BACKGROUND_MARK}" not in ps
    assert _leftovers() <= graded["leftovers_before"]
