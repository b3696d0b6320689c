"""Exercises of the movmatrix notebook: where each element ends up and which lane sends it, the
mirrored row addresses of a transposed tile, a transpose kernel, and a register-transpose bug.

Every expected answer is computed by running the emulator on element ids, never written out.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...model import emulator, layouts
from .. import diagnosis, tiles
from ..checks import AddressTask
from . import cases
from .base import AddressExercise, ChoiceExercise, FragmentExercise
from .stmatrix import (FILL, TileKernelExercise, TileRun, addressing_lane, emulated_store,
                       held_by, stored_from, value_names)

# ---------------------------------------------------------------------------------------------
# What movmatrix does to a fragment, measured on element ids
# ---------------------------------------------------------------------------------------------


def movmatrix_each(regs: np.ndarray) -> np.ndarray:
    """One movmatrix per register: ``(32, n)`` -> ``(32, n)``."""
    regs = np.asarray(regs, dtype=np.uint32).reshape(layouts.WARP_SIZE, -1)
    return np.stack([emulator.movmatrix(regs[:, i]) for i in range(regs.shape[1])], axis=1)


@lru_cache(maxsize=None)
def after_movmatrix(num: int) -> layouts.FragmentLayout:
    """Where every element of the stored matrices sits after ``ldmatrix.x{num}`` followed by a
    movmatrix on each register: matrix i, row r, column c is stored as the id 64i + 8r + c,
    loaded and moved by the emulator, and read back from the registers."""
    ids = np.arange(64 * num, dtype=np.uint16)                   # rows of 8, stacked
    regs = emulator.ldmatrix(ids.view(np.uint8), np.arange(32) % (8 * num) * 16, num=num)
    elems = emulator.unpack_b16(movmatrix_each(regs)).astype(np.int64)   # (32, num, 2)
    coords = np.stack([elems // 64, elems % 64 // 8, elems % 8], axis=-1)
    return layouts.FragmentLayout(f"ldmatrix.x{num} + movmatrix", num, 8, 8, 16, coords)


# ---------------------------------------------------------------------------------------------
# 1. Which stored element is in (lane, reg, half) after ldmatrix + movmatrix?
# ---------------------------------------------------------------------------------------------

def _moved_cases(nums) -> list[tuple]:
    return [(after_movmatrix(n), cases.ident, ()) for n in nums]


transposed_fragment = FragmentExercise(
    key="movmatrix.transposed_fragment",
    title="ldmatrix.x4 + movmatrix: which stored element is in (lane, reg, half)",
    answer_names=("matrix", "row", "col"),
    visible=lambda: _moved_cases((4,)),
    hidden_cases=lambda: _moved_cases((1, 2)),
    mistakes=(
        (lambda lane, reg, half: (reg, lane // 4, 2 * (lane % 4) + half),
         "that is the fragment before the movmatrix; after it, lane t holds row t // 4 of the "
         "*transposed* matrix, i.e. column t // 4 of the stored one"),
        (lambda lane, reg, half: (reg, 2 * (lane % 4), lane // 4 + half),
         "the two halves of a register come from neighbouring *rows* of the stored matrix "
         "(one column): row = 2 * (lane % 4) + half"),
        (lambda lane, reg, half: (lane // 8, 2 * (lane % 4) + half, lane // 4 % 8),
         "movmatrix never mixes registers: register i still holds matrix i"),
    ),
    hints=(
        "movmatrix leaves the layout alone and transposes the matrix: lane t gets row t // 4 "
        "of the transpose.",
        "Row t // 4 of the transpose is column t // 4 of the original; the halves walk down "
        "that column.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2. Which lane (and half) sent it?
# ---------------------------------------------------------------------------------------------


def _sender_cases(nums) -> list[tuple]:
    out = []
    for n in nums:
        before = layouts.ldmatrix_fragment(n)
        out.append((after_movmatrix(n),
                    lambda m, r, c, _b=before: _b.owner(m, r, c)[0::2], ()))
    return out


sender = FragmentExercise(
    key="movmatrix.sender",
    title="movmatrix: which lane and half held the element before",
    answer_names=("lane", "half"),
    visible=lambda: _sender_cases((1,)),
    hidden_cases=lambda: _sender_cases((2, 4)),
    mistakes=(
        (lambda lane, reg, half: (lane, half),
         "movmatrix does move data between lanes: apart from the diagonal, every element "
         "comes from another lane"),
        (lambda lane, reg, half: (4 * (2 * (lane % 4) + half) + lane // 8, half),
         "the lane is right; the half is the parity of the element's old column, which is "
         "its new row: (lane // 4) % 2"),
    ),
    hints=(
        "Lane t receives the original element (row 2*(t%4) + half, column t // 4).",
        "Before the move, element (row r, column c) sat in lane 4r + c // 2, half c % 2.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 3. Row addresses that store a 16x16 tile transposed: the blocks trade places
# ---------------------------------------------------------------------------------------------


def transposed_tile() -> tiles.Placement:
    """Where the four blocks of a 16x16 tile loaded as mma's A (ldmatrix.x4) go once each is
    transposed: block (r0, c0) to (c0, r0), so matrices 1 and 2 trade places."""
    return tiles.mirrored(tiles.mma_a())


def _tasks(params) -> list[AddressTask]:
    return [AddressTask(transposed_tile(), b, s, (b, s)) for b, s in params]


def _random_tasks(rng: np.random.Generator) -> list[AddressTask]:
    p = transposed_tile()
    return [AddressTask(p, b, s, (b, s)) for b, s in
            (cases.random_tile_params(rng, p) for _ in range(8))]


transposed_rows = AddressExercise(
    key="movmatrix.transposed_rows",
    title="stmatrix .x4: row addresses of the transposed 16x16 tile",
    arg_names=("lane", "base", "stride"),
    visible=lambda: _tasks(((0, 32), (512, 64))) + cases.drawn(_random_tasks, 1),
    hidden_cases=_random_tasks,
    mistakes=(
        (lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 16,
         "that is the load's formula: it puts every transposed block back where it came from. "
         "The blocks must trade places too: matrix 1 (loaded from rows 8-15, columns 0-7) "
         "belongs at rows 0-7, columns 8-15, and matrix 2 the other way round"),
        (lambda lane, base, stride: base + (lane % 8 + 8 * (lane // 16)) * stride
         + (lane // 8 % 2) * 8,
         "the right-hand blocks start 8 elements = 16 bytes in: addresses count bytes"),
    ),
    hints=(
        "Matrix i was loaded from the block at (rows r0.., cols c0..); transposed, it belongs "
        "at (rows c0.., cols r0..).",
        "Matrices 0-3 came from (0,0), (8,0), (0,8), (8,8), so they go to (0,0), (0,8), "
        "(8,0), (8,8): lanes 8-15 point at columns 8-15, lanes 16-23 at rows 8-15.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. Kernel: transpose a 16x16 tile with ldmatrix.x4, movmatrix and stmatrix.x4
# ---------------------------------------------------------------------------------------------

TRANSPOSE_KERNEL_NAME = "transpose_16x16"


def loaded_tile(tile_in: np.ndarray, sld: int) -> np.ndarray:
    """The registers ``(32, 4)`` that ldmatrix.x4 loads from a 16x16 tile staged with rows
    ``sld`` elements apart, each lane pointing at A's rows (matrix i = A's register i)."""
    smem = np.zeros((16, sld), dtype=np.uint16)
    smem[:, :16] = tile_in
    place = tiles.mma_a()
    return emulator.ldmatrix(smem.reshape(-1).view(np.uint8),
                             place.expected_addresses(place.tile(0, sld * 2)), num=4)


def _one_not_moved(regs: np.ndarray, moved: np.ndarray, i: int) -> np.ndarray:
    """The registers after movmatrix, but register ``i`` as it was loaded (its movmatrix
    forgotten)."""
    out = np.array(moved, copy=True)
    out[:, i] = np.asarray(regs)[:, i]
    return out


def transpose_run(sld: int, values: np.ndarray | None = None) -> TileRun:
    """The 16x16 tile ``values`` (default: ids 0..255) transposed through shared memory rows
    ``sld`` elements apart; the wrong variants a learner may write give their own advice."""
    tile_in = (np.arange(256) if values is None else np.asarray(values)).astype(np.uint16)
    tile_in = tile_in.reshape(16, 16)
    regs = loaded_tile(tile_in, sld)
    moved = movmatrix_each(regs)
    out_place = transposed_tile()
    mistakes = diagnosis.Deferred(lambda: (
        (emulated_store(moved, tiles.mma_a(), sld),
         "each 8x8 block is transposed but still in its old place: the two off-diagonal "
         "blocks must also trade places: store matrix 1 at rows 0-7, columns 8-15 and matrix "
         "2 at rows 8-15, columns 0-7 (or exchange r1 and r2 in the store)"),
        (emulated_store(regs, out_place, sld),
         "the blocks are in their mirrored places but not turned around: transpose each "
         "register once with movmatrix (movmatrix and a .trans store together cancel out)"),
        (emulated_store(regs, tiles.mma_a(), sld),
         "the tile came out as a plain copy: no block was transposed and none moved"),
        *((s.output, s.cause) for s in diagnosis.store_suspects(
            moved, out_place, sld, trans=False, fill=FILL)),
        *((emulated_store(_one_not_moved(regs, moved, i), out_place, sld),
           f"r{i} was stored as it was loaded, not transposed; the other three blocks are "
           f"right: one of the four movmatrix is missing, or transposes another register "
           f"than r{i} {{proof}}") for i in range(4)),
    ))
    return TileRun(label=f"tile row stride {sld} elements",
                   args=[tile_in.reshape(-1), np.int32(sld), np.zeros(256, dtype=np.uint16)],
                   out_index=2, expected=emulated_store(moved, out_place, sld),
                   shared_mem=2 * 16 * sld * 2, describe_value=value_names(tile_in, "in"),
                   cell_source=stored_from(out_place, ("r0", "r1", "r2", "r3")),
                   value_source=held_by(regs, ("r0", "r1", "r2", "r3"), "loaded into"),
                   row_names=lambda r: f"the output row stored through lane "
                                       f"{addressing_lane(out_place, r)}'s address",
                   mistakes=mistakes)


transpose_kernel = TileKernelExercise(
    key="movmatrix.transpose_kernel",
    title="kernel: transpose a 16x16 tile with movmatrix and stmatrix",
    kernel_name=TRANSPOSE_KERNEL_NAME,
    visible=lambda: [transpose_run(16), transpose_run(56)],
    hidden_cases=lambda rng: [transpose_run(s, rng.permutation(256)) for s in (24, 40)],
    advice_for=(
        (lambda src: "movmatrix" not in src,
         "transpose each of the four registers with movmatrix.sync.aligned.m8n8.trans.b16"),
        (lambda src: "stmatrix" not in src,
         "store the four transposed matrices with one stmatrix.x4"),
    ),
    hints=(
        "Four movmatrix, one per register: r0 = transposed r0, and so on.",
        "Then one stmatrix.x4 of {r0, r1, r2, r3}, with your transposed_rows formula: base = "
        "the output tile's shared address, stride = 2 * sld bytes.",
        'asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r0) : "r"(r0)); '
        "and const unsigned addr = s_dst + (lane % 8 + 8 * (lane / 16)) * sld * 2 + "
        "(lane / 8 % 2) * 16;",
    ),
)

# ---------------------------------------------------------------------------------------------
# 5. Spot the bug: transposing mma's A operand in registers, block by block
# ---------------------------------------------------------------------------------------------

a_blocks_bug = ChoiceExercise(
    key="movmatrix.a_blocks_bug",
    title="spot the bug: four movmatrix make A transposed?",
    correct="b",
    explanations={
        "a": "each movmatrix transposes one 8x8 block in place; transposing the 16x16 A also "
             "moves the blocks, and nothing here moves a1 and a2",
        "b": "the diagonal blocks are right, but Aᵀ's lower-left block is the transposed "
             "*upper-right* block of A (a2), and its upper-right is a1 transposed. Swap them: "
             "a1 = movmatrix(a2), a2 = movmatrix(a1) (through a temporary)",
        "c": "movmatrix works on one register at a time, so four calls are exactly how a "
             "16x16 operand is handled; it compiles",
        "d": "the registers are transposed once each, not twice; the product does change",
    },
    hints=("Write A as four blocks [[P, Q], [R, S]]. What is Aᵀ in blocks?",
           "a1 holds R (lower-left) and a2 holds Q (upper-right)."),
)
