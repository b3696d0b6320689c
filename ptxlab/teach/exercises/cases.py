"""Case generators shared by the exercises: random tiles for hidden tests, fragment cases."""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ...model import layouts
from ..checks import AddressTask
from ..tiles import ELEM_BYTES, Placement


#: Seed of the visible cases drawn like the hidden ones: fixed, so the visible check is the same
#: every time.
VISIBLE_SEED = 1


def drawn(hidden_cases: Callable[[np.random.Generator], list], n: int) -> list:
    """The first ``n`` cases the hidden generator draws from :data:`VISIBLE_SEED`. A visible
    check that meets a random base and stride too tells an answer that only works for round
    numbers (``base | offset``, bits of the absolute address) before the hidden tests do."""
    return list(hidden_cases(np.random.default_rng(VISIBLE_SEED)))[:n]


def every_lane(params: Iterable[tuple]) -> list[tuple]:
    """``(lane, *p)`` for the 32 lanes of each parameter tuple ``p`` (a base and a stride, say):
    the table a per-lane address function is checked on."""
    return [(lane, *p) for p in params for lane in range(32)]


def random_tile_params(rng: np.random.Generator, placement: Placement,
                       max_base: int = 4096, max_stride: int = 512) -> tuple[int, int]:
    """A 16-byte aligned base and a 16-byte multiple row stride that fits the tile's rows,
    sometimes padded (a tile cut from a wider matrix)."""
    min_units = -(-placement.cols * ELEM_BYTES // 16)
    base = 16 * int(rng.integers(0, max_base // 16))
    stride = 16 * int(rng.integers(min_units, max(min_units + 1, max_stride // 16)))
    return base, stride


def address_tasks(placement_for: Callable[[int], Placement], nums, params,
                  args_for: Callable[[int, int, int], tuple], trans: bool = False) -> list[AddressTask]:
    """One :class:`AddressTask` per ``(num, base, stride)``."""
    out = []
    for num, (base, stride) in zip(nums, params):
        out.append(AddressTask(placement_for(num), base, stride, args_for(num, base, stride),
                               trans=trans))
    return out


def random_address_tasks(rng: np.random.Generator, placement_for: Callable[[int], Placement],
                         nums, args_for: Callable[[int, int, int], tuple], repeats: int = 3,
                         trans: bool = False) -> list[AddressTask]:
    """``repeats`` random tiles for every ``num`` in ``nums``."""
    tasks = []
    for num in nums:
        for _ in range(repeats):
            p = placement_for(num)
            base, stride = random_tile_params(rng, p)
            tasks.append(AddressTask(p, base, stride, args_for(num, base, stride), trans=trans))
    return tasks


def ident(m: int, r: int, c: int) -> tuple[int, int, int]:
    return m, r, c


def row_col(m: int, r: int, c: int) -> tuple[int, int]:
    return r, c


def ldmatrix_cases(nums=(1, 2, 4), trans: bool = False, with_num: bool = False) -> list[tuple]:
    """Fragment cases of ldmatrix ``.x{num}``: answers are ``(matrix, row, col)``."""
    return [(layouts.ldmatrix_fragment(n, trans), ident, (n,) if with_num else ())
            for n in nums]
