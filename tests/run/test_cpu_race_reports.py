"""Race reports of the CPU model are short and their advice follows from what was seen.

The cause (one pair of accesses: hazard, both warps and lanes, the address, the CUDA and PTX
lines) stays under 400 characters; the advice is said once, apart from it: a barrier when a
write and a read are unordered, one writer per element when two warps write different values,
and, when several warps write the very values already there (every warp copies the whole tile
because the copy loop is not split by threadIdx.x), that split, since a barrier fixes nothing.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import cpu
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.racecheck import (BARRIER_ADVICE, OVERWRITE_ADVICE, REDUNDANT_COPY_ADVICE,
                                      RaceWarning, SharedMemoryRace)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"))
from block_load import block_load_b  # noqa: E402
from kernels import RACES, racy  # noqa: E402

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

ADVICE_OF = {"fill_then_load": BARRIER_ADVICE, "handoff": BARRIER_ADVICE,
             "both_write": OVERWRITE_ADVICE, "store_then_read": BARRIER_ADVICE}


def _race(src: str, kernel: str, threads: int, args) -> SharedMemoryRace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # reads of never-written words, not the point here
        with pytest.raises(SharedMemoryRace) as info:
            cpu.run_kernel(src, kernel, (1,), (threads,), args)
    return info.value


def _assert_short_and_said_once(race: SharedMemoryRace) -> None:
    assert race.reason.startswith("race in shared memory (")
    assert len(race.reason) < 400, (len(race.reason), race.reason)
    assert race.advice and race.advice not in str(race)
    assert "Put __syncthreads()" not in str(race) and "a barrier does not" not in str(race)


@pytest.mark.parametrize("name,src,kernel,threads,words,hazard", RACES, ids=[r[0] for r in RACES])
def test_each_planted_race_gets_its_own_advice(name, src, kernel, threads, words, hazard):
    race = _race(racy(src), kernel, threads, [np.zeros(words, np.uint32)])
    _assert_short_and_said_once(race)
    assert f"({hazard})" in race.reason and "warp 0" in race.reason and "warp 1" in race.reason
    assert race.advice == ADVICE_OF[name]


#: Every thread copies the whole tile: all four warps write every word, with the same values.
COPY_NOT_SPLIT = r'''
extern "C" __global__ void copy_all(const unsigned* src, unsigned* out) {
    __shared__ unsigned tile[128];
    int t = threadIdx.x;
    for (int i = 0; i < 128; ++i) tile[i] = src[i];
    SYNC
    out[t] = tile[127 - t];
}'''


@pytest.mark.parametrize("sync", ["", "__syncthreads();"])
def test_a_copy_every_warp_makes_in_full_is_named_and_a_barrier_is_not_advised(sync):
    args = [np.arange(128, dtype=np.uint32) * 7, np.zeros(128, np.uint32)]
    race = _race(COPY_NOT_SPLIT.replace("SYNC", sync), "copy_all", 128, args)
    _assert_short_and_said_once(race)
    assert "(write-after-write)" in race.reason and "the same line" in race.reason
    assert race.advice == REDUNDANT_COPY_ADVICE
    assert "threadIdx.x" in race.advice and "a barrier does not fix this" in race.advice
    # split by thread, the same copy is right
    split = COPY_NOT_SPLIT.replace("for (int i = 0; i < 128; ++i)",
                                   "for (int i = t; i < 128; i += blockDim.x)")
    out = cpu.run_kernel(split.replace("SYNC", "__syncthreads();"), "copy_all", (1,), (128,),
                         args)[1]
    assert np.array_equal(out, (np.arange(128)[::-1] * 7).astype(np.uint32))


def test_different_values_from_a_loop_not_split_get_the_overwrite_advice():
    """The same unsplit loop writing what depends on the warp: not a redundant copy."""
    src = COPY_NOT_SPLIT.replace("tile[i] = src[i];", "tile[i] = src[i] + t / 32;")
    race = _race(src.replace("SYNC", "__syncthreads();"), "copy_all", 128,
                 [np.arange(128, dtype=np.uint32), np.zeros(128, np.uint32)])
    assert race.advice == OVERWRITE_ADVICE


def test_warn_mode_says_the_advice_once():
    name, src, kernel, threads, words, _ = RACES[1]
    with pytest.warns(RaceWarning) as seen:
        cpu.run_kernel(racy(src), kernel, (1,), (threads,), [np.zeros(words, np.uint32)],
                       racecheck="warn")
    (text,) = [str(w.message) for w in seen if issubclass(w.category, RaceWarning)]
    assert text.count(BARRIER_ADVICE) == 1 and text.count("__syncthreads") == 1


def test_a_kernel_check_with_a_copy_not_split_by_thread():
    """The course's exercise: all four warps copy the whole of B; the check names that."""
    from ptxlab.teach.exercises import ldmatrix_trans as ex

    src = block_load_b(every_warp_copies_all=True)
    res = ex.block_load_kernel.evaluate(src)
    assert not res.passed and "has a race" in res.message
    assert res.advice == [REDUNDANT_COPY_ADVICE], res.advice
    assert "__syncthreads()" not in res.message.split("\n")[0]
    assert ex.block_load_kernel.evaluate(block_load_b()).passed


#: Every warp stores the same fragment to the same rows with stmatrix (the store is not split).
STMATRIX_EVERY_WARP = r'''
extern "C" __global__ void store_all(unsigned* out) {
    __shared__ __align__(16) unsigned short tile[64];
    int t = threadIdx.x, lane = t % 32;
    unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[(lane % 8) * 8]);
    unsigned v = VALUE;
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" :: "r"(addr), "r"(v));
    __syncthreads();
    out[t] = tile[t % 64];
}'''


@pytest.mark.parametrize("value,advice", [("0x00010000u * lane + lane", REDUNDANT_COPY_ADVICE),
                                          ("0x00010000u * t + t", OVERWRITE_ADVICE)])
def test_stmatrix_from_every_warp_same_or_different_values(value, advice):
    race = _race(STMATRIX_EVERY_WARP.replace("VALUE", value), "store_all", 64,
                 [np.zeros(64, np.uint32)])
    _assert_short_and_said_once(race)
    assert "with stmatrix" in race.reason and race.advice == advice


def test_a_read_then_a_write_of_the_same_value_still_asks_for_a_barrier():
    """Warp 1 rewrites the value warp 0 is reading: not a copy every warp makes, the read and
    the write are unordered."""
    src = r'''
    extern "C" __global__ void k(unsigned* out) {
        __shared__ unsigned box[64];
        int t = threadIdx.x;
        box[t] = 5u;
        __syncthreads();
        if (t < 32) out[t] = box[t + 32];
        if (t >= 32) box[t] = 5u;
    }'''
    race = _race(src, "k", 64, [np.zeros(64, np.uint32)])
    assert "(write-after-read)" in race.reason and race.advice == BARRIER_ADVICE
