"""The vector run's order guards (``ptxlab.run.ptx.wide_memory``) take an access as rows of up to
16 bytes, but must judge byte by byte: an overlap of one byte between accesses of different
widths and alignments is a pair whose order matters, and neighbouring bytes are not."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.run.ptx.errors import NeedsWarpByWarp
from ptxlab.run.ptx.racecheck import access_units
from ptxlab.run.ptx.wide_memory import PAGE, IntervalGuard, OrderGuard

LANE_WARP = np.repeat(np.arange(4), 32)          # lanes 0-31 warp 0, 32-63 warp 1, ...


def _order_guard(nbytes: int, same_block: bool = True) -> OrderGuard:
    blocks = np.zeros(4, np.int64) if same_block else np.arange(4)
    return OrderGuard(nbytes, LANE_WARP, blocks, np.zeros(4, np.int64))


def test_rows_are_the_widest_unit_every_offset_allows():
    idx, who, unit = access_units(np.array([0, 1]), np.array([32, 48]), 16)
    assert unit == 16 and list(idx) == [2, 3] and list(who) == [0, 1]
    assert access_units(np.array([0]), np.array([36]), 8)[2] == 4
    assert access_units(np.array([0]), np.array([34]), 4)[2] == 2
    idx, who, unit = access_units(np.array([5]), np.array([7]), 2)
    assert unit == 1 and list(idx) == [7, 8] and list(who) == [5, 5]


@pytest.mark.parametrize("write,read,overlap", [
    ((0, 16), (15, 1), True),      # a 16-byte write and a one-byte read of its last byte
    ((0, 16), (16, 2), False),     # the next two bytes
    ((6, 2), (0, 16), True),       # a two-byte write inside a 16-byte read
    ((4, 4), (8, 4), False),       # neighbouring words
    ((3, 1), (2, 2), True),        # odd bytes
])
@pytest.mark.parametrize("paged", [False, True])
def test_global_guard_judges_bytes_across_units(write, read, overlap, paged):
    g = _order_guard(2 * PAGE if not paged else 64 << 20)
    base = 0 if not paged else 5 * PAGE
    g.write(np.array([0]), np.array([base + write[0]]), write[1])          # warp 0
    if overlap:
        with pytest.raises(NeedsWarpByWarp):
            g.read(np.array([32]), np.array([base + read[0]]), read[1])     # warp 1
    else:
        g.read(np.array([32]), np.array([base + read[0]]), read[1])
        with pytest.raises(NeedsWarpByWarp):                     # warp 2 writes what 1 read
            g.write(np.array([64]), np.array([base + read[0] + read[1] - 1]), 1)


def test_global_guard_lets_one_warp_and_ordered_blocks_be():
    g = _order_guard(4096)
    g.write(np.arange(32), np.arange(32) * 16, 16)               # warp 0, 512 bytes
    g.read(np.arange(32), np.arange(32) * 16 + 4, 4)             # the same warp reads them back
    g.write(np.arange(32), np.arange(32) * 2, 2)                 # and writes over them
    g.generation[:] += 1                                         # a barrier of the block
    g.read(np.arange(32, 64), np.arange(32) * 16, 16)            # warp 1 after it
    with pytest.raises(NeedsWarpByWarp):                         # two warps in one store
        g.write(np.array([0, 32]), np.array([100, 99]), 2)


def test_shared_guard_judges_bytes_across_units():
    g = IntervalGuard(1024, LANE_WARP, uninitialized_reads=True)
    g.write(np.arange(32), np.arange(32) * 16, 16)               # warp 0 writes 512 bytes
    g.check()                                                    # a barrier
    g.read(np.arange(32, 64), np.arange(32) * 2 + 1, 1)          # odd bytes, warp 1
    g.write(np.array([64]), np.array([600]), 2)                  # warp 2, bytes nobody reads
    g.check()
    g.write(np.array([0]), np.array([32]), 16)                   # warp 0: bytes 32-47
    g.read(np.array([32]), np.array([47]), 1)                    # warp 1: byte 47, unordered
    with pytest.raises(NeedsWarpByWarp):
        g.check()
    g.write(np.array([0]), np.array([0]), 8)
    g.write(np.array([32]), np.array([6]), 2)                    # byte 6-7 twice, two warps
    with pytest.raises(NeedsWarpByWarp):
        g.check()
    with pytest.raises(NeedsWarpByWarp):                         # byte 700 was never written
        g.read(np.array([0]), np.array([696]), 8)
    g.read(np.array([0]), np.array([600]), 2)                    # written: no stop


@pytest.mark.parametrize("cap", [1 << 22, 1], ids=["reads-kept-aside", "noted-at-once"])
def test_reads_before_the_first_write_are_judged_when_it_comes(cap, monkeypatch):
    """A region's reads before its first write are kept aside (or, past the cap, noted at
    once): a later write by another warp is judged against them just the same."""
    import ptxlab.run.ptx.wide_memory as wm
    monkeypatch.setattr(wm, "DEFERRED_ROWS", cap)
    g = _order_guard(4096)
    g.read(np.arange(32, 64), np.arange(32) * 4, 4)              # warp 1 reads 128 bytes
    with pytest.raises(NeedsWarpByWarp):                         # warp 2 writes byte 64
        g.write(np.array([64]), np.array([64]), 1)

    g = _order_guard(4096)
    g.read(np.arange(32, 64), np.arange(32) * 4, 4)
    g.generation[:] += 1                                         # a barrier between
    g.write(np.array([64]), np.array([64]), 1)

    g = _order_guard(4096)
    g.read(np.array([0]), np.array([16]), 16)                    # warps 0 and 1 read one row
    g.read(np.array([32]), np.array([16]), 16)
    with pytest.raises(NeedsWarpByWarp):                         # then warp 0 writes it
        g.write(np.array([0]), np.array([20]), 4)

    g = _order_guard(4096, same_block=False)
    g.read(np.array([32]), np.array([0]), 16)                    # another block's read:
    g.generation[:] += 1                                         # no barrier orders it
    with pytest.raises(NeedsWarpByWarp):
        g.write(np.array([0]), np.array([8]), 8)
