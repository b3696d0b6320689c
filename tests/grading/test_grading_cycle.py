"""The whole nbgrader cycle with stock commands, for several students, in a temporary course
root and exchange: generate, release, fetch, submit, collect, autograde (sandboxed, through
``autograder/nbgrader_config.py``), generate and release feedback, fetch it, export the
gradebook; then the formgrader started from ``autograder/jupyter_server_config.py``, and a late
student graded by ``autograder/grade-assignment.sh`` (collect, ``ptxlab grade``, feedback).

Every command, the students' and the grader's, reads ``autograder/global_nbgrader_config.py``
as the server's ``/etc/jupyter/nbgrader_config.py`` (through ``JUPYTER_CONFIG_DIR``), which
names the exchange and the course.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")

STUDENTS = {"alice": "solution", "bob": "untouched", "carol": "wrong"}
LATE = "dave"


def _server_env(base: Path, exchange: Path, **extra: str) -> dict[str, str]:
    """The environment of every account: the server-wide nbgrader config, no personal one."""
    etc = base / "etc-jupyter"
    etc.mkdir(exist_ok=True)
    shutil.copy(fixture_course.REPO / "autograder" / "global_nbgrader_config.py",
                etc / "nbgrader_config.py")
    return fixture_course.grading_env(JUPYTER_CONFIG_DIR=str(etc), PTXLAB_EXCHANGE=str(exchange),
                                      PTXLAB_COURSE_ID=fixture_course.COURSE_ID, **extra)


def _work(home: Path) -> Path:
    """A student's copy of ps1: the exchange's paths include the course (global config)."""
    return home / fixture_course.COURSE_ID / "ps1"


def _parallel(cmds: list[tuple[list[str], Path]], env) -> None:
    procs = [(subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), args)
             for args, cwd in cmds]
    for p, args in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{out[-3000:]}"


def _answer(nb_path: Path, source_nb: Path, kind: str) -> None:
    import nbformat
    nb = nbformat.read(str(nb_path), as_version=4)
    src = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nbformat.read(str(source_nb), as_version=4).cells}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and kind in ("solution", "wrong"):
            cell.source = src[gid].source
            if kind == "wrong" and gid == "address_formula":
                cell.source = cell.source.replace("16 * (matrix // 2)", "16 * (matrix % 2)")
    nbformat.write(nb, str(nb_path))


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    base = tmp_path_factory.mktemp("cycle")
    exchange = base / "exchange"
    exchange.mkdir()
    os.chmod(exchange, 0o777)
    root = fixture_course.make_course(base / "course")
    env = _server_env(base, exchange, PTXLAB_CELL_TIMEOUT_S="30")
    ex: list[str] = []                  # the exchange and course come from the global config
    log = {}
    for step in (["generate_assignment", "ps1"], ["release_assignment", "ps1"]):
        r = fixture_course.nbgrader(step, root, env)
        assert r.returncode == 0, r.stderr[-3000:]
    homes = {s: base / "home" / s for s in [*STUDENTS, LATE]}
    for h in homes.values():
        h.mkdir(parents=True)
    _parallel([(["fetch_assignment", "ps1", *ex], homes[s]) for s in [*STUDENTS, LATE]], env)
    for s, kind in STUDENTS.items():
        _answer(_work(homes[s]) / "ps1.ipynb", root / "source" / "ps1" / "ps1.ipynb", kind)
    _parallel([(["submit", "ps1", "--student", s, *ex], homes[s]) for s in STUDENTS], env)
    for step in (["collect", "ps1", "--CollectApp.check_owner=False"], ["autograde", "ps1"],
                 ["generate_feedback", "ps1"], ["release_feedback", "ps1"],
                 ["export", "--to", str(base / "grades.csv")]):
        r = fixture_course.nbgrader(step, root, env)
        log[step[0]] = r.stdout + r.stderr
        assert r.returncode == 0, f"nbgrader {step[0]}:\n{r.stderr[-4000:]}"
    _parallel([(["fetch_feedback", "ps1", "--student", s, *ex], homes[s]) for s in STUDENTS], env)
    return root, base, homes, log, env


def test_collect_brings_every_student(cycle):
    root, base, homes, log, env = cycle
    assert sorted(p.name for p in (root / "submitted").iterdir()) == sorted(STUDENTS)


def test_autograde_scores_in_gradebook(cycle):
    root, base, homes, log, env = cycle
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", fixture_course.COURSE_ID) as gb:
        grades = {s: {g.name: g.score for nb in gb.find_submission("ps1", s).notebooks
                      for g in nb.grades} for s in STUDENTS}
    assert grades["alice"]["test_address_visible"] == 2 and grades["alice"]["test_address_hidden"] == 3
    assert grades["bob"]["test_address_visible"] == 0 and grades["bob"]["test_address_hidden"] == 0
    assert grades["carol"]["test_address_visible"] == 0
    # The kernels of the autograde ran sandboxed: the autograded notebook says so.
    nb = json.loads((root / "autograded" / "alice" / "ps1" / "ps1.ipynb").read_text())
    assert nb["metadata"]["language_info"]["name"] == "python"
    assert "ptxlab-kernel-" in log["autograde"] or "Autograding" in log["autograde"]


def test_export_has_a_row_per_student(cycle):
    root, base, homes, log, env = cycle
    with open(base / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["student_id"] for r in rows) == sorted(STUDENTS)
    alice = next(r for r in rows if r["student_id"] == "alice")
    assert float(alice["raw_score"]) >= 5


def test_students_fetch_feedback(cycle):
    root, base, homes, log, env = cycle
    for s in STUDENTS:
        pages = list((_work(homes[s]) / "feedback").rglob("ps1.html"))
        assert pages, f"{s} got no feedback"
    text = next((_work(homes["carol"]) / "feedback").rglob("ps1.html")).read_text()
    assert "lane 16" in text or "lane" in text      # the check's message reaches the student


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_formgrader_starts_from_the_config(cycle):
    root, base, homes, log, env = cycle
    port, token = _free_port(), "ptxlab-test-token"
    cmd = [sys.executable, "-m", "jupyter_server",
           f"--config={fixture_course.REPO / 'autograder' / 'jupyter_server_config.py'}",
           f"--ServerApp.root_dir={root}", f"--ServerApp.port={port}",
           f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0"]
    if os.geteuid() == 0:
        # Jupyter refuses root unless told; the grading account of the README is not root,
        # but CI and containers often are.
        cmd.append("--allow-root")
    log_path = base / "formgrader.log"
    log_file = open(log_path, "w")
    server = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file,
                              stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/formgrader/api/assignments?token={token}"
        body = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    body = json.loads(resp.read())
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None, f"formgrader did not answer:\n{log_path.read_text()[-3000:]}"
        assert [a["name"] for a in body] == ["ps1"]
        assert body[0]["num_submissions"] >= len(STUDENTS)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log_file.close()


def test_grade_assignment_script_grades_a_late_student(cycle):
    """autograder/grade-assignment.sh, as the nightly job runs it: the late submission is
    collected, graded by ptxlab grade, and its feedback released and fetched."""
    root, base, homes, log, env = cycle
    _answer(_work(homes[LATE]) / "ps1.ipynb", root / "source" / "ps1" / "ps1.ipynb", "solution")
    _parallel([(["submit", "ps1", "--student", LATE], homes[LATE])], env)
    script = fixture_course.REPO / "autograder" / "grade-assignment.sh"
    run_env = {**env, "PTXLAB_COURSE_ROOT": str(root), "PTXLAB_PYTHON": sys.executable,
               "PTXLAB_COLLECT_ARGS": "--CollectApp.check_owner=False"}
    r = subprocess.run(["bash", str(script), "ps1", "--workers", "2"], env=run_env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    with open(root / "grading" / "ps1" / "grades.csv") as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    assert set(rows) == {*STUDENTS, LATE}
    assert rows[LATE]["score"] == rows["alice"]["score"] and float(rows[LATE]["score"]) >= 5
    assert rows["carol"]["failed_checks"].startswith("test_address_visible")
    _parallel([(["fetch_feedback", "ps1", "--student", LATE], homes[LATE])], env)
    page = next((_work(homes[LATE]) / "feedback").rglob("ps1.html")).read_text()
    if rows[LATE]["kernel_backend"]:
        # The feedback says where the kernels ran, at the top and under the check.
        assert "Grading note" in page and "the kernels of this cell ran on" in page
        assert rows[LATE]["kernel_backend"] in ("gpu", "cpu")
