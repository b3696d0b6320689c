"""Fragment layouts of the warp-level matrix instructions, written once, as data.

Every instruction the course teaches is a fixed map between *(lane, register, element)* and
*(matrix, row, column)*. This module is the only place that knows those maps: the emulator, the
widgets, the checks and the CPU backend all read them from here.

Two facts generate every table below (PTX ISA, "Matrix fragments for mma.m16n8k*" and the
ldmatrix section): a lane ``t`` is split into ``group = t // 4`` and ``thread_in_group = t % 4``,
and an 8x8 matrix of 16-bit elements is spread so that the four lanes of a group hold one row,
two neighbouring elements per 32-bit register.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

WARP_SIZE = 32
#: Bytes in one row of an m8n8 .b16 matrix: eight 16-bit elements. Row addresses must be
#: aligned to this.
ROW_BYTES = 16


@dataclass(frozen=True)
class FragmentLayout:
    """Where every element a warp holds in registers sits in the matrix (or matrices).

    ``coords[lane, reg, elem]`` is ``(matrix, row, col)``; ``owners[matrix, row, col]`` is the
    inverse ``(lane, reg, elem)``. ``elem`` counts the elements packed in one 32-bit register,
    lowest bits first.
    """

    name: str
    matrices: int
    rows: int
    cols: int
    elem_bits: int
    coords: np.ndarray = field(repr=False, compare=False)

    @property
    def regs(self) -> int:
        """32-bit registers each lane holds."""
        return int(self.coords.shape[1])

    @property
    def elems_per_reg(self) -> int:
        return int(self.coords.shape[2])

    @cached_property
    def owners(self) -> np.ndarray:
        """``(matrices, rows, cols, 3)``: the ``(lane, reg, elem)`` holding each element
        (computed once per layout; read-only, as every caller shares it)."""
        table = _owners(self)
        table.setflags(write=False)
        return table

    def element(self, lane: int, reg: int, elem: int) -> tuple[int, int, int]:
        """``(matrix, row, col)`` of element ``elem`` of register ``reg`` of ``lane``."""
        m, r, c = self.coords[lane, reg, elem]
        return int(m), int(r), int(c)

    def owner(self, matrix: int, row: int, col: int) -> tuple[int, int, int]:
        """``(lane, reg, elem)`` that holds element ``(row, col)`` of ``matrix``."""
        lane, reg, elem = self.owners[matrix, row, col]
        return int(lane), int(reg), int(elem)

    def lanes_holding_row(self, matrix: int, row: int) -> list[int]:
        """The lanes that receive (part of) one matrix row, in column order."""
        lanes = self.owners[matrix, row, :, 0]
        return sorted(set(int(x) for x in lanes), key=list(lanes).index)


def _owners(layout: FragmentLayout) -> np.ndarray:
    owners = np.full((layout.matrices, layout.rows, layout.cols, 3), -1, dtype=np.int64)
    for lane in range(WARP_SIZE):
        for reg in range(layout.regs):
            for elem in range(layout.elems_per_reg):
                m, r, c = layout.coords[lane, reg, elem]
                owners[m, r, c] = (lane, reg, elem)
    return owners


def _check_bijective(layout: FragmentLayout) -> FragmentLayout:
    """Every element of every matrix is held by exactly one (lane, reg, elem)."""
    m, r, c = layout.coords.reshape(-1, 3).T
    expected = layout.matrices * layout.rows * layout.cols
    inside = ((0 <= m) & (m < layout.matrices) & (0 <= r) & (r < layout.rows)
              & (0 <= c) & (c < layout.cols)).all()
    # one element each: as many holders as elements, no element held twice (counted by numpy,
    # where a set of Python tuples cost a notebook's first mma cell tens of milliseconds;
    # bincount, as np.unique loads numpy.ma, another 17 ms, on its first call)
    if (len(m) != expected or not inside
            or np.bincount((m * layout.rows + r) * layout.cols + c).max(initial=0) > 1):
        raise AssertionError(f"layout {layout.name} is not one-to-one")
    return layout


# ---------------------------------------------------------------------------------------------
# The 8x8 x 16-bit fragment (ldmatrix, stmatrix, movmatrix, and the blocks of every f16 mma operand)
# ---------------------------------------------------------------------------------------------

def m8n8_b16_position(lane: int | np.ndarray, elem: int | np.ndarray):
    """(row, col) of element ``elem`` (0 = low half) of a lane's register in an 8x8 .b16 fragment."""
    return np.asarray(lane) // 4, 2 * (np.asarray(lane) % 4) + np.asarray(elem)


@lru_cache(maxsize=None)
def ldmatrix_fragment(num: int = 4, trans: bool = False) -> FragmentLayout:
    """Register side of ``ldmatrix.sync.aligned.m8n8.{num}{.trans}.shared.b16``.

    Register ``i`` of every lane holds a piece of matrix ``i``. Without ``.trans`` lane ``t``
    gets row ``t // 4``, columns ``2*(t%4)`` and ``2*(t%4)+1``; with ``.trans`` the matrix in
    memory is read column-wise, so the same lane gets *column* ``t // 4``, rows ``2*(t%4)`` and
    ``2*(t%4)+1`` of the stored matrix.
    """
    _check_num(num)
    coords = np.zeros((WARP_SIZE, num, 2, 3), dtype=np.int64)
    for lane in range(WARP_SIZE):
        for reg in range(num):
            for elem in range(2):
                r, c = m8n8_b16_position(lane, elem)
                if trans:
                    r, c = c, r
                coords[lane, reg, elem] = (reg, r, c)
    name = f"ldmatrix.m8n8.x{num}{'.trans' if trans else ''}.b16"
    return _check_bijective(FragmentLayout(name, num, 8, 8, 16, coords))


def stmatrix_fragment(num: int = 4, trans: bool = False) -> FragmentLayout:
    """Register side of ``stmatrix``: the same map as ldmatrix, data flowing the other way."""
    return ldmatrix_fragment(num, trans)


@lru_cache(maxsize=None)
def movmatrix_fragment() -> FragmentLayout:
    """The fragment movmatrix reads and writes: one 8x8 .b16 matrix, one register per lane.

    ``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: the element that ends up in ``d`` at
    (lane, elem) is the element of ``a``'s matrix at the transposed position.
    """
    return ldmatrix_fragment(1, False)


def row_address_lanes(num: int) -> np.ndarray:
    """``(num, 8)``: the lane whose address gives row ``r`` of matrix ``i`` (lane ``8*i + r``)."""
    _check_num(num)
    return np.arange(8 * num, dtype=np.int64).reshape(num, 8)


def address_role(lane: int, num: int) -> tuple[int, int] | None:
    """``(matrix, row)`` whose start address ``lane`` supplies, or ``None`` if it is ignored.

    With ``.x1`` only lanes 0-7 supply addresses and with ``.x2`` lanes 0-15. For ``.target
    sm_75`` or below the PTX ISA still requires the other lanes to hold valid addresses (copy
    the lower ones up); the emulator models newer targets, where they are ignored.
    """
    _check_num(num)
    if not 0 <= lane < WARP_SIZE:
        raise ValueError(f"lane must be 0..31, got {lane}")
    if lane >= 8 * num:
        return None
    return lane // 8, lane % 8


def _check_num(num: int) -> None:
    if num not in (1, 2, 4):
        raise ValueError(f".num must be 1, 2 or 4 (x1, x2, x4), got {num!r}")


# ---------------------------------------------------------------------------------------------
# The 8-bit forms of sm_100a/sm_110a/sm_120a-class GPUs (ldmatrix .m16n16/.m8n16, stmatrix .m16n8)
#
# Coordinates are those of shared memory: ``(matrix, row, col)`` where ``row`` is the 16-byte
# row named by one lane's address (see ptxlab.model.matrix_forms.address_lanes) and ``col`` the
# byte within it (for the packed 6-/4-bit sources: the element within it). One element = one
# byte of a register, lowest byte first. Cross-checked with CuTe's SM100 LDSM/STSM traits in
# tests/test_cute_sm100.py.
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def ldmatrix_m16n16_fragment(num: int = 1) -> FragmentLayout:
    """Register side of ``ldmatrix.sync.aligned.m16n16.x{num}.trans.shared.b8`` (and of the
    packed ``.b8x16.b6x16_p32``/``.b4x16_p64`` sources, one element per byte).

    Matrix ``m`` is 16 rows of 16 bytes and uses registers ``2m`` and ``2m+1``. With ``.trans``
    (mandatory) lane ``t`` receives *column* ``t // 4`` (register ``2m``) and column
    ``t // 4 + 8`` (register ``2m+1``) of the stored matrix, rows ``4*(t%4) .. 4*(t%4)+3`` in
    bytes 0..3: the PTX ISA's "4 consecutive columns across 2 rows" of the transposed matrix.
    """
    if num not in (1, 2):
        raise ValueError(f"ldmatrix .m16n16 exists only as .x1 and .x2, got x{num}")
    coords = np.zeros((WARP_SIZE, 2 * num, 4, 3), dtype=np.int64)
    for lane in range(WARP_SIZE):
        g, t = lane // 4, lane % 4
        for reg in range(2 * num):
            for byte in range(4):
                coords[lane, reg, byte] = (reg // 2, 4 * t + byte, g + 8 * (reg % 2))
    return _check_bijective(FragmentLayout(f"ldmatrix.m16n16.x{num}.trans.b8", num, 16, 16, 8,
                                           coords))


@lru_cache(maxsize=None)
def ldmatrix_m8n16_fragment(num: int = 4) -> FragmentLayout:
    """Register side of ``ldmatrix.sync.aligned.m8n16.x{num}.shared.b8x16.{b6x16_p32,b4x16_p64}``.

    Matrix ``i`` (register ``i``) is 8 rows of 16 packed elements; lane ``t`` receives row
    ``t // 4``, elements ``4*(t%4) .. 4*(t%4)+3``, one per byte (no ``.trans`` form exists).
    """
    _check_num(num)
    coords = np.zeros((WARP_SIZE, num, 4, 3), dtype=np.int64)
    for lane in range(WARP_SIZE):
        for reg in range(num):
            for byte in range(4):
                coords[lane, reg, byte] = (reg, lane // 4, 4 * (lane % 4) + byte)
    return _check_bijective(FragmentLayout(f"ldmatrix.m8n16.x{num}.b8x16", num, 8, 16, 8, coords))


@lru_cache(maxsize=None)
def stmatrix_m16n8_fragment(num: int = 4) -> FragmentLayout:
    """Register side of ``stmatrix.sync.aligned.m16n8.x{num}.trans.shared.b8``.

    Register ``i`` of every lane holds a piece of a 16x8 byte matrix ``A_i`` as an mma
    accumulator-like fragment: lane ``t`` byte ``b`` is ``A_i[t//4 + 8*(b//2)][2*(t%4) + b%2]``.
    ``.trans`` (mandatory) stores ``A_i`` transposed: 8 rows of 16 bytes, row ``j`` (named by
    lane ``8i + j``) holding column ``j`` of ``A_i``. In shared-memory coordinates lane ``t``
    byte ``b`` goes to row ``2*(t%4) + b%2``, byte ``t//4 + 8*(b//2)``.
    """
    _check_num(num)
    coords = np.zeros((WARP_SIZE, num, 4, 3), dtype=np.int64)
    for lane in range(WARP_SIZE):
        g, t = lane // 4, lane % 4
        for reg in range(num):
            for byte in range(4):
                coords[lane, reg, byte] = (reg, 2 * t + byte % 2, g + 8 * (byte // 2))
    return _check_bijective(FragmentLayout(f"stmatrix.m16n8.x{num}.trans.b8", num, 8, 16, 8,
                                           coords))


# ---------------------------------------------------------------------------------------------
# mma.sync fragments
# ---------------------------------------------------------------------------------------------

#: Bits of one element of each PTX type.
TYPE_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "s8": 8, "u8": 8, "s32": 32}


@dataclass(frozen=True)
class MmaForm:
    """One ``mma.sync.aligned`` variant: its shape, types and the four fragment layouts."""

    shape: str
    atype: str
    btype: str
    ctype: str
    dtype: str
    a: FragmentLayout = field(repr=False)
    b: FragmentLayout = field(repr=False)
    c: FragmentLayout = field(repr=False)
    d: FragmentLayout = field(repr=False)

    @property
    def m(self) -> int:
        return self.a.rows

    @property
    def n(self) -> int:
        return self.b.cols

    @property
    def k(self) -> int:
        return self.a.cols

    @property
    def ptx(self) -> str:
        """The instruction as written in PTX."""
        return (f"mma.sync.aligned.{self.shape}.row.col."
                f"{self.dtype}.{self.atype}.{self.btype}.{self.ctype}")

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.shape, self.atype, self.btype, self.ctype, self.dtype)


def _tiled_layout(name: str, rows: int, cols: int, elem_bits: int,
                  blocks: list[tuple[int, int]], block_rows: int, block_cols: int) -> FragmentLayout:
    """A fragment made of ``blocks`` (row, col offsets), one register each, in register order.

    Inside a block of ``block_rows`` x ``block_cols`` elements, lane ``t`` holds row ``t // 4``
    and the ``per = block_cols // 4`` consecutive columns starting at ``per * (t % 4)``; this is
    the shape every mma operand shares, whatever the element width.
    """
    per = block_cols // 4
    assert block_rows == 8 and per * elem_bits == 32, name
    lane = np.arange(WARP_SIZE)[:, None, None]                    # (lane, reg, elem)
    r0, c0 = (np.array(offsets)[None, :, None] for offsets in zip(*blocks))
    coords = np.zeros((WARP_SIZE, len(blocks), per, 3), dtype=np.int64)
    coords[..., 1] = r0 + lane // 4
    coords[..., 2] = c0 + per * (lane % 4) + np.arange(per)
    return _check_bijective(FragmentLayout(name, 1, rows, cols, elem_bits, coords))


def _transpose_layout(layout: FragmentLayout, name: str) -> FragmentLayout:
    """The same lane assignment, with row and column exchanged (for the column-major B operand)."""
    coords = layout.coords.copy()
    coords[..., 1], coords[..., 2] = layout.coords[..., 2], layout.coords[..., 1]
    return _check_bijective(FragmentLayout(name, 1, layout.cols, layout.rows, layout.elem_bits, coords))


def _operand_a(shape: str, atype: str) -> FragmentLayout:
    m, k = 16, int(shape.split("k")[1])
    bits = TYPE_BITS[atype]
    block_cols = 32 // bits * 4          # elements of one 8-row block's row across 4 lanes
    blocks = [(r, c) for c in range(0, k, block_cols) for r in (0, 8)]
    return _tiled_layout(f"{shape}.A.{atype}", m, k, bits, blocks, 8, block_cols)


def _operand_b(shape: str, btype: str) -> FragmentLayout:
    k = int(shape.split("k")[1])
    bits = TYPE_BITS[btype]
    block_cols = 32 // bits * 4
    # B (K x N) is laid out like a row-major N x K matrix (the ".col" in "row.col").
    blocks_t = [(0, c) for c in range(0, k, block_cols)]
    bt = _tiled_layout(f"{shape}.B^T.{btype}", 8, k, bits, blocks_t, 8, block_cols)
    return _transpose_layout(bt, f"{shape}.B.{btype}")


def _operand_cd(shape: str, ctype: str, which: str) -> FragmentLayout:
    bits = TYPE_BITS[ctype]
    block_cols = 32 // bits * 4
    blocks = [(r, c) for r in (0, 8) for c in range(0, 8, block_cols)]
    layout = _tiled_layout(f"{shape}.{which}.{ctype}", 16, 8, bits, blocks, 8, block_cols)
    if bits == 32:
        # Four f32/s32 accumulators: c0,c1 = row g, cols 2t,2t+1; c2,c3 = row g+8.
        lane, reg = np.arange(WARP_SIZE)[:, None], np.arange(4)[None, :]
        coords = np.zeros((WARP_SIZE, 4, 1, 3), dtype=np.int64)
        coords[..., 0, 1] = lane // 4 + 8 * (reg // 2)
        coords[..., 0, 2] = 2 * (lane % 4) + reg % 2
        layout = _check_bijective(FragmentLayout(layout.name, 1, 16, 8, 32, coords))
    return layout


#: The mma variants the course covers: (shape, atype, btype, ctype, dtype).
MMA_VARIANTS: tuple[tuple[str, str, str, str, str], ...] = (
    ("m16n8k16", "f16", "f16", "f16", "f16"),
    ("m16n8k16", "f16", "f16", "f32", "f32"),
    ("m16n8k16", "bf16", "bf16", "f32", "f32"),
    ("m16n8k8", "f16", "f16", "f32", "f32"),
    ("m16n8k8", "tf32", "tf32", "f32", "f32"),
    ("m16n8k32", "s8", "s8", "s32", "s32"),
)


@lru_cache(maxsize=None)
def mma_form(shape: str, atype: str, btype: str, ctype: str, dtype: str) -> MmaForm:
    """The fragment layouts of one mma variant; a clear error for a variant not covered."""
    key = (shape, atype, btype, ctype, dtype)
    if key not in MMA_VARIANTS:
        covered = ", ".join(f"{s} {a}x{b}+{c}->{d}" for s, a, b, c, d in MMA_VARIANTS)
        raise ValueError(f"mma variant {shape} A={atype} B={btype} C={ctype} D={dtype} is not "
                         f"modelled; covered: {covered}")
    return MmaForm(shape, atype, btype, ctype, dtype,
                   a=_operand_a(shape, atype), b=_operand_b(shape, btype),
                   c=_operand_cd(shape, ctype, "C"), d=_operand_cd(shape, dtype, "D"))


def mma_forms() -> list[MmaForm]:
    """Every mma variant the course covers."""
    return [mma_form(*v) for v in MMA_VARIANTS]


MMA_FORMS = MMA_VARIANTS
