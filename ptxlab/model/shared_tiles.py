"""Where a tile of 16-bit elements sits in shared memory: naive, padded or swizzled rows.

One description serves the lessons (the swizzle exercise's reference), the bank model's
predictions and the capstone's bank-conflict study, whose kernel (``bank::offset`` in
``kernels/capstone/bank_study.cu``) computes the same offsets on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layouts import ROW_BYTES

#: Bytes of one swizzle unit: a 16-byte chunk, the row an ldmatrix lane addresses.
CHUNK_BYTES = ROW_BYTES
KINDS = ("naive", "padded", "swizzled")


@dataclass(frozen=True)
class SharedTileLayout:
    """A ``rows x cols`` tile of 16-bit elements, row-major, in one of three layouts.

    ``padded`` adds ``pad`` bytes after every row; ``swizzled`` XORs each row's 16-byte chunk
    index with bits of the row number, so the eight rows an ldmatrix matrix reads hit eight
    different bank groups. ``trans`` says the tile is read with ``ldmatrix .trans``.
    """

    kind: str          # naive | padded | swizzled
    cols: int          # 16-bit elements per row: 64 -> 128-byte rows, 32 -> 64-byte rows
    rows: int = 64
    pad: int = 16
    trans: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"layout kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def name(self) -> str:
        return f"{self.kind} {2 * self.cols}B rows{' .trans' if self.trans else ''}"

    @property
    def pitch(self) -> int:
        """Bytes from one row's start to the next."""
        return 2 * self.cols + (self.pad if self.kind == "padded" else 0)

    @property
    def chunks(self) -> int:
        """16-byte chunks per row."""
        return 2 * self.cols // CHUNK_BYTES

    def offset(self, row, chunk) -> np.ndarray:
        """Byte offset of 16-byte chunk ``chunk`` of row ``row`` (numpy, element-wise)."""
        row, chunk = np.asarray(row), np.asarray(chunk)
        if self.kind == "swizzled":
            c = self.chunks
            if c >= 8:
                chunk = chunk ^ (row & 7)
            elif c == 4:
                chunk = chunk ^ ((row >> 1) & 3)
            elif c == 2:
                chunk = chunk ^ ((row >> 2) & 1)
        return row * self.pitch + chunk * CHUNK_BYTES

    def ldmatrix_addresses(self) -> np.ndarray:
        """``(pieces, 32)``: the address each lane gives ldmatrix.x4 for each 16x16 piece."""
        lane = np.arange(32)
        per_row = self.cols // 16
        out = []
        for p in range((self.rows // 16) * per_row):
            rb, cb = (p // per_row) * 16, (p % per_row) * 16
            out.append(self.offset(rb + (lane & 15), cb // 8 + (lane >> 4)))
        return np.array(out)
