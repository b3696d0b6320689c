"""Exercises of the first notebook: byte addresses in a tile, alignment, banks, launches."""
from __future__ import annotations

from . import cases
from .base import ChoiceExercise, FunctionExercise


def _element_hidden(rng) -> list[tuple[int, int, int, int]]:
    """Random elements of random tiles: 16-byte aligned bases, strides of 2 to 11 chunks."""
    return [(int(rng.integers(0, 16)), int(rng.integers(0, 16)), 16 * int(rng.integers(0, 64)),
             16 * int(rng.integers(2, 12))) for _ in range(40)]


element_address = FunctionExercise(
    key="basics.element_address",
    title="byte address of element (row, col) of a tile",
    arg_names=("row", "col", "base", "stride"),
    reference=lambda row, col, base, stride: base + row * stride + 2 * col,
    visible=lambda: [(r, c, 0, 32) for r in (0, 1, 5) for c in (0, 3, 15)] +
                    [(2, 4, 256, 80)] + cases.drawn(_element_hidden, 4),
    hidden_cases=_element_hidden,
    describe=lambda a: f"row {a[0]}, col {a[1]}, base {a[2]}, stride {a[3]}",
    mistakes=(
        (lambda row, col, base, stride: base + row * stride + col,
         "a 16-bit element is 2 bytes: the column moves the address by 2 * col"),
        (lambda row, col, base, stride: base + 2 * (row * stride + col),
         "the stride is already in bytes: do not multiply it by 2"),
        (lambda row, col, base, stride: row * stride + 2 * col,
         "add the tile's base address"),
    ),
    hints=("Addresses count bytes; each 16-bit element is 2 bytes.",
           "Row r starts r * stride bytes after base."),
)

bank_of = FunctionExercise(
    key="basics.bank_of",
    title="which bank serves a byte address",
    arg_names=("address",),
    reference=lambda address: (address // 4) % 32,
    visible=lambda: [(a,) for a in (0, 1, 4, 8, 64, 124, 127, 128, 132, 1000)],
    hidden_cases=lambda rng: [(int(a),) for a in rng.integers(0, 1 << 16, 60)],
    describe=lambda a: f"address {a[0]}",
    mistakes=(
        (lambda address: address % 32,
         "a bank is 4 bytes wide: divide the address by 4 before taking % 32"),
        (lambda address: (address // 4) % 16,
         "there are 32 banks"),
        (lambda address: address // 128,
         "address // 128 is the 128-byte line, not the bank: the bank is the word index mod 32"),
    ),
    hints=("Shared memory is 32 banks of 4-byte words, interleaved word by word.",
           "word = address // 4; bank = word % 32"),
)

row_alignment = ChoiceExercise(
    key="basics.row_alignment",
    title="which address can start an ldmatrix row",
    correct="b",
    explanations={
        "a": "0x1008 is 8-byte aligned only: a row is 16 bytes and must start on a 16-byte "
             "boundary",
        "b": "0x1010 = 4112 = 257 * 16: 16-byte aligned",
        "c": "0x1004 is only 4-byte aligned",
        "d": "0x1001 is not even 2-byte aligned: not a 16-bit element boundary",
    },
    hints=("A row of 8 16-bit elements is 16 bytes.", "The address must be a multiple of 16."),
)

launch_132_bug = ChoiceExercise(
    key="basics.launch_132_bug",
    title="spot the bug: the <<<132>>> launch",
    correct="c",
    explanations={
        "a": "ldmatrix is executed by a warp (32 lanes); one lane per block is not a warp that "
             "could load 8x8 matrices the way the kernel expects",
        "b": "132 is the number of SMs of an H100, but a kernel runs once per thread of every "
             "block; the count of blocks is not a block size",
        "c": "<<<132>>> gives only the grid: nvcc compiles it with the block size defaulting "
             "to 1, so it launches 132 blocks of one thread each, and ldmatrix, a 32-lane "
             "instruction, runs in warps of a single lane (undefined in the PTX ISA). The "
             "intended launch is <<<1, 32>>>: one block of one warp, because the kernel's "
             "lanes 0..31 each supply one row address",
        "d": "the launch itself is valid (132 blocks of one thread); nothing checks that a "
             "block holds a whole warp, so no launch error is raised",
    },
    hints=("<<<grid, block>>>: which of the two numbers is the number of threads per block?",
           "The kernel is written for exactly one warp."),
)
