"""The learner's workspace (``ptxlab open``, ``./lab open``): the student version of every
notebook, answers kept across course updates, and a JupyterLab without the instructor's tools.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ptxlab.authoring.course_notebooks import assignments
from ptxlab.authoring.workspace import UPSTREAM_NOTE_KEY, prepare_workspace

pytest.importorskip("nbgrader")

REPO = Path(__file__).resolve().parents[2]
COURSE = REPO / "course"


def _course_copy(dest: Path, assignments: list[str]) -> Path:
    """A course folder with some of the course's assignments (its config, its stubs)."""
    (dest / "source").mkdir(parents=True)
    shutil.copy(COURSE / "nbgrader_config.py", dest / "nbgrader_config.py")
    for name in assignments:
        shutil.copytree(COURSE / "source" / name, dest / "source" / name)
    return dest


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_workspace_holds_what_a_class_receives_and_keeps_the_learners_answers(tmp_path):
    course = _course_copy(tmp_path / "course", ["01_warps_lanes_smem", "02_ldmatrix"])
    ws = tmp_path / "ws"
    first = prepare_workspace(ws, course)
    assert sorted(first.added) == ["01_warps_lanes_smem/01_warps_lanes_smem.ipynb",
                                   "02_ldmatrix/02_ldmatrix.ipynb"]
    source = _cells(course / "source" / "02_ldmatrix" / "02_ldmatrix.ipynb")
    mine = ws / "02_ldmatrix" / "02_ldmatrix.ipynb"
    student = _cells(mine)
    text = "\n".join(_text(c) for c in student)
    # Solutions gone (the course's own stub instead), hidden tests gone, nothing of the
    # instructor's markers left.
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "raise NotImplementedError()" in text
    solutions = [_text(c) for c in source if c["metadata"].get("nbgrader", {}).get("solution")]
    assert solutions and not any(s.split("### BEGIN SOLUTION")[-1].split("### END SOLUTION")[0].strip()
                                 in text for s in solutions if "### BEGIN SOLUTION" in s)
    assert not (course / "release").exists() and not (course / "gradebook.db").exists()

    # Nothing changed upstream: nothing happens.
    again = prepare_workspace(ws, course)
    assert not again.added and not again.updated and len(again.unchanged) == 2

    # The learner answers in 02; the course changes 01 (untouched by the learner) and 02, and
    # gains an assignment.
    answer = next(i for i, c in enumerate(student)
                  if c["metadata"].get("nbgrader", {}).get("solution"))
    nb = json.loads(mine.read_text())
    nb["cells"][answer]["source"] = "# my answer\n"
    mine.write_text(json.dumps(nb))
    for name in ("01_warps_lanes_smem", "02_ldmatrix"):
        path = course / "source" / name / f"{name}.ipynb"
        src = json.loads(path.read_text())
        first_md = next(c for c in src["cells"] if c["cell_type"] == "markdown")
        first_md["source"] = "# A clearer introduction\n" + _text(first_md)
        path.write_text(json.dumps(src, indent=1))
    shutil.copytree(COURSE / "source" / "05_movmatrix", course / "source" / "05_movmatrix")
    update = prepare_workspace(ws, course)
    assert update.added == ["05_movmatrix/05_movmatrix.ipynb"]
    assert update.updated == ["01_warps_lanes_smem/01_warps_lanes_smem.ipynb"]
    assert update.kept_with_upstream == ["02_ldmatrix/02_ldmatrix.ipynb"]
    assert "A clearer introduction" in _text(
        _cells(ws / "01_warps_lanes_smem" / "01_warps_lanes_smem.ipynb")[0]) or any(
        "A clearer introduction" in _text(c)
        for c in _cells(ws / "01_warps_lanes_smem" / "01_warps_lanes_smem.ipynb"))
    kept = _cells(mine)
    assert any(_text(c) == "# my answer\n" for c in kept)          # the answer is still there
    note = kept[0]
    assert note["metadata"]["ptxlab"][UPSTREAM_NOTE_KEY]
    assert "02_ldmatrix.upstream.ipynb" in _text(note) and "A clearer introduction" in _text(note)
    upstream = _cells(ws / "02_ldmatrix" / "02_ldmatrix.upstream.ipynb")
    assert any("A clearer introduction" in _text(c) for c in upstream)
    assert "update" in update.summary() or "kept" in update.summary()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_open_serves_the_workspace_without_the_instructors_tools(tmp_path):
    """``ptxlab open DIR --no-browser``: the workspace made, the URL printed, nbgrader's
    formgrader and class tools off (its Validate kept); as root it starts and says so."""
    ws = tmp_path / "ws"
    port = _free_port()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    proc = subprocess.Popen([sys.executable, "-m", "ptxlab.cli", "open", str(ws), "--no-browser",
                             "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out = ""
    try:
        deadline = time.monotonic() + 240
        url = None
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            out += line
            m = re.search(rf"(http://(?:127\.0\.0\.1|localhost):{port}/lab\?token=\w+)", line)
            url = m.group(1) if m else None
        assert url, f"no URL printed:\n{out[-3000:]}"
        token = url.split("token=")[1]
        base = url.split("/lab?")[0]
        assert "workspace" in out and f"{len(assignments())} new" in out   # every notebook
        assert "no browser: open the URL" in out
        if os.geteuid() == 0:
            assert "running as root" in out

        def get(path: str) -> tuple[int, str]:
            req = urllib.request.Request(f"{base}{path}",
                                         headers={"Authorization": f"token {token}"})
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(req, timeout=60) as resp:
                    return resp.status, resp.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, err.read().decode()

        for _ in range(60):                  # the URL is printed as the server starts
            try:
                status, listing = get("/api/contents")
                break
            except urllib.error.URLError:
                time.sleep(0.5)
        assert status == 200
        assert {e["name"] for e in json.loads(listing)["content"]} >= {"02_ldmatrix", "06_mma"}
        assert get("/formgrader")[0] == 404                   # no formgrader on a learner's server
        assert get("/assignments?course_id=x")[0] == 404      # no class assignment list
        status, page = get("/lab")
        assert status == 200
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page,
                                      re.DOTALL).group(1))
        disabled = config.get("disabledExtensions", [])
        for plugin in ("@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:formgrader"):
            assert plugin in disabled, disabled
        assert "@jupyter/nbgrader:validate-assignment" not in disabled
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
