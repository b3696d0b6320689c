"""Bit-exact model of ldmatrix, stmatrix, movmatrix and mma.sync on numpy arrays.

Registers are raw ``uint32`` bits, shared memory is a ``uint8`` array, addresses are byte offsets
per lane: the same things the PTX instruction sees. Every function accepts one warp (``addrs``
of shape ``(32,)``) or a batch of warps (``(W, 32)``), and is vectorised over both. All layout
knowledge comes from :mod:`ptxlab.model.layouts`.

Where the hardware would fault or the result is undefined, the model raises an
:class:`EmulatorError` naming the warp, the lane and the address instead of guessing.

Arithmetic of ``mma`` (measured against the H100, see ``reports/hardware/REPORT.md``):

* s8 -> s32 is exact integer arithmetic, wrapping modulo 2**32 like the hardware without
  ``.satfinite``.
* f16/bf16/tf32 inputs follow the tensor core's own arithmetic (:mod:`ptxlab.model.tensorcore`):
  exact products aligned to the largest exponent, truncated 25 bits below it, added exactly,
  then rounded once (toward zero into f32, to nearest into f16). This is not IEEE
  round-to-nearest after every addition, and it matches the H100 bit for bit.
* tf32 operands: only the upper 19 bits of each 32-bit register are used (the low 13 mantissa
  bits are ignored), as the H100's tensor core reads them; the PTX ISA leaves what mma makes
  of a pattern that is not a tf32 value unsaid.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np

from . import layouts, matrix_forms, tensorcore
from .layouts import ROW_BYTES, WARP_SIZE

__all__ = [
    "EmulatorError", "MisalignedAddress", "AddressOutOfRange", "BadOperand", "UndefinedResult",
    "ldmatrix", "stmatrix", "movmatrix", "mma", "mma_warp", "ldmatrix_batch", "stmatrix_batch",
    "ldmatrix_form", "stmatrix_form", "row_loader", "row_storer", "unpack_row_elements",
    "pack_row_elements",
    "pack_b16", "unpack_b16", "matrices_to_fragment", "fragment_to_matrices", "element_bits",
]


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

class EmulatorError(ValueError):
    """Something the hardware would fault on, or leave undefined; names where it happened."""

    def __init__(self, message: str, *, lane: int | None = None, warp: int | None = None,
                 address: int | None = None, lanes: tuple[int, ...] = ()):
        where = []
        if warp is not None:
            where.append(f"warp {warp}")
        if lane is not None:
            where.append(f"lane {lane}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.lane, self.warp, self.address = lane, warp, address
        #: every lane concerned (``lane`` is the one the message leads with)
        self.lanes = tuple(lanes) or ((lane,) if lane is not None else ())


class MisalignedAddress(EmulatorError):
    """A row address that is not a multiple of 16 bytes."""


class AddressOutOfRange(EmulatorError):
    """A row that does not lie wholly inside the shared-memory buffer."""


class BadOperand(EmulatorError):
    """Wrong shape, dtype or qualifier of an operand."""


class UndefinedResult(EmulatorError):
    """The PTX ISA leaves the result undefined (e.g. two lanes storing to one row)."""


# ---------------------------------------------------------------------------------------------
# Operand normalisation
# ---------------------------------------------------------------------------------------------

def _as_registers(x, name: str, per_lane: int | None) -> np.ndarray:
    """Accept ``(32,)``/``(32, n)``/``(W, 32, n)`` raw bits; return ``(W, 32, n)`` uint32."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "ui":
        raise BadOperand(f"{name} must hold raw register bits as unsigned integers (uint32), "
                         f"got dtype {arr.dtype}; reinterpret floats with .view(np.uint32)")
    if arr.dtype.itemsize > 4 and arr.size and (arr.max() > 0xFFFFFFFF or arr.min() < 0):
        raise BadOperand(f"{name} holds values that do not fit in 32 bits")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise BadOperand(f"{name} holds negative values; pass the raw bits as uint32")
    arr = arr.astype(np.uint32, copy=False)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != WARP_SIZE:
        raise BadOperand(f"{name} must have shape (32, n) or (warps, 32, n), got {np.shape(x)}")
    if per_lane is not None and arr.shape[2] != per_lane:
        raise BadOperand(f"{name} needs {per_lane} register(s) per lane, got {arr.shape[2]}")
    return arr


def _as_addresses(addrs, name: str = "addrs") -> tuple[np.ndarray, bool]:
    """Return ``(W, 32)`` int64 addresses and whether the caller passed a batch."""
    arr = np.asarray(addrs)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise BadOperand(f"{name} must be whole byte offsets, got non-integer values")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "ui":
        raise BadOperand(f"{name} must be integer byte offsets, got dtype {arr.dtype}")
    batched = arr.ndim == 2
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != WARP_SIZE:
        raise BadOperand(f"{name} must hold one address per lane: shape (32,) or (warps, 32), "
                         f"got {np.shape(addrs)}")
    return arr.astype(np.int64, copy=False), batched


def _as_smem(smem, warps: int, writable: bool = False) -> np.ndarray:
    """Shared memory as ``(1 or W, S)`` uint8 (a view, so stores land in the caller's array)."""
    if not isinstance(smem, np.ndarray):
        raise BadOperand(f"shared memory must be a numpy uint8 array, got {type(smem).__name__}")
    if smem.dtype != np.uint8:
        raise BadOperand(f"shared memory must be raw bytes (dtype uint8), got {smem.dtype}; "
                         "use .view(np.uint8)")
    if smem.ndim == 1:
        view = smem[None]
    elif smem.ndim == 2 and smem.shape[0] == warps:
        view = smem
    else:
        raise BadOperand(f"shared memory must have shape (S,) or (warps={warps}, S), "
                         f"got {smem.shape}")
    if writable and not smem.flags.writeable:
        raise BadOperand("shared memory array is read-only")
    return view


def _check_form(shape: str, dtype: str, num: int, what: str,
                trans: bool = False) -> matrix_forms.MatrixForm:
    """The validated form (the same rules, and messages, as the CPU model and ptxas)."""
    if num not in (1, 2, 4):
        raise BadOperand(f"{what} .num must be 1, 2 or 4 (x1/x2/x4), got {num!r}")
    try:
        return matrix_forms.form(what, shape=shape, num=num, trans=trans, dtype=dtype)
    except matrix_forms.FormError as exc:
        raise BadOperand(str(exc)) from None


def _row_addresses(addrs: np.ndarray, num: int, smem_bytes: int, what: str,
                   rows_per_matrix: int = 8) -> np.ndarray:
    """The ``(W, rows_per_matrix*num)`` row addresses that the instruction uses, validated.

    Lanes at or above that count are ignored, as for targets above sm_75 (for ``.target sm_75``
    they must still be valid: see :func:`ptxlab.model.layouts.address_role`).
    """
    per = rows_per_matrix
    rows = addrs[:, : per * num]
    if not (rows & (ROW_BYTES - 1)).any() and rows.min() >= 0 and rows.max() + ROW_BYTES <= smem_bytes:
        return rows
    bad = rows % ROW_BYTES != 0
    if bad.any():
        w, lane = map(int, np.argwhere(bad)[0])
        a = int(rows[w, lane])
        raise MisalignedAddress(
            f"{what} row address {a} (0x{a:x}) is not 16-byte aligned "
            f"(it supplies row {lane % per} of matrix {lane // per}; {a} % 16 = {a % 16})",
            lane=lane, warp=w if addrs.shape[0] > 1 else None, address=a)
    bad = (rows < 0) | (rows + ROW_BYTES > smem_bytes)
    if bad.any():
        w, lane = map(int, np.argwhere(bad)[0])
        a = int(rows[w, lane])
        raise AddressOutOfRange(
            f"{what} row address {a} (0x{a:x}) {'writes' if what == 'stmatrix' else 'reads'} "
            f"bytes {a}..{a + ROW_BYTES - 1}, outside "
            f"shared memory of {smem_bytes} bytes (row {lane % per} of matrix {lane // per})",
            lane=lane, warp=w if addrs.shape[0] > 1 else None, address=a)
    return rows


# ---------------------------------------------------------------------------------------------
# Packing helpers
# ---------------------------------------------------------------------------------------------

def pack_b16(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Two 16-bit patterns into one register: ``lo`` in bits 0-15, ``hi`` in bits 16-31."""
    return (np.asarray(lo).astype(np.uint32) & 0xFFFF) | (np.asarray(hi).astype(np.uint32) << 16)


def unpack_b16(regs: np.ndarray) -> np.ndarray:
    """Registers ``(..., n)`` -> ``(..., n, 2)`` uint16, low half first."""
    r = np.asarray(regs, dtype=np.uint32)
    return np.stack([(r & 0xFFFF).astype(np.uint16), (r >> 16).astype(np.uint16)], axis=-1)


def _unpack(regs: np.ndarray, elem_bits: int) -> np.ndarray:
    """``(..., n)`` uint32 -> ``(..., n, 32 // elem_bits)`` unsigned elements, lowest bits first."""
    per = 32 // elem_bits
    if per == 1:
        return regs[..., None]
    if elem_bits in (8, 16) and sys.byteorder == "little":   # the bytes already lie in order
        narrow = np.uint8 if elem_bits == 8 else np.uint16
        whole = np.ascontiguousarray(regs, dtype=np.uint32)
        return whole.view(narrow).reshape(whole.shape + (per,)).astype(np.uint32)
    mask = np.uint32((1 << elem_bits) - 1)
    # one whole-array shift per element position: a broadcast over a last axis of 2 or 4
    # would run numpy's inner loop 2 or 4 elements at a time
    return np.stack([(regs >> np.uint32(i * elem_bits)) & mask for i in range(per)], axis=-1)


def _pack(elems: np.ndarray, elem_bits: int) -> np.ndarray:
    """Inverse of :func:`_unpack`."""
    per = elems.shape[-1]
    e = elems.astype(np.uint32)
    if per == 1:
        return e[..., 0]
    shifts = np.arange(per, dtype=np.uint32) * elem_bits
    mask = np.uint32((1 << elem_bits) - 1)
    return np.bitwise_or.reduce((e & mask) << shifts, axis=-1)


def fragment_to_matrices(regs: np.ndarray, layout: layouts.FragmentLayout) -> np.ndarray:
    """Registers ``(..., 32, regs)`` -> element bit patterns ``(..., matrices, rows, cols)``."""
    regs = np.asarray(regs, dtype=np.uint32)
    elems = _unpack(regs, layout.elem_bits)                  # (..., 32, regs, per)
    o = layout.owners
    return elems[..., o[..., 0], o[..., 1], o[..., 2]]


def matrices_to_fragment(mats: np.ndarray, layout: layouts.FragmentLayout) -> np.ndarray:
    """Element bit patterns ``(..., matrices, rows, cols)`` -> registers ``(..., 32, regs)``."""
    c = layout.coords
    elems = np.asarray(mats)[..., c[..., 0], c[..., 1], c[..., 2]]   # (..., 32, regs, per)
    return _pack(elems, layout.elem_bits)


# ---------------------------------------------------------------------------------------------
# ldmatrix / stmatrix
# ---------------------------------------------------------------------------------------------

def _gather_index(num: int, trans: bool) -> tuple[np.ndarray, np.ndarray]:
    """For each (lane, reg, elem): which address lane's row, and which 16-bit column of it."""
    lay = layouts.ldmatrix_fragment(num, trans)
    row_lanes = layouts.row_address_lanes(num)
    c = lay.coords
    return row_lanes[c[..., 0], c[..., 1]], c[..., 2]


def ldmatrix(smem: np.ndarray, addrs, num: int = 4, trans: bool = False, *,
             shape: str = "m8n8", dtype: str = "b16") -> np.ndarray:
    """``ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16`` for one warp or a batch.

    ``smem``: uint8 ``(S,)`` or ``(W, S)``; ``addrs``: ``(32,)`` or ``(W, 32)`` byte offsets.
    Returns ``(32, num)`` uint32 (or ``(W, 32, num)`` for a batch).

    The sm_100a/sm_120a-class forms: ``shape="m16n16", dtype="b8"`` (``trans=True`` required;
    ``num`` 1 or 2; returns ``2*num`` registers), ``shape="m16n16"`` or ``"m8n16"`` with
    ``dtype="b6x16_p32"``/``"b4x16_p64"`` (packed sources, one element per byte); see
    :func:`ldmatrix_form`.
    """
    f = _check_form(shape, dtype, num, "ldmatrix", trans)
    if f.dtype != "b16":
        return ldmatrix_form(smem, addrs, f)
    a, batched = _as_addresses(addrs)
    mem = _as_smem(smem, a.shape[0])
    rows = _row_addresses(a, num, mem.shape[1], "ldmatrix")        # (W, 8*num)
    src_lane, col = _gather_index(num, trans)                      # (32, num, 2)
    # Row addresses are 16-byte aligned, so every element is a whole little-endian uint16 of the
    # buffer: gather in units of 16 bits (or 32 bits when both halves are neighbours).
    halves = (rows // 2).astype(np.int32)                          # (W, 8*num)
    if mem.shape[1] % 4:
        mem = np.pad(mem, ((0, 0), (0, 4 - mem.shape[1] % 4)))
    if not trans:
        words = np.ascontiguousarray(mem).view("<u4")              # (1 or W, S/4)
        idx = halves[:, src_lane[..., 0]] // 2 + (col[..., 0] // 2).astype(np.int32)
        out = words[0][idx] if words.shape[0] == 1 else np.take_along_axis(
            words, idx.reshape(idx.shape[0], -1), axis=1).reshape(idx.shape)
        out = out.astype(np.uint32)
    else:
        h16 = np.ascontiguousarray(mem).view("<u2")
        idx = halves[:, src_lane] + col.astype(np.int32)            # (W, 32, num, 2)
        el = h16[0][idx] if h16.shape[0] == 1 else np.take_along_axis(
            h16, idx.reshape(idx.shape[0], -1), axis=1).reshape(idx.shape)
        out = el[..., 0].astype(np.uint32) | (el[..., 1].astype(np.uint32) << 16)
    return out if batched else out[0]


def ldmatrix_batch(smem: np.ndarray, addrs, num: int = 4, trans: bool = False) -> np.ndarray:
    """Many warps at once: ``addrs (W, 32)`` -> ``(W, 32, num)``."""
    a = np.asarray(addrs)
    if a.ndim != 2:
        raise BadOperand(f"ldmatrix_batch wants addresses of shape (warps, 32), got {a.shape}")
    return ldmatrix(smem, a, num, trans)


def _refuse_shared_rows(rows: np.ndarray, batched: bool) -> None:
    """Two lanes of a stmatrix naming one row: which row lands there is left open by the PTX
    ISA (the H100 kept the lower lane's), so the model refuses to pick one."""
    srt = np.sort(rows, axis=1)
    dup = srt[:, 1:] == srt[:, :-1]
    if dup.any():
        w, i = map(int, np.argwhere(dup)[0])
        addr = int(srt[w, i])
        lanes = [int(x) for x in np.nonzero(rows[w] == addr)[0]]
        raise UndefinedResult(
            f"stmatrix lanes {lanes} all store a row at address {addr}; the PTX ISA does not "
            "say which of them is stored", lane=lanes[1], warp=w if batched else None, address=addr,
            lanes=tuple(lanes))


def stmatrix(smem: np.ndarray, addrs, regs, num: int = 4, trans: bool = False, *,
             shape: str = "m8n8", dtype: str = "b16") -> None:
    """``stmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16``: writes ``smem`` in place.

    ``shape="m16n8", dtype="b8", trans=True``: the sm_100a/sm_120a-class 8-bit form (see
    :func:`stmatrix_form`).

    Two lanes naming the same row would make the stored bytes depend on an order the PTX ISA
    does not define, so that raises :class:`UndefinedResult`.
    """
    f = _check_form(shape, dtype, num, "stmatrix", trans)
    if f.dtype != "b16":
        return stmatrix_form(smem, addrs, regs, f)
    a, batched = _as_addresses(addrs)
    r = _as_registers(regs, "regs", num)
    if r.shape[0] != a.shape[0]:
        raise BadOperand(f"regs is for {r.shape[0]} warp(s) but addrs for {a.shape[0]}")
    mem = _as_smem(smem, a.shape[0], writable=True)
    if mem.shape[0] == 1 and a.shape[0] > 1:
        raise BadOperand("a batch of stmatrix warps needs one shared buffer per warp: (W, S)")
    rows = _row_addresses(a, num, mem.shape[1], "stmatrix")
    _refuse_shared_rows(rows, batched)
    # The layout already places each register element at its (row, col) in memory, .trans
    # included, so row j of the result is the row whose address lane j gave.
    lay = layouts.stmatrix_fragment(num, trans)
    mats = fragment_to_matrices(r, lay)                             # (W, num, 8, 8) 16-bit bits
    rows_data = np.ascontiguousarray(mats.reshape(a.shape[0], num * 8, 8), dtype="<u2")
    bytes_ = rows_data.view(np.uint8).reshape(a.shape[0], num * 8, ROW_BYTES)
    dst = rows[..., None] + np.arange(ROW_BYTES)                    # (W, 8*num, 16)
    w_idx = np.arange(a.shape[0])[:, None, None]
    mem[w_idx, dst] = bytes_


def stmatrix_batch(smem: np.ndarray, addrs, regs, num: int = 4, trans: bool = False) -> None:
    """Many warps at once, one shared buffer per warp: ``smem (W, S)``, ``addrs (W, 32)``."""
    stmatrix(smem, addrs, regs, num, trans)


# ---------------------------------------------------------------------------------------------
# Every form, driven by its byte map (the .b8 and packed forms of sm_100a/sm_120a-class GPUs)
# ---------------------------------------------------------------------------------------------

def _form_rows(f: matrix_forms.MatrixForm, addrs, smem, writable: bool):
    a, batched = _as_addresses(addrs)
    mem = _as_smem(smem, a.shape[0], writable=writable)
    rows = _row_addresses(a, f.num, mem.shape[1], f.op, f.rows_per_matrix)
    return (a, batched, mem, rows) + _byte_sources(f)


@lru_cache(maxsize=None)
def _byte_sources(f: matrix_forms.MatrixForm) -> tuple[np.ndarray, np.ndarray]:
    """``(address lane, column)`` of every register byte of ``f``, ``(32, regs, 4)`` each
    (read-only: built once per form, every instruction of that form reads them)."""
    bm = matrix_forms.byte_map(f)                                   # (32, regs, 4, 3)
    src_lane = bm[..., 0] * f.rows_per_matrix + bm[..., 1]          # address lane of each byte
    col = np.array(bm[..., 2])
    for arr in (src_lane, col):
        arr.flags.writeable = False
    return src_lane, col


def _take(mem: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``mem[w, idx[w]]`` for ``mem (1 or W, S)`` and ``idx (W, ...)``."""
    if mem.shape[0] == 1:
        return mem[0][idx]
    return np.take_along_axis(mem, idx.reshape(idx.shape[0], -1), axis=1).reshape(idx.shape)


def unpack_row_elements(row_bytes: np.ndarray, dtype: str) -> np.ndarray:
    """The 16 elements of packed 16-byte rows ``(..., 16)`` uint8 -> ``(..., 16)`` uint8.

    ``b4x16_p64``: element ``i`` is bits ``4i .. 4i+3`` of bytes 0..7 read little-endian (the
    low nibble of byte 0 first); bytes 8..15 are padding. ``b6x16_p32``: element ``i`` is bits
    ``6i .. 6i+5`` of bytes 0..11; bytes 12..15 are padding. Each element lands zero-extended in
    the low bits of its byte. The ISA states the element and padding sizes only: this bit order
    and the position of the padding are the model's assumption (docs/blackwell_forms.md).
    """
    bits, _ = matrix_forms.PACKED_FORMATS[dtype]
    r = np.asarray(row_bytes, dtype=np.uint8).astype(np.uint16)
    first = np.arange(16) * bits                     # first bit of each element
    lo, shift = first // 8, (first % 8).astype(np.uint16)
    window = r[..., lo] | (r[..., lo + 1] << np.uint16(8))   # 16 bits hold any 6-bit element
    return ((window >> shift) & np.uint16((1 << bits) - 1)).astype(np.uint8)


def pack_row_elements(elements: np.ndarray, dtype: str) -> np.ndarray:
    """Inverse of :func:`unpack_row_elements`: ``(..., 16)`` element values -> 16-byte rows
    (padding bytes zero). Values must fit the element width."""
    bits, data_bytes = matrix_forms.PACKED_FORMATS[dtype]
    e = np.asarray(elements).astype(np.uint64)
    if e.shape[-1] != 16:
        raise BadOperand(f"a packed row holds 16 elements, got {e.shape[-1]}")
    if e.size and int(e.max()) >= (1 << bits):
        raise BadOperand(f"{dtype} elements are {bits}-bit: values must be < {1 << bits}")
    out = np.zeros(e.shape[:-1] + (16,), dtype=np.uint8)
    for i in range(16):
        for k in range(bits):                        # bit k of element i -> bit bits*i + k
            bit = bits * i + k
            out[..., bit // 8] |= (((e[..., i] >> np.uint64(k)) & np.uint64(1))
                                   << np.uint64(bit % 8)).astype(np.uint8)
    assert bits * 16 <= 8 * data_bytes
    return out


@lru_cache(maxsize=None)
def _whole_words(f: matrix_forms.MatrixForm) -> tuple[np.ndarray, np.ndarray] | None:
    """Where every register of ``f`` is one aligned 4-byte word of one row, lowest byte
    first (the non-transposed forms): each register's address lane and word within the row,
    ``(32, regs)`` each, so a load gathers words, not bytes. ``None`` for the other forms."""
    bm = matrix_forms.byte_map(f)
    lane = bm[..., 0] * f.rows_per_matrix + bm[..., 1]
    col = bm[..., 2]
    whole = (not f.packed and (lane == lane[..., :1]).all()
             and (col == col[..., :1] + np.arange(4)).all() and not (col[..., 0] % 4).any())
    return (lane[..., 0], col[..., 0] // 4) if whole else None


def ldmatrix_form(smem: np.ndarray, addrs, f: matrix_forms.MatrixForm) -> np.ndarray:
    """Any ldmatrix form, read through :func:`ptxlab.model.matrix_forms.byte_map`.

    Returns ``(32, f.regs)`` uint32 (or ``(W, 32, f.regs)``). Packed sources are unpacked one
    element per byte (see :func:`unpack_row_elements`).
    """
    if f.op != "ldmatrix":
        raise BadOperand(f"{f.ptx} is not an ldmatrix form")
    a, batched, mem, rows, src_lane, col = _form_rows(f, addrs, smem, writable=False)
    words = _whole_words(f)
    if words is not None and mem.shape[1] % 4 == 0:
        lanes, word = words                  # rows are 16-byte aligned, so words are whole
        out = _take(mem.view("<u4"), (rows >> 2)[:, lanes] + word).astype(np.uint32)
        return out if batched else out[0]
    starts = rows[:, src_lane]                                      # (W, 32, regs, 4)
    if f.packed:
        row_idx = rows[..., None] + np.arange(ROW_BYTES)            # (W, n, 16)
        elems = unpack_row_elements(_take(mem, row_idx), f.dtype)   # (W, n, 16)
        w_idx = np.arange(a.shape[0])[:, None, None, None]
        vals = elems[w_idx, src_lane[None], col[None]]              # (W, 32, regs, 4)
    else:
        vals = _take(mem, starts + col[None])
    # the four bytes of each register, lowest first: one little-endian word
    out = np.ascontiguousarray(vals, dtype=np.uint8).view("<u4")[..., 0].astype(np.uint32)
    return out if batched else out[0]


def stmatrix_form(smem: np.ndarray, addrs, regs, f: matrix_forms.MatrixForm) -> None:
    """Any stmatrix form, written through :func:`ptxlab.model.matrix_forms.byte_map`.

    Two lanes naming the same row raise :class:`UndefinedResult`, as for the m8n8 form.
    """
    if f.op != "stmatrix":
        raise BadOperand(f"{f.ptx} is not a stmatrix form")
    a, batched = _as_addresses(addrs)
    r = _as_registers(regs, "regs", f.regs)
    if r.shape[0] != a.shape[0]:
        raise BadOperand(f"regs is for {r.shape[0]} warp(s) but addrs for {a.shape[0]}")
    a, batched, mem, rows, src_lane, col = _form_rows(f, addrs, smem, writable=True)
    _refuse_shared_rows(rows, batched)
    shifts = np.arange(4, dtype=np.uint32) * np.uint32(8)
    data = ((r[..., None] >> shifts) & np.uint32(0xFF)).astype(np.uint8)   # (W, 32, regs, 4)
    dst = rows[:, src_lane] + col[None]                             # (W, 32, regs, 4)
    if mem.shape[0] == 1 and a.shape[0] > 1:
        # warps of several blocks side by side in one buffer: fine while no two warps store
        # to one byte, which is for the caller to have checked (which warp wins is not said)
        _refuse_shared_bytes(dst)
        mem[0][dst] = data
        return
    w_idx = np.arange(a.shape[0])[:, None, None, None]
    mem[w_idx, dst] = data


def _refuse_shared_bytes(dst: np.ndarray) -> None:
    """Warps of a batch that share one buffer must store to different bytes."""
    per_warp = [np.unique(d) for d in dst.reshape(dst.shape[0], -1)]
    every = np.concatenate(per_warp)
    if np.unique(every).size != every.size:
        raise BadOperand("warps of a batch that share one shared buffer store to the same "
                         "bytes; give each warp its own buffer: (W, S)")


# ---------------------------------------------------------------------------------------------
# One warp, register by register: a loader or storer built once per instruction (the CPU backend
# holds each register as its own (32,) array), so that each call only checks and gathers
# ---------------------------------------------------------------------------------------------

_UNIT = {4: np.dtype("<u4"), 2: np.dtype("<u2"), 1: np.dtype(np.uint8)}


class _Units(NamedTuple):
    """A form's register bytes as whole units of ``size`` bytes (4, 2 or 1) of its rows, and
    for each unit of the registers ``(regs, 32, 4 // size)``, flat, the unit it is among the
    rows' bytes read in address-lane order (``None`` where that order is the registers' own:
    the non-transposed m8n8 forms)."""
    size: int
    order: np.ndarray | None


@lru_cache(maxsize=None)
def _units(f: matrix_forms.MatrixForm) -> _Units:
    """The widest units the byte map of ``f`` moves whole (bytes in order, from one row,
    aligned): 4 for the non-transposed m8n8 forms, 2 for .trans .b16, 1 for the others."""
    bm = matrix_forms.byte_map(f).transpose(1, 0, 2, 3)            # (regs, 32, 4, 3)
    at = (bm[..., 0] * f.rows_per_matrix + bm[..., 1]) * ROW_BYTES + bm[..., 2]   # byte
    for size in (4, 2, 1):
        first = at[..., ::size]
        if (not (first % size).any()
                and (at.reshape(at.shape[:2] + (-1, size)) == first[..., None]
                     + np.arange(size)).all()):
            break
    order = (first // size).reshape(-1)
    if (order == np.arange(order.size)).all():
        return _Units(size, None)
    order.setflags(write=False)
    return _Units(size, order)


#: One 16-byte row as one numpy element: a gather of rows is then a gather of elements.
_ROW = np.dtype(f"V{ROW_BYTES}")


def _row_view(mem: np.ndarray) -> np.ndarray:
    """Shared memory as 16-byte rows (whole rows lie in the part viewed: a checked row ends on
    a multiple of 16 within the buffer)."""
    return mem[: mem.size - mem.size % ROW_BYTES].view(_ROW)


_OR, _MAX, _ALIGN = np.bitwise_or.reduce, np.maximum.reduce, np.uint64(ROW_BYTES - 1)


def _checked_rows(rows: np.ndarray, f: matrix_forms.MatrixForm, smem_bytes: int) -> None:
    """The checks and errors of :func:`_row_addresses` for one warp's ``(n,)`` row addresses,
    in one or two reductions where all is well (as unsigned, a negative address is past the
    end)."""
    u = rows.view(np.uint64)
    bits = _OR(u)                    # at least the largest row: often the only reduction
    last = smem_bytes - ROW_BYTES
    if not bits & _ALIGN and (bits <= last or _MAX(u) <= last):
        return
    _row_addresses(rows[None], f.num, smem_bytes, f.op, f.rows_per_matrix)


def row_loader(f: matrix_forms.MatrixForm) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``load(smem, rows) -> (f.regs, 32)`` uint32 for one warp of ldmatrix form ``f``: ``rows``
    the ``(f.address_lane_count,)`` int64 row addresses, ``smem`` the contiguous uint8 buffer
    they index. The checks and errors of :func:`ldmatrix_form`; each register a contiguous row.
    """
    if f.op != "ldmatrix":
        raise BadOperand(f"{f.ptx} is not an ldmatrix form")
    if f.packed or sys.byteorder != "little":
        def load_any(smem: np.ndarray, rows: np.ndarray) -> np.ndarray:
            addrs = np.zeros(WARP_SIZE, dtype=np.int64)
            addrs[:rows.size] = rows
            return np.ascontiguousarray(ldmatrix_form(smem, addrs, f).T)
        return load_any
    unit, order = _UNIT[_units(f).size], _units(f).order
    shape = (f.regs, WARP_SIZE)

    def load(smem: np.ndarray, rows: np.ndarray) -> np.ndarray:
        _checked_rows(rows, f, smem.size)
        data = _row_view(smem)[rows >> 4]                           # (n,) rows
        if order is not None:
            data = data.view(unit).reshape(-1)[order]               # the registers' units
        return data.view(np.uint32).reshape(shape)
    return load


def row_storer(f: matrix_forms.MatrixForm) -> Callable[[np.ndarray, np.ndarray, np.ndarray],
                                                        None]:
    """``store(smem, rows, regs)`` for one warp of stmatrix form ``f``: ``regs (f.regs, 32)``
    uint32, ``rows`` and ``smem`` as for :func:`row_loader` (``smem`` written in place). The
    checks and errors of :func:`stmatrix_form`, two lanes naming one row included."""
    if f.op != "stmatrix":
        raise BadOperand(f"{f.ptx} is not a stmatrix form")
    unit, order = _UNIT[_units(f).size], _units(f).order
    if order is not None:                          # where each unit of the rows comes from
        order = np.argsort(order)
    little = sys.byteorder == "little"

    def store(smem: np.ndarray, rows: np.ndarray, regs: np.ndarray) -> None:
        _checked_rows(rows, f, smem.size)
        if len(set(rows.tolist())) < rows.size:
            _refuse_shared_rows(rows[None], False)
        if not little or not smem.flags.c_contiguous:
            addrs = np.zeros(WARP_SIZE, dtype=np.int64)
            addrs[:rows.size] = rows
            stmatrix_form(smem, addrs, np.ascontiguousarray(regs.T), f)
            return
        data = np.ascontiguousarray(regs, dtype=np.uint32)
        if order is not None:
            data = data.view(unit).reshape(-1)[order]
        _row_view(smem)[rows >> 4] = data.reshape(-1).view(_ROW)
    return store


# ---------------------------------------------------------------------------------------------
# movmatrix
# ---------------------------------------------------------------------------------------------

def movmatrix(a, trans: bool = True) -> np.ndarray:
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: transpose an 8x8 fragment in registers.

    ``a``: ``(32,)`` (or ``(W, 32)``) uint32. Returns the same shape.
    """
    if not trans:
        raise BadOperand("movmatrix exists only with .trans (movmatrix.sync.aligned.m8n8.trans.b16)")
    arr = np.asarray(a)
    if arr.ndim == 1:
        regs = _as_registers(arr[:, None], "a", 1)
    elif arr.ndim == 2 and arr.shape == (WARP_SIZE, 1):
        regs = _as_registers(arr, "a", 1)
    elif arr.ndim == 2:
        regs = _as_registers(arr[..., None], "a", 1)
    else:
        raise BadOperand(f"movmatrix takes one register per lane: shape (32,) or (warps, 32), "
                         f"got {arr.shape}")
    if sys.byteorder != "little":
        lay = layouts.movmatrix_fragment()
        mats = fragment_to_matrices(regs, lay)                      # (W, 1, 8, 8)
        out = matrices_to_fragment(np.swapaxes(mats, -1, -2), lay)  # (W, 32, 1)
        return out.reshape(arr.shape)
    halves = np.ascontiguousarray(regs).reshape(regs.shape[0], -1).view(np.uint16)  # (W, 64)
    return halves.take(_movmatrix_halves(), axis=1).view(np.uint32).reshape(arr.shape)


@lru_cache(maxsize=None)
def _movmatrix_halves() -> np.ndarray:
    """``(64,)``: for each 16-bit half of the result (lane, low/high), the half of the source
    that lands there: the element at the transposed position. One gather moves the matrix."""
    lay = layouts.movmatrix_fragment()
    src = lay.owners[0].transpose(1, 0, 2)                          # owner of A^T's elements
    c = lay.coords[:, 0]                                            # (32, 2, 3) of d
    o = src[c[..., 1], c[..., 2]]                                   # (32, 2, 3)
    index = (o[..., 0] * lay.regs + o[..., 1]) * lay.elems_per_reg + o[..., 2]
    index = index.reshape(-1)
    index.setflags(write=False)
    return index


# ---------------------------------------------------------------------------------------------
# mma.sync
# ---------------------------------------------------------------------------------------------

def _decode(bits: np.ndarray, typ: str) -> np.ndarray:
    """Element bit patterns -> exact float64 (or int64) values (NaN payloads need not survive)."""
    with np.errstate(invalid="ignore"):
        return _decode_values(bits, typ)


def _decode_values(bits: np.ndarray, typ: str) -> np.ndarray:
    if typ == "f16":
        return bits.astype(np.uint16, copy=False).view(np.float16).astype(np.float64)
    if typ == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if typ == "tf32":
        return (bits.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if typ == "f32":
        return bits.astype(np.uint32, copy=False).view(np.float32).astype(np.float64)
    if typ == "s8":
        return bits.astype(np.uint8).view(np.int8).astype(np.int64)
    if typ == "u8":
        return bits.astype(np.uint8).astype(np.int64)
    if typ == "s32":
        return bits.astype(np.uint32).view(np.int32).astype(np.int64)
    raise BadOperand(f"unknown element type {typ}")


def element_bits(values, typ: str) -> np.ndarray:
    """Numbers -> the ``uint32`` bit patterns of elements of PTX type ``typ``: the inputs of an
    mma as a kernel would hold them.

    f16 and bf16 round to nearest even (bf16 through f32, as a ``cvt`` chain would); ``tf32``
    elements are stored as the f32 pattern (the tensor core decides what to read of it); s8/u8
    keep the low 8 bits of the two's complement, s32 the low 32 bits.
    """
    v = np.asarray(values)
    if typ == "f16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint32)
    if typ == "bf16":
        f = v.astype(np.float32).view(np.uint32).astype(np.uint64)
        return (((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint32)
    if typ in ("f32", "tf32"):
        return v.astype(np.float32).view(np.uint32).astype(np.uint32)
    if typ in ("s8", "u8"):
        return (v.astype(np.int64) & 0xFF).astype(np.uint32)
    if typ == "s32":
        return (v.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    raise BadOperand(f"unknown element type {typ!r}")


def _wrap_s32(values: np.ndarray) -> np.ndarray:
    """Exact integer sums -> s32 bit patterns, wrapping modulo 2**32 (no ``.satfinite``)."""
    return (values.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)


def mma(shape: str, a, b, c, *, atype: str = "f16", btype: str = "f16", ctype: str = "f32",
        dtype: str = "f32") -> np.ndarray:
    """``mma.sync.aligned.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype}``: D = A*B + C.

    ``a``, ``b``, ``c``: raw register bits ``(32, n)`` (or ``(W, 32, n)``) in the fragment
    layouts of :func:`ptxlab.model.layouts.mma_form`. Returns ``d`` the same way.
    """
    try:
        form = layouts.mma_form(shape, atype, btype, ctype, dtype)
    except ValueError as exc:
        raise BadOperand(str(exc)) from None
    batched = np.asarray(a).ndim == 3
    ra = _as_registers(a, "a", form.a.regs)
    rb = _as_registers(b, "b", form.b.regs)
    rc = _as_registers(c, "c", form.c.regs)
    if not (ra.shape[0] == rb.shape[0] == rc.shape[0]):
        raise BadOperand("a, b and c must be for the same number of warps")
    if atype in ("s8", "u8"):
        A = _decode(fragment_to_matrices(ra, form.a)[:, 0], atype)     # (W, M, K)
        B = _decode(fragment_to_matrices(rb, form.b)[:, 0], btype)     # (W, K, N)
        C = _decode(fragment_to_matrices(rc, form.c)[:, 0], ctype)     # (W, M, N)
        out = matrices_to_fragment(_wrap_s32(np.einsum("wmk,wkn->wmn", A, B) + C)[:, None],
                                   form.d)
    elif sys.byteorder != "little":
        A = _decode(_warps_last_operand(ra, form.a, cols_first=True), atype)    # (K, M, W)
        B = _decode(_warps_last_operand(rb, form.b, cols_first=False), btype)  # (K, N, W)
        C = _decode(_warps_last_operand(rc, form.c, cols_first=False), ctype)  # (M, N, W)
        out = _warps_last_fragment(tensorcore.mma_sum(A, B, C, atype, ctype, dtype), form.d)
    else:
        plan = _mma_plan(form.key)
        out = _result_registers(_float_mma_bits(ra, rb, rc, plan, form), plan.d)
    return out if batched else out[0]


def mma_warp(form: layouts.MmaForm, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One warp's :func:`mma` with every operand register by register: ``a (regs, 32)`` uint32
    and so on (how the CPU backend holds them, one ``(32,)`` array per register); returns ``d``
    as ``(regs, 32)``, each register a contiguous row. The same arithmetic as :func:`mma`; this
    order spares the backend a transpose of every operand and a copy of every result."""
    for x, lay, name in ((a, form.a, "a"), (b, form.b, "b"), (c, form.c, "c")):
        if x.dtype != np.uint32 or x.shape != (lay.regs, WARP_SIZE):
            raise BadOperand(f"{name} must be ({lay.regs}, 32) uint32 register bits, "
                             f"got {x.shape} {x.dtype}")
    if form.atype in ("s8", "u8") or sys.byteorder != "little":
        return np.ascontiguousarray(mma(form.shape, a.T, b.T, c.T, atype=form.atype,
                                        btype=form.btype, ctype=form.ctype, dtype=form.dtype).T)
    plan = _mma_plan(form.key, regs_first=True)
    return _result_registers(_float_mma_bits(a[None], b[None], c[None], plan, form), plan.d)[0]


# ---------------------------------------------------------------------------------------------
# mma operands as flat gathers (little-endian hosts: a register's elements lie in its bytes in
# order, so a warp's registers viewed as narrow elements are one array to index)
# ---------------------------------------------------------------------------------------------

class _MmaPlan(NamedTuple):
    """Where each element of one mma variant lies in a warp's registers ``(32, regs)`` (or
    ``(regs, 32)``) viewed as ``32 * regs * per`` narrow elements: ``a (K, M)``, ``b (K, N)``,
    ``c (N, M)`` (transposed, as :func:`ptxlab.model.tensorcore.few_warps_bits` takes it); and
    ``d (32, regs, per)`` (or ``(regs, 32, per)``), the flat ``n * M + m`` of each result
    element a register holds."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: np.ndarray


def _element_positions(layout: layouts.FragmentLayout, regs_first: bool) -> np.ndarray:
    """``(rows, cols)``: each element's position among a warp's registers as narrow elements."""
    o = layout.owners[0]                                            # (rows, cols, 3)
    reg = o[..., 1] * WARP_SIZE + o[..., 0] if regs_first else o[..., 0] * layout.regs + o[..., 1]
    return reg * layout.elems_per_reg + o[..., 2]


@lru_cache(maxsize=None)
def _mma_plan(key: tuple[str, str, str, str, str], regs_first: bool = False) -> _MmaPlan:
    """The gather indices of one mma variant, built once (read-only: every call shares them)."""
    form = layouts.mma_form(*key)
    d = form.d.coords
    d = d[..., 2] * form.d.rows + d[..., 1]                         # (32, regs, per)
    plan = _MmaPlan(a=_element_positions(form.a, regs_first).T.copy(),
                    b=_element_positions(form.b, regs_first),
                    c=_element_positions(form.c, regs_first).T.copy(),
                    d=d.transpose(1, 0, 2).copy() if regs_first else d)
    for arr in plan:
        arr.setflags(write=False)
    return plan


_NARROW = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _operand_bits(regs: np.ndarray, index: np.ndarray, typ: str) -> np.ndarray:
    """Registers ``(W, 32, n)`` (or ``(W, n, 32)``, as the plan's index was built) -> element
    bits ``index.shape + (W,)``, the warps last as the tensor-core sum takes them."""
    W = regs.shape[0]
    elems = np.ascontiguousarray(regs).reshape(W, -1).view(_NARROW[layouts.TYPE_BITS[typ]])
    return elems[0][index][..., None] if W == 1 else elems.T[index]


@lru_cache(maxsize=None)
def _operand_table(typ: str) -> np.ndarray:
    """``(2, 65536)``: the float64 value of every 16-bit pattern of ``typ`` (f16, bf16; 0 for
    an infinity or NaN) over its step-1 power ``2**e`` (``inf`` for those): one look-up gives
    what :func:`ptxlab.model.tensorcore.few_warps_bits` takes."""
    table = tensorcore.stacked_inputs(_decode(np.arange(1 << 16, dtype=np.uint32), typ), typ)
    table.setflags(write=False)
    return table


def _stacked(bits: np.ndarray, typ: str) -> np.ndarray:
    """Element bits -> ``(2, ...)`` values (0 for an infinity or NaN) over step-1 powers."""
    if typ in ("f16", "bf16"):
        return _operand_table(typ).take(bits, axis=1)       # take: a third of [:, bits]
    return tensorcore.stacked_inputs(_decode(bits, typ), typ)


def _float_mma_bits(ra: np.ndarray, rb: np.ndarray, rc: np.ndarray, plan: _MmaPlan,
                    form: layouts.MmaForm) -> np.ndarray:
    """Result bits ``(N, M, W)`` of a floating-point variant (uint16 for f16, uint32 for f32):
    a few warps through the stacked look-ups; with an infinity or NaN, or many warps, through
    the decoded values."""
    a, b = _operand_bits(ra, plan.a, form.atype), _operand_bits(rb, plan.b, form.btype)
    with np.errstate(invalid="ignore"):            # a signalling NaN widened: see _decode
        C = _decode_values(_operand_bits(rc, plan.c, form.ctype), form.ctype)
        if tensorcore.is_few(ra.shape[0]):
            bits = tensorcore.few_warps_bits(_stacked(a, form.atype), _stacked(b, form.btype),
                                             C, form.atype, form.ctype, form.dtype)
            if bits is not None:
                return bits
    # the few-warps sum declined (an infinity or NaN) or never applied: the general sum
    return tensorcore.general_bits(_decode(a, form.atype), _decode(b, form.btype),
                                   C.transpose(1, 0, 2), form.atype, form.ctype,
                                   form.dtype).transpose(1, 0, 2)


def _result_registers(bits: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Result bits ``(N, M, W)`` (uint16 for f16, uint32 for f32) -> registers ``(W, 32, n)``."""
    W = bits.shape[-1]
    flat = bits.reshape(-1, W)
    elems = flat[:, 0][index][None] if W == 1 else flat.T[:, index]    # (W, 32, n, per)
    return np.ascontiguousarray(elems).view(np.uint32)[..., 0]


def _warps_last_operand(regs: np.ndarray, layout: layouts.FragmentLayout,
                        cols_first: bool) -> np.ndarray:
    """Registers ``(W, 32, n)`` -> element bits ``(rows, cols, W)`` (``(cols, rows, W)`` with
    ``cols_first``) of the layout's one matrix: the warps last, as the tensor-core sum takes
    them."""
    mats = fragment_to_matrices(regs, layout)[:, 0]                 # (W, rows, cols)
    return np.ascontiguousarray(mats.transpose(2, 1, 0) if cols_first else mats.transpose(1, 2, 0))


def _warps_last_fragment(bits: np.ndarray, layout: layouts.FragmentLayout) -> np.ndarray:
    """Inverse of :func:`_warps_last_operand` for a result: ``(rows, cols, W)`` -> registers
    ``(W, 32, n)``."""
    return matrices_to_fragment(np.moveaxis(bits, -1, 0)[:, None], layout)
