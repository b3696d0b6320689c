"""The warm launch service: one process runs a grading worker's kernel launches with the same
contract as a fresh child per launch (limits, faults, hangs), and what a client sends it is data.

Run on the CPU backend here; the same service holds one CUDA context on a GPU machine (the GPU
grading check runs it there).
"""
from __future__ import annotations

import json
import os
import socket
import time

import numpy as np
import pytest

from ptxlab.run import backends as run_backends
from ptxlab.run import errors as iso
from ptxlab.run import launch_client as ls
from ptxlab.run import launch_log, launch_wire

SRC = 'extern "C" __global__ void k(unsigned* o, int s) { o[threadIdx.x] = threadIdx.x * 3u + s; }'
#: Spins on a volatile global load nothing writes: never finishes, on any backend.
HANG = ('extern "C" __global__ void spin(unsigned* o) { volatile unsigned* f = o; '
        'while (f[0] == 0u) { } o[0] = 1u; }')
#: Stores far past the end of its output: a fault (on a GPU, one that breaks the context).
WILD = 'extern "C" __global__ void wild(unsigned* o) { o[threadIdx.x + (1u << 30)] = 1u; }'
MAX_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def service():
    svc = ls.ServiceProcess(max_timeout_s=MAX_TIMEOUT_S, max_memory_mb=2048)
    try:
        state = svc.wait_ready(60)
    except ls.ServiceUnavailable as exc:
        svc.stop()
        pytest.fail(str(exc))
    assert state["executor"]["backend"] in ("cpu", "gpu")
    yield svc
    svc.stop()
    assert not os.path.exists(svc.folder)


@pytest.fixture
def via_service(service, monkeypatch, tmp_path):
    """Launches of this test go to the service; returns the launch log's path."""
    monkeypatch.setenv(ls.SERVICE_ENV, service.socket_path)
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    return log


def _records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _launch(src=SRC, kernel="k", args=None, **kw):
    if args is None:
        args = [np.zeros(32, np.uint32), np.int32(5)]
    return run_backends.launch(src, kernel, args=args, backend="cpu", isolate=True, **kw)


def test_same_result_as_a_direct_launch_and_the_executor_stays_warm(service, via_service):
    from ptxlab.run import backends

    before = ls.ping(service.socket_path)
    res = _launch()
    direct = backends.launch(SRC, "k", args=[np.zeros(32, np.uint32), np.int32(5)],
                             backend="cpu", isolate=False)
    assert np.array_equal(res.outputs[0], direct.outputs[0])
    assert np.array_equal(res.outputs[0], np.arange(32, dtype=np.uint32) * 3 + 5)
    assert res.outputs[1] == np.int32(5) and isinstance(res.outputs[1], np.int32)
    t0 = time.monotonic()
    _launch()
    warm_s = time.monotonic() - t0
    after = ls.ping(service.socket_path)
    assert after["executor_pid"] == before["executor_pid"], "a good launch must not restart it"
    assert after["launches"] == before["launches"] + 2
    assert warm_s < 1.0, f"a warm launch took {warm_s:.2f} s"
    assert [r["route"] for r in _records(via_service)] == ["service", "service"]


def test_a_hang_is_stopped_at_the_limit_and_the_next_launch_gets_a_fresh_executor(service, via_service):
    before = ls.ping(service.socket_path)["executor_pid"]
    t0 = time.monotonic()
    with pytest.raises(iso.IsolatedTimeout, match=r"kernel 'spin' did not finish within 1 s on the CPU model"):
        _launch(HANG, "spin", args=[np.zeros(1, np.uint32)], timeout_s=1)
    assert time.monotonic() - t0 < 10
    assert ls.ping(service.socket_path)["executor_pid"] != before
    assert np.array_equal(_launch().outputs[0], np.arange(32, dtype=np.uint32) * 3 + 5)
    assert _records(via_service)[0]["outcome"] == "IsolatedTimeout"


def test_a_client_cannot_raise_its_own_limits(service, via_service):
    t0 = time.monotonic()
    with pytest.raises(iso.IsolatedTimeout, match=f"within {MAX_TIMEOUT_S:g} s"):
        _launch(HANG, "spin", args=[np.zeros(1, np.uint32)], timeout_s=3600)
    assert time.monotonic() - t0 < MAX_TIMEOUT_S + 8


def test_a_fault_comes_back_as_itself_and_replaces_the_executor(service, via_service):
    from ptxlab.run import backends

    before = ls.ping(service.socket_path)["executor_pid"]
    with pytest.raises(backends.CompileError) as info:
        _launch('extern "C" __global__ void k(unsigned* o) { o[0] = 1 }', "k",
                args=[np.zeros(1, np.uint32)])
    assert info.value.line is not None
    assert ls.ping(service.socket_path)["executor_pid"] == before, \
        "a compile error leaves the context sound: no restart"
    with pytest.raises(backends.KernelFault):
        _launch(WILD, "wild", args=[np.zeros(32, np.uint32)])
    assert ls.ping(service.socket_path)["executor_pid"] != before
    assert _launch().outputs[0][1] == 8


def test_memory_over_the_limit_is_stopped(service, via_service):
    big = np.zeros(200 * 2**20 // 4, np.uint32)
    with pytest.raises(iso.IsolatedMemoryExceeded, match="kernel 'k' used more than 100 MiB"):
        _launch(args=[big, np.int32(1)], memory_mb=100)
    assert _launch().outputs[0][0] == 5


def _raw(service, data: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(service.socket_path)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        header, _ = launch_wire.recv_frame(sock)
    return header


def _frame(header: dict, payload: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return launch_wire.FRAME.pack(len(head), len(payload)) + head + payload


def test_what_a_client_sends_is_checked_as_data(service, tmp_path):
    """Learner code can reach the socket: it can ask for launches within the limits, nothing else."""
    import pickle

    marker = tmp_path / "pwned"

    class Boom:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    good = {"op": "launch", "source": SRC, "kernel": "k", "grid": [1], "block": [32],
            "backend": "cpu", "args": [], "timeout_s": 1, "memory_mb": 100}
    bad_requests = [
        b"\x00\x01garbage",
        pickle.dumps(Boom()),
        _frame({**good, "args": [{"dtype": "|O", "shape": [1], "scalar": False, "nbytes": 8}]},
               pickle.dumps(Boom())[:8]),
        _frame({**good, "args": [{"dtype": "<u4", "shape": [4], "scalar": False, "nbytes": 16}]},
               b"\x00" * 8),
        _frame({**good, "grid": [0]}),
        _frame({**good, "source": ["not", "a", "string"]}),
        _frame({**good, "backend": "shell"}),
        launch_wire.FRAME.pack(launch_wire.MAX_HEADER_BYTES + 1, 0),
    ]
    for data in bad_requests:
        reply = _raw(service, data)
        assert reply["verdict"] == "refused", (data[:40], reply)
    assert not marker.exists()
    assert ls.ping(service.socket_path)["verdict"] == "done"


def test_without_a_service_launches_are_isolated_one_by_one(monkeypatch, tmp_path):
    monkeypatch.setenv(ls.SERVICE_ENV, str(tmp_path / "no-such.sock"))
    log = tmp_path / "launches.jsonl"
    monkeypatch.setenv(launch_log.LAUNCH_LOG_ENV, str(log))
    assert _launch().outputs[0][2] == 11
    (record,) = _records(log)
    assert record["route"].startswith("child (launch service unavailable")
    assert record["outcome"] == "ok"


def test_a_dead_service_is_not_the_learners_fault(monkeypatch, tmp_path):
    svc = ls.ServiceProcess(max_timeout_s=5, max_memory_mb=1024)
    svc.wait_ready(60)
    monkeypatch.setenv(ls.SERVICE_ENV, svc.socket_path)
    assert _launch().outputs[0][0] == 5
    svc.stop()
    assert _launch().outputs[0][0] == 5      # isolated the old way, same verdict


def _pid_of(service, session: str, src: str = SRC, kernel: str = "k", args=None,
            backend: str = "cpu") -> int:
    notes: dict = {}
    ls.launch(service.socket_path, source=src, kernel=kernel,
              args=args if args is not None else [np.zeros(32, np.uint32), np.int32(1)],
              backend=backend, timeout_s=30, memory_mb=1024, notes=notes, session=session)
    return notes["executor_pid"]


def test_the_next_student_is_served_by_a_cleared_executor(service):
    """A new session is served by the warm executor once it has cleared what the last one left
    (no fresh CUDA context per student: the driver makes those one at a time)."""
    first = _pid_of(service, "student-a")
    before = ls.ping(service.socket_path)["handovers"]
    assert _pid_of(service, "student-a") == first            # warm within a session
    assert _pid_of(service, "student-b") == first            # cleared, then reused
    state = ls.ping(service.socket_path)
    assert state["session"] == "student-b" and state["handovers"] == before + 1


#: Counts its own launches in a ``__device__`` variable: what a module keeps between launches.
COUNTER = ('__device__ unsigned launches_seen; extern "C" __global__ void count(unsigned* o) '
           '{ if (threadIdx.x == 0) o[0] = ++launches_seen; }')


def _count(service, session: str) -> int:
    res = ls.launch(service.socket_path, source=COUNTER, kernel="count",
                    args=[np.zeros(32, np.uint32)], backend="auto", timeout_s=30,
                    memory_mb=1024, session=session)
    return int(res.outputs[0][0])


def test_a_device_variable_does_not_carry_over_to_the_next_student(service):
    """The modules are unloaded between students: the next student's first launch sees the
    variable as the first student's first launch did (on a GPU, a warm module counts on)."""
    first = [_count(service, "counting-a"), _count(service, "counting-a")]
    assert _count(service, "counting-b") == first[0] == 1


#: Calls malloc only for an input no launch here gives it: its PTX uses the device heap, and
#: the CPU model (which has no heap) still runs it.
HEAP = ('extern "C" __global__ void heap(unsigned* o) { if (o[0] == 12345u) { unsigned* p = '
        '(unsigned*)malloc(64); o[1] = p ? 1u : 2u; } o[threadIdx.x] += 1u; }')


def test_a_kernel_that_used_the_device_heap_leaves_its_process_to_no_one(service):
    """What in-kernel malloc takes stays in the CUDA context: the next student gets a fresh
    executor, and the one after that shares it again."""
    used = _pid_of(service, "heap-a", HEAP, "heap", [np.zeros(32, np.uint32)], backend="auto")
    fresh = _pid_of(service, "heap-b")
    assert fresh != used
    assert _pid_of(service, "heap-c") == fresh


def test_the_ptx_says_which_kernels_leave_state_in_the_context():
    from ptxlab.run import cpu
    from ptxlab.run.ptx.context_state import context_state_left, system_calls

    heap = cpu.compile_ptx(HEAP)
    assert context_state_left(heap) == ["malloc"]
    new = cpu.compile_ptx('extern "C" __global__ void n(unsigned* o) { unsigned* p = new '
                          'unsigned[4]; o[0] = p[0]; delete[] p; }')
    assert context_state_left(new) == ["free", "malloc"]
    talk = cpu.compile_ptx('extern "C" __global__ void t(unsigned* o) { printf("%u\\n", o[0]); '
                           'assert(o[0] != 7u); }')
    assert system_calls(talk) == ["__assertfail", "vprintf"] and context_state_left(talk) == []
    assert context_state_left(cpu.compile_ptx(SRC)) == []


def test_oversize_sources_and_file_options_are_refused_by_the_service(service):
    from ptxlab.run.errors import RequestRefused

    with pytest.raises(RequestRefused, match="not compiled"):
        ls.launch(service.socket_path, source=SRC + "//" + "x" * (17 * 2**20), kernel="k",
                  backend="cpu", timeout_s=5, memory_mb=100)
    good = {"op": "launch", "source": SRC, "kernel": "k", "grid": [1], "block": [32],
            "backend": "cpu", "args": [], "timeout_s": 1, "memory_mb": 100}
    for header in ({**good, "options": ["--time=/tmp/home/.cache/ptxlab/ptx/x.ptx"]},
                   {**good, "options": ["-I/"]},
                   {**good, "source": SRC + "//" + "x" * (2 * 2**20)}):
        reply = _raw(service, _frame(header))
        assert reply["verdict"] == "refused" and reply["kind"] == "RequestRefused", reply
