"""How PTX types map to numpy, and how register bits are read and written under a lane mask.

A register holds raw bits: ``uint16``/``uint32``/``uint64`` by its declared size, ``bool`` for
a predicate. An instruction reads it *as* its operand type (a numpy view: ``int32`` for
``.s32``, ``float32`` for ``.f32``; 16-bit floats stay raw ``uint16`` bits) and writes back raw
bits. Register arrays are never changed in place, so two registers may share one array.
"""
from __future__ import annotations

import numpy as np

WARP = 32

#: numpy dtype in which an instruction of each PTX type sees its operands.
VIEW_DTYPE = {
    "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.uint16, "bf16": np.uint16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
    "f16x2": np.uint32, "bf16x2": np.uint32, "tf32": np.uint32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
    "pred": np.bool_, "b128": None,
}

#: storage dtype of a register by its declared type's size in bytes.
STORAGE_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

UNSIGNED_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIGNED_BY_SIZE = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}

TYPE_NAMES = set(VIEW_DTYPE)
INT_TYPES = {"b8", "u8", "s8", "b16", "u16", "s16", "b32", "u32", "s32", "b64", "u64", "s64"}
SIGNED_TYPES = {"s8", "s16", "s32", "s64"}
FLOAT_TYPES = {"f16", "bf16", "f32", "f64", "f16x2", "bf16x2", "tf32"}


def type_bytes(t: str) -> int:
    if t == "pred":
        return 1
    if t == "b128":
        return 16
    return np.dtype(VIEW_DTYPE[t]).itemsize


def storage_dtype(reg_type: str):
    if reg_type == "pred":
        return np.bool_
    return STORAGE_BY_SIZE[type_bytes(reg_type)]


def constant(value, dtype, width: int = WARP) -> np.ndarray:
    """A read-only array holding one value for every lane: 32 of them, or ``width`` when the
    program runs many warps as one vector (:mod:`ptxlab.run.ptx.wide`)."""
    arr = np.full(width, value, dtype=dtype)
    arr.flags.writeable = False
    return arr


def convert_bits(v: np.ndarray, to_dtype, signed_source: bool) -> np.ndarray:
    """Raw bits of one width -> another: truncate, or zero/sign-extend."""
    v = np.asarray(v)
    src_size = v.dtype.itemsize
    dst = np.dtype(to_dtype)
    if dst == np.bool_:
        return v.astype(bool)
    if v.dtype == np.bool_:
        return v.astype(dst)
    if src_size == dst.itemsize:
        return v.view(dst)
    if src_size > dst.itemsize:
        return v.astype(dst)             # numpy integer cast truncates (wraps)
    if signed_source:
        wide = v.view(SIGNED_BY_SIZE[src_size]).astype(SIGNED_BY_SIZE[dst.itemsize])
        return wide.view(dst) if dst.kind == "u" else wide.astype(dst)
    wide = v.view(UNSIGNED_BY_SIZE[src_size]).astype(UNSIGNED_BY_SIZE[dst.itemsize])
    return wide if dst.kind == "u" else wide.view(dst)


def merge(mask, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``new`` in the active lanes, ``old`` elsewhere (mask None = all lanes)."""
    if mask is None:
        return new
    return np.where(mask, new, old)
