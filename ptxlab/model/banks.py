"""Shared-memory bank model: how many wavefronts (and so how many bank conflicts) an access costs.

Shared memory is 32 banks of 4-byte words; one *wavefront* serves at most one word per bank
(lanes reading the *same* word share it). A warp-wide access is split into *phases*, the groups
of addresses the hardware serves together, and each phase costs as many wavefronts as the most
contended bank has distinct words. What a conflict-free access would cost is one wavefront per
phase; the difference is what the profiler reports as bank conflicts.

The phases:

* ``ldmatrix`` / ``stmatrix`` m8n8 .b16: one phase per 8x8 matrix, made of the eight 16-byte rows
  whose start addresses that matrix's lanes supply. Which lanes those are is read from
  :func:`ptxlab.model.layouts.row_address_lanes`, so this module never restates the layout.
* ordinary ``ld``/``st.shared`` of ``width`` bytes per lane: ``128 // width`` lanes per phase
  (all 32 lanes for 4-byte words, half-warps for 8 bytes, quarter-warps for 16 bytes).

The model was checked against Nsight Compute's counters on the H100 (see
``reports/capstone/REPORT.md``, bank-conflict study).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import layouts

BANKS = 32
BANK_BYTES = 4
#: Bytes one wavefront can serve: one 4-byte word from each of the 32 banks.
WAVEFRONT_BYTES = BANKS * BANK_BYTES
#: Bytes of one ldmatrix/stmatrix m8n8 .b16 row.
MATRIX_ROW_BYTES = layouts.ROW_BYTES


@dataclass(frozen=True)
class AccessCost:
    """Wavefronts an access (or a sum of accesses) costs, against the conflict-free cost."""

    wavefronts: int
    ideal: int

    @property
    def conflicts(self) -> int:
        """Extra wavefronts caused by bank conflicts (what ncu calls bank conflicts)."""
        return self.wavefronts - self.ideal

    def __add__(self, other: "AccessCost") -> "AccessCost":
        return AccessCost(self.wavefronts + other.wavefronts, self.ideal + other.ideal)

    def __mul__(self, times: int) -> "AccessCost":
        return AccessCost(self.wavefronts * int(times), self.ideal * int(times))


def bank_of(address) -> np.ndarray:
    """Bank (0..31) of each byte address."""
    return (np.asarray(address, dtype=np.int64) // BANK_BYTES) % BANKS


def phase_wavefronts(words: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Wavefronts of each phase, given the 4-byte word indices it touches.

    ``words``: int array ``(..., k)`` (one phase per leading index); ``valid`` masks words of
    inactive lanes. Each phase costs the largest number of *distinct* words in one bank (at
    least 1 if it touches anything).
    """
    words = np.asarray(words, dtype=np.int64)
    lead, k = words.shape[:-1], words.shape[-1]
    flat = words.reshape(-1, k)
    ok = np.ones_like(flat, dtype=bool) if valid is None else np.asarray(valid, bool).reshape(-1, k)
    # Inactive words become -1 and sort first; a word counts once however many lanes touch it.
    keyed = np.where(ok, flat, -1)
    order = np.sort(keyed, axis=1)
    first = np.ones_like(order, dtype=bool)
    first[:, 1:] = order[:, 1:] != order[:, :-1]
    counted = first & (order >= 0)
    per_bank = np.zeros((flat.shape[0], BANKS), dtype=np.int64)
    rows = np.broadcast_to(np.arange(flat.shape[0])[:, None], order.shape)
    np.add.at(per_bank, (rows[counted], order[counted] % BANKS), 1)
    return per_bank.max(axis=1).reshape(lead)


def _as_warps(addrs) -> np.ndarray:
    a = np.asarray(addrs, dtype=np.int64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != layouts.WARP_SIZE:
        raise ValueError(f"addresses must have shape (32,) or (W, 32), got {np.shape(addrs)}")
    return a


def matrix_cost(addrs, num: int = 4) -> AccessCost:
    """Cost of ``ldmatrix``/``stmatrix`` ``.m8n8.x{num}.b16`` (``.trans`` does not change it).

    ``addrs``: byte address each lane supplies, ``(32,)`` for one warp or ``(W, 32)`` for many
    (summed). Lanes whose address the instruction ignores are not looked at.
    """
    warps = _as_warps(addrs)
    row_lanes = layouts.row_address_lanes(num)                      # (num, 8): matrix -> lanes
    if (warps[:, row_lanes.ravel()] % MATRIX_ROW_BYTES).any():
        bad = np.argwhere(warps[:, row_lanes.ravel()] % MATRIX_ROW_BYTES)[0]
        lane = int(row_lanes.ravel()[bad[1]])
        raise ValueError(f"warp {bad[0]} lane {lane}: row address {warps[bad[0], lane]} is not "
                         f"a multiple of {MATRIX_ROW_BYTES} bytes")
    starts = warps[:, row_lanes]                                     # (W, num, 8)
    word_in_row = np.arange(MATRIX_ROW_BYTES // BANK_BYTES)
    words = (starts[..., None] // BANK_BYTES + word_in_row).reshape(*starts.shape[:2], -1)
    wavefronts = phase_wavefronts(words)                             # (W, num)
    return AccessCost(int(wavefronts.sum()), int(wavefronts.size))


def ldmatrix_cost(addrs, num: int = 4) -> AccessCost:
    """Wavefronts of ``ldmatrix.m8n8.x{num}``: see :func:`matrix_cost`."""
    return matrix_cost(addrs, num)


def stmatrix_cost(addrs, num: int = 4) -> AccessCost:
    """Wavefronts of ``stmatrix.m8n8.x{num}``: see :func:`matrix_cost`."""
    return matrix_cost(addrs, num)


def access_cost(addrs, width: int = 4, active=None) -> AccessCost:
    """Cost of an ordinary ``ld.shared``/``st.shared`` of ``width`` bytes (4, 8 or 16) per lane.

    ``active``: optional bool mask ``(32,)`` or ``(W, 32)`` of the lanes that take part.
    Addresses must be aligned to ``width`` (as the hardware requires).
    """
    if width not in (1, 2, 4, 8, 16):
        raise ValueError(f"access width must be 1, 2, 4, 8 or 16 bytes, got {width}")
    warps = _as_warps(addrs)
    mask = np.ones_like(warps, dtype=bool) if active is None else np.broadcast_to(
        np.asarray(active, dtype=bool), warps.shape)
    misaligned = (warps % width != 0) & mask
    if misaligned.any():
        w, lane = (int(x) for x in np.argwhere(misaligned)[0])
        raise ValueError(f"warp {w} lane {lane}: address {warps[w, lane]} is not aligned to "
                         f"its {width}-byte access")
    lanes_per_phase = max(1, WAVEFRONT_BYTES // max(width, BANK_BYTES))
    phases = layouts.WARP_SIZE // lanes_per_phase
    words_per_lane = max(1, width // BANK_BYTES)
    words = (warps // BANK_BYTES)[..., None] + np.arange(words_per_lane)
    words = words.reshape(warps.shape[0], phases, lanes_per_phase * words_per_lane)
    valid = np.repeat(mask, words_per_lane, axis=1).reshape(words.shape)
    wavefronts = phase_wavefronts(words, valid)
    used = valid.any(axis=2)
    return AccessCost(int(wavefronts.sum()), int(used.sum()))


def bank_table(addrs, num: int = 4) -> np.ndarray:
    """For drawing: ``(num, 32)`` — how many distinct words of each bank each matrix's rows touch.

    A column with a value above 1 is a conflict; the row maximum is that matrix's wavefronts.
    """
    warps = _as_warps(addrs)
    if warps.shape[0] != 1:
        raise ValueError("bank_table draws one warp; pass addresses of shape (32,)")
    row_lanes = layouts.row_address_lanes(num)
    table = np.zeros((num, BANKS), dtype=np.int64)
    for m in range(num):
        words = {int(a) // BANK_BYTES + w for a in warps[0, row_lanes[m]]
                 for w in range(MATRIX_ROW_BYTES // BANK_BYTES)}
        for word in words:
            table[m, word % BANKS] += 1
    return table
