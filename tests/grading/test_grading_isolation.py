"""Isolated calls: a hang, a crash, a memory hog or an exception in the child becomes a clear
exception in the caller, and the caller carries on."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from ptxlab.run import backends as run_backends
from ptxlab.run import isolation as iso
from ptxlab.run import launch_log


def launch_isolated(*args, **kwargs):
    """A kernel launch isolated in a child (no launch service in these tests)."""
    return run_backends.launch(*args, isolate=True, **kwargs)


@pytest.fixture(params=["fork", "exec"], autouse=True)
def child_kind(request, monkeypatch):
    """Every test runs with a forked child (the default where no CUDA is loaded) and with a
    fresh interpreter (the only kind once CUDA may be initialised in the parent)."""
    monkeypatch.setenv(iso.FORK_ENV, "auto" if request.param == "fork" else "0")
    if request.param == "fork" and not iso.fork_is_safe():
        pytest.skip("this process has CUDA loaded: children are never forked here")
    return request.param


def test_result_comes_back():
    assert iso.run_isolated("operator:add", (2, 3), timeout_s=30) == 5
    arr = iso.run_isolated("numpy:arange", (5,), {"dtype": "uint32"}, timeout_s=30)
    assert arr.dtype == np.uint32 and arr.tolist() == [0, 1, 2, 3, 4]


def test_exception_comes_back_as_itself():
    with pytest.raises(ZeroDivisionError):
        iso.run_isolated("operator:truediv", (1, 0), timeout_s=30)


def test_hang_is_stopped_at_the_limit():
    t0 = time.monotonic()
    with pytest.raises(iso.IsolatedTimeout, match=r"did not finish within 1\.5 s"):
        iso.run_isolated("time:sleep", (60,), timeout_s=1.5, what="kernel 'spin'")
    assert time.monotonic() - t0 < 10


def test_hard_exit_and_signal_are_crashes():
    with pytest.raises(iso.IsolatedCrash, match="exited with status 7"):
        iso.run_isolated("os:_exit", (7,), timeout_s=30)
    with pytest.raises(iso.IsolatedCrash, match="SIGABRT"):
        iso.run_isolated("os:abort", timeout_s=30)


def test_memory_hog_is_stopped():
    with pytest.raises(iso.IsolatedMemoryExceeded, match="more than 300 MiB"):
        iso.run_isolated("builtins:bytearray", (2 * 2**30,), timeout_s=60, memory_mb=300)


def test_caller_survives_and_recursion_is_off():
    for _ in range(2):
        with pytest.raises(iso.IsolatedCrash):
            iso.run_isolated("os:_exit", (1,), timeout_s=30)
    env = iso.run_isolated("os:getenv", ("PTXLAB_ISOLATE",), timeout_s=30)
    assert env == "0"          # a launch inside the child runs there, not in a grandchild


def test_limits_from_environment(monkeypatch):
    monkeypatch.setenv(iso.TIMEOUT_ENV, "12.5")
    monkeypatch.setenv(iso.MEMORY_ENV, "777")
    assert iso.default_timeout_s() == 12.5 and iso.default_memory_mb() == 777
    with pytest.raises(ValueError):
        iso.run_isolated("operator:add", (1, 2), timeout_s=0)


def _backend_or_skip():
    backends = pytest.importorskip("ptxlab.backends")
    src = 'extern "C" __global__ void k(unsigned* o) { o[threadIdx.x] = threadIdx.x * 3u; }'
    try:
        backends.choose_backend(src)
    except Exception as exc:
        pytest.skip(f"no kernel backend here: {exc}")
    return backends


def test_isolated_launch_matches_direct_launch():
    backends = _backend_or_skip()
    src = 'extern "C" __global__ void k(unsigned* o) { o[threadIdx.x] = threadIdx.x * 3u; }'
    out = np.zeros(32, dtype=np.uint32)
    res = launch_isolated(src, "k", (1,), (32,), [out], timeout_s=120)
    assert np.array_equal(res.outputs[0], np.arange(32, dtype=np.uint32) * 3)
    direct = backends.launch(src, "k", grid=(1,), block=(32,), args=[out.copy()], isolate=False)
    assert res.backend == direct.backend

#: A kernel that never finishes on any backend. It spins on a volatile load of global memory that
#: nothing writes: the GPU compiler removes a spin on a local variable, even a volatile one.
HANG = ('extern "C" __global__ void {name}(unsigned* o) {{ volatile unsigned* flag = o; '
        'while (flag[0] == 0u) {{ }} o[0] = 1u; }}')


def test_isolated_launch_compile_error_and_hang():
    backends = _backend_or_skip()
    with pytest.raises(backends.CompileError) as info:
        launch_isolated('extern "C" __global__ void k(unsigned* o) { o[0] = 1 }', "k",
                                args=[np.zeros(1, np.uint32)], timeout_s=120)
    assert info.value.line is not None
    with pytest.raises((iso.IsolatedTimeout, backends.KernelFault), match="kernel 'k'"):
        launch_isolated(HANG.format(name="k"), "k", args=[np.zeros(1, np.uint32)],
                                timeout_s=2)


def test_interrupt_while_waiting_stops_the_child():
    """A notebook cell's own time limit interrupts the kernel while it waits for a launch: the
    child must not live on under the cells that follow."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            iso.run_isolated("time:sleep", (30,), timeout_s=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert iso._descendants(os.getpid()) == []


def test_an_interrupt_inside_popen_wait_cannot_hang_the_kernel():
    """The interrupt may land in ``Popen.wait`` right after it took its internal lock and
    before it could release it: collecting the killed child must not wait for that lock."""
    import subprocess
    import sys
    import threading

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    proc._waitpid_lock.acquire()               # as the interrupted wait left it
    iso._kill_group(proc)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (iso._reap_after_interrupt(proc), done.set()),
                              daemon=True)
    worker.start()
    assert done.wait(20), "collecting the child waited for Popen's lock"
    assert iso._descendants(os.getpid()) == []


def test_forked_child_is_not_charged_for_the_parents_memory(child_kind):
    ballast = bytearray(400 * 2**20)          # the parent's memory, shared with a forked child
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert iso.run_isolated("operator:add", (1, 2), timeout_s=30, memory_mb=300) == 3
    del ballast


def test_fork_is_never_used_once_cupy_is_imported(monkeypatch, child_kind):
    monkeypatch.setitem(__import__("sys").modules, "cupy", object())
    assert not iso.fork_is_safe()
    assert iso.run_isolated("operator:add", (2, 2), timeout_s=30) == 4


def test_launch_log_and_messages_say_where_the_kernel_ran(tmp_path, monkeypatch):
    _backend_or_skip()
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    src = 'extern "C" __global__ void k(unsigned* o) { o[threadIdx.x] = 7u; }'
    res = launch_isolated(src, "k", args=[np.zeros(32, np.uint32)], timeout_s=120)
    with pytest.raises(iso.IsolatedTimeout) as info:
        launch_isolated(HANG.format(name="spin"), "spin", args=[np.zeros(1, np.uint32)],
                                timeout_s=2)
    where = "the GPU" if res.backend == "gpu" else "the CPU model"
    assert f"kernel 'spin' did not finish within 2 s on {where}" in str(info.value)
    records, offset = launch_log.read_launch_log(log)
    assert [(r["kernel"], r["backend"], r["outcome"]) for r in records] == [
        ("k", res.backend, "ok"), ("spin", res.backend, "IsolatedTimeout")]
    assert offset == log.stat().st_size and launch_log.read_launch_log(log, offset) == ([], offset)
