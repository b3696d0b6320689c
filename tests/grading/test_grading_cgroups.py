"""Limits the kernel enforces: a sandbox in its own control group is held to its memory (files
in its ``/dev`` tmpfs and detached System V shared memory included), its tasks and an equal CPU
share, whatever it does between two looks of the grader's watch.

These run where this account may make control groups (root on the CI machine, cgroup v1; a
delegated v2 subtree elsewhere) and skip, saying why, where it may not.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxlab.grading import cgroups, sandbox
from ptxlab.grading.sandbox_account import hand_over, sandbox_account
from ptxlab.grading.sandbox_watch import SandboxWatch, resident_now

ROOT = cgroups.find_root()
needs_groups = pytest.mark.skipif(not ROOT.usable, reason=ROOT.describe())


def _bwrap() -> str:
    try:
        return sandbox.bwrap_binary()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"needs the grading sandbox: {exc}")


def _sandboxed(tmp_path: Path, code: str) -> list[str]:
    hand_over(tmp_path, sandbox_account())     # a root grader's sandbox runs as a uid of its own
    policy = sandbox.SandboxPolicy(workdir=tmp_path, gpu=False)
    return sandbox.sandbox_argv(policy, [sys.executable, "-c", code], bwrap=_bwrap(),
                                env={"PATH": "/usr/bin:/bin"})


@pytest.fixture
def group(request):
    made = []

    def make(memory_mb: int = 0, tasks: int = 0) -> cgroups.SubmissionGroup:
        g = ROOT.group(f"test-{os.getpid()}-{len(made)}-{request.node.name[:40]}",
                       cgroups.GroupLimits(memory_bytes=memory_mb << 20, tasks=tasks,
                                           stated_memory_mb=memory_mb * 2 // 3))
        made.append(g)
        return g

    yield make
    for g in made:
        assert g.remove(), f"group {g.name} could not be removed"


def test_the_grader_says_which_enforcement_it_uses():
    text = ROOT.describe()
    assert text.startswith("limits: ")
    if ROOT.usable:
        assert "enforced by the kernel" in text and "cgroup v" in text
    else:
        assert "watch" in text


def test_watch_mode_makes_no_group():
    off = cgroups.find_root("off")
    assert not off.usable and "watch" in off.describe()


@needs_groups
def test_files_in_the_sandboxes_dev_count_as_its_memory(tmp_path, group):
    """The tmpfs bwrap mounts as ``/dev`` is memory no process walk sees."""
    g = group(memory_mb=192)
    hog = ("chunk = b'x' * (1 << 20)\n"
           "with open('/dev/hog', 'wb') as f:\n"
           "    for _ in range(512):\n"
           "        f.write(chunk)\n"
           "print('held it all')\n")
    run = subprocess.run(g.enter_argv(_sandboxed(tmp_path, hog)), capture_output=True,
                         text=True, timeout=120)
    assert "held it all" not in run.stdout, run.stdout + run.stderr
    if sandbox_account() is not None:      # run by root, its /dev is root's: nothing written
        assert "PermissionError" in run.stderr, run.stderr
        return
    assert g.oom_kills() > 0
    why = g.limit_reason()
    assert why.startswith("memory limit exceeded") and "192 MiB" in why and "128 MiB" in why


@needs_groups
def test_detached_shared_memory_counts_as_its_memory(tmp_path, group):
    g = group(memory_mb=192)
    hog = ("import ctypes\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "libc.shmat.restype = ctypes.c_void_p\n"
           "libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\n"
           "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
           "for _ in range(8):\n"
           "    shmid = libc.shmget(0, 64 << 20, 0o1600)\n"
           "    addr = libc.shmat(shmid, None, 0)\n"
           "    ctypes.memset(addr, 1, 64 << 20)\n"
           "    libc.shmdt(ctypes.c_void_p(addr))\n"
           "print('held it all')\n")
    run = subprocess.run(g.enter_argv(_sandboxed(tmp_path, hog)), capture_output=True,
                         text=True, timeout=120)
    assert "held it all" not in run.stdout, run.stdout + run.stderr
    assert g.oom_kills() > 0 and g.limit_reason().startswith("memory limit exceeded")


@needs_groups
@pytest.mark.skipif("pids" not in ROOT.hierarchies,
                    reason=ROOT.missing.get("pids", "") or "no pids controller here")
def test_a_fork_storm_meets_the_task_limit_and_is_named(tmp_path, group):
    g = group(tasks=40)
    storm = ("import subprocess\n"
             "kids = []\n"
             "for _ in range(100):\n"
             "    try:\n"
             "        kids.append(subprocess.Popen(['sleep', '30']))\n"
             "    except OSError as exc:\n"
             "        print('refused', exc.errno)\n"
             "        break\n"
             "print('started', len(kids))\n")
    run = subprocess.run(g.enter_argv(_sandboxed(tmp_path, storm)), capture_output=True,
                         text=True, timeout=120)
    assert "refused" in run.stdout, run.stdout + run.stderr
    started = int(run.stdout.split("started")[1].split()[0])
    assert started < 40
    assert g.refused_tasks() > 0
    assert g.limit_reason().startswith("process limit exceeded") and "40" in g.limit_reason()


@needs_groups
def test_new_sessions_stay_in_the_group_and_are_killed_with_it(tmp_path, group):
    """``setsid`` escaped per-session scheduling and a process-group kill; not a group."""
    g = group(tasks=200)
    spawn = ("import subprocess, time\n"
             "for _ in range(6):\n"
             "    subprocess.Popen(['setsid', 'sh', '-c', 'while :; do :; done'],\n"
             "                     start_new_session=True)\n"
             "print('spawned', flush=True)\n"
             "time.sleep(60)\n")
    proc = subprocess.Popen(g.enter_argv(_sandboxed(tmp_path, spawn)), stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "spawned"
        time.sleep(0.3)
        # bwrap, its init, python and six shells, each in a session of its own
        assert len(g.processes()) >= 8
        g.kill()
        deadline = time.monotonic() + 10
        while g.processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert g.processes() == []
    finally:
        proc.kill()
        proc.wait()


@needs_groups
@pytest.mark.skipif("cpu" not in ROOT.hierarchies,
                    reason=ROOT.missing.get("cpu", "") or "no cpu controller here")
def test_a_hog_of_many_sessions_gets_one_share_of_the_cpu(tmp_path, group):
    """Busy processes in sessions of their own, each once an autogroup with a full share:
    in a group they share one weight, and a neighbour's single process gets its own."""
    hog, honest = group(tasks=200), group(tasks=50)
    cores = len(os.sched_getaffinity(0))
    spawn = ("import subprocess, time\n"
             f"for _ in range({4 * cores + 4}):\n"
             "    subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True)\n"
             "print('spawned', flush=True)\n"
             "time.sleep(60)\n")
    spin = ("import time\n"
            "t0, c0 = time.monotonic(), time.process_time()\n"
            "while time.monotonic() - t0 < 3: pass\n"
            "print(round((time.process_time() - c0) / (time.monotonic() - t0), 3))\n")

    def share(argv: list[str]) -> float:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return float(run.stdout.strip())

    def beside_the_hog(in_groups: bool) -> float:
        command = _sandboxed(tmp_path, spawn)
        proc = subprocess.Popen(hog.enter_argv(command) if in_groups else command,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert proc.stdout.readline().strip() == "spawned"
            argv = [sys.executable, "-c", spin]
            return share(honest.enter_argv(argv) if in_groups else argv)
        finally:
            if in_groups:
                hog.kill()
            os.killpg(proc.pid, 9)
            proc.wait()
            deadline = time.monotonic() + 10
            while hog.processes() and time.monotonic() < deadline:
                time.sleep(0.05)

    grouped, per_session = beside_the_hog(True), beside_the_hog(False)
    # two groups: the single busy process may use a whole core; in sessions it got one share
    # in 4 * cores + 5 (0.15 of a core on the 2-core machine). Compared with each other, as the
    # machine's other load weighs on both.
    assert grouped > 2 * per_session, (f"the honest process got {grouped:.2f} of a core beside "
                                       f"the hog in groups, {per_session:.2f} without")


def test_an_exited_process_holds_no_memory():
    """The watch measured a second time from a table read earlier: a process gone in between
    was counted at its old size (32 busy workers read as 5,028 MiB)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert resident_now([done.pid], 0) == 0
    assert resident_now([os.getpid()], 4096) > 4096


def test_the_watch_names_what_the_group_recorded(tmp_path):
    class Recorded:
        folders = {"memory": (1, tmp_path), "pids": (1, tmp_path)}
        killed = False

        def limit_reason(self):
            return "memory limit exceeded: test"

        def kill(self):
            self.killed = True

    group = Recorded()
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        watch = SandboxWatch(sleeper.pid, reason_file=tmp_path / "why.txt", folders=[tmp_path],
                             memory_mb=1, max_tasks=1, group=group)
        assert watch.settle() == "memory limit exceeded: test"
        assert (tmp_path / "why.txt").read_text().strip() == "memory limit exceeded: test"
        assert group.killed
        assert sleeper.wait(timeout=10) == -9
    finally:
        sleeper.kill()


# -- the disk, sized to the disk ---------------------------------------------------------------

def test_a_quota_never_promises_more_than_the_free_disk(tmp_path, monkeypatch):
    import shutil as _shutil
    from collections import namedtuple

    from ptxlab.grading import disk_share

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk_share.shutil, "disk_usage",
                        lambda p: usage(1 << 40, 0, 400 << 20))      # 400 MiB free
    share = disk_share.disk_share(512, [tmp_path], workers=2)
    # (400 - the grader's reserve) / (2 workers x the hard factor of 1.5)
    assert share.quota_mb == int((400 - disk_share.RESERVE_MB) / 3) and share.reduced
    assert "would promise more than the 400 MiB free shared by 2 workers" in share.describe()
    monkeypatch.setattr(disk_share.shutil, "disk_usage", lambda p: usage(1 << 40, 0, 1 << 40))
    roomy = disk_share.disk_share(512, [tmp_path], workers=16)
    assert roomy.quota_mb == 512 and not roomy.reduced
    monkeypatch.setattr(disk_share.shutil, "disk_usage", _shutil.disk_usage)


def test_what_a_stopped_submission_wrote_is_removed(tmp_path):
    from ptxlab.grading import disk_share

    (tmp_path / "nb.ipynb").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "given.bin").write_bytes(b"x")
    before = disk_share.snapshot(tmp_path)
    (tmp_path / "fill0.bin").write_bytes(b"x" * 1000)
    (tmp_path / "data" / "more.bin").write_bytes(b"x")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_bytes(b"x")
    assert disk_share.remove_new_files(tmp_path, before) >= 3
    assert disk_share.snapshot(tmp_path) == before


def test_a_v2_tree_gets_its_limits_written(tmp_path, monkeypatch):
    """cgroup v2 (a delegated subtree), laid out as files: where each figure is written."""
    own = tmp_path / "system.slice" / "grade.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups, "_mounts", lambda: [(str(tmp_path), "cgroup2", {"rw"})])
    monkeypatch.setattr(cgroups, "_own_paths", lambda: {"": "/system.slice/grade.service"})
    root = cgroups.find_root.__wrapped__()
    assert {h.version for h in root.hierarchies.values()} == {2}
    assert set(root.hierarchies) == {"memory", "pids", "cpu"}
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    base = own / f"ptxlab-grading-{os.getpid()}"
    for name in ("memory.swap.max", "memory.oom.group", "cpu.weight"):
        (base / "k1").mkdir(parents=True, exist_ok=True)
        (base / "k1" / name).write_text("")
    g = root.group("k1", cgroups.GroupLimits(memory_bytes=3 << 30, tasks=1024))
    folder = base / "k1"
    assert (folder / "memory.max").read_text() == str(3 << 30)
    assert (folder / "memory.swap.max").read_text() == "0"
    assert (folder / "memory.oom.group").read_text() == "1"
    assert (folder / "pids.max").read_text() == "1024"
    assert (folder / "cpu.weight").read_text() == "100"
    argv = g.enter_argv(["bwrap", "--", "python"])
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3:] == ["bwrap", "--", "python"]
    assert str(folder / "cgroup.procs") in argv[2]
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert g.oom_kills() == 1 and g.limit_reason().startswith("memory limit exceeded")


@pytest.mark.skipif(not __import__("ptxlab.grading.disk_share", fromlist=["x"]).can_mount_scratch(),
                    reason="mounting a sized scratch file system needs root")
@pytest.mark.parametrize("through", ["the C library", "the mount program"])
def test_a_sized_scratch_area_refuses_the_write_past_it(tmp_path, monkeypatch, through):
    """The kernel, not a walk every 0.1 s, stops the byte and the file past the quota."""
    import errno as _errno

    from ptxlab.grading import disk_share

    if through == "the mount program":
        monkeypatch.setattr(disk_share, "_libc", lambda: None)
    folder = tmp_path / "private"
    folder.mkdir()
    assert disk_share.mount_scratch(folder, 8 << 20, 100)
    try:
        mounted = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if line.split()[4] == str(folder)]
        assert len(mounted) == 1
        fields = mounted[0][mounted[0].index("-") + 1:]
        assert fields[:2] == ["tmpfs", "ptxlab-scratch"]
        assert "size=8192k" in fields[2] and "nr_inodes=100" in fields[2]
        assert "mode=700" in fields[2]
        with pytest.raises(OSError) as full:
            with open(folder / "big", "wb") as fh:
                for _ in range(16):
                    fh.write(b"x" * (1 << 20))
                    fh.flush()
        assert full.value.errno == _errno.ENOSPC
        (folder / "big").unlink()
        with pytest.raises(OSError) as many:
            for n in range(200):
                (folder / f"f{n}").write_bytes(b"")
        assert many.value.errno == _errno.ENOSPC
    finally:
        disk_share.unmount_scratch(folder)
    assert not list(folder.iterdir())           # the files went with the file system
    assert str(folder) not in Path("/proc/self/mountinfo").read_text()


def test_a_killed_graders_groups_are_removed(tmp_path):
    """A grader killed before its exit leaves its groups; the next one removes them (those of
    a grader still running stay)."""
    dead = tmp_path / "ptxlab-grading-999999999" / "ptxlab-kernel-x"
    live = tmp_path / f"ptxlab-grading-{os.getpid()}" / "ptxlab-kernel-y"
    dead.mkdir(parents=True)
    live.mkdir(parents=True)
    cgroups._remove_stale(tmp_path)
    assert not dead.parent.exists() and live.exists()


def test_a_gone_graders_group_with_processes_is_left_alone(tmp_path):
    """From another PID namespace a live grader looks gone: its busy groups are not removed."""
    busy = tmp_path / "ptxlab-grading-999999998" / "ptxlab-kernel-z"
    busy.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("12345\n")     # a file: its folder cannot be removed
    cgroups._remove_stale(tmp_path)
    assert busy.exists()


@needs_groups
@pytest.mark.skipif(not __import__("shutil").which("unshare"), reason="no unshare(1) here")
def test_a_tmpfs_in_a_nested_namespace_counts_as_its_memory(tmp_path, group):
    """A user and mount namespace of the notebook's own (``unshare -Urm``) with a tmpfs in it:
    memory no walk of the sandbox's folders sees, charged to its group all the same."""
    g = group(memory_mb=192)
    hog = ("import subprocess\n"
           "r = subprocess.run(['unshare', '-Urm', 'sh', '-c', 'mkdir -p /tmp/m && mount -t "
           "tmpfs none /tmp/m && dd if=/dev/zero of=/tmp/m/f bs=1M count=512 && echo HELD'],"
           " capture_output=True, text=True)\n"
           "print(r.stdout, r.stderr)\n")
    run = subprocess.run(g.enter_argv(_sandboxed(tmp_path, hog)), capture_output=True,
                         text=True, timeout=120)
    assert "HELD" not in run.stdout, run.stdout + run.stderr
    if "unshare failed" in run.stdout + run.stderr or "Operation not permitted" in run.stdout:
        pytest.skip(f"no nested namespace here: {run.stdout.strip()[-200:]}")
    assert g.oom_kills() > 0 and g.limit_reason().startswith("memory limit exceeded")
