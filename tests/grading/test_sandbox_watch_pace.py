"""How often the grader measures a running sandbox: after every cell that ran code, and by its
watch whenever nobody has measured for the watch's interval (a measure after a cell counts)."""
from __future__ import annotations

import subprocess
import sys
import time

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from ptxlab.grading import execute
from ptxlab.grading.sandbox_watch import SandboxWatch


def _counted(watch: SandboxWatch) -> list[float]:
    """The times at which ``watch`` measured its sandbox."""
    times: list[float] = []
    measure = watch._measure

    def counting():
        times.append(time.monotonic())
        return measure()

    watch._measure = counting
    return times


def test_a_measure_after_a_cell_puts_the_watchs_next_look_off(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
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
    finally:
        sleeper.kill()
        sleeper.wait()


def test_without_the_grader_the_watch_keeps_its_interval(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        watch = SandboxWatch(sleeper.pid, reason_file=tmp_path / "why.txt", folders=[tmp_path],
                             disk_mb=100, interval_s=0.2)
        looks = _counted(watch)
        watch.start()
        time.sleep(1.5)
        watch.stop()
        assert 4 <= len(looks) <= 9
        assert all(b - a >= 0.19 for a, b in zip(looks, looks[1:]))
    finally:
        sleeper.kill()
        sleeper.wait()


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
