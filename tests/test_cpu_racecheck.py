"""The CPU model's shared-memory race detector: planted races are reported with both warps,
lanes, the address and the PTX and CUDA lines; their synced twins, one warp's own accesses,
atomics and every kernel of the project are not."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.ptx.racecheck import (RACECHECK_ENV, RaceWarning, SharedMemoryRace,
                                      UninitializedSharedRead)

ok, why = cpu.available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

#: Four warps fill a 16x16 half tile, then warp 0 loads it with ldmatrix.x4 (the course's trap).
FILL_THEN_LOAD = r'''
extern "C" __global__ void fill_then_load(unsigned* out) {
    __shared__ __align__(16) unsigned short tile[256];
    int t = threadIdx.x;
    for (int i = t; i < 256; i += blockDim.x) tile[i] = (unsigned short)i;
    SYNC
    if (t < 32) {
        unsigned r0, r1, r2, r3;
        unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[t * 8]);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
        out[t * 4 + 0] = r0; out[t * 4 + 1] = r1; out[t * 4 + 2] = r2; out[t * 4 + 3] = r3;
    }
}'''

#: Warp 0 writes, warp 1 reads the word it wrote (read-after-write).
PRODUCER_CONSUMER = r'''
extern "C" __global__ void handoff(unsigned* out) {
    __shared__ unsigned box[32];
    int t = threadIdx.x;
    if (t < 32) box[t] = 100u + t;
    SYNC
    if (t >= 32) out[t - 32] = box[t - 32];
}'''

#: Two warps write the same words (write-after-write).
BOTH_WRITE = r'''
extern "C" __global__ void both_write(unsigned* out) {
    __shared__ unsigned box[32];
    int t = threadIdx.x;
    if (t < 32) box[t] = t;
    SYNC
    if (t >= 32) box[t - 32] = t;
    __syncthreads();
    if (t < 32) out[t] = box[t];
}'''

#: Warp 0 stores a fragment with stmatrix, warp 1 reads the tile back.
STORE_THEN_READ = r'''
extern "C" __global__ void store_then_read(unsigned* out) {
    __shared__ __align__(16) unsigned short tile[64];
    int t = threadIdx.x;
    if (t < 32) {
        unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[(t % 8) * 8]);
        unsigned v = 0x00010000u * t + t;
        asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(addr), "r"(v));
    }
    SYNC
    if (t >= 32) out[t - 32] = tile[t - 32];
}'''


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
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import compare_backends

    cases = compare_backends.all_cases(np.random.default_rng(7))
    assert len(cases) > 20
    for group, case in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RaceWarning)
            cpu.run_kernel(case.source, case.kernel, case.grid, case.block,
                           [a.copy() if isinstance(a, np.ndarray) else a for a in case.args],
                           shared_mem=case.shared_mem, options=case.options, racecheck="warn")
