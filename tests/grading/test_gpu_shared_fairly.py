"""The GPU shared fairly, checked without one: a launch that finds the GPU's memory full is
waited for and tried again, then set aside as the machine's fault (never a wrong answer); a
judged notebook's sandbox gets no GPU; each worker's launch service gets its share of the GPU's
memory."""
from __future__ import annotations

import pytest

from ptxlab.grading import launch_service_pool, machine_faults
from ptxlab.grading.kernel_manager import SandboxedKernelManager
from ptxlab.run import errors, gpu


class OutOfMemoryError(Exception):
    """Stands for CuPy's pool error of the same name."""


class CUDARuntimeError(Exception):
    def __init__(self, status: int):
        super().__init__(f"status {status}")
        self.status = status


@pytest.fixture
def no_waits(monkeypatch):
    monkeypatch.setattr(gpu, "OUT_OF_MEMORY_WAITS_S", (0.0, 0.0))
    monkeypatch.setattr(gpu, "_free_pool", lambda: None)


def test_a_full_gpu_is_waited_for_then_the_launch_runs(monkeypatch, no_waits):
    tries = []

    def once(*args):
        tries.append(args)
        if len(tries) < 3:
            raise OutOfMemoryError("out of memory allocating 1,024 bytes")
        return ["done"]

    monkeypatch.setattr(gpu, "_run_kernel_once", once)
    assert gpu.run_kernel("src", "k", 1, 32, []) == ["done"]
    assert len(tries) == 3


def test_a_gpu_that_stays_full_is_the_machines_fault(monkeypatch, no_waits):
    def once(*args):
        raise CUDARuntimeError(2)          # cudaErrorMemoryAllocation

    monkeypatch.setattr(gpu, "_run_kernel_once", once)
    with pytest.raises(errors.GpuMemoryExhausted) as caught:
        gpu.run_kernel("src", "k", 1, 32, [])
    assert isinstance(caught.value, errors.ServiceUnavailable)   # no verdict, no 0
    assert "another process" in str(caught.value)
    assert machine_faults.machine_fault(caught.value) == "the GPU's memory was held by another process"


def test_other_cuda_errors_are_not_retried(monkeypatch, no_waits):
    tries = []

    def once(*args):
        tries.append(1)
        raise CUDARuntimeError(700)        # an illegal address: the kernel's own fault

    monkeypatch.setattr(gpu, "_run_kernel_once", once)
    with pytest.raises(CUDARuntimeError):
        gpu.run_kernel("src", "k", 1, 32, [])
    assert tries == [1]


def test_a_full_gradebook_disk_is_the_machines_fault():
    import sqlite3

    assert machine_faults.machine_fault(sqlite3.OperationalError("database or disk is full"))


def test_a_judged_notebook_gets_no_gpu():
    km = SandboxedKernelManager()
    km.gpu = True
    km.graded_outside = True
    assert not km.notebook_gpu
    km.graded_outside = False              # its test cells decide: they launch in the notebook
    assert km.notebook_gpu


@pytest.mark.parametrize("workers, share", [("1", "90%"), ("4", "22%"), ("16", "5%"),
                                            ("x", "90%")])
def test_each_workers_service_gets_a_share_of_the_gpu(workers, share):
    env = {launch_service_pool.WORKERS_ENV: workers}
    assert launch_service_pool.gpu_memory_cap(0, env) == {"CUPY_GPU_MEMORY_LIMIT": share}


def test_a_configured_gpu_cap_is_kept():
    cap = launch_service_pool.gpu_memory_cap(2048, {})
    assert cap["CUPY_GPU_MEMORY_LIMIT"] == str(2048 << 20)


@pytest.mark.gpu
def test_a_gpu_held_by_another_process_is_the_machines_fault(monkeypatch):
    """On the GPU: another process takes all but a sliver of its memory; a launch whose input
    does not fit is waited for, tried again, and set aside as the machine's fault; once the
    memory is free the same launch runs."""
    import subprocess
    import sys

    import numpy as np

    hold = ("import cupy, sys, time\n"
            "free, _ = cupy.cuda.runtime.memGetInfo()\n"
            "pool = cupy.get_default_memory_pool()\n"
            "held = cupy.empty(free - (256 << 20), dtype=cupy.uint8)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    src = 'extern "C" __global__ void touch(unsigned char* x) { x[threadIdx.x] += 1; }'
    big = np.zeros(1 << 30, dtype=np.uint8)              # 1 GiB: more than is left
    monkeypatch.setattr(gpu, "OUT_OF_MEMORY_WAITS_S", (0.2, 0.2))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(errors.GpuMemoryExhausted, match="another process"):
            gpu.run_kernel(src, "touch", 1, 32, [big])
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    out = gpu.run_kernel(src, "touch", 1, 32, [big])
    assert int(out[0][:32].sum()) == 32
