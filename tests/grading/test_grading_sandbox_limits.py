"""The grader's own watch over each sandbox (:mod:`ptxlab.grading.sandbox_watch`): limits that
learner code cannot patch away, graded end to end with ``ptxlab grade`` (sandbox on).

Each attack defeats what the kernel's in-process watchdogs can see -- the disk watchdog with
``os.scandir`` patched, ``/dev/shm`` (not the working folder), memory held by child processes --
and is stopped by the grader with its reason on the row and in the cell; the good student graded
next to it keeps full marks.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "fixtures" / "grading"))
sys.path.insert(0, str(HERE / "submissions"))

import attacks  # noqa: E402
import course as fixture_course  # noqa: E402
from attacks import ASSIGNMENT, NOTEBOOK, TESTS, Attack, _at_end  # noqa: E402

pytest.importorskip("nbgrader")

MEMORY_MB, DISK_MB = 1024, 64
#: The in-kernel disk watchdog blinded: every folder it walks looks empty.
_BLIND = ("import os\n"
          "os.makedirs('/tmp/empty', exist_ok=True)\n"
          "_real = os.scandir\n"
          "os.scandir = lambda *a, **k: _real('/tmp/empty')\n")
_FILL = ("chunk = b'x' * (8 << 20)\n"
         "for n in range(96):      # 768 MiB in files under the file-size limit\n"
         "    with open(f'{where}/fill{n}.bin', 'wb') as f:\n"
         "        f.write(chunk)\n"
         "print('NOT STOPPED', flush=True)\n")
_CHILDREN = ("import subprocess, sys, time\n"
             "kids = [subprocess.Popen([sys.executable, '-c', 'import time; "
             "b = bytearray(600 << 20); time.sleep(30)']) for _ in range(3)]\n"
             "time.sleep(25)\n"
             "print('NOT STOPPED', flush=True)\n")

LIMIT_ATTACKS = [
    Attack("w01_scandir_patched", "the disk watchdog's os.scandir patched, then 768 MiB written",
           edit=_at_end(_BLIND + _FILL.replace("{where}", ".")), full=(),
           reason=r"Disk quota exceeded \(at least \d+ MiB written, limit 64 MiB\)"),
    Attack("w01_good", "the course's solutions, graded next to an attack"),
    Attack("w02_dev_shm", "768 MiB written into /dev/shm with the disk watchdog blinded",
           edit=_at_end(_BLIND + _FILL.replace("{where}", "/dev/shm")), full=(),
           reason=r"Disk quota exceeded \(at least \d+ MiB written"),
    Attack("w02_good", "the course's solutions, graded next to an attack"),
    Attack("w03_children", "three children of 600 MiB each, each under the kernel's limit",
           edit=_at_end(_CHILDREN), full=(),
           reason=r"memory limit exceeded.*all the notebook's processes together"),
    Attack("w03_good", "the course's solutions, graded next to an attack"),
]
BY_NAME = {a.name: a for a in LIMIT_ATTACKS}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    env = fixture_course.grading_env(PTXLAB_KERNEL_MEMORY_MB=str(MEMORY_MB),
                                     PTXLAB_CELL_TIMEOUT_S="60",
                                     PTXLAB_KERNEL_DISK_MB=str(DISK_MB))
    root = fixture_course.released_course(tmp_path_factory.mktemp("limits") / "course",
                                          ASSIGNMENT, env)
    students = attacks.write_class(root, LIMIT_ATTACKS)
    _, rows = fixture_course.grade_class(root, ASSIGNMENT, env)
    assert set(rows) == set(students)
    return {"root": root, "rows": rows}


@pytest.mark.parametrize("name", [a.name for a in LIMIT_ATTACKS])
def test_stopped_by_the_grader_with_its_reason(graded, name):
    import nbformat

    attack, root, row = BY_NAME[name], graded["root"], graded["rows"][name]
    assert row["status"] == "graded", row
    grades = attacks.gradebook_grades(root, name)
    if not attack.reason:                  # the good neighbour
        for test in TESTS:
            score, max_score, _ = grades[test]
            assert score == max_score, (test, grades[test], row["reason"])
        return
    assert re.search(attack.reason, row["reason"], re.I), row["reason"]
    nb = nbformat.read(str(root / "autograded" / name / ASSIGNMENT / NOTEBOOK), as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                      if o.get("output_type") == "stream")
    assert "NOT STOPPED" not in printed
    stopped = [o for c in nb.cells for o in c.get("outputs", [])
               if o.get("output_type") == "error" and o.get("ename") == "KernelStopped"]
    assert stopped and re.search(attack.reason, stopped[0]["evalue"], re.I), stopped


def test_nothing_left_running(graded):
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "bytearray(600 << 20)" not in ps


def test_the_watch_measures_every_process_and_kills_the_tree(tmp_path):
    """Without any sandbox: a tree of processes is measured together and killed whole."""
    import time

    from ptxlab.grading.sandbox_watch import SandboxWatch, process_tree

    reason = tmp_path / "why.txt"
    code = ("import subprocess, sys, time\n"
            "[subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(120 << 20); "
            "time.sleep(60)']) for _ in range(3)]\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        watch = SandboxWatch(proc.pid, reason_file=reason, folders=[tmp_path], memory_mb=200,
                             interval_s=0.05).start()
        deadline = time.monotonic() + 30
        while not reason.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "all the notebook's processes together" in reason.read_text()
        proc.wait(timeout=10)
        time.sleep(0.2)
        assert process_tree(proc.pid) == []
        assert watch.reason
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_kernels_disk_watch_leaves_out_folders_mounted_inside(tmp_path):
    """A Python installation under /tmp is shown to the sandbox at its own path, inside the
    sandbox's /tmp: the kernel's disk watchdog must count what the notebook wrote, not those
    read-only packages (a GPU server's site-packages under /tmp stopped every kernel at once)."""
    from ptxlab.grading import kernel_boot, sandbox
    try:
        bwrap = sandbox.bwrap_binary()
    except Exception as exc:
        pytest.skip(f"needs bubblewrap: {exc}")
    big, tmp = tmp_path / "site", tmp_path / "tmp"
    big.mkdir()
    (tmp / "site").mkdir(parents=True)            # where the installation is shown, inside
    with open(big / "data.bin", "wb") as f:       # 256 MiB long, no blocks: a sparse file
        f.truncate(256 << 20)
    (tmp / "written.bin").write_bytes(b"x" * 4096)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); where = sys.argv[2]\n"
            "from ptxlab.grading import kernel_boot as kb\n"
            "skip = kb._mount_points() - {where}\n"
            "print(kb._folder_usage(where, 1 << 40, 1 << 30, skip)[0])\n")
    repo = str(Path(kernel_boot.__file__).resolve().parents[2])
    # the writable folder at its own path, the installation mounted read-only inside it
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--bind", str(tmp), str(tmp), "--ro-bind", str(big), str(tmp / "site"),
            sys.executable, "-c", code, repo, str(tmp)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == 4096


#: ``SYS_exit`` (the calling thread only) where this test knows its number.
_SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(__import__("os").uname().machine)

#: A process whose first thread ends while another runs on, holding 200 MiB and a deleted
#: 16 MiB file: /proc then shows the process as a zombie holding nothing.
_FIRST_THREAD_ENDS = (
    "import ctypes, os, sys, threading, time\n"
    "held = bytearray(b'x' * (200 << 20))\n"
    "path = os.path.join(sys.argv[1], 'big')\n"
    "fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)\n"
    "os.write(fd, b'x' * (16 << 20))\n"
    "os.unlink(path)\n"
    "threading.Thread(target=time.sleep, args=(60,)).start()\n"
    "ctypes.CDLL(None).syscall(int(sys.argv[2]), 0)\n")


#: A thread with a table of open files of its own holding a deleted 16 MiB file.
_OWN_TABLE = (
    "import ctypes, os, sys, threading, time\n"
    "def own():\n"
    "    assert ctypes.CDLL(None, use_errno=True).unshare(0x400) == 0   # CLONE_FILES\n"
    "    path = os.path.join(sys.argv[1], 'big')\n"
    "    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)\n"
    "    os.write(fd, b'x' * (16 << 20))\n"
    "    os.unlink(path)\n"
    "    print('held', flush=True)\n"
    "    time.sleep(60)\n"
    "threading.Thread(target=own).start()\n")


def test_a_deleted_file_held_by_a_thread_with_its_own_table_counts(tmp_path):
    from ptxlab.grading.sandbox_watch import SandboxWatch

    folder = tmp_path / "scratch"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _OWN_TABLE, str(folder)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        watch = SandboxWatch(proc.pid, reason_file=tmp_path / "why.txt", folders=[folder],
                             disk_mb=8)
        why, _ = watch.check()
        assert why.startswith("Disk quota exceeded"), why
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(_SYS_EXIT is None, reason="the test knows SYS_exit on x86_64 and aarch64")
@pytest.mark.parametrize("limit", ["memory", "disk"])
def test_a_process_whose_first_thread_ended_is_still_measured(tmp_path, limit):
    """Its memory and the files it holds open are read from a live thread."""
    import time

    from ptxlab.grading.sandbox_watch import SandboxWatch, process_tree

    folder = tmp_path / "scratch"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _FIRST_THREAD_ENDS, str(folder),
                             str(_SYS_EXIT)], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stat = Path(f"/proc/{proc.pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the first thread did not end")
        assert not list(folder.iterdir())           # the file is held open, deleted
        limits = {"memory_mb": 100} if limit == "memory" else {"disk_mb": 8}
        watch = SandboxWatch(proc.pid, reason_file=tmp_path / "why.txt", folders=[folder],
                             **limits)
        why, pids = watch.check()
        assert pids == [proc.pid]
        assert why.startswith("memory limit exceeded" if limit == "memory"
                              else "Disk quota exceeded"), why
        watch._enforce(why)
        assert proc.wait(timeout=10) == -9
        assert process_tree(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
