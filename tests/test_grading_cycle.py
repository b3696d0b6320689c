"""The whole nbgrader cycle with stock commands, for several students, in a temporary course
root and exchange: generate, release, fetch, submit, collect, autograde (sandboxed, through
``autograder/nbgrader_config.py``), generate and release feedback, fetch it, export the
gradebook; then the formgrader started from ``autograder/jupyter_server_config.py``.
"""
from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")

STUDENTS = {"alice": "solution", "bob": "untouched", "carol": "wrong"}


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
    root = fixture_course.make_course(base / "course", exchange=exchange)
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="30")
    ex = [f"--Exchange.root={exchange}", "--course", fixture_course.COURSE_ID]
    log = {}
    for step in (["generate_assignment", "ps1"], ["release_assignment", "ps1"]):
        r = fixture_course.nbgrader(step, root, env)
        assert r.returncode == 0, r.stderr[-3000:]
    homes = {s: base / "home" / s for s in STUDENTS}
    for h in homes.values():
        h.mkdir(parents=True)
    _parallel([(["fetch_assignment", "ps1", *ex], homes[s]) for s in STUDENTS], env)
    for s, kind in STUDENTS.items():
        _answer(homes[s] / "ps1" / "ps1.ipynb", root / "source" / "ps1" / "ps1.ipynb", kind)
    _parallel([(["submit", "ps1", "--student", s, *ex], homes[s]) for s in STUDENTS], env)
    for step in (["collect", "ps1", "--CollectApp.check_owner=False"], ["autograde", "ps1"],
                 ["generate_feedback", "ps1"], ["release_feedback", "ps1"],
                 ["export", "--to", str(base / "grades.csv")]):
        r = fixture_course.nbgrader(step, root, env)
        log[step[0]] = r.stdout + r.stderr
        assert r.returncode == 0, f"nbgrader {step[0]}:\n{r.stderr[-4000:]}"
    _parallel([(["fetch_feedback", "ps1", "--student", s, *ex], homes[s]) for s in STUDENTS], env)
    return root, base, homes, log


def test_collect_brings_every_student(cycle):
    root, base, homes, log = cycle
    assert sorted(p.name for p in (root / "submitted").iterdir()) == sorted(STUDENTS)


def test_autograde_scores_in_gradebook(cycle):
    root, base, homes, log = cycle
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
    root, base, homes, log = cycle
    with open(base / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["student_id"] for r in rows) == sorted(STUDENTS)
    alice = next(r for r in rows if r["student_id"] == "alice")
    assert float(alice["raw_score"]) >= 5


def test_students_fetch_feedback(cycle):
    root, base, homes, log = cycle
    for s, h in homes.items():
        pages = list((h / "ps1" / "feedback").rglob("ps1.html"))
        assert pages, f"{s} got no feedback"
    text = next((homes["carol"] / "ps1" / "feedback").rglob("ps1.html")).read_text()
    assert "lane 16" in text or "lane" in text      # the check's message reaches the student


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_formgrader_starts_from_the_config(cycle):
    root, base, homes, log = cycle
    port, token = _free_port(), "ptxlab-test-token"
    env = fixture_course.grading_env()
    cmd = [sys.executable, "-m", "jupyter_server",
           f"--config={fixture_course.REPO / 'autograder' / 'jupyter_server_config.py'}",
           f"--ServerApp.root_dir={root}", f"--ServerApp.port={port}",
           f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0"]
    server = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
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
        assert body is not None, "formgrader did not answer"
        assert [a["name"] for a in body] == ["ps1"]
        assert body[0]["num_submissions"] == len(STUDENTS)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
