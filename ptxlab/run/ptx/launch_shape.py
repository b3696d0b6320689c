"""The special registers of a launch shape (%tid, %laneid, %ntid ...), per warp of a block.

A check or a grade launches one shape again and again, and the warp-by-warp interpreter and
the vector run (``wide``) both read these tables: they are built once per shape, here below
both, every array read-only and every table a read-only view, so sharing them is safe.
"""
from __future__ import annotations

import functools
import types

import numpy as np

from .values import WARP, constant


@functools.lru_cache(maxsize=64)
def launch_shape(block: tuple, grid: tuple, shared_mem: int, shared_size: int
                 ) -> tuple[tuple, tuple]:
    """Per warp of a block of ``block`` threads: which lanes are threads, and the special
    registers that do not depend on the block. Every array is read-only and every table a
    read-only view, so the launches of one shape share them (a check launches the same shape
    again and again)."""
    nwarps = (block[0] * block[1] * block[2] + WARP - 1) // WARP
    lin = np.arange(nwarps * WARP)
    bx, by, _ = block
    tx, ty, tz = lin % bx, (lin // bx) % by, lin // (bx * by)
    exists = lin < block[0] * block[1] * block[2]
    exists.flags.writeable = False
    common = _common_specials(block, grid, shared_mem, shared_size)
    specials = []
    for wi in range(nwarps):
        s = dict(common)
        sl = slice(wi * WARP, (wi + 1) * WARP)
        for name, arr in (("x", tx), ("y", ty), ("z", tz)):
            a = arr[sl].astype(np.uint32)
            a.flags.writeable = False
            s["%tid." + name] = a
        s["%warpid"] = constant(wi, np.uint32)
        specials.append(types.MappingProxyType(s))
    return tuple(exists[i * WARP:(i + 1) * WARP] for i in range(nwarps)), tuple(specials)


def _common_specials(block: tuple, grid: tuple, shared_mem: int, shared_size: int) -> dict:
    """The special registers every warp of every block reads alike."""
    lane = np.arange(WARP, dtype=np.uint32)
    wide = lane.astype(np.uint64)
    one, two = np.uint64(1), np.uint64(2)
    table = {
        "%laneid": lane,
        "%lanemask_eq": (np.uint32(1) << lane).astype(np.uint32),
        "%lanemask_lt": ((one << wide) - one).astype(np.uint32),
        "%lanemask_le": ((two << wide) - one).astype(np.uint32),
        "%lanemask_gt": (~((two << wide) - one)).astype(np.uint32),
        "%lanemask_ge": (~((one << wide) - one)).astype(np.uint32),
    }
    for arr in table.values():
        arr.flags.writeable = False
    return {
        "%ntid.x": constant(block[0], np.uint32), "%ntid.y": constant(block[1], np.uint32),
        "%ntid.z": constant(block[2], np.uint32),
        "%nctaid.x": constant(grid[0], np.uint32), "%nctaid.y": constant(grid[1], np.uint32),
        "%nctaid.z": constant(grid[2], np.uint32),
        "%nwarpid": constant(64, np.uint32), "%smid": constant(0, np.uint32),
        "%nsmid": constant(1, np.uint32), "%gridid": constant(0, np.uint64),
        "%dynamic_smem_size": constant(shared_mem, np.uint32),
        "%total_smem_size": constant(shared_size, np.uint32),
        "%clusterid.x": constant(0, np.uint32), "%cluster_ctarank": constant(0, np.uint32),
        "%cluster_nctarank": constant(1, np.uint32), "%is_explicit_cluster": constant(0, np.uint32),
        **table,
    }
