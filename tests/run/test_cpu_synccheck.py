"""The CPU model's synccheck: a barrier reached by only part of the block is an error.

On a GPU, ``if (warp == 0) __syncthreads();`` does not hang (exited threads release the
barrier) and often gives the right answer by timing; compute-sanitizer's synccheck reports it as
"divergent thread(s) in block". The model reports each form with the barrier's PTX and CUDA
lines, the warps or lanes that arrived and where the others went, and a kernel check fails.
Correct kernels with barriers (including after an early return, and a barrier with a thread
count that only some warps take) are not reported.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.synccheck import BarrierDivergence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from barriers import (BARRIERS, EARLY_RETURN, HALF_A_WARP, IN_WARP_ZERO,  # noqa: E402
                      SYNCWARP_EXITED, TWO_PLACES, TWO_PLACES_IN_A_WARP, UNEVEN_LOOP)
from block_load import block_load_b  # noqa: E402

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")


def _run(src: str, threads: int):
    return cpu.run_kernel(src, "k", (1,), (threads,), [np.zeros(128, np.uint32)])


def _report(src: str, threads: int) -> BarrierDivergence:
    with pytest.raises(BarrierDivergence) as info:
        _run(src, threads)
    fault = info.value
    assert fault.sanitizer == "synccheck" and fault.advice
    assert fault.ptx_line is not None and fault.source_line.startswith("kernel.cu:")
    assert len(fault.reason) < 400, fault.reason
    return fault


def test_barrier_inside_if_warp_zero():
    fault = _report(IN_WARP_ZERO, 128)
    msg = str(fault)
    assert msg.startswith("divergent threads in block: bar.sync was reached by warp 0 only; "
                          "warps 1-3 exited (PTX line"), msg
    assert "if (warp == 0) __syncthreads();" in msg and "kernel.cu:5" in msg
    assert fault.warp == 0


def test_barrier_reached_by_half_a_warp():
    src = HALF_A_WARP
    fault = _report(src, 32)
    assert fault.reason.startswith("divergent threads in warp: in warp 0, lanes 0-15 reached "
                                   "bar.sync; lanes 16-31 exited (PTX line"), fault.reason
    assert fault.lanes == tuple(range(16))
    # the same condition in a block of four warps: warps 1-3 never reach it either
    fault = _report(src.replace("box[32]", "box[128]"), 128)
    assert "warps 1-3 exited" in fault.reason


def test_early_return_of_some_warps_before_a_barrier():
    src = EARLY_RETURN
    fault = _report(src, 128)
    assert "reached by warps 0, 1 only; warps 2, 3 exited" in fault.reason, fault.reason
    assert "__syncthreads();" in str(fault)
    _run(src, 64)      # the same kernel in a block of exactly 64 threads is right


def test_warps_at_different_barrier_instructions():
    fault = _report(TWO_PLACES, 64)
    msg = fault.reason
    assert "wait at different barrier instructions for barrier 0" in msg, msg
    assert "warp 0 at PTX line" in msg and "kernel.cu:4" in msg
    assert "warp 1 at PTX line" in msg and "kernel.cu:5" in msg


def test_a_loop_with_a_barrier_run_a_different_number_of_times():
    fault = _report(UNEVEN_LOOP, 64)
    assert "reached by warp 1 only; warp 0 exited" in fault.reason, fault.reason


def test_syncwarp_whose_mask_names_exited_lanes():
    src = SYNCWARP_EXITED
    fault = _report(src.replace("MASK", "0xffffffffu"), 32)
    assert fault.reason.startswith("invalid arguments: lanes 24-31, named in the mask of "
                                   "__syncwarp"), fault.reason
    assert "__syncwarp(0xffffffffu);" in str(fault) and "lanes" in fault.advice
    out = _run(src.replace("MASK", "0x00ffffffu"), 32)[0]     # only the lanes that get there
    assert np.array_equal(out[:24], (np.arange(24) + 1) % 24)


@pytest.mark.parametrize("name,src,threads,report", BARRIERS, ids=[b[0] for b in BARRIERS])
def test_each_fixture_kernel(name, src, threads, report):
    """The kernels the H100 comparison runs under compute-sanitizer's synccheck."""
    if report:
        assert _report(src, threads).reason.startswith(report)
    else:
        _run(src, threads)


def test_a_kernel_check_fails_on_a_divergent_barrier():
    """The course's exercise where the barrier is the point: the barrier in the branch that
    selects warp 0 fails, visible and hidden, with the synccheck report and its advice."""
    from ptxlab.teach.exercises import ldmatrix_trans as ex

    assert ex.block_load_kernel.evaluate(block_load_b()).passed
    wrong = block_load_b(barrier_in_branch=True)
    for hidden in (False, True):
        res = ex.block_load_kernel.evaluate(wrong, hidden=hidden)
        assert not res.passed and res.score == 0
        assert "reached by only part of the threads" in res.message, res.message
        assert "divergent threads in block" in res.message and "warps 1-3 exited" in res.message
        assert res.advice == [BarrierDivergence.advice]


def test_lanes_of_one_warp_at_different_barriers():
    fault = _report(TWO_PLACES_IN_A_WARP, 64)
    assert fault.reason.startswith("divergent threads in warp: in warp 0, lanes 0-15 wait at "
                                   "PTX line"), fault.reason
    assert "lanes 16-31 wait at PTX line" in fault.reason and "kernel.cu:5" in fault.reason


def test_a_barrier_with_a_count_reached_by_half_a_warp():
    src = r'''extern "C" __global__ void k(unsigned* out) {
        __shared__ unsigned box[64];
        int t = threadIdx.x;
        if (t < 64) {
            if (t % 32 >= 16) return;
            box[t] = t;
            asm volatile("bar.sync 1, 64;");
            out[t] = box[63 - t];
        }
    }'''
    fault = _report(src, 128)
    assert fault.reason.startswith("divergent threads in warp: in warp 0, lanes 0-15 reached "
                                   "bar.sync; lanes 16-31 exited"), fault.reason
