"""CuTe's layout notation, ``shape:stride``, read and evaluated without CuTe.

A layout maps a coordinate to an offset: ``(8,8):(1,8)`` is an 8x8 column-major tile, and
``((4,8),2):((16,1),8)`` maps (lane, value) to an element of a tile, the way CuTe writes a
thread-value layout. Shapes and strides may nest. A 1-D index into a mode is split into that
mode's coordinates column-major first (CuTe's ``idx2crd``), so ``layout(i)`` is the offset of
the ``i``-th element in CuTe's order. The layout-fit rule reads layouts written this way; pycute
(shipped with ``nvidia-cutlass``) evaluates the same strings in the tests.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import Union

import numpy as np

IntTuple = Union[int, tuple["IntTuple", ...]]

_TOKEN = re.compile(r"\s*(?:(\()|(\))|(,)|(:)|_?(-?\d+))")


class LayoutSyntaxError(ValueError):
    """A layout string that is not ``shape:stride`` in CuTe's notation."""


def _parse_tuple(text: str, pos: int) -> tuple[IntTuple, int]:
    match = _TOKEN.match(text, pos)
    if not match:
        raise LayoutSyntaxError(f"expected a number or '(' at column {pos + 1} of {text!r}")
    if match.group(5) is not None:
        return int(match.group(5)), match.end()
    if match.group(1) is None:
        raise LayoutSyntaxError(f"expected a number or '(' at column {pos + 1} of {text!r}")
    items: list[IntTuple] = []
    pos = match.end()
    while True:
        item, pos = _parse_tuple(text, pos)
        items.append(item)
        match = _TOKEN.match(text, pos)
        if match and match.group(3):
            pos = match.end()
            continue
        if match and match.group(2):
            return tuple(items), match.end()
        raise LayoutSyntaxError(f"expected ',' or ')' at column {pos + 1} of {text!r}")


def _congruent(a: IntTuple, b: IntTuple) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(_congruent(x, y) for x, y in zip(a, b))


def _size(shape: IntTuple) -> int:
    return shape if isinstance(shape, int) else prod(_size(s) for s in shape)


def _offset(index: int | np.ndarray, shape: IntTuple, stride: IntTuple):
    """Offset of the 1-D ``index`` (column-major over ``shape``) under ``stride``."""
    if isinstance(shape, int):
        return (index % shape) * stride if shape > 1 else index * 0
    total = 0
    for sub_shape, sub_stride in zip(shape, stride):
        n = _size(sub_shape)
        total = total + _offset(index % n, sub_shape, sub_stride)
        index = index // n
    return total


def _all_positive(shape: IntTuple) -> bool:
    return shape > 0 if isinstance(shape, int) else all(_all_positive(s) for s in shape)


def _text(t: IntTuple) -> str:
    return str(t) if isinstance(t, int) else "(" + ",".join(_text(x) for x in t) + ")"


@dataclass(frozen=True)
class Layout:
    """``shape:stride``; calling it with a 1-D index (or a top-level coordinate) gives the offset."""

    shape: IntTuple
    stride: IntTuple

    def __post_init__(self) -> None:
        if not _congruent(self.shape, self.stride):
            raise LayoutSyntaxError(f"shape {_text(self.shape)} and stride {_text(self.stride)} "
                                    "do not have the same nesting")

    @property
    def rank(self) -> int:
        """Number of top-level modes (1 for a plain ``n:s``)."""
        return 1 if isinstance(self.shape, int) else len(self.shape)

    @cached_property
    def size(self) -> int:
        return _size(self.shape)

    def mode(self, i: int) -> "Layout":
        """The ``i``-th top-level mode as a layout of its own."""
        if isinstance(self.shape, int):
            if i != 0:
                raise IndexError(f"layout {self} has one mode")
            return self
        return Layout(self.shape[i], self.stride[i])

    def __call__(self, *coord) -> int | np.ndarray:
        """``layout(i)``: offset of the ``i``-th element; ``layout(i, j, ...)``: one index per mode."""
        if len(coord) == 1:
            return _offset(coord[0], self.shape, self.stride)
        if len(coord) != self.rank:
            raise ValueError(f"layout {self} has {self.rank} modes, got {len(coord)} coordinates")
        return sum(self.mode(i)(c) for i, c in enumerate(coord))

    def offsets(self) -> np.ndarray:
        """Offsets of every element, in CuTe's 1-D order."""
        return np.asarray(self(np.arange(self.size, dtype=np.int64)), dtype=np.int64)

    def coords(self, index: int | np.ndarray) -> tuple:
        """The top-level coordinate ``(i0, i1, ...)`` of a 1-D index (each mode flattened)."""
        out = []
        for i in range(self.rank):
            n = self.mode(i).size
            out.append(index % n)
            index = index // n
        return tuple(out)

    def __str__(self) -> str:
        return f"{_text(self.shape)}:{_text(self.stride)}"


def parse_layout(text: str) -> Layout:
    """Read ``"(8,8):(1,8)"``, ``"32:1"`` or a nested ``"((4,8),2):((16,1),8)"`` (CuTe's ``_8``
    spelling of a static integer is accepted too)."""
    if not isinstance(text, str) or ":" not in text:
        raise LayoutSyntaxError(f"a layout is written shape:stride, e.g. (8,8):(1,8); got {text!r}")
    shape, pos = _parse_tuple(text, 0)
    match = _TOKEN.match(text, pos)
    if not (match and match.group(4)):
        raise LayoutSyntaxError(f"expected ':' between shape and stride in {text!r}")
    stride, pos = _parse_tuple(text, match.end())
    if text[pos:].strip():
        raise LayoutSyntaxError(f"unexpected {text[pos:].strip()!r} after the stride in {text!r}")
    if not _all_positive(shape):
        raise LayoutSyntaxError(f"every extent of a shape must be positive, got {_text(shape)}")
    return Layout(shape, stride)


def as_layout(layout: "Layout | str") -> Layout:
    return layout if isinstance(layout, Layout) else parse_layout(layout)
