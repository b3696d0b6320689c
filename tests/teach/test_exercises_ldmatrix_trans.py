"""The kernel exercises of notebook 3 that no GPU can judge alone: a column-major B loaded
without .trans, and a tile staged by four warps that one warp loads (the race is the trap)."""
from __future__ import annotations

import re

import pytest

from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.racecheck import BARRIER_ADVICE
from ptxlab.run.sources import PROJECT_ROOT
from ptxlab.teach.exercises import ldmatrix_trans as ex

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

_TEXT = (PROJECT_ROOT / "course" / "text" / "03_ldmatrix_trans.py").read_text()
SOURCES = dict(re.findall(r'^(\w+) = r"""(.*?)"""', _TEXT, re.S | re.M))


def test_the_solutions_pass_the_hidden_cases():
    assert ex.b_col_major_kernel.evaluate(SOURCES["B_COL_KERNEL"], hidden=True).passed
    assert ex.block_load_kernel.evaluate(SOURCES["BLOCK_KERNEL"], hidden=True).passed


def test_trans_on_a_column_major_b_is_named():
    wrong = SOURCES["B_COL_KERNEL"].replace(".x2.shared", ".x2.trans.shared")
    res = ex.b_col_major_kernel.evaluate(wrong)
    assert not res.passed and any("uses .trans where it must not" in a for a in res.advice)
    assert res.diffs and "B[" in res.diffs[0].got


@pytest.mark.parametrize("barrier", ["", "__syncwarp();"])
def test_a_missing_block_barrier_is_a_race(barrier):
    wrong = SOURCES["BLOCK_KERNEL"].replace("__syncthreads();", barrier)
    res = ex.block_load_kernel.evaluate(wrong)
    assert not res.passed and "has a race" in res.message
    assert len(res.message) < 700 and res.message.count("__syncthreads") == 0, res.message
    assert "warp 0" in res.message and "ldmatrix" in res.message
    # one cause: the __syncwarp between the two accesses where there is one, else the race's
    assert len(res.advice) == 1, res.advice
    if barrier:
        assert "the __syncwarp() at line 10 orders the threads of one warp only" \
            in res.advice[0], res.advice
    else:
        assert res.advice == [BARRIER_ADVICE]


def test_a_syncwarp_away_from_the_race_is_not_blamed():
    # a __syncwarp before the copy, the block barrier missing: the race's own advice
    wrong = SOURCES["BLOCK_KERNEL"].replace("__syncthreads();", "")
    wrong = wrong.replace("for (unsigned i = threadIdx.x", "__syncwarp();\n    for (unsigned i = threadIdx.x", 1)
    res = ex.block_load_kernel.evaluate(wrong)
    assert not res.passed and res.advice == [BARRIER_ADVICE], res.report()
