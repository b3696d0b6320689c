"""How often the grader measures a running sandbox: after every cell that ran code, and by its
watch whenever nobody has measured for the watch's interval (a measure after a cell counts)."""
from __future__ import annotations

import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from ptxlab.grading import execute
from ptxlab.grading.sandbox_watch import SandboxWatch


@pytest.fixture
def sleeper():
    """A process standing in for a sandbox's, gone after the test."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield proc
    proc.kill()
    proc.wait()


def _counted(watch: SandboxWatch) -> list[float]:
    """The times at which ``watch`` measured its sandbox."""
    times: list[float] = []
    measure = watch._measure

    def counting():
        times.append(time.monotonic())
        return measure()

    watch._measure = counting
    return times


def test_a_measure_after_a_cell_puts_the_watchs_next_look_off(tmp_path, sleeper):
    watch = SandboxWatch(sleeper.pid, reason_file=tmp_path / "why.txt", folders=[tmp_path],
                         disk_mb=100, interval_s=1.0)
    looks = _counted(watch)
    started = time.monotonic()
    watch.start()
    time.sleep(0.6)
    assert watch.check_now() == ""              # the grader, after a cell
    time.sleep(0.7)                             # 1.3 s in: the watch's own look is put off
    assert len(looks) == 2, [round(t - started, 2) for t in looks]
    time.sleep(0.8)                             # 2.1 s in: it looked, a second after 0.6
    assert len(looks) == 3, [round(t - started, 2) for t in looks]
    assert looks[2] - looks[1] >= 0.95
    watch.stop()


def test_without_the_grader_the_watch_keeps_its_interval(tmp_path, sleeper):
    watch = SandboxWatch(sleeper.pid, reason_file=tmp_path / "why.txt", folders=[tmp_path],
                         disk_mb=100, interval_s=0.2)
    looks = _counted(watch)
    watch.start()
    time.sleep(1.5)
    watch.stop()
    assert 4 <= len(looks) <= 9
    assert all(b - a >= 0.19 for a, b in zip(looks, looks[1:]))


def test_only_a_cell_that_ran_code_is_followed_by_a_measure():
    cells = [new_markdown_cell("# title"), new_code_cell("x = 1"), new_raw_cell("raw"),
             new_code_cell("   \n"), new_code_cell("print(x)")]
    assert [execute._ran_code(c) for c in cells] == [False, True, False, False, True]
    listed = nbformat.from_dict({"cell_type": "code", "source": ["y = 2\n", "y"],
                                 "metadata": {}, "outputs": [], "execution_count": None})
    assert execute._ran_code(listed)


def test_the_cell_loop_measures_after_code_cells_only(monkeypatch):
    measured: list[int] = []

    class Manager:
        def limit_reached_now(self) -> str:
            measured.append(ran[-1])
            return ""

    ran: list[int] = []
    client = execute.SandboxedExecute()
    client.nb = new_notebook(cells=[new_markdown_cell("a"), new_code_cell("x = 1"),
                                    new_markdown_cell("b"), new_code_cell(""),
                                    new_code_cell("x")])
    client.km = Manager()
    monkeypatch.setattr(client, "preprocess_cell", lambda cell, resources, index: ran.append(index))
    client._run_cells(None, {}, [])
    assert ran == [0, 1, 2, 3, 4]
    assert measured == [1, 4]

    # the judge's questions after a test cell run the notebook's code too: measured after them
    class Plan:
        def slots_of(self, cell):
            return ["slot"] if "x = 1" in cell.source else []

    ran.clear(), measured.clear()
    client._judged_outside = True
    monkeypatch.setattr(client, "_ask", lambda plan, due, after: ran.append(f"ask {after}"))
    client._run_cells(Plan(), {}, [])
    assert measured == [1, "ask cell 2", 4]


class _Group:
    """A control group's records: its controllers, processes and no limit reached."""

    def __init__(self, folders, pids):
        self.folders = {name: (1, None) for name in folders}
        self.pids = pids

    def processes(self):
        return list(self.pids)

    def limit_reason(self):
        return ""


def _watch_of(pid, tmp_path, group, **limits):
    return SandboxWatch(pid, reason_file=tmp_path / "why.txt", folders=[tmp_path],
                        group=group, disk_mb=100, **limits)


def test_where_the_group_holds_memory_and_processes_its_list_stands_in_for_the_walk(
        tmp_path, monkeypatch, sleeper):
    from ptxlab.grading import sandbox_watch

    walked, scanned = [], []
    real_walk, real_scan = sandbox_watch.process_table, sandbox_watch._held_without_name
    monkeypatch.setattr(sandbox_watch, "process_table",
                        lambda root: walked.append(root) or real_walk(root))
    monkeypatch.setattr(sandbox_watch, "_held_without_name",
                        lambda pids: scanned.append(list(pids)) or real_scan(pids))
    held = _Group({"memory", "pids", "cpu"}, [sleeper.pid])
    assert _watch_of(sleeper.pid, tmp_path, held, memory_mb=100, max_tasks=10).check() == (
        "", [sleeper.pid])
    assert walked == [] and scanned == [[sleeper.pid]]
    # a limit the group does not hold is measured here: the walk gives each process's share
    for group, limits in ((_Group({"memory", "cpu"}, [sleeper.pid]), {"max_tasks": 10}),
                          (_Group({"pids"}, [sleeper.pid]), {"memory_mb": 100}),
                          (_Group({"memory", "pids"}, []), {"memory_mb": 100})):
        walked.clear()
        why, pids = _watch_of(sleeper.pid, tmp_path, group, **limits).check()
        assert (why, pids, walked) == ("", [sleeper.pid], [sleeper.pid])
