"""A kernel check gives the same verdict on every machine.

The CPU model always runs the learner's kernel (its sanitizer and its outputs decide); a GPU, when
there is one, runs it too and is a cross-check whose disagreements are reported, never scored.
Here the GPU is a stand-in that runs the CPU model without its race detector, which is what a real
GPU does with a race: it hides it and returns whatever the timing gave.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import backends, cpu, gpu
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.racecheck import BARRIER_ADVICE
from ptxlab.teach.exercises.kernel_exercise import KernelExercise, KernelRun, run_kernel_case

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from kernels import FILL_THEN_LOAD, generic_source  # noqa: E402

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

SYNCED = FILL_THEN_LOAD.replace("SYNC", "__syncthreads();")
RACY = FILL_THEN_LOAD.replace("SYNC", "")


def _fake_status():
    return gpu.GpuStatus(True, "stand-in GPU", name="Stand-in GPU", compute_capability=(9, 0),
                         supported={k: True for k in gpu.INSTRUCTION_MIN_SM}, cupy_version="0")


@pytest.fixture
def with_gpu(monkeypatch):
    """A machine with a 'GPU' that runs kernels like the hardware: races hidden, no warnings.
    ``outputs`` may rewrite what it returns (a GPU that disagrees), ``fault`` makes it fault."""
    behaviour: dict = {"outputs": None, "fault": None, "calls": 0}
    model = cpu.run_kernel

    def run_kernel(source, kernel, grid, block, args, shared_mem=0, options=()):
        behaviour["calls"] += 1
        if behaviour["fault"]:
            raise backends.KernelFault(behaviour["fault"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model(source, kernel, grid, block, args, shared_mem=shared_mem,
                        options=options, racecheck="off")
        return behaviour["outputs"](out) if behaviour["outputs"] else out

    monkeypatch.setattr(gpu, "status", lambda refresh=False: _fake_status())
    monkeypatch.setattr(gpu, "run_kernel", run_kernel)
    monkeypatch.delenv("PTXLAB_ISOLATE", raising=False)
    return behaviour


def _fill_then_load_exercise() -> KernelExercise:
    expected = cpu.run_kernel(SYNCED, "fill_then_load", (1,), (128,),
                              [np.zeros(128, np.uint32)])[0].reshape(32, 4)
    run = KernelRun("a 4-warp tile", [np.zeros(128, np.uint32)], 0, expected, block=(128,))
    return KernelExercise(key="t.fill", title="fill then load", kernel_name="fill_then_load",
                          visible=lambda: [run])


def _verdicts(exercise: KernelExercise, source: str, monkeypatch, with_gpu) -> tuple:
    """The check's result on this 'GPU machine' and with no GPU at all."""
    on_gpu = exercise.evaluate(source)
    monkeypatch.setattr(gpu, "status", lambda refresh=False: gpu.GpuStatus(False, "no GPU"))
    on_cpu = exercise.evaluate(source)
    return on_gpu, on_cpu


def test_a_race_fails_on_a_gpu_machine_as_on_a_cpu_machine(monkeypatch, with_gpu):
    exercise = _fill_then_load_exercise()
    on_gpu, on_cpu = _verdicts(exercise, RACY, monkeypatch, with_gpu)
    assert with_gpu["calls"] == 0, "the sanitizer's finding decides before any GPU run"
    assert not on_gpu.passed and not on_cpu.passed
    assert on_gpu.message == on_cpu.message and "race" in on_gpu.message
    assert on_gpu.advice == on_cpu.advice == [BARRIER_ADVICE]


def test_a_right_kernel_passes_on_both_and_names_both(monkeypatch, with_gpu):
    exercise = _fill_then_load_exercise()
    on_gpu, on_cpu = _verdicts(exercise, SYNCED, monkeypatch, with_gpu)
    assert with_gpu["calls"] == 1
    assert on_gpu.passed and on_cpu.passed
    assert "Stand-in GPU" in on_gpu.message and backends.CPU_DEVICE in on_gpu.message
    assert on_gpu.details["backend"] == "gpu+cpu" and on_cpu.details["backend"] == "cpu"
    assert not on_gpu.advice and not on_cpu.advice


def test_a_gpu_that_disagrees_is_reported_and_the_model_decides(monkeypatch, with_gpu):
    exercise = _fill_then_load_exercise()
    with_gpu["outputs"] = lambda out: [np.zeros_like(out[0])]
    on_gpu, on_cpu = _verdicts(exercise, SYNCED, monkeypatch, with_gpu)
    assert on_gpu.passed == on_cpu.passed is True
    (note,) = on_gpu.advice
    assert note.startswith("on the GPU (Stand-in GPU") and "128 output word(s)" in note
    assert "CPU model's" in note


def test_a_gpu_fault_is_reported_and_the_model_decides(monkeypatch, with_gpu):
    exercise = _fill_then_load_exercise()
    with_gpu["fault"] = "an illegal memory access was encountered"
    on_gpu, on_cpu = _verdicts(exercise, SYNCED, monkeypatch, with_gpu)
    assert on_gpu.passed == on_cpu.passed is True
    (note,) = on_gpu.advice
    assert note.startswith("on the GPU, the kernel faulted") and "illegal memory" in note


def test_what_the_model_notices_is_said_once_on_every_machine(monkeypatch, with_gpu):
    expected = cpu.run_kernel(generic_source("cvta"), "load_generic", (1,), (32,),
                              [np.zeros(128, np.uint32)])[0].reshape(32, 4)
    run = KernelRun("tile", [np.zeros(128, np.uint32)], 0, expected)
    exercise = KernelExercise(key="t.generic", title="generic", kernel_name="load_generic",
                              visible=lambda: [run, run])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_gpu, on_cpu = _verdicts(exercise, generic_source("generic64"), monkeypatch, with_gpu)
    assert on_gpu.passed and on_cpu.passed
    assert on_gpu.advice == on_cpu.advice and len(on_gpu.advice) == 1
    assert "__cvta_generic_to_shared" in on_gpu.advice[0]


def test_the_gpu_decides_alone_only_where_the_model_cannot_run(monkeypatch, with_gpu):
    def unsupported(*args, **kwargs):
        fault = backends.KernelFault("instruction 'foo.bar' is not modelled")
        fault.unsupported = True
        raise fault

    exercise = _fill_then_load_exercise()
    monkeypatch.setattr(cpu, "run_kernel", unsupported)
    res = exercise.evaluate(SYNCED)
    assert res.passed and any(a.startswith("only the GPU checked this kernel") for a in res.advice)
    monkeypatch.setattr(gpu, "status", lambda refresh=False: gpu.GpuStatus(False, "no GPU"))
    res = exercise.evaluate(SYNCED)
    assert not res.passed and "cannot run here" in res.message and "not modelled" in res.message


def test_run_kernel_case_alone_still_carries_the_models_notes():
    expected = cpu.run_kernel(generic_source("cvta"), "load_generic", (1,), (32,),
                              [np.zeros(128, np.uint32)])[0].reshape(32, 4)
    run = KernelRun("tile", [np.zeros(128, np.uint32)], 0, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_kernel_case(generic_source("generic64"), "load_generic", run, "load")
    assert res.passed and any("__cvta_generic_to_shared" in a for a in res.advice)


def test_after_a_gpu_fault_the_process_stops_using_the_gpu(monkeypatch):
    """A CUDA fault leaves the context unusable: later launches go to the CPU model and say
    why, instead of failing one after the other."""
    monkeypatch.setattr(gpu, "_status_cache", _fake_status())
    assert gpu.status().available
    monkeypatch.setattr(gpu, "_broken_by", "'load_tile'")
    st = gpu.status()
    assert not st.available and "'load_tile' faulted" in st.message and "restart" in st.message
    chosen, reason = backends.choose_backend('extern "C" __global__ void k() {}')
    assert chosen == "cpu" and "restart" in reason
