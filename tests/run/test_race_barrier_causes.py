"""A race's or a barrier's cause fits in 400 characters and still names who and where.

The cause is what a learner reads of the sanitizer's finding (:meth:`Failure.cause`): the reason,
the place it does not already say, and the advice on the fix. For a race it names both warps and
lanes, the shared address, and the CUDA and PTX lines of both accesses; for a barrier, the warps
(and lanes) and the barrier's lines. Source text is cut to the room left, never a line number.
"""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.failure import MAX_CAUSE, Failure, FailureKind, RaceSide, lanes_text
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.racecheck import (BARRIER_ADVICE, OVERWRITE_ADVICE, REDUNDANT_COPY_ADVICE,
                                      SharedMemoryRace)
from ptxlab.run.ptx.synccheck import BarrierDivergence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from barriers import BARRIERS  # noqa: E402
from kernels import RACES, racy  # noqa: E402

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

#: Every warp copies the whole tile (the copy loop not split by thread): write-after-write of the
#: same values; ``+ t / 32`` makes the values differ (an overwrite).
COPY_ALL = r'''
extern "C" __global__ void k(const unsigned* src, unsigned* out) {
    __shared__ unsigned tile[128];
    int t = threadIdx.x;
    for (int i = 0; i < 128; ++i) tile[i] = src[i]VALUE;
    __syncthreads();
    out[t] = tile[127 - t];
}'''

#: (name, source, kernel, threads, args, the hazard, the advice)
RACE_CASES = [(name, racy(src), kernel, threads, [np.zeros(words, np.uint32)], hazard, None)
              for name, src, kernel, threads, words, hazard in RACES] + [
    ("redundant_copy", COPY_ALL.replace("VALUE", ""), "k", 128,
     [np.arange(128, dtype=np.uint32), np.zeros(128, np.uint32)], "write-after-write",
     REDUNDANT_COPY_ADVICE),
    ("overwrite", COPY_ALL.replace("VALUE", " + t / 32"), "k", 128,
     [np.arange(128, dtype=np.uint32), np.zeros(128, np.uint32)], "write-after-write",
     OVERWRITE_ADVICE),
]


def _fault(src: str, kernel: str, threads: int, args, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # reads of never-written words, not the point here
        with pytest.raises(kind) as info:
            cpu.run_kernel(src, kernel, (1,), (threads,), args)
    return info.value.failure


def _names_line(text: str, cuda_line: str) -> bool:
    return re.search(re.escape(cuda_line) + r"(?!\d)", text) is not None


def assert_race_cause(f: Failure) -> str:
    """The race's cause fits and names both sides: warp and lane, PTX and CUDA line."""
    cause = f.cause()
    assert f.kind is FailureKind.RACE and len(f.race) == 2
    assert len(cause) <= MAX_CAUSE, (len(cause), cause)
    assert f"shared address 0x{f.address:x}" in cause and "no barrier between them" in cause
    for side in f.race:
        assert side.who() in cause and f"PTX line {side.ptx_line}" in cause, cause
    first, second = f.race
    assert second.cuda_line and _names_line(cause, second.cuda_line), cause
    assert _names_line(cause, first.cuda_line) or (first.cuda_line == second.cuda_line
                                                   and "the same line" in cause), cause
    assert f.advice and f.advice in cause
    return cause


def assert_barrier_cause(f: Failure) -> str:
    """The barrier's cause fits and names the warp (and lanes) and the barrier's lines."""
    cause = f.cause()
    assert f.kind is FailureKind.BARRIER
    assert len(cause) <= MAX_CAUSE, (len(cause), cause)
    assert re.search(rf"\bwarps? {f.warp}(?!\d)", cause), cause
    if f.lanes:
        assert lanes_text(f.lanes) in cause, cause
    assert f"PTX line {f.ptx_line}" in cause and _names_line(cause, f.cuda_line), cause
    assert f.advice and f.advice in cause
    return cause


@pytest.mark.parametrize("name,src,kernel,threads,args,hazard,advice", RACE_CASES,
                         ids=[c[0] for c in RACE_CASES])
def test_each_race_cause_fits_and_names_lanes_and_lines(name, src, kernel, threads, args,
                                                        hazard, advice):
    f = _fault(src, kernel, threads, args, SharedMemoryRace)
    cause = assert_race_cause(f)
    assert f"({hazard})" in cause
    assert f.advice == (advice or (OVERWRITE_ADVICE if hazard == "write-after-write"
                                   else BARRIER_ADVICE))


REPORTED = [b for b in BARRIERS if b[3]]


@pytest.mark.parametrize("name,src,threads,report", REPORTED, ids=[b[0] for b in REPORTED])
def test_each_barrier_cause_fits_and_names_warps_and_lines(name, src, threads, report):
    f = _fault(src, "k", threads, [np.zeros(128, np.uint32)], BarrierDivergence)
    assert f.reason.startswith(report)
    assert_barrier_cause(f)


def test_a_race_says_each_line_once():
    """The place a race's reason gives (its second access) is not repeated after it."""
    name, src, kernel, threads, args, _, _ = RACE_CASES[1]         # the hand-off
    f = _fault(src, kernel, threads, args, SharedMemoryRace)
    render = f.render()
    for side in f.race:
        assert render.count(f"PTX line {side.ptx_line}") == 1, render
        assert len(re.findall(re.escape(side.cuda_line) + r"(?!\d)", render)) == 1, render
    assert render.endswith("\n  at block (0, 0, 0)")


def test_a_long_source_line_is_cut_to_fit_and_its_line_kept():
    """A barrier whose source line is long: its text is cut, its lines and the advice stay."""
    long_text = "if (warp == 0) __syncthreads();" + " " * 40 + "// " + "why " * 120
    f = Failure(FailureKind.BARRIER, "divergent threads in block: bar.sync was reached by warp "
                "0 only; warps 1-3 exited (PTX line 99, kernel.cu:21) without reaching it",
                block=(0, 0, 0), warp=0, ptx_line=68, ptx_text="bar.sync 0",
                cuda_line="kernel.cu:11", cuda_text=long_text, advice="x" * 150)
    cause = f.cause()
    assert len(cause) <= MAX_CAUSE, (len(cause), cause)
    assert "kernel.cu:11: if (warp == 0) __syncthreads();" in cause and "..." in cause
    assert "PTX line 68: bar.sync 0" in cause and cause.endswith("x" * 150)


def test_a_place_the_reason_names_is_not_repeated():
    f = Failure(FailureKind.BARRIER, "divergent threads in warp: in warp 0, lanes 0-15 wait at "
                "PTX line 48 (bar.sync, kernel.cu:4); lanes 16-31 wait at PTX line 65",
                block=(0, 0, 0), warp=0, lanes=tuple(range(16)), ptx_line=48,
                ptx_text="bar.sync 0", cuda_line="kernel.cu:4", cuda_text="__syncthreads();")
    assert f.render().endswith("\n  at block (0, 0, 0)"), f.render()
    # kernel.cu:4 is not kernel.cu:45, nor PTX line 4 PTX line 48
    g = Failure(FailureKind.BARRIER, "warp 1 at PTX line 48, kernel.cu:45", warp=0,
                ptx_line=4, ptx_text="bar.sync 0", cuda_line="kernel.cu:4", cuda_text="s();")
    assert "PTX line 4: bar.sync 0" in g.render() and "kernel.cu:4: s();" in g.render()
    assert "warp 0" in g.render()


def test_a_fault_keeps_its_whole_place():
    """Only a sanitizer's finding is shortened: a fault's place is as it was."""
    text = "p[i] = " + "v" * 100 + ";"
    f = Failure(FailureKind.FAULT, "out of bounds at PTX line 7", block=(0, 0, 0), warp=1,
                lanes=(3,), ptx_line=7, ptx_text="st.global.u32 [%rd1], %r1",
                cuda_line="kernel.cu:2", cuda_text=text)
    assert f.render().endswith(f"CUDA source kernel.cu:2: {text}")
    assert "PTX line 7: st.global" in f.render()


def test_a_race_record_without_a_reason_naming_it_still_renders():
    """The record decides, not the words: any reason renders, with the block after it."""
    f = Failure(FailureKind.RACE, "reworded", block=(1, 0, 0),
                race=(RaceSide("write", 0, 1), RaceSide("read", 1, 2)))
    assert f.render() == "reworded\n  at block (1, 0, 0)"
