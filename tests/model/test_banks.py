"""The shared-memory bank model on hand-counted cases, and against the committed ncu counters."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ptxlab import banks
from ptxlab.bench import bank_study

LANE = np.arange(32)
ROW, HALF = LANE & 15, LANE >> 4            # ldmatrix.x4 of a 16x16 piece: row, 16-byte chunk
REPORT = Path(__file__).resolve().parents[2] / "reports" / "capstone" / "report.json"


def test_naive_128_byte_rows_serialise_each_matrix_eight_ways():
    # 8 rows 128 B apart all start in bank 0 (or 4): 8 wavefronts per matrix, 4 matrices.
    cost = banks.ldmatrix_cost(ROW * 128 + HALF * 16)
    assert (cost.wavefronts, cost.ideal, cost.conflicts) == (32, 4, 28)


def test_padding_by_one_chunk_removes_the_conflicts():
    assert banks.ldmatrix_cost(ROW * 144 + HALF * 16).conflicts == 0


def test_xor_swizzle_removes_the_conflicts():
    assert banks.ldmatrix_cost(ROW * 128 + ((HALF ^ (ROW & 7)) * 16)).conflicts == 0


def test_64_byte_rows_conflict_four_ways_per_matrix():
    # rows 0,2,4,6 share banks 0-3 and rows 1,3,5,7 banks 16-19: 4 wavefronts per matrix.
    assert banks.ldmatrix_cost(ROW * 64 + HALF * 16).wavefronts == 16


def test_ignored_lanes_do_not_count():
    addrs = np.where(LANE < 8, LANE * 16, 0)          # .x1: lanes 8-31 are not read
    assert banks.ldmatrix_cost(addrs, num=1) == banks.AccessCost(1, 1)
    addrs_junk = np.where(LANE < 8, LANE * 16, 12345 * 16)
    assert banks.ldmatrix_cost(addrs_junk, num=1).wavefronts == 1


def test_same_row_twice_is_a_broadcast():
    assert banks.ldmatrix_cost(np.zeros(32, dtype=int), num=4).wavefronts == 4


def test_matrix_rows_must_be_16_byte_aligned():
    addrs = LANE * 16
    addrs[9] += 4
    with pytest.raises(ValueError, match="lane 9"):
        banks.ldmatrix_cost(addrs)


def test_batched_warps_sum():
    one = banks.ldmatrix_cost(ROW * 128 + HALF * 16)
    assert banks.ldmatrix_cost(np.stack([ROW * 128 + HALF * 16] * 3)) == one * 3


@pytest.mark.parametrize("addrs,width,wavefronts", [
    (LANE * 4, 4, 1),            # consecutive words
    (LANE * 8, 4, 2),            # stride 2 words: two lanes per bank
    (LANE * 128, 4, 32),         # every lane in bank 0
    (np.zeros(32, int), 4, 1),   # one word for all: broadcast
    (LANE * 16, 16, 4),          # 16-byte vectors: quarter-warp phases, conflict-free
    (LANE * 32, 16, 8),          # 16-byte vectors two chunks apart: 2 per phase
    (LANE * 8, 8, 2),            # 8-byte vectors: half-warp phases
])
def test_ordinary_access_costs(addrs, width, wavefronts):
    assert banks.access_cost(addrs, width).wavefronts == wavefronts


def test_padded_64_byte_rows_make_the_vector_fill_conflict():
    # 80-byte pitch: lanes 0 and 7 of a quarter-warp both touch banks 0-3 (offsets 0 and 128).
    q = np.arange(8)
    addrs = np.concatenate([(q + 8 * p) // 4 * 80 + (q + 8 * p) % 4 * 16 for p in range(4)])
    assert banks.access_cost(addrs, 16) == banks.AccessCost(8, 4)


def test_inactive_lanes_are_left_out():
    active = LANE < 16
    assert banks.access_cost(LANE * 128, 4, active=active).wavefronts == 16


def test_bank_table_shows_the_conflict():
    table = banks.bank_table(ROW * 128 + HALF * 16)
    assert table.shape == (4, 32)
    assert table.max(axis=1).tolist() == [8, 8, 8, 8]


def test_study_swizzled_layouts_are_conflict_free():
    for p in bank_study.predictions():
        if p["layout"].startswith("swizzled"):
            assert p["ld_conflicts"] == 0 and p["st_wavefronts"] > 0


def test_predictions_match_the_committed_ncu_measurement():
    """The H100 run's counters (reports/capstone) against today's model: exact, per layout."""
    if not REPORT.exists():
        pytest.skip("no committed capstone report")
    study = json.loads(REPORT.read_text())["bank_study"]
    if not study.get("measured"):
        pytest.skip("the committed report has no ncu measurement")
    predicted = {p["layout"]: p for p in bank_study.predictions()}
    assert set(predicted) == {row["layout"] for row in study["rows"]}
    for row in study["rows"]:
        for key, value in row["measured"].items():
            assert predicted[row["layout"]][key] == value, (row["layout"], key)
