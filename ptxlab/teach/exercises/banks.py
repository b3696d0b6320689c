"""Exercises of the bank-conflict notebook: why row-major tiles conflict, padding, XOR swizzles.

Every cost here comes from the bank model :mod:`ptxlab.model.banks` (its predictions equal Nsight
Compute's counters on an H100, see ``reports/capstone/REPORT.md``). This module only decides
which accesses to ask the model about, and names the lanes that collide, so a learner sees which
ldmatrix phase conflicts and why. Which lane points at which matrix row comes from
:mod:`ptxlab.model.layouts` (through :mod:`ptxlab.teach.exercises.tiles`); the reference swizzle
is the one the capstone kernels use (:class:`ptxlab.model.shared_tiles.SharedTileLayout`).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ...model import banks, emulator, layouts
from ...model.shared_tiles import CHUNK_BYTES, SharedTileLayout
from ...run.ptx.errors import lanes_text, number_runs
from .. import checks, render, tiles
from ..checks import CheckResult, LaneDiff
from ..mistakes import Mistake, known_mistake
from . import cases
from .base import hidden_rng, ChoiceExercise, Exercise, FragmentExercise, FunctionExercise
from .kernel_exercise import KernelExercise, launch_for_check

#: One wavefront serves 128 bytes: 8 chunk-sized groups of 4 banks.
BANK_GROUPS = banks.WAVEFRONT_BYTES // CHUNK_BYTES
#: Row widths (in 16-byte chunks) the swizzle exercise must handle: 32 to 256-byte rows.
SWIZZLE_WIDTHS = (2, 4, 8, 16)


# ---------------------------------------------------------------------------------------------
# The reference swizzle and where each lane points
# ---------------------------------------------------------------------------------------------

def gemm_swizzle(row, chunk, chunks: int):
    """Stored chunk of logical chunk ``chunk`` of ``row`` in the capstone kernels' XOR swizzle,
    for rows of ``chunks`` 16-byte chunks (works on ints and numpy arrays alike)."""
    study = SharedTileLayout("swizzled", cols=chunks * CHUNK_BYTES // 2)
    stored = (study.offset(row, chunk) - np.asarray(row) * study.pitch) // CHUNK_BYTES
    return int(stored) if np.ndim(stored) == 0 else stored


def swizzled_offset(row, chunk, chunks: int):
    """Byte offset of (row, 16-byte chunk) inside a swizzled tile of ``chunks`` chunks per row."""
    return (np.asarray(row) * chunks + gemm_swizzle(row, chunk, chunks)) * CHUNK_BYTES


def lane_rows_chunks(placement: tiles.Placement, row0: int = 0,
                     chunk0: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tile row and 16-byte chunk each lane's row address must point at, for the matrices of
    ``placement`` with their top-left corner at tile row ``row0``, chunk ``chunk0``
    (``-1`` for lanes the instruction ignores)."""
    rows, chunks = _lane_rows_chunks(placement, int(row0), int(chunk0))
    return rows.copy(), chunks.copy()


@functools.lru_cache(maxsize=256)
def _lane_rows_chunks(placement: tiles.Placement, row0: int,
                      chunk0: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lane_rows_chunks`, worked out once per placement and corner (a check asks for
    the same few again and again), read-only."""
    lanes = layouts.row_address_lanes(placement.num)
    rows = np.full(layouts.WARP_SIZE, -1, dtype=np.int64)
    chunks = np.full(layouts.WARP_SIZE, -1, dtype=np.int64)
    for i in range(placement.num):
        for r in range(8):
            tr, tc = placement.row_start(i, r)
            rows[lanes[i, r]] = row0 + tr
            chunks[lanes[i, r]] = chunk0 + tc * tiles.ELEM_BYTES // CHUNK_BYTES
    rows.flags.writeable = chunks.flags.writeable = False
    return rows, chunks


def layout_cost(row_bytes: int, pad: int = 0, swizzle: Callable | None = None,
                rows: int = 16) -> banks.AccessCost:
    """Wavefronts of the ldmatrix.x4 loads of every 16x16 piece of a ``rows`` x ``row_bytes``
    tile stored with row pitch ``row_bytes + pad`` and, optionally, a swizzle
    ``(row, chunk, chunks) -> stored chunk``."""
    chunks = row_bytes // CHUNK_BYTES
    pitch = row_bytes + pad
    total = banks.AccessCost(0, 0)
    for row0 in range(0, rows, 16):
        for chunk0 in range(0, chunks - 1, 2):
            r, c = lane_rows_chunks(tiles.mma_a(), row0, chunk0)
            if swizzle is not None:
                c = np.array([swizzle(int(a), int(b), chunks) for a, b in zip(r, c)])
            total = total + banks.ldmatrix_cost(r * pitch + c * CHUNK_BYTES, num=4)
    return total


# ---------------------------------------------------------------------------------------------
# Naming the lanes that collide
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseConflict:
    """One phase of a shared-memory access (an ldmatrix matrix, or a group of lanes of an
    ordinary access) that costs more than one wavefront."""

    phase: int
    lanes: tuple[int, ...]          # the lanes served together in this phase
    wavefronts: int                 # what the bank model says this phase costs
    colliding: tuple[int, ...]      # one lane per distinct address in the busiest bank
    first_bank: int                 # banks the first colliding lane's access covers
    last_bank: int

    def describe(self, what: str = "matrix") -> str:
        who = ", ".join(str(l) for l in self.colliding)
        every = "both" if len(self.colliding) == 2 else "all"
        return (f"{what} {self.phase} ({lanes_text(self.lanes)}) takes "
                f"{self.wavefronts} wavefronts instead of 1: lanes {who} {every} use banks "
                f"{self.first_bank}-{self.last_bank}, at different addresses")


def _phase_conflicts(groups: Sequence[Sequence[int]], addrs: np.ndarray, width: int,
                     active: np.ndarray | None = None) -> list[PhaseConflict]:
    out = []
    words_per_lane = max(1, width // banks.BANK_BYTES)
    # every phase's wavefronts in one call of the bank model (the lanes of a phase that are
    # not active count no words); only a phase that conflicts is looked at lane by lane
    table = np.asarray(groups, dtype=np.int64).reshape(len(groups), -1)     # (phases, lanes)
    valid = np.ones(table.shape, bool) if active is None else np.asarray(active, bool)[table]
    if not valid.any():
        return out
    # an inactive lane's address is never read (it may be missing): the first lane's stands in
    words = (addrs[np.where(valid, table, 0)] // banks.BANK_BYTES)[..., None] \
        + np.arange(words_per_lane)
    costs = banks.phase_wavefronts(words.reshape(len(table), -1),
                                   np.repeat(valid, words_per_lane, axis=1))
    for phase, lanes in enumerate(groups):
        wavefronts = int(costs[phase])
        if wavefronts <= 1:
            continue
        lanes = [int(l) for l in lanes if active is None or active[int(l)]]
        words = (addrs[lanes] // banks.BANK_BYTES)[:, None] + np.arange(words_per_lane)
        per_bank: dict[int, dict[int, int]] = {}
        for lane, ws in zip(lanes, words):
            for w in ws:
                per_bank.setdefault(int(w) % banks.BANKS, {}).setdefault(int(w), lane)
        busiest = max(sorted(per_bank), key=lambda b: len(per_bank[b]))
        colliding = tuple(sorted(per_bank[busiest].values()))
        first = int(addrs[colliding[0]])
        out.append(PhaseConflict(phase, tuple(lanes), wavefronts, colliding,
                                 int(banks.bank_of(first)), int(banks.bank_of(first + width - 1))))
    return out


def ldmatrix_conflicts(addrs, num: int = 4) -> list[PhaseConflict]:
    """The matrices of one ``ldmatrix``/``stmatrix`` ``.x{num}`` that conflict (phase = matrix)."""
    a = np.asarray(addrs, dtype=np.int64)
    return _phase_conflicts(layouts.row_address_lanes(num), a, CHUNK_BYTES)


def store_conflicts(addrs, width: int = 16, active=None) -> list[PhaseConflict]:
    """The lane groups of one ordinary ``st.shared``/``ld.shared`` of ``width`` bytes per lane
    that conflict (a phase is ``128 // width`` lanes)."""
    a = np.asarray(addrs, dtype=np.int64)
    mask = None if active is None else np.asarray(active, dtype=bool)
    return _phase_conflicts(_store_phases(width), a, width, mask)


def _store_phases(width: int) -> list[range]:
    """The lanes of each phase of an ordinary access of ``width`` bytes per lane."""
    per = banks.WAVEFRONT_BYTES // max(width, banks.BANK_BYTES)
    return [range(p * per, (p + 1) * per) for p in range(layouts.WARP_SIZE // per)]


def conflicting(groups: Sequence[Sequence[int]], addrs: np.ndarray, width: int) -> np.ndarray:
    """Which of many warp accesses (``addrs``: ``(n, 32)``, every lane active) has a phase of
    more than one wavefront: one call of the bank model for all of them, so that a check of a
    whole tile looks lane by lane (:func:`_phase_conflicts`) only at an access that conflicts."""
    words_per_lane = max(1, width // banks.BANK_BYTES)
    table = np.asarray(groups, dtype=np.int64).reshape(len(groups), -1)     # (phases, lanes)
    a = np.asarray(addrs, dtype=np.int64)
    words = (a[:, table] // banks.BANK_BYTES)[..., None] + np.arange(words_per_lane)
    costs = banks.phase_wavefronts(words.reshape(len(a), len(table), -1))
    return (costs > 1).any(axis=1)


# ---------------------------------------------------------------------------------------------
# 1. Which group of four banks does a chunk of a row-major tile use?
# ---------------------------------------------------------------------------------------------

def _bank_group(row: int, chunk: int, row_bytes: int) -> int:
    banks_per_chunk = CHUNK_BYTES // banks.BANK_BYTES
    return int(banks.bank_of(row * row_bytes + chunk * CHUNK_BYTES)) // banks_per_chunk


bank_group = FunctionExercise(
    key="banks.bank_group",
    title="the group of 4 banks that serves chunk (row, chunk) of a row-major tile",
    arg_names=("row", "chunk", "row_bytes"),
    reference=_bank_group,
    visible=lambda: [(r, c, rb) for rb in (128, 64, 144) for r in range(8) for c in (0, 3)],
    hidden_cases=lambda rng: [(int(rng.integers(0, 64)), int(rng.integers(0, rb // 16)), rb)
                              for rb in (32, 64, 80, 128, 144, 256) for _ in range(8)],
    describe=lambda a: f"row {a[0]}, chunk {a[1]}, rows of {a[2]} bytes",
    mistakes=(
        (lambda row, chunk, row_bytes: (row + chunk) % 8,
         "a row is row_bytes long, not one chunk: row r starts r * row_bytes bytes in, i.e. "
         "r * row_bytes // 16 chunks"),
        (lambda row, chunk, row_bytes: ((row * row_bytes + 16 * chunk) // 4) % 32,
         "that is the bank of the chunk's first word; the question asks for the group of four "
         "banks (one 16-byte slot of a 128-byte line): divide the byte address by 16, then % 8"),
        (lambda row, chunk, row_bytes: ((row * row_bytes + chunk) // 16) % 8,
         "a chunk is 16 bytes: the chunk moves the address by 16 * chunk"),
        (lambda row, chunk, row_bytes: (row * row_bytes // 16 + chunk) % 32,
         "there are only 8 groups of four banks in the 128 bytes one wavefront serves: % 8"),
    ),
    hints=("Work with the byte address: row * row_bytes + 16 * chunk.",
           "The 32 banks repeat every 128 bytes; each 16-byte slot of those 128 bytes is one "
           "group of four banks."),
)


# ---------------------------------------------------------------------------------------------
# 2. Padding: which pitch is conflict-free?
# ---------------------------------------------------------------------------------------------

#: The options of the padding question (row pitch in bytes for rows of 64 16-bit elements).
PITCH_OPTIONS = {"a": 128, "b": 136, "c": 144, "d": 192}

padding_choice = ChoiceExercise(
    key="banks.padding_choice",
    title="padding: which row pitch makes the ldmatrix loads conflict-free",
    correct="c",
    explanations={
        "a": "128 bytes is the naive layout: every row starts in banks 0-3 again, so the eight "
             "rows of a matrix need eight wavefronts",
        "b": "136 bytes is not a multiple of 16: rows 1, 3, 5... would start at addresses "
             "ldmatrix cannot take (every row address must be 16-byte aligned)",
        "c": "144 = 9 chunks: row r starts 9r chunks in, so its chunk lands in group "
             "(9r + c) % 8 = (r + c) % 8, a different group for each of 8 consecutive rows. The "
             "price: 16 unused bytes per row (12.5% more shared memory)",
        "d": "192 = 12 chunks: 12r % 8 is 0 or 4, so rows 0, 2, 4, 6 still share banks (4 "
             "wavefronts per matrix). An odd number of chunks per row is what works",
    },
    hints=("Row starts must stay 16-byte aligned.",
           "Consecutive rows must land in different groups of four banks: count the pitch in "
           "16-byte chunks and look at it modulo 8."),
)


# ---------------------------------------------------------------------------------------------
# 3. Row addresses of the A operand in a swizzled tile
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SwizzledTask:
    """One case of a swizzled-address exercise: a tile of ``chunks`` 16-byte chunks per row,
    stored with the capstone swizzle at byte ``base``; the instruction reads the matrices of the
    exercise's placement with their top-left corner at (``row0``, chunk ``chunk0``)."""

    chunks: int
    base: int
    row0: int
    chunk0: int
    args: tuple
    label: str = ""

    def describe(self) -> str:
        return self.label or (f"rows of {self.chunks * CHUNK_BYTES} B, tile at byte "
                              f"{self.base}, block at row {self.row0}, column "
                              f"{self.chunk0 * 8}")


def _decode_swizzled(task: SwizzledTask, addr: int) -> str:
    """Name what a byte address points at in the swizzled tile, in the learner's terms."""
    off = int(addr) - task.base
    if off % CHUNK_BYTES:
        return f"{addr} (not 16-byte aligned)"
    if off < 0:
        return f"{addr} (before the tile, which starts at {task.base})"
    row, slot = divmod(off // CHUNK_BYTES, task.chunks)
    logical = [c for c in range(task.chunks) if gemm_swizzle(row, c, task.chunks) == slot]
    return f"row {row}, chunk {logical[0]} (stored in slot {slot})"


@dataclass(repr=False)
class SwizzledAddressExercise(Exercise):
    """A per-lane address function for an ldmatrix/stmatrix that reads a swizzled tile.

    The rows each lane must point at come from ``placement`` (layouts data); where a row's
    chunk is stored comes from :func:`gemm_swizzle`. Wrong lanes are reported as
    "row r, chunk c (stored in slot s)", and a passing answer is also priced by the bank model.
    """

    placement: Callable[[], tiles.Placement] = tiles.mma_a
    arg_names: Sequence[str] = ("lane",)
    visible: Callable[[], list[SwizzledTask]] = list
    hidden_cases: Callable[[np.random.Generator], list[SwizzledTask]] = lambda rng: []
    mistakes: Sequence[Mistake] = ()

    def expected(self, task: SwizzledTask) -> np.ndarray:
        rows, chunks = lane_rows_chunks(self.placement(), task.row0, task.chunk0)
        out = task.base + swizzled_offset(rows, chunks, task.chunks)
        return np.where(rows >= 0, out, -1)

    def unswizzled(self, task: SwizzledTask) -> np.ndarray:
        rows, chunks = lane_rows_chunks(self.placement(), task.row0, task.chunk0)
        return task.base + (rows * task.chunks + chunks) * CHUNK_BYTES

    def _one(self, answer, task: SwizzledTask) -> CheckResult:
        calls = [(lane, *task.args) for lane in range(32)]
        lv = checks.evaluate_lanes(answer, calls)
        exp = self.expected(task)
        rows, chunks = lane_rows_chunks(self.placement(), task.row0, task.chunk0)
        got = np.array([-1 if v is None else v for v in lv.values], dtype=np.int64)
        active = exp >= 0
        diffs, wrong = [], []
        for lane in np.flatnonzero(active):
            if lv.problems[lane] or got[lane] != exp[lane]:
                wrong.append(int(lane))
                want = (f"row {rows[lane]}, chunk {chunks[lane]} (stored in slot "
                        f"{gemm_swizzle(int(rows[lane]), int(chunks[lane]), task.chunks)}, "
                        f"address {exp[lane]})")
                shown = (lv.problems[lane]
                         or f"{_decode_swizzled(task, got[lane])} (address {got[lane]})")
                diffs.append(LaneDiff(int(lane), shown, want))
        n = int(active.sum())
        if not wrong:
            cost = banks.ldmatrix_cost(np.where(active, exp, exp[active][0]),
                                       num=self.placement().num)
            return CheckResult(self.title, True, 1.0,
                               f"all {n} row addresses right ({task.describe()}); the load "
                               f"costs {cost.wavefronts} wavefronts, {cost.conflicts} from "
                               "conflicts")
        advice = []
        prob = next((lv.problems[l] for l in wrong if lv.problems[l]), "")
        if prob:
            advice.append(f"your function {prob.split(' (line')[0]}; fix that first")
        elif np.array_equal(got[active], self.unswizzled(task)[active]):
            advice.append("these are the addresses of the plain row-major tile: the swizzle "
                          "is missing. Chunk c of row r is stored in slot c ^ (r % 8)")
        elif np.array_equal(got[active], (exp - task.base)[active]):
            advice.append("every address is off by exactly `base`: add the tile's base address")
        else:
            known = known_mistake(self.mistakes, calls, got, where=active)
            if known is not None:
                advice.append(known)
            else:
                advice += _xor_bits_advice(task, got, exp, self.unswizzled(task), active)
        return CheckResult(self.title, False, 1 - len(wrong) / n,
                           f"{len(wrong)} of {n} address lanes wrong ({task.describe()})",
                           diffs=diffs, advice=advice, wrong_lanes=wrong)

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if answer is None:
            return checks.not_implemented(self.title)
        if not callable(answer):
            return CheckResult(self.title, False, 0.0, f"expected a function of "
                               f"({', '.join(self.arg_names)})", status="invalid")
        tasks = list(self.visible())
        if hidden:
            tasks += self.hidden_cases(hidden_rng())
        try:
            results = [self._one(answer, t) for t in tasks]
        except checks._Unfinished:
            return checks.not_implemented(self.title)
        return checks.combine(self.title, results)


def _bits_text(mask: int) -> str:
    bits = [b for b in range(mask.bit_length()) if mask >> b & 1]
    return f"bit{'s' if len(bits) > 1 else ''} {number_runs(bits)}" if bits else "no bits"


def _xor_bits_advice(task: SwizzledTask, got: np.ndarray, exp: np.ndarray, plain: np.ndarray,
                     active: np.ndarray) -> list[str]:
    """A swizzle XOR-ed into the wrong bits of the address, or with the wrong key, from the
    answer itself: each lane's address against the plain row-major one is ``key << s`` with a
    3-bit key; the swizzle's is the row % 8 at bit 4 (the 16-byte chunk index)."""
    lanes = np.flatnonzero(active)
    moved = got[lanes] ^ plain[lanes]
    wanted = exp[lanes] ^ plain[lanes]
    if np.any(got[lanes] < 0) or not np.any(moved):
        return []
    low = int(np.bitwise_or.reduce(moved))
    shift = (low & -low).bit_length() - 1
    if np.any(moved >> shift >= 8):
        return []               # not one 3-bit key XOR-ed in: no claim
    chunk_bit = CHUNK_BYTES.bit_length() - 1
    i = next(i for i in range(len(lanes)) if moved[i] != wanted[i])
    lane = int(lanes[i])
    row = (int(plain[lane]) - task.base) // (task.chunks * CHUNK_BYTES)
    proof = (f"lane {lane}'s address differs from the plain row-major one by {int(moved[i])} "
             f"where it must differ by {int(wanted[i])}")
    if shift != chunk_bit:
        return [f"your swizzle XORs address {_bits_text(int(np.bitwise_or.reduce(moved)))} "
                f"({proof}); the swizzle moves the 16-byte chunk index, address "
                f"{_bits_text(int(np.bitwise_or.reduce(wanted)))}, by the row % 8: XOR the "
                "chunk, then multiply by 16"]
    return [f"your swizzle XORs the chunk with the wrong key: lane {lane} (row {row}) XORs it "
            f"with {int(moved[i]) >> chunk_bit}, the key is row % 8 = {row % 8} ({proof})"]


def _a_task(base: int, row0: int, col0: int) -> SwizzledTask:
    return SwizzledTask(8, base, row0, col0 // 8, (base, row0, col0))


def _a_hidden(rng: np.random.Generator) -> list[SwizzledTask]:
    return [_a_task(128 * int(rng.integers(0, 64)), 16 * int(rng.integers(0, 8)),
                    16 * int(rng.integers(0, 4))) for _ in range(10)]


swizzled_a_rows = SwizzledAddressExercise(
    key="banks.swizzled_a_rows",
    title="ldmatrix .x4: row addresses of the A operand in a swizzled tile",
    placement=tiles.mma_a,
    arg_names=("lane", "base", "row0", "col0"),
    visible=lambda: [_a_task(0, 0, 0), _a_task(0, 0, 16), _a_task(4224, 16, 48)]
    + cases.drawn(_a_hidden, 1),
    hidden_cases=_a_hidden,
    mistakes=(
        (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 128
         + ((col0 + lane // 16) ^ ((row0 + lane % 16) % 8)) * 16,
         "col0 counts elements; the swizzle works on 16-byte chunks of 8 elements: the chunk is "
         "col0 // 8 + lane // 16"),
        (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 128
         + (col0 // 8 + (lane // 16 ^ ((row0 + lane % 16) % 8))) * 16,
         "XOR the whole chunk index (col0 // 8 + lane // 16) with the row, not only the lane's "
         "part of it"),
        (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 64
         + ((col0 // 8 + lane // 16) ^ ((row0 + lane % 16) % 8)) * 16,
         "rows are 64 elements = 128 bytes apart: the row stride in bytes is 128"),
        (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 128
         + ((2 * col0 + 16 * (lane // 16)) ^ ((row0 + lane % 16) % 8)),
         "XOR the chunk index, then multiply by 16: XOR on the byte offset moves the address by "
         "a few bytes and breaks the 16-byte alignment"),
        (lambda lane, base, row0, col0: base + (row0 + lane % 16) * 128
         + ((col0 // 8 + lane // 16) ^ ((base // 128 + row0 + lane % 16) % 8)) * 16,
         "your swizzle follows the address, not the tile: you XOR with the row bits of base + "
         "row * 128, which equal the tile's row % 8 only when base is a multiple of 1024. The "
         "swizzle belongs to the tile: XOR with (row0 + lane % 16) % 8"),
    ),
    hints=(
        "First the plain answer from notebook 2: row = row0 + lane % 16, chunk = col0 // 8 + "
        "lane // 16.",
        "Then move the chunk: it is stored in slot chunk ^ (row % 8) of its row.",
    ),
)


# ---------------------------------------------------------------------------------------------
# 4. Design a swizzle: conflict-free for every row width, and a bijection
# ---------------------------------------------------------------------------------------------

def _pieces(rows: int, chunks: int) -> list[tuple[int, int]]:
    """Top-left (row, chunk) of every 16x16 piece an ldmatrix.x4 reads (2 chunks wide)."""
    return [(r0, c0) for r0 in range(0, rows, 16) for c0 in range(0, chunks, 2)]


@dataclass(frozen=True)
class SwizzleCase:
    """A tile of ``rows`` rows of ``chunks`` 16-byte chunks, read with ldmatrix.x4 in 16x16
    pieces (A-operand order, and the order of B stored column-major) and filled row by row
    with 16-byte stores."""

    chunks: int
    rows: int = 32

    @property
    def row_bytes(self) -> int:
        return self.chunks * CHUNK_BYTES

    def describe(self) -> str:
        return f"rows of {self.chunks} chunks ({self.row_bytes} B)"


#: How a 16x16 piece is read: the A operand (lanes 8-15 = rows 8-15) and B column-major
#: (lanes 8-15 = the next chunk of rows 0-7), both from layouts through tiles.
def _b_col_two_tiles() -> tiles.Placement:
    """ldmatrix.x4 of B stored column-major for two n8 tiles: B^T rows n, matrices = k halves."""
    one = tiles.mma_b_col_major()
    origins = one.origins + tuple((r + 8, c) for r, c in one.origins)
    return tiles.Placement("B col-major, two n8 tiles", origins, 16, 16,
                           "B stored column-major, two n8 tiles")


READ_PATTERNS: dict[str, Callable[[], tiles.Placement]] = {
    "the A operand (ldmatrix.x4)": tiles.mma_a,
    "B stored column-major, two n8 tiles (ldmatrix.x4)": _b_col_two_tiles,
}


@dataclass(repr=False)
class SwizzleExercise(Exercise):
    """``fn(row, chunk, chunks) -> stored chunk``: must keep every chunk (a permutation of
    each row) and make every ldmatrix phase and every 16-byte store phase conflict-free."""

    visible: Callable[[], list[SwizzleCase]] = list
    hidden_cases: Callable[[], list[SwizzleCase]] = list
    mistakes: Sequence[Mistake] = ()

    def table(self, answer, case: SwizzleCase) -> tuple[np.ndarray, list[LaneDiff]]:
        """The stored chunk of every (row, chunk) and the problems of values that cannot be."""
        calls = [(r, c, case.chunks) for r in range(case.rows) for c in range(case.chunks)]
        lv = checks.evaluate_lanes(answer, calls)
        stored = np.full((case.rows, case.chunks), -1, dtype=np.int64)
        problems = []
        for (r, c, _), v, prob in zip(calls, lv.values, lv.problems):
            where = f"row {r}, chunk {c} ({case.describe()})"
            if prob:
                problems.append(LaneDiff(-1, prob, "a chunk index", where=where))
            elif not 0 <= v < case.chunks:
                problems.append(LaneDiff(-1, f"stored chunk {v}", f"a chunk of the same row, "
                                         f"0..{case.chunks - 1}", where=where))
            else:
                stored[r, c] = v
        return stored, problems

    def _bijection(self, stored: np.ndarray, case: SwizzleCase) -> list[LaneDiff]:
        out = []
        for r in range(case.rows):
            seen: dict[int, int] = {}
            for c in range(case.chunks):
                s = int(stored[r, c])
                if s in seen:
                    missing = sorted(set(range(case.chunks)) - set(stored[r].tolist()))
                    out.append(LaneDiff(-1, f"chunks {seen[s]} and {c} both stored in slot {s}",
                                        "every chunk in a slot of its own", where=f"row {r} ("
                                        f"{case.describe()})", note=f"one overwrites the other "
                                        f"and slot(s) {missing} stay empty: data is lost"))
                    break
                seen[s] = c
        return out

    def _conflicts(self, stored: np.ndarray,
                   case: SwizzleCase) -> tuple[int, int, list[str], list[LaneDiff]]:
        """``(phases checked, phases conflicting, first messages, lanes of the first)``."""
        pitch = case.row_bytes
        checked, bad, messages, diffs = 0, 0, [], []
        for name, make in READ_PATTERNS.items():
            place = make()
            for r0, c0 in _pieces(case.rows, case.chunks):
                rows, chunks = lane_rows_chunks(place, r0, c0)
                addrs = rows * pitch + stored[rows, chunks] * CHUNK_BYTES
                found = ldmatrix_conflicts(addrs, place.num)
                checked += place.num
                bad += len(found)
                if found and not messages:
                    pc = found[0]
                    messages.append(f"{name} of rows {r0}-{r0 + 15}, chunks {c0}-{c0 + 1}: "
                                    + pc.describe("matrix"))
                    for lane in pc.colliding:
                        r, c = int(rows[lane]), int(chunks[lane])
                        diffs.append(LaneDiff(int(lane), f"banks {pc.first_bank}-"
                                              f"{pc.last_bank}", "banks no other lane of its "
                                              "matrix uses", where=f"(row {r}, chunk {c} -> "
                                              f"stored {stored[r, c]})"))
        total = case.rows * case.chunks
        for start in range(0, total, layouts.WARP_SIZE):
            q = start + np.arange(layouts.WARP_SIZE)
            active = q < total
            qq = np.where(active, q, 0)
            r, c = qq // case.chunks, qq % case.chunks
            found = store_conflicts(r * pitch + stored[r, c] * CHUNK_BYTES, 16, active)
            checked += int(active.sum()) // 8
            bad += len(found)
            if found and not messages:
                pc = found[0]
                messages.append(f"the 16-byte stores that fill rows {r[0]}-{r[active][-1]} "
                                f"(lane i stores chunk i of the tile in row order): "
                                + pc.describe("lane group"))
                for lane in pc.colliding:
                    diffs.append(LaneDiff(int(lane), f"banks {pc.first_bank}-{pc.last_bank}",
                                          "banks no other lane of its group uses",
                                          where=f"(row {r[lane]}, chunk {c[lane]} -> stored "
                                          f"{stored[r[lane], c[lane]]})"))
        return checked, bad, messages, diffs

    def _one(self, answer, case: SwizzleCase) -> CheckResult:
        stored, problems = self.table(answer, case)
        if problems:
            return CheckResult(self.title, False, 0.0, f"{len(problems)} stored chunks are not "
                               f"chunks of the row ({case.describe()})", diffs=problems,
                               advice=["the swizzle only reorders the chunks of a row: return a "
                                       "number from 0 to chunks - 1 (XOR with something smaller "
                                       "than chunks, or take % chunks)"])
        lost = self._bijection(stored, case)
        if lost:
            return CheckResult(self.title, False, 0.0, f"{len(lost)} rows lose data "
                               f"({case.describe()})", diffs=lost,
                               advice=["a swizzle must be a permutation of each row's chunks, "
                                       "so that no two chunks share a slot: XOR of the chunk "
                                       "with a value that depends only on the row always is"])
        checked, bad, messages, diffs = self._conflicts(stored, case)
        if not bad:
            return CheckResult(self.title, True, 1.0, f"no chunk lost, all {checked} phases "
                               f"conflict-free ({case.describe()})")
        advice = list(messages[1:])
        cells = [(r, c) for r in range(case.rows) for c in range(case.chunks)]
        known = known_mistake(self.mistakes, [(r, c, case.chunks) for r, c in cells],
                              [stored[r, c] for r, c in cells])
        if known is not None:
            advice.append(known)
        return CheckResult(self.title, False, 1 - bad / checked,
                           f"{bad} of {checked} phases have bank conflicts ({case.describe()}); "
                           f"first: {messages[0]}", diffs=diffs, advice=advice,
                           wrong_lanes=sorted({d.lane for d in diffs}))

    def evaluate(self, answer, hidden: bool = False) -> CheckResult:
        if answer is None:
            return checks.not_implemented(self.title)
        if not callable(answer):
            return CheckResult(self.title, False, 0.0, "expected a function of (row, chunk, "
                               "chunks)", status="invalid")
        cases = list(self.visible()) + (list(self.hidden_cases()) if hidden else [])
        try:
            results = [self._one(answer, c) for c in cases]
        except checks._Unfinished:
            return checks.not_implemented(self.title)
        return checks.combine(self.title, results)


swizzle = SwizzleExercise(
    key="banks.swizzle",
    title="a conflict-free swizzle (row, chunk, chunks) -> stored chunk",
    visible=lambda: [SwizzleCase(8), SwizzleCase(4)],
    hidden_cases=lambda: [SwizzleCase(16), SwizzleCase(2), SwizzleCase(8, rows=64),
                          SwizzleCase(4, rows=64)],
    mistakes=(
        (lambda row, chunk, chunks: chunk,
         "this is the naive layout: every chunk stays where it was"),
        (lambda row, chunk, chunks: chunk ^ (row % chunks),
         "with rows shorter than 128 bytes, one 128-byte line holds 8 // chunks rows, so rows r "
         "and r + 8 // chunks start in the same banks; XOR-ing with row % chunks still leaves "
         "rows r and r + 4 of a matrix in the same banks. XOR with the number of the 128-byte "
         "line, (row * chunks // 8) % chunks, not with the row"),
        (lambda row, chunk, chunks: (chunk + row) % chunks,
         "a rotation by the row works for 128-byte rows, but for shorter rows it repeats every "
         "`chunks` rows while the row starts repeat their banks every 8 // chunks rows: rows r "
         "and r + 4 of a matrix still land in the same banks"),
    ),
    hints=(
        "For 128-byte rows (8 chunks), XOR the logical chunk with the row's place among the "
        "eight rows of its matrix (0-7): the eight rows read the same logical chunk, and XOR "
        "with eight different values gives eight different slots. Row 11, chunk 2 goes to slot "
        "2 XOR 3 = 1.",
        "A row of 4 chunks fills half a 128-byte line: rows 2k and 2k+1 share a line and are "
        "already in different banks. Only rows whose (row // 2) differ need moving.",
    ),
)


# ---------------------------------------------------------------------------------------------
# 5. The fragment does not move: where in shared memory did a register half come from?
# ---------------------------------------------------------------------------------------------

#: The A tile of the fragment exercise: 16 rows of 64 16-bit elements (128-byte rows).
A_TILE_COLS = 64


def stored_column(row: int, col: int, chunks: int = A_TILE_COLS // 8) -> int:
    """Element column, inside its stored row, where logical element (row, col) sits."""
    return gemm_swizzle(row, col // 8, chunks) * 8 + col % 8


def _stored_case(ks: int):
    layout = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32").a
    return (layout, lambda m, r, c, _ks=ks: (r, stored_column(r, 16 * _ks + c)), (ks,))


stored_position = FragmentExercise(
    key="banks.stored_position",
    title="swizzled A: where in shared memory (lane, reg, half) came from",
    arg_names=("lane", "reg", "half", "ks"),
    answer_names=("row", "stored col"),
    visible=lambda: [_stored_case(0), _stored_case(1)],
    hidden_cases=lambda: [_stored_case(2), _stored_case(3)],
    mistakes=(
        (lambda lane, reg, half, ks: (lane // 4 + 8 * (reg % 2),
                                      16 * ks + 8 * (reg // 2) + 2 * (lane % 4) + half),
         "that is the logical column: the element is *stored* in another 16-byte slot of its "
         "row. Swizzle the chunk (column // 8), keep column % 8"),
        (lambda lane, reg, half, ks: (lane // 4 + 8 * (reg % 2),
                                      8 * ((2 * ks + reg // 2) ^ (lane % 8))
                                      + 2 * (lane % 4) + half),
         "the swizzle depends on the stored row (lane // 4 + 8 * (reg % 2)), not on the lane"),
    ),
    hints=(
        "The registers hold exactly the plain A fragment of notebook 2 (your a_fragment there),"
        " with each k-step ks moving 16 columns further right.",
        "That column is in chunk col // 8; the chunk is stored in the slot the swizzle gives "
        "it, and the column keeps its place inside the chunk.",
        "Worked example, lane 5, reg 3, half 0, ks 1: the fragment puts it at row 9, column 16 "
        "+ 8 + 2 = 26. Column 26 is place 2 of chunk 3; row 9 sends chunk 3 to slot 3 XOR 1 = "
        "2: stored (row 9, col 18).",
    ),
)


# ---------------------------------------------------------------------------------------------
# 6. Kernel: store a tile swizzled, load it back with ldmatrix
# ---------------------------------------------------------------------------------------------

ROUNDTRIP_KERNEL_NAME = "swizzle_roundtrip"


def describe_tile_value(v: int) -> str:
    """The round-trip tile holds ids row * 64 + col."""
    r, c = divmod(int(v), A_TILE_COLS)
    return f"tile[{r}][{c}]"


def roundtrip_expected(rows: int) -> np.ndarray:
    """``(pieces, 32, 4)``: what each ldmatrix.x4 of the A pieces gives, read from the plain
    (unswizzled) tile by the emulator: the swizzle must not change a single register."""
    return _roundtrip_expected(int(rows)).copy()


@functools.lru_cache(maxsize=16)
def _roundtrip_expected(rows: int) -> np.ndarray:
    """:func:`roundtrip_expected`, read once per tile height (every check of every submission
    reads the same few), read-only."""
    tile = np.arange(rows * A_TILE_COLS, dtype=np.uint16)
    place = tiles.mma_a()
    out = []
    for row0, chunk0 in _pieces(rows, A_TILE_COLS // 8):
        r, c = _lane_rows_chunks(place, row0, chunk0)
        out.append(emulator.ldmatrix(tile.view(np.uint8), (r * A_TILE_COLS // 8 + c) * 16, num=4))
    expected = np.array(out)
    expected.flags.writeable = False
    return expected


@dataclass
class RoundtripRun:
    """One launch of the round-trip kernel on a tile of ``rows`` rows: its arguments are the
    tile, the row count, the registers, the load addresses and a dump of shared memory."""

    rows: int
    label: str
    args: list
    shared_mem: int
    grid: tuple = (1,)
    block: tuple = (32,)
    out_index: int = 2
    compare: tuple = (2, 3, 4)
    offset: int = 0           # added to every element id (a multiple of 8, so chunks stay whole)

    def with_fresh_values(self, rng: np.random.Generator) -> "RoundtripRun":
        """The same launch with the ids shifted by a random multiple of 8: a kernel must move
        the values it is given (a table of the usual ids fails), and every check still reads
        a chunk's id from its first element."""
        offset = 8 * int(rng.integers(1, (65536 - self.rows * A_TILE_COLS) // 8))
        args = list(self.args)
        args[0] = (np.arange(self.rows * A_TILE_COLS) + offset).astype(np.uint16)
        return replace(self, args=args, offset=offset)


def roundtrip_run(rows: int) -> RoundtripRun:
    pieces = len(_pieces(rows, A_TILE_COLS // 8))
    args = [np.arange(rows * A_TILE_COLS, dtype=np.uint16), np.int32(rows),
            np.zeros(pieces * 128, np.uint32), np.zeros(pieces * 32, np.uint32),
            np.full(rows * A_TILE_COLS, 0xFFFF, np.uint16)]
    return RoundtripRun(rows, f"a tile of {rows} rows", args, rows * A_TILE_COLS * 2)


@dataclass(repr=False)
class SwizzleKernelExercise(KernelExercise):
    """The round-trip kernel: data kept (every chunk once in shared memory), registers equal
    to the emulator's, and every ldmatrix.x4 and 16-byte store conflict-free."""

    kernel_name: str = ROUNDTRIP_KERNEL_NAME
    visible: Callable[[], list] = lambda: [roundtrip_run(16), roundtrip_run(32)]
    hidden_cases: Callable[[np.random.Generator], list] = (
        lambda rng: [roundtrip_run(48), roundtrip_run(64)])

    def run_case(self, answer: str, run: RoundtripRun) -> CheckResult:
        rows, label = run.rows, run.label
        pieces = len(_pieces(rows, A_TILE_COLS // 8))
        res = launch_for_check(answer, self.kernel_name, run, self.title, self.backend,
                               fault_advice="a fault usually means an address outside shared "
                                            "memory or not aligned to the access size")
        if isinstance(res, CheckResult):
            return res
        device = res.device
        dump = np.asarray(res.outputs[4]).reshape(-1, 8).astype(np.int64) - run.offset
        # 1. every 16-byte chunk of the tile is somewhere in shared memory, exactly once
        ids = dump[:, 0]
        whole = (dump == ids[:, None] + np.arange(8)).all(axis=1) & (ids % 8 == 0)
        slot_of: dict[int, int] = {}
        for slot in np.flatnonzero(whole):
            slot_of.setdefault(int(ids[slot]) // 8, int(slot))
        missing = [q for q in range(rows * 8) if q not in slot_of]
        if missing:
            diffs = [LaneDiff(-1, "no slot (overwritten, or stored outside the tile)",
                              "a 16-byte slot of its own", where=f"chunk {q % 8} of row {q // 8}")
                     for q in missing]
            return CheckResult(self.title, False, 0.0, f"{len(missing)} of {rows * 8} chunks "
                               f"are lost in shared memory ({label})", diffs=diffs,
                               advice=["two (row, chunk) pairs get the same offset, or an "
                                       "offset falls outside the tile: swizzled_offset must "
                                       "give every chunk a 16-byte slot of its own"])
        # 2. the registers: exactly what the emulator reads from the plain tile
        regs = np.asarray(res.outputs[2]).view(np.uint32).reshape(pieces, 32, 4)
        halves = _roundtrip_expected(rows).astype(np.uint32).view(np.uint16)
        exp = (halves + np.uint16(run.offset)).view(np.uint32)
        for p, (row0, chunk0) in enumerate(_pieces(rows, A_TILE_COLS // 8)):
            r = checks.check_kernel_outputs(self.title, regs[p], exp[p],
                                            describe_value=lambda v: describe_tile_value(
                                                (int(v) - run.offset) & 0xFFFF),
                                            backend=device)
            if not r.passed:
                r.message += (f" (ldmatrix.x4 of rows {row0}-{row0 + 15}, columns "
                              f"{8 * chunk0}-{8 * chunk0 + 15}, {label})")
                r.advice.append("the load must use the same offset function as the store: "
                                "row = row0 + lane % 16, chunk = chunk0 + lane / 16")
                return r
        # 3. bank conflicts of the loads (the addresses the kernel recorded) and of the stores
        addrs = np.asarray(res.outputs[3]).astype(np.int64).reshape(pieces, 32)
        loads_conflict = conflicting(layouts.row_address_lanes(4), addrs, CHUNK_BYTES)
        for p, (row0, chunk0) in enumerate(_pieces(rows, A_TILE_COLS // 8)):
            found = ldmatrix_conflicts(addrs[p]) if loads_conflict[p] else []
            if found:
                lanes = found[0].colliding
                diffs = [LaneDiff(int(l), f"offset {addrs[p, l]} (row {addrs[p, l] // 128}, "
                                  f"slot {addrs[p, l] % 128 // 16})", "banks no other lane of "
                                  "its matrix uses", where=f"(row {row0 + l % 16}, chunk "
                                  f"{chunk0 + l // 16})") for l in lanes]
                return CheckResult(self.title, False, 0.5, f"the data is right, but the "
                                   f"ldmatrix.x4 of rows {row0}-{row0 + 15}, columns "
                                   f"{8 * chunk0}-{8 * chunk0 + 15} conflicts: "
                                   + found[0].describe(), diffs=diffs, advice=[
                                       "swizzle the chunk with the row: chunk ^ (row % 8)"],
                                   wrong_lanes=list(lanes))
        stores = np.array([slot_of[q] for q in range(rows * 8)]) * CHUNK_BYTES
        groups = [stores[start:start + 32] for start in range(0, rows * 8, 32)]
        stores_conflict = (conflicting(_store_phases(CHUNK_BYTES), np.stack(groups), CHUNK_BYTES)
                           if all(len(g) == 32 for g in groups) else [True] * len(groups))
        for start, group, maybe in zip(range(0, rows * 8, 32), groups, stores_conflict):
            found = store_conflicts(group) if maybe else []
            if found:
                return CheckResult(self.title, False, 0.5, f"the loads are conflict-free, but "
                                   f"the 16-byte stores of chunks {start}-{start + 31} "
                                   f"conflict: " + found[0].describe("lane group"),
                                   wrong_lanes=list(found[0].colliding))
        return CheckResult(self.title, True, 1.0, f"every register matches the emulator and "
                           f"all {pieces} ldmatrix.x4 and {rows * 8 // 32} stores are "
                           f"conflict-free ({label}) on {device}",
                           details={"device": device, "backend": res.backend})


swizzle_roundtrip = SwizzleKernelExercise(
    key="banks.swizzle_roundtrip",
    title="kernel: store a tile swizzled, load it back with ldmatrix.x4",
    hints=(
        "swizzled_offset(row, chunk): row * 128 + (chunk ^ (row % 8)) * 16 (bytes from the "
        "tile's start).",
        "load_a: row = row0 + lane % 16, chunk = chunk0 + lane / 16; the address is tile + "
        "swizzled_offset(row, chunk).",
        'asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : '
        '"=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr)); then return addr.',
    ),
)


# ---------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------

def swizzle_picture(fn: Callable | None, chunks: int = 8, rows: int = 8,
                    chunk: int = 0) -> render.Html:
    """Shared memory of a tile stored with ``fn(row, chunk, chunks)`` (``None``: naive): each
    cell is a 16-byte slot showing the logical chunk stored there, coloured by that chunk. The
    slots one ldmatrix phase reads (logical ``chunk`` of rows 0-7) are outlined, red where two of
    them share banks."""
    stored = np.full((rows, chunks), -1, dtype=np.int64)
    note = ""
    for r in range(rows):
        for c in range(chunks):
            try:
                s = c if fn is None else int(fn(r, c, chunks))
            except NotImplementedError:
                return render.Html("<i>your swizzle is not implemented yet</i>")
            except Exception as exc:
                return render.Html(f"<i>your swizzle raised {type(exc).__name__}: "
                                   f"{render.escape(exc)}</i>")
            if not 0 <= s < chunks:
                note = note or f"row {r}, chunk {c}: stored chunk {s} is outside the row"
                continue
            stored[r, c] = s
    logical = np.full((rows, chunks), -1, dtype=np.int64)
    for r in range(rows):
        for c in range(chunks):
            if stored[r, c] >= 0:
                logical[r, stored[r, c]] = c
    pitch = chunks * CHUNK_BYTES
    marked = np.zeros((rows, chunks), dtype=bool)
    clash = np.zeros((rows, chunks), dtype=bool)
    phase_rows = [r for r in range(min(8, rows)) if stored[r, chunk % chunks] >= 0]
    addrs = {r: r * pitch + int(stored[r, chunk % chunks]) * CHUNK_BYTES for r in phase_rows}
    for r in phase_rows:
        marked[r, stored[r, chunk % chunks]] = True
    for r in phase_rows:
        group = addrs[r] // CHUNK_BYTES % BANK_GROUPS
        if any(addrs[o] // CHUNK_BYTES % BANK_GROUPS == group and addrs[o] != addrs[r]
               for o in phase_rows if o != r):
            clash[r, stored[r, chunk % chunks]] = True
    tips = np.empty((rows, chunks), dtype=object)
    for r in range(rows):
        for s in range(chunks):
            a = r * pitch + s * CHUNK_BYTES
            b = int(banks.bank_of(a))
            tips[r, s] = f"row {r}, slot {s}: bytes {a}-{a + 15}, banks {b}-{b + 3}"
    text = np.where(logical >= 0, np.char.add("c", logical.astype(str)), "")
    names = [f"{s}" + (f" (b{4 * (s % 8)}-{4 * (s % 8) + 3})" if pitch % banks.WAVEFRONT_BYTES == 0
                       else "") for s in range(chunks)]
    cost = sum(1 for r in phase_rows if clash[r, stored[r, chunk % chunks]])
    title = (f"{'naive' if fn is None else 'swizzled'} rows of {pitch} B: slot -> logical "
             f"chunk; outlined: chunk {chunk} of rows 0-7 (one ldmatrix phase)"
             + (f", {cost} slots in shared banks (red)" if cost else ", no two in the same banks"))
    grid = render.id_grid_html(logical, text=text, title=title, marked=marked, clash=clash,
                               tooltips=tips, row_label="row", col_label="slot",
                               col_names=names)
    if note:
        return render.Html(f'<span style="color:#c00000">{render.escape(note)}</span>' + grid)
    return grid
