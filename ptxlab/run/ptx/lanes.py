"""Lane masks of one warp: ``None`` means all 32 lanes, otherwise a (32,) bool array.

The interpreter and the instruction families both speak in these masks; the helpers live here,
below both, so an instruction family never imports the interpreter.
"""
from __future__ import annotations

import numpy as np

from .values import WARP

ALL = None                                  # mask value meaning "all 32 lanes"
_LANE_BITS = (np.uint64(1) << np.arange(WARP, dtype=np.uint64))


def mask_or(a, b):
    if a is None or b is None:
        return None
    r = a | b
    return None if r.all() else r


def mask_array(m) -> np.ndarray:
    return np.ones(WARP, dtype=bool) if m is None else m


def mask_bits(m) -> int:
    if m is None:
        return 0xFFFFFFFF
    return int(_LANE_BITS[m].sum())


def bits_mask(bits: int) -> np.ndarray:
    return ((np.uint64(bits) >> np.arange(WARP, dtype=np.uint64)) & np.uint64(1)).astype(bool)


def lanes_of(m) -> tuple[int, ...]:
    return tuple(range(WARP)) if m is None else tuple(int(i) for i in np.nonzero(m)[0])


__all__ = ["ALL", "mask_or", "mask_array", "mask_bits", "bits_mask", "lanes_of"]
