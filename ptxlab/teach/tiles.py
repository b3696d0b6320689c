"""Where the 8x8 matrices of one ldmatrix/stmatrix sit inside a tile in shared memory.

The instruction only knows row addresses; which rows a kernel points at depends on how its tile
is stored. This module names the arrangements the course uses (matrices stacked, side by side,
the four blocks of an mma A operand, the two blocks of B, the C/D accumulator) and derives the
mma ones from :mod:`ptxlab.model.layouts`, so they cannot drift from the fragment tables.

It sits below :mod:`ptxlab.teach.checks` and :mod:`ptxlab.teach.diagnosis`, which name a wrong
address or a wrong cell by its place in a tile, and below the exercises, which build the tiles:
so the checks never import the exercises they serve.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import layouts

ELEM_BYTES = 2  # the m8n8 .b16 forms move 16-bit elements


@dataclass(frozen=True)
class Tile:
    """``rows`` x ``cols`` 16-bit elements stored row by row, ``stride`` bytes apart,
    starting at byte ``base`` of shared memory."""

    rows: int
    cols: int
    base: int
    stride: int

    def __post_init__(self) -> None:
        if self.stride < self.cols * ELEM_BYTES:
            raise ValueError(f"row stride {self.stride} B is shorter than a row of {self.cols} "
                             f"16-bit elements ({self.cols * ELEM_BYTES} B)")

    def address(self, row: int, col: int) -> int:
        return self.base + row * self.stride + col * ELEM_BYTES

    @property
    def end(self) -> int:
        """One past the last byte of the tile."""
        return self.address(self.rows - 1, self.cols)

    def locate(self, addr: int) -> tuple[int, int] | None:
        """``(row, col)`` of the element that starts at ``addr``, or ``None`` if none does."""
        off = int(addr) - self.base
        if off < 0:
            return None
        row, rem = divmod(off, self.stride)
        if rem % ELEM_BYTES or row >= self.rows or rem // ELEM_BYTES >= self.cols:
            return None
        return row, rem // ELEM_BYTES


@dataclass(frozen=True)
class Placement:
    """Origins (tile row, tile col) of matrix 0, 1, ... of one instruction inside a tile, and
    the tile's shape in elements."""

    name: str
    origins: tuple[tuple[int, int], ...]
    rows: int
    cols: int
    what: str = ""          # a sentence for messages: what the matrices are

    @property
    def num(self) -> int:
        return len(self.origins)

    def tile(self, base: int, stride: int) -> Tile:
        return Tile(self.rows, self.cols, base, stride)

    def row_start(self, matrix: int, row: int) -> tuple[int, int]:
        r0, c0 = self.origins[matrix]
        return r0 + row, c0

    def row_starts(self, tile: Tile) -> np.ndarray:
        """``(num, 8)`` byte addresses of the start of row r of matrix i."""
        out = np.zeros((self.num, 8), dtype=np.int64)
        for i in range(self.num):
            for r in range(8):
                out[i, r] = tile.address(*self.row_start(i, r))
        return out

    def expected_addresses(self, tile: Tile) -> np.ndarray:
        """Per lane: the address it must give, ``-1`` where the lane's address is ignored."""
        starts = self.row_starts(tile)
        out = np.full(layouts.WARP_SIZE, -1, dtype=np.int64)
        lanes = layouts.row_address_lanes(self.num)
        for i in range(self.num):
            for r in range(8):
                out[lanes[i, r]] = starts[i, r]
        return out

    def decode(self, tile: Tile, addr: int) -> tuple[int, int] | None:
        """``(matrix, row)`` whose row starts at ``addr``, or ``None``."""
        pos = tile.locate(addr)
        if pos is None:
            return None
        for i, (r0, c0) in enumerate(self.origins):
            if pos[1] == c0 and r0 <= pos[0] < r0 + 8:
                return i, pos[0] - r0
        return None

    def describe_matrix(self, i: int) -> str:
        r0, c0 = self.origins[i]
        return f"matrix {i} (tile rows {r0}-{r0 + 7}, columns {c0}-{c0 + 7})"


def stacked(num: int) -> Placement:
    """Matrix i = tile rows 8i..8i+7: a (8*num) x 8 tile."""
    return Placement(f"stacked x{num}", tuple((8 * i, 0) for i in range(num)), 8 * num, 8,
                     f"{num} matrices stacked one below the other")


def side_by_side(num: int) -> Placement:
    """Matrix i = tile columns 8i..8i+7: an 8 x (8*num) tile."""
    return Placement(f"side by side x{num}", tuple((0, 8 * i) for i in range(num)), 8, 8 * num,
                     f"{num} matrices side by side")


def _origins_from(layout: layouts.FragmentLayout) -> tuple[tuple[int, int], ...]:
    """Register i of an mma operand holds an 8x8 block; lane 0's first element is its corner."""
    return tuple((int(layout.coords[0, i, 0, 1]), int(layout.coords[0, i, 0, 2]))
                 for i in range(layout.regs))


def mma_a(shape: str = "m16n8k16") -> Placement:
    """The A operand (M x K, row-major) of an f16 mma: ldmatrix.x4 matrix i = A's register i."""
    form = layouts.mma_form(shape, "f16", "f16", "f32", "f32")
    return Placement(f"{shape} A", _origins_from(form.a), form.m, form.k,
                     f"the {form.m}x{form.k} A operand of {shape}")


def mma_b_row_major(shape: str = "m16n8k16") -> Placement:
    """B (K x N) stored row-major (a row per k): ldmatrix.x2.trans matrix i = B's register i.

    B's register i holds k = 8i..8i+7 of every column, so matrix i is stored rows 8i..8i+7.
    """
    form = layouts.mma_form(shape, "f16", "f16", "f32", "f32")
    origins = tuple((int(form.b.coords[0, i, 0, 1]), int(form.b.coords[0, i, 0, 2]))
                    for i in range(form.b.regs))
    return Placement(f"{shape} B row-major", origins, form.k, form.n,
                     f"B ({form.k}x{form.n}) stored row-major, one row per k")


def mma_b_col_major(shape: str = "m16n8k16") -> Placement:
    """B (K x N) stored column-major, i.e. as B^T (N x K) row by row: ldmatrix.x2 without
    .trans; matrix i is columns 8i..8i+7 of that N x K tile."""
    form = layouts.mma_form(shape, "f16", "f16", "f32", "f32")
    origins = tuple((int(form.b.coords[0, i, 0, 2]), int(form.b.coords[0, i, 0, 1]))
                    for i in range(form.b.regs))
    return Placement(f"{shape} B column-major", origins, form.n, form.k,
                     f"B ({form.k}x{form.n}) stored column-major: a row of {form.k} per column n")


def mma_cd_f16(shape: str = "m16n8k16") -> Placement:
    """The f16 C/D accumulator (16 x 8, row-major): stmatrix.x2 matrix i = register i."""
    form = layouts.mma_form(shape, "f16", "f16", "f16", "f16")
    return Placement(f"{shape} C/D f16", _origins_from(form.d), form.m, form.n,
                     f"the {form.m}x{form.n} f16 accumulator of {shape}")


def mirrored(placement: Placement) -> Placement:
    """Every matrix of ``placement`` moved across the tile's diagonal (origin (r, c) -> (c, r)).

    Transposing a tile block by block (movmatrix, or a .trans load or store) turns each 8x8
    block around in place; the blocks must then also trade places, and this is where they go.
    """
    return Placement(f"{placement.name} mirrored", tuple((c, r) for r, c in placement.origins),
                     placement.cols, placement.rows,
                     f"the transposed blocks of {placement.what}, each at its mirrored place")


PLACEMENTS = {
    "stacked": stacked,
    "side by side": side_by_side,
}
