"""The CPU model as a sanitizer.

Races: planted ones are reported with both warps, lanes, the address and the PTX and CUDA lines;
their synced twins, one warp's own accesses, atomics and every kernel of the project are not.
Address spaces: a generic pointer handed to a ``.shared`` instruction behaves as on sm_90 (the low
32 bits) and the learner is told why it is still wrong."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.in_process import cpu_available

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from kernels import (BOTH_WRITE, FILL_THEN_LOAD, PRODUCER_CONSUMER,  # noqa: E402
                     STORE_THEN_READ, generic_source)

from ptxlab.run.ptx.racecheck import (RACECHECK_ENV, RaceWarning,  # noqa: E402
                                      SharedMemoryRace, UninitializedSharedRead)

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")


def _run(src: str, kernel: str, threads: int = 128, racecheck: str | None = None):
    return cpu.run_kernel(src, kernel, (1,), (threads,), [np.zeros(128, np.uint32)],
                          racecheck=racecheck)


@pytest.mark.parametrize("src,kernel,threads,hazard,warps,lines", [
    (FILL_THEN_LOAD, "fill_then_load", 128, "write-after-read", ("warp 0", "warp 1"),
     ("ldmatrix", "tile[i] = ")),
    (PRODUCER_CONSUMER, "handoff", 64, "read-after-write", ("warp 0", "warp 1"),
     ("box[t] = 100u + t", "out[t - 32] = box[t - 32]")),
    (BOTH_WRITE, "both_write", 64, "write-after-write", ("warp 0", "warp 1"),
     ("box[t] = t", "box[t - 32] = t")),
    (STORE_THEN_READ, "store_then_read", 64, "read-after-write", ("warp 0", "warp 1"),
     ("stmatrix", "out[t - 32] = tile[t - 32]")),
])
def test_planted_races_are_reported_with_both_sides(src, kernel, threads, hazard, warps, lines):
    with pytest.raises(SharedMemoryRace) as info:
        _run(src.replace("SYNC", ""), kernel, threads)
    msg = str(info.value)
    assert msg.startswith("race in shared memory") and hazard in msg, msg
    for w in warps:
        assert w in msg, msg
    for text in lines:
        assert text in msg, f"{text!r} not in {msg}"
    assert "shared address" in msg and "PTX line" in msg and "kernel.cu:" in msg
    assert info.value.where.ptx_line is not None and info.value.where.warp is not None
    # The synced twin: no race, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(src.replace("SYNC", "__syncthreads();"), kernel, threads)


def test_warn_mode_returns_the_outputs_and_warns(monkeypatch):
    with pytest.warns(RaceWarning, match="race in shared memory"):
        out = _run(PRODUCER_CONSUMER.replace("SYNC", ""), "handoff", 64, racecheck="warn")
    assert (out[0][:32] == 100 + np.arange(32)).all()   # warp 0 ran first on the CPU model
    monkeypatch.setenv(RACECHECK_ENV, "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(PRODUCER_CONSUMER.replace("SYNC", ""), "handoff", 64)
    with pytest.raises(ValueError, match="racecheck"):
        _run(PRODUCER_CONSUMER.replace("SYNC", ""), "handoff", 64, racecheck="sometimes")


def test_one_warps_own_accesses_are_ordered():
    """Lanes of one warp exchanging through shared memory: program order (and __syncwarp)."""
    src = r'''
    extern "C" __global__ void rotate(unsigned* out) {
        __shared__ unsigned box[32];
        int t = threadIdx.x;
        box[t] = t * 7u;
        __syncwarp();
        out[t] = box[(t + 1) % 32];
        box[(t + 5) % 32] = 1u;
    }'''
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = cpu.run_kernel(src, "rotate", (1,), (32,), [np.zeros(32, np.uint32)])
    assert (out[0] == ((np.arange(32) + 1) % 32) * 7).all()


def test_atomics_are_not_races():
    src = r'''
    extern "C" __global__ void hist(unsigned* out) {
        __shared__ unsigned count[4];
        int t = threadIdx.x;
        if (t < 4) count[t] = 0u;
        __syncthreads();
        atomicAdd(&count[t % 4], 1u);
        __syncthreads();
        if (t < 4) out[t] = count[t];
    }'''
    out = cpu.run_kernel(src, "hist", (1,), (128,), [np.zeros(4, np.uint32)])
    assert (out[0] == 32).all()


def test_reading_shared_memory_nobody_wrote_is_a_warning():
    src = r'''
    extern "C" __global__ void stale(unsigned* out) {
        __shared__ unsigned box[64];
        int t = threadIdx.x;
        box[t] = 1u;
        __syncthreads();
        out[t] = box[t + 32];
    }'''
    with pytest.warns(UninitializedSharedRead, match=r"no thread of the block wrote"):
        cpu.run_kernel(src, "stale", (1,), (32,), [np.zeros(32, np.uint32)])


def test_no_kernel_of_the_project_is_reported():
    """Every reference, capstone and course kernel, as the backend comparison runs them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measure" / "gpu"))
    import compare_backends

    cases = compare_backends.all_cases(np.random.default_rng(7))
    assert len(cases) > 20
    for group, case in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RaceWarning)
            cpu.run_kernel(case.source, case.kernel, case.grid, case.block,
                           [a.copy() if isinstance(a, np.ndarray) else a for a in case.args],
                           shared_mem=case.shared_mem, options=case.options, racecheck="warn")





def test_a_generic_pointer_as_shared_address_works_as_on_sm90_and_is_diagnosed():
    from ptxlab.run import backends

    right = backends.launch(generic_source("cvta"), "load_generic", args=[np.zeros(128, np.uint32)],
                            backend="cpu", isolate=False)
    assert right.diagnostics == []
    with pytest.warns(backends.KernelDiagnostic, match="generic address 0x7f"):
        wrong = backends.launch(generic_source("generic64"), "load_generic",
                                args=[np.zeros(128, np.uint32)], backend="cpu", isolate=False)
    assert np.array_equal(wrong.outputs[0], right.outputs[0])
    (note,) = wrong.diagnostics
    assert "__cvta_generic_to_shared" in note and "sm_80" in note and "PTX line" in note
    # Cut to 32 bits by hand: the same shared address on sm_90, nothing to see for the model.
    cut = backends.launch(generic_source("generic32"), "load_generic",
                          args=[np.zeros(128, np.uint32)], backend="cpu", isolate=False)
    assert np.array_equal(cut.outputs[0], right.outputs[0])


def test_a_kernel_check_names_the_race_and_what_the_model_noticed():
    from ptxlab.run.ptx.racecheck import BARRIER_ADVICE
    from ptxlab.teach.exercises.kernel_exercise import KernelRun, run_kernel_case

    expected = cpu.run_kernel(FILL_THEN_LOAD.replace("SYNC", "__syncthreads();"), "fill_then_load",
                              (1,), (128,), [np.zeros(128, np.uint32)])[0].reshape(32, 4)
    run = KernelRun("tile", [np.zeros(128, np.uint32)], 0, expected, block=(128,))
    racy = run_kernel_case(FILL_THEN_LOAD.replace("SYNC", ""), "fill_then_load", run, "load",
                           backend="cpu")
    assert not racy.passed and "has a race" in racy.message and racy.advice == [BARRIER_ADVICE]
    synced = run_kernel_case(FILL_THEN_LOAD.replace("SYNC", "__syncthreads();"), "fill_then_load",
                             run, "load", backend="cpu")
    assert synced.passed and not synced.advice
    expected = cpu.run_kernel(generic_source("cvta"), "load_generic", (1,), (32,),
                              [np.zeros(128, np.uint32)])[0].reshape(32, 4)
    run = KernelRun("tile", [np.zeros(128, np.uint32)], 0, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # said once, in the check's advice, not as a warning
        generic = run_kernel_case(generic_source("generic64"), "load_generic", run, "load",
                                  backend="cpu")
    assert generic.passed and any("__cvta_generic_to_shared" in a for a in generic.advice)


class _Ins:
    """An instruction as the tracker sees one: its opcode, line and text."""

    def __init__(self, line: int):
        self.full_opcode, self.line, self.text = f"st.shared.b{line}", line, f"line {line}"


class _NoLines:
    def source_location(self, ins):
        raise LookupError


def _sites(n: int):
    from ptxlab.run.ptx.racecheck import Site
    return [Site(_Ins(i + 1)) for i in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_one_warp_tracker_keeps_what_the_full_tracker_reports(seed):
    """A block of one warp keeps only which bytes were written: over random reads, writes and
    barriers of one warp, it records the same reads of unwritten bytes (lane, site, address)
    as the full tracker, and, like it, no race."""
    from ptxlab.run.ptx.racecheck import RaceTracker, SoleWarpTracker
    rng = np.random.default_rng(seed)
    size, sites = 256, _sites(6)
    full, sole = (cls(size, _NoLines(), (0, 0, 0)) for cls in (RaceTracker, SoleWarpTracker))
    for _ in range(60):
        step = rng.integers(0, 5)
        if step == 4:
            full.barrier(), sole.barrier()
            continue
        nbytes = int(rng.choice([1, 2, 4, 8, 16]))
        lanes = np.sort(rng.choice(32, size=int(rng.integers(1, 33)), replace=False))
        off = rng.integers(0, size // nbytes, size=lanes.size) * nbytes
        what = sites[int(rng.integers(0, len(sites)))]
        for t in (full, sole):
            (t.read if step < 2 else t.write)(0, lanes, off, nbytes, what)
    assert not full.races and not sole.races
    assert ([(a.kind, a.lane, a.ptx_line, where) for a, where in sole.uninitialized]
            == [(a.kind, a.lane, a.ptx_line, where) for a, where in full.uninitialized])


def test_a_one_warp_block_gets_the_one_warp_tracker_and_many_warps_the_full_one():
    from ptxlab.run.ptx import interpreter
    from ptxlab.run.ptx.racecheck import SoleWarpTracker
    seen = {}
    made = interpreter.BlockRun.__init__

    def spy(self, launch, index):
        made(self, launch, index)
        seen[launch.nwarps] = type(self.race)
    src = r'''
    extern "C" __global__ void copy(const unsigned* in, unsigned* out) {
        __shared__ unsigned box[256];
        box[threadIdx.x] = in[threadIdx.x];
        __syncthreads();
        out[threadIdx.x] = box[(threadIdx.x + 32) % blockDim.x];
    }'''
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interpreter.BlockRun, "__init__", spy)
        for threads in (32, 64):
            data = np.arange(threads, dtype=np.uint32)
            launch = interpreter.Launch(cpu.program_for(src, "copy", ()), (1,), (threads,),
                                        [data, np.zeros_like(data)], engine="warp")
            out = launch.run()
            assert (out[1] == np.roll(data, -32 % threads)).all()
    assert seen[1] is SoleWarpTracker and seen[2] is not SoleWarpTracker
