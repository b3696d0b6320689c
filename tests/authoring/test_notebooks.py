"""The course notebooks: in sync with their text form, output-free, passing with the solutions,
and failing cleanly ("not implemented yet") once nbgrader has removed the solutions."""
from __future__ import annotations

import json
import shutil

import pytest

from ptxlab.authoring import course_notebooks as nt

NAMES = nt.assignments()


def test_every_assignment_has_a_text_form_and_a_notebook():
    assert NAMES, "no notebooks under course/text/"
    for name in NAMES:
        assert nt.notebook_path(name).exists(), f"{name}: run tools/course/course_build.py"


def test_notebooks_match_text_and_have_no_outputs():
    assert nt.check_sync() == []


def test_stripped_detects_outputs():
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream"}],
                     "execution_count": 3}]}
    assert len(nt.stripped(nb)) == 2


def test_percent_round_trip_keeps_nbgrader_metadata():
    text = (nt.COURSE_DIR / "text" / f"{NAMES[1]}.py").read_text()
    nb = nt.percent_to_notebook(text)
    assert nt.percent_to_notebook(nt.notebook_to_percent(nb)).cells == nb.cells
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all(c.metadata["nbgrader"]["points"] >= 1 for c in graded)
    assert all(c.metadata["nbgrader"]["locked"] for c in graded)


def test_every_exercise_has_a_solution_and_a_graded_test():
    for name in NAMES:
        nb = nt.percent_to_notebook((nt.COURSE_DIR / "text" / f"{name}.py").read_text())
        sol = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        assert len(sol) == len(tests) >= 3, f"{name}: {len(sol)} solutions, {len(tests)} tests"
        for c in sol:
            assert "BEGIN SOLUTION" in c.source and "END SOLUTION" in c.source, c.source[:80]


def _needs(module):
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install "
                                              "'ptxlab[course]')")


@pytest.mark.parametrize("name", NAMES)
def test_source_notebook_runs_and_every_exercise_passes(name, tmp_path):
    _needs("nbclient")
    _needs("ipykernel")
    report = nt.execute(nt.notebook_path(name), cwd=tmp_path, timeout=600)
    assert report.ok, f"{name} failed after {report.seconds:.0f} s: {report.error}"
    failed = {k: v for k, v in report.grade_cells.items() if v != "ok"}
    assert not failed, f"{name}: graded cells failed with the solutions in: {failed}"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    _needs("nbgrader")
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(nt.COURSE_DIR / "source", root / "source")
    shutil.copy(nt.COURSE_DIR / "nbgrader_config.py", root / "nbgrader_config.py")
    return nt.generate_release(root, NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_released_notebook_has_no_solutions_or_hidden_tests(name, released):
    import nbformat
    source = nbformat.read(str(nt.notebook_path(name)), as_version=4)
    text = released[name].read_text()
    leaked = [line for line in nt.solution_lines(source) if line in text]
    assert not leaked, f"{name}: released notebook still holds {leaked[:3]}"
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text


@pytest.mark.parametrize("name", NAMES)
def test_released_notebook_fails_cleanly(name, released, tmp_path):
    _needs("nbclient")
    report = nt.execute(released[name], cwd=tmp_path, allow_errors=True, timeout=600)
    assert report.ok, report.error
    for i, cell in enumerate(report.outputs.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not meta.get("grade"):
            assert not errors, (f"{name} cell {i} crashed in the released version: "
                                f"{errors[0]['ename']}: {errors[0]['evalue'][:300]}")
            continue
        assert errors, f"{name}: graded cell {meta['grade_id']} passed with no answer given"
        err = errors[0]
        assert err["ename"] == "AssertionError", f"{meta['grade_id']}: {err['ename']}"
        assert nt_not_implemented(err["evalue"]), f"{meta['grade_id']}: {err['evalue'][:300]}"


def nt_not_implemented(text: str) -> bool:
    from ptxlab.checks import NOT_IMPLEMENTED
    return NOT_IMPLEMENTED in text


def test_released_notebooks_are_valid_json(released):
    for path in released.values():
        nb = json.loads(path.read_text())
        assert nb["nbformat"] == 4
