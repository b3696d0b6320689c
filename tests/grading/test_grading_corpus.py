"""The bad-submission corpus graded in one batch with good submissions (``ptxlab grade``).

Every student must get a score and a readable reason, the batch must finish, the gradebook
must hold a row for every student, the good submissions must keep full marks among the bad
ones, and the snooping submission must find nothing.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import course as fixture_course  # noqa: E402
import cases as corpus  # noqa: E402

pytest.importorskip("nbgrader")

KERNEL_SRC = corpus.FIXTURE.read_text()


def _kernels_run_here() -> bool:
    """Can any backend (GPU or CPU model) run the fixture's kernel here?"""
    try:
        from ptxlab import backends
        backends.choose_backend(
            'extern "C" __global__ void k(unsigned* o) { asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(o[0]),"=r"(o[1]),"=r"(o[2]),"=r"(o[3]) : "r"(0)); }')
        return True
    except Exception:
        return False


def _class_roster() -> list[tuple[str, corpus.Case]]:
    """Students in grading order, the good submissions spread among the bad ones."""
    good = [c for c in corpus.CASES if c.good]
    bad = [c for c in corpus.CASES if not c.good]
    order = [good[0]] + bad[: len(bad) // 2] + [good[1]] + bad[len(bad) // 2:] + [good[2]]
    return [(f"s{i:02d}_{case.name}", case) for i, case in enumerate(order)]


ROSTER = _class_roster()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = fixture_course.make_course(tmp_path_factory.mktemp("corpus") / "course")
    # Launches through each worker's warm launch service, as on a GPU server (where 'auto'
    # turns it on): the corpus's hangs and faults must cost only their own student there too.
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="6", PTXLAB_LAUNCH_TIMEOUT_S="10",
                                     PTXLAB_KERNEL_MEMORY_MB="1536", PTXLAB_WARM_LAUNCHES="on")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, case in ROSTER:
        corpus.write_submission(root, student, case)
    run = fixture_course.ptxlab_grade(["ps1", "--workers", "2", "--submission-timeout", "240"],
                                      root, env)
    assert run.returncode == 0, f"ptxlab grade failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    with open(root / "grading" / "ps1" / "grades.csv") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    from ptxlab.grading.batch import Ledger
    outcomes = Ledger(root / "grading" / "ps1" / "ledger.jsonl").load()
    return root, rows, outcomes, run


def test_corpus_is_big_enough():
    assert sum(not c.good for c in corpus.CASES) >= 20
    assert len({c.name for c in corpus.CASES}) == len(corpus.CASES)


def test_every_student_has_a_score_and_reason(graded):
    root, rows, outcomes, run = graded
    assert set(rows) == {s for s, _ in ROSTER}, run.stderr[-3000:]
    for student, row in rows.items():
        assert row["score"] != "" and row["max_score"] == "10", (student, row)
        assert row["reason"].strip(), f"{student} has no reason"
    assert (root / "grading" / "ps1" / "summary.md").read_text().startswith("# Autograding summary")


def test_gradebook_has_every_row(graded):
    root, rows, outcomes, run = graded
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", fixture_course.COURSE_ID) as gb:
        for student, case in ROSTER:
            sub = gb.find_submission("ps1", student)
            grades = {g.name: g for nb in sub.notebooks for g in nb.grades}
            assert set(grades) == set(corpus.TESTS), (student, set(grades))
            for gid, g in grades.items():
                assert g.score is not None, f"{student}/{gid} has no score in the gradebook"
            assert float(sub.score) == pytest.approx(float(rows[student]["score"]))


@pytest.mark.parametrize("student,case", ROSTER, ids=[s for s, _ in ROSTER])
def test_case_outcome(graded, student, case):
    root, rows, outcomes, run = graded
    outcome = outcomes[student]
    assert outcome.status == case.status, (outcome.status, outcome.reason)
    if case.submission_reason:
        assert corpus.reason_matches(case.submission_reason, outcome.reason), outcome.reason
    kernels = _kernels_run_here()
    by_id = {c.grade_id: c for c in outcome.checks}
    for gid, points in corpus.TESTS.items():
        check = by_id[gid]
        if gid == "test_kernel" and not kernels and gid in case.passes:
            assert check.score == 0 and corpus.reason_matches(corpus.NO_BACKEND, check.reason), check
            continue
        if gid in case.passes:
            assert check.score == points, f"{gid} lost points: {check.reason}"
            continue
        assert check.score < points, f"{gid} should not pass"
        pattern = case.reasons.get(gid)
        if gid == "test_kernel" and case.kernel and not kernels:
            pattern = corpus.NO_BACKEND
        if pattern:
            assert corpus.reason_matches(pattern, check.reason), f"{gid}: {check.reason!r}"


def test_good_submissions_unaffected_by_neighbours(graded):
    root, rows, outcomes, run = graded
    good = [s for s, c in ROSTER if c.good]
    scores = {s: outcomes[s].score for s in good}
    assert len(set(scores.values())) == 1, scores
    expected = 10.0 if _kernels_run_here() else 5.0
    assert all(v == expected for v in scores.values()), scores
    if _kernels_run_here():
        # Each kernel check records where it ran; the CSV says it per student.
        for s in good:
            kernel_check = next(c for c in outcomes[s].checks if c.grade_id == "test_kernel")
            assert kernel_check.backend in ("gpu", "cpu"), kernel_check
            assert rows[s]["kernel_backend"] == kernel_check.backend


def test_snooping_found_nothing(graded):
    root, rows, outcomes, run = graded
    student = next(s for s, c in ROSTER if c.name == "bad_snoop")
    import nbformat
    nb = nbformat.read(str(root / "autograded" / student / "ps1" / "ps1.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "SNOOP OK" not in text, text
    assert text.count("SNOOP BLOCKED") == 7, text
    # The attempt to rewrite every score in the gradebook changed nothing.
    assert outcomes[student].score == (5.0 if _kernels_run_here() else 0.0)
    good = next(s for s, c in ROSTER if c.good)
    assert outcomes[good].score > 0


def test_launches_went_through_the_warm_service(graded):
    """Every launch of a good student ran in its worker's warm launch service, none in a child."""
    import nbformat

    root, rows, outcomes, run = graded
    if not _kernels_run_here():
        pytest.skip("no backend runs the fixture's kernel here")
    routes = []
    for s, c in ROSTER:
        if not c.good:
            continue
        nb = nbformat.read(str(root / "autograded" / s / "ps1" / "ps1.ipynb"), as_version=4)
        for cell in nb.cells:
            routes += [r.get("route") for r in
                       cell.get("metadata", {}).get("ptxlab", {}).get("kernel_launches", [])]
    assert routes and set(routes) == {"service"}, routes

