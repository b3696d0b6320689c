"""``ptxlab grade --scheduler``: a class graded on a Dask cluster gets exactly the grades it gets
on one machine, even when a worker is killed in the middle of a submission.

A local cluster of 2 worker processes stands in for the GPU machines: each worker unpacks the
course into a private folder, grades in its own sandbox and sends back data; only the head (the
``ptxlab grade`` process) writes the ledger, the CSV, the summary and the gradebook.
"""
from __future__ import annotations

import csv
import re
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))
import cases as corpus  # noqa: E402
import course as fixture_course  # noqa: E402

pytest.importorskip("nbgrader")
distributed = pytest.importorskip("distributed", reason="Dask's distributed package is not installed "
                                  "(pip install -e '.[cluster]')")

CASES = {c.name: c for c in corpus.CASES}
#: Good and bad submissions, the bad ones of every kind a batch must survive.
CLASS = {
    "s01": "good_a", "s02": "bad_wrong_formula", "s03": "good_b", "s04": "bad_syntax_error",
    "s05": "bad_corrupted_json", "s06": "good_c", "s07": "bad_deleted_test_cell",
    "s08": "bad_returns_nan", "s09": "bad_snoop", "s10": "good_a",
}
LINKED = "s11"          # a submission holding a link: refused with a reason, on both
#: The CSV's columns that must agree (not the time each took).
SAME = ["student", "status", "score", "max_score", "percent", "failed_checks", "reason",
        "kernel_backend", "submitted_at"]


def _build(root: Path, env: dict) -> Path:
    fixture_course.make_course(root)
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    for student, case in CLASS.items():
        corpus.write_submission(root, student, CASES[case])
    folder = corpus.write_submission(root, LINKED, CASES["good_a"])
    (folder / "notes.txt").symlink_to(root / "source" / "ps1" / "ps1.ipynb")
    return root


def _rows(root: Path) -> dict[str, dict]:
    with open(root / "grading" / "ps1" / "grades.csv") as fh:
        rows = {r["student"]: {k: r[k] for k in SAME} for r in csv.DictReader(fh)}
    for row in rows.values():     # each course's own folder may appear in a reason
        row["reason"] = row["reason"].replace(str(root.resolve()), "<course>")
    return rows


def _gradebook(root: Path) -> dict:
    from nbgrader.api import Gradebook

    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", fixture_course.COURSE_ID) as gb:
        for student in [*CLASS, LINKED]:
            sub = gb.find_submission("ps1", student)
            for nb in sub.notebooks:
                found[student, nb.name] = (
                    sub.timestamp, nb.late_submission_penalty,
                    sorted((g.name, g.auto_score, g.needs_manual_grade) for g in nb.grades),
                    sorted((c.name, c.auto_comment or "") for c in nb.comments))
    return found


def _graded_notebooks(root: Path) -> set[str]:
    return {p.relative_to(root / "autograded").as_posix()
            for p in (root / "autograded").glob("*/ps1/*.ipynb")}


@pytest.fixture(scope="module")
def graded_here(tmp_path_factory):
    """The class graded on this machine, the way it always was: the reference."""
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="20")
    root = _build(tmp_path_factory.mktemp("here") / "course", env)
    run = fixture_course.ptxlab_grade(["ps1", "--workers", "2", "--quiet"], root, env)
    assert run.returncode == 0, run.stderr[-3000:]
    return root


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "dask", *argv], env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop a dask command and everything it started (a worker's nanny and processes)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    try:                                   # what the nanny started, if it outlived it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_class_on_a_dask_cluster_with_a_worker_killed_gets_the_same_grades(graded_here,
                                                                              tmp_path):
    """The cluster as autograder/README.md starts it: ``dask scheduler``, and ``dask worker
    --nworkers 2 --nthreads 1`` (one of its processes killed mid-submission, and restarted by
    its nanny), and a third worker on a machine whose sandbox cannot start: its preflight
    fails, it is retired, and its students go to the others."""
    env = fixture_course.grading_env(PTXLAB_CELL_TIMEOUT_S="20")
    root = _build(tmp_path / "course", env)
    ledger = root / "grading" / "ps1" / "ledger.jsonl"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    log = tmp_path / "dask.log"
    started = [_start(["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                      env, log)]
    try:
        started.append(_start(["worker", address, "--nworkers", "2", "--nthreads", "1",
                               "--no-dashboard"], env, log))
        started.append(_start(["worker", address, "--nthreads", "1", "--name", "no-sandbox",
                               "--no-nanny", "--no-dashboard"],
                              dict(env, PTXLAB_BWRAP="/nonexistent/bwrap"), log))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(3, timeout=120)
            unfit_address = next(a for a, w in client.scheduler_info()["workers"].items()
                                 if w.get("name") == "no-sandbox")
            head = subprocess.Popen(
                [sys.executable, "-m", "ptxlab.cli", "grade", "ps1", "--scheduler", address],
                cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # Once the class is under way, kill a worker in the middle of a submission.
            killed = None
            deadline = time.monotonic() + 300
            while killed is None and time.monotonic() < deadline and head.poll() is None:
                done = len(ledger.read_text().splitlines()) if ledger.exists() else 0
                busy = [w for w, keys in client.processing().items()
                        if keys and w != unfit_address]
                if done >= 2 and busy:
                    pids = client.run(os.getpid)
                    killed = busy[0]
                    os.kill(pids[killed], signal.SIGKILL)
                time.sleep(0.05)
            out, err = head.communicate(timeout=600)
        assert killed is not None, f"the batch ended before a worker could be killed:\n{err[-3000:]}"
        assert head.returncode == 0, err[-3000:]
        workers_log = (root / "grading" / "ps1" / "workers.log").read_text()
    finally:
        for proc in reversed(started):
            _stop(proc)

    # The killed worker's submission was graded again elsewhere: every student exactly once in
    # the ledger, each with a counted grade.
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sorted(e["student"] for e in entries) == sorted([*CLASS, LINKED])
    assert all(e["status"] != "infrastructure" for e in entries), entries
    assert f"graded {len(CLASS) + 1} now" in out
    # Identical to the class graded on one machine: the CSV (but the time each took), the
    # gradebook's scores, review marks and comments, the graded notebooks.
    assert _rows(root) == _rows(graded_here)
    assert _gradebook(root) == _gradebook(graded_here)
    assert _graded_notebooks(root) == _graded_notebooks(graded_here)
    rows = _rows(root)
    assert rows["s01"]["percent"] == "100.0" and float(rows["s02"]["score"]) < float(rows["s01"]["score"])
    assert "symbolic links" in rows[LINKED]["reason"]
    assert "on the Dask cluster" in (root / "grading" / "ps1" / "summary.md").read_text()
    assert " on tcp://" in workers_log                  # who graded whom, for the instructor
    assert f"{unfit_address} cannot grade" in err and "needs bubblewrap" in err
    assert f"on {unfit_address}" not in workers_log
    # The killed worker's grading process did not outlive it.
    time.sleep(2)
    left = subprocess.run(["pgrep", "-f", "ptxlab.grading.grading_worker .*-course-"], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"grading processes left behind: {left}"


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path):
    env = fixture_course.grading_env()
    root = _build(tmp_path / "course", env)
    run = fixture_course.ptxlab_grade(["ps1", "--scheduler", "tcp://127.0.0.1:9", "--quiet"],
                                      root, dict(env, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"),
                                      timeout=180)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "cannot reach the Dask scheduler tcp://127.0.0.1:9" in run.stderr
    assert not (root / "grading" / "ps1" / "ledger.jsonl").exists() or \
        not (root / "grading" / "ps1" / "ledger.jsonl").read_text()


def _unit(name: str):
    import configparser

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(fixture_course.REPO / "autograder" / name)
    return parser["Service"]


@pytest.mark.parametrize("unit, command", [("ptxlab-dask-scheduler.service", "scheduler"),
                                           ("ptxlab-dask-worker.service", "worker")])
def test_the_cluster_units_start_dask_with_options_it_knows(unit, command):
    """The head's scheduler and each GPU machine's workers: the command the unit runs exists
    in this environment, with every option the unit passes."""
    service = _unit(unit)
    argv = service["ExecStart"].split()
    assert argv[0] == "/srv/ptxlab/.venv/bin/dask" and argv[1] == command
    assert service["EnvironmentFile"] == "/etc/ptxlab/grading.env"
    help_text = subprocess.run([sys.executable, "-m", "dask", command, "--help"],
                               capture_output=True, text=True, timeout=120).stdout
    for option in (a for a in argv[2:] if a.startswith("--")):
        assert option in help_text, f"{unit}: 'dask {command}' has no option {option}"
    env_file = (fixture_course.REPO / "autograder" / "grading.env").read_text()
    for variable in {v for a in argv for v in re.findall(r"\$\{(\w+)\}", a)}:
        assert f"{variable}=" in env_file, f"{unit} needs {variable}, which grading.env does not name"
    if command == "worker":
        assert argv[argv.index("--nthreads") + 1] == "1"     # one submission per worker process


def test_a_worker_gets_one_assignment_and_no_student(tmp_path):
    """The gradebook sent to the workers: the graded assignment's definitions, nothing of the
    other assignments (their hidden tests) and nothing of any student."""
    from nbgrader.api import Gradebook

    from ptxlab.grading import transfer

    env = fixture_course.grading_env()
    root = fixture_course.make_course(tmp_path / "course")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root, env)
    assert gen.returncode == 0, gen.stderr[-3000:]
    url = f"sqlite:///{root / 'gradebook.db'}"
    with Gradebook(url, fixture_course.COURSE_ID) as gb:
        gb.update_or_create_assignment("ps2")
        gb.update_or_create_notebook("ps2", "ps2")
        gb.update_or_create_source_cell("hidden", "ps2", "ps2", cell_type="code", locked=True,
                                        source="assert answer == 'the secret of ps2'")
        gb.update_or_create_student("ada")
        gb.update_or_create_submission("ps1", "ada")
        expected = {nb.name: sorted(c.name for c in nb.source_cells)
                    for nb in gb.find_assignment("ps1").notebooks}
    template = transfer.template_gradebook(url, fixture_course.COURSE_ID, "ps1",
                                           tmp_path / "template.db")
    assert b"the secret of ps2" not in template.read_bytes()
    with Gradebook(f"sqlite:///{template}", fixture_course.COURSE_ID) as gb:
        assert [a.name for a in gb.assignments] == ["ps1"]
        assert gb.students == []
        assert {nb.name: sorted(c.name for c in nb.source_cells)
                for nb in gb.find_assignment("ps1").notebooks} == expected
