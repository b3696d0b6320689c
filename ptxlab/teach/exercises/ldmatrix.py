"""Exercises of the ldmatrix notebook: row addresses, receiving lanes, the A operand."""
from __future__ import annotations

import numpy as np

from ...model import emulator, layouts
from .. import diagnosis, tiles
from ..checks import AddressTask
from . import cases
from .base import AddressExercise, ChoiceExercise, FragmentExercise
from .kernel_exercise import KernelExercise, KernelRun

# ---------------------------------------------------------------------------------------------
# 1. Which element does each register half receive?
# ---------------------------------------------------------------------------------------------

receive = FragmentExercise(
    key="ldmatrix.receive",
    title="ldmatrix .x4: which element lands in (lane, reg, half)",
    arg_names=("lane", "reg", "half"),
    answer_names=("matrix", "row", "col"),
    visible=lambda: cases.ldmatrix_cases((4,)),
    hidden_cases=lambda: cases.ldmatrix_cases((1, 2)),
    mistakes=(
        (lambda lane, reg, half: (reg, lane % 8, 2 * (lane // 8) + half),
         "you gave lane % 8 the row: but a row is spread over the four lanes 4r..4r+3, so the "
         "row is lane // 4 and the column pair is lane % 4"),
        (lambda lane, reg, half: (lane // 8, lane // 4 % 8, 2 * (lane % 4) + half),
         "the matrix comes from the register number, not the lane: register i of every lane "
         "holds a piece of matrix i"),
        (lambda lane, reg, half: (reg, lane // 4, lane % 4 + half),
         "each lane holds two neighbouring columns: the first column is 2 * (lane % 4)"),
    ),
    hints=(
        "Register i of every lane holds part of matrix i.",
        "A row of 8 elements is shared by 4 consecutive lanes, 2 elements (one register) each: "
        "lanes 0-3 hold row 0, lanes 4-7 row 1, and so on.",
        "Worked example, lane 6, reg 1, half 1: lanes 4-7 share row 1; lane 6 is the third of "
        "them (place 2), so it holds columns 4 and 5, and half 1 is column 5: (matrix 1, row 1,"
        " col 5).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2. Row addresses of num matrices side by side in a wider tile
# ---------------------------------------------------------------------------------------------


def _side_args(num, base, stride):
    return (num, base, stride)


def _side_random_x4(rng: np.random.Generator) -> list[AddressTask]:
    """Four matrices side by side in a random tile."""
    return cases.random_address_tasks(rng, tiles.side_by_side, (4,), _side_args, repeats=1)


side_by_side_rows = AddressExercise(
    key="ldmatrix.side_by_side_rows",
    title="ldmatrix .x{num}: row addresses of matrices side by side",
    arg_names=("lane", "num", "base", "stride"),
    visible=lambda: cases.address_tasks(tiles.side_by_side, (4, 2), ((0, 64), (256, 96)),
                                        _side_args) + cases.drawn(_side_random_x4, 1),
    hidden_cases=lambda rng: cases.random_address_tasks(rng, tiles.side_by_side, (1, 2, 4),
                                                        _side_args),
    mistakes=(
        (lambda lane, num, base, stride: base + lane * stride,
         "you treated the matrices as stacked rows: here they sit side by side, so lanes 8-15 "
         "point at the same rows as lanes 0-7, 16 bytes (8 elements) further right"),
        (lambda lane, num, base, stride: base + (lane % 8) * stride + (lane // 8) * 8,
         "the column offset of matrix i is 8 elements = 16 bytes: addresses count bytes"),
    ),
    hints=(
        "Lanes 0-7 give rows 0-7 of matrix 0, lanes 8-15 rows 0-7 of matrix 1, and so on.",
        "Matrix i starts 8 elements to the right of matrix i-1, on the same tile rows.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 3. Row addresses of the A operand of m16n8k16 (a 16x16 tile of a larger row-major matrix)
# ---------------------------------------------------------------------------------------------


def _a_tasks(params):
    return [AddressTask(tiles.mma_a(), b, s, (b, s)) for b, s in params]


def _a_hidden(rng):
    p = tiles.mma_a()
    return [AddressTask(p, b, s, (b, s)) for b, s in
            (cases.random_tile_params(rng, p) for _ in range(8))]


a_operand_rows = AddressExercise(
    key="ldmatrix.a_operand_rows",
    title="ldmatrix .x4: row addresses of the m16n8k16 A operand",
    arg_names=("lane", "base", "stride"),
    visible=lambda: _a_tasks(((0, 32), (512, 128))) + cases.drawn(_a_hidden, 1),
    hidden_cases=_a_hidden,
    mistakes=(
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8) * 16,
         "you loaded the four blocks left to right: but mma's register a1 holds rows 8-15 "
         "(the lower-left block) and a2 columns 8-15. Lanes 8-15 must point at rows 8-15, "
         "columns 0-7"),
        (lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 8,
         "the right-hand blocks start 8 elements = 16 bytes to the right; you added 8 bytes"),
        (lambda lane, base, stride: base + lane * stride,
         "lanes 16-31 must point at the right half of the tile (columns 8-15), rows 0-15 again"),
    ),
    hints=(
        "mma's A fragment: a0 = rows 0-7/cols 0-7, a1 = rows 8-15/cols 0-7, a2 = rows 0-7/cols "
        "8-15, a3 = rows 8-15/cols 8-15. ldmatrix.x4 fills register i from the rows lanes "
        "8i..8i+7 point at.",
        "So lanes 0-15 give tile rows 0-15 at column 0, and lanes 16-31 rows 0-15 at column 8.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. The A fragment as (row, col) of the 16x16 tile
# ---------------------------------------------------------------------------------------------


def _a_cases(shapes):
    return [(layouts.mma_form(s, "f16", "f16", "f32", "f32").a, cases.row_col, ())
            for s in shapes]


a_fragment = FragmentExercise(
    key="ldmatrix.a_fragment",
    title="m16n8k16 A fragment: (lane, reg, half) -> (row, col)",
    arg_names=("lane", "reg", "half"),
    answer_names=("row", "col"),
    visible=lambda: _a_cases(("m16n8k16",)),
    hidden_cases=lambda: _a_cases(("m16n8k8",)),
    mistakes=(
        (lambda lane, reg, half: (lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + half + 8 * (reg % 2)),
         "you swapped what reg % 2 and reg // 2 do: register 1 is the lower-left block (rows "
         "8-15), register 2 the upper-right (columns 8-15)"),
        (lambda lane, reg, half: (lane // 4, 2 * (lane % 4) + half + 8 * reg),
         "the four registers are not four column blocks: odd registers move down 8 rows"),
    ),
    hints=(
        "Inside each 8x8 block the ldmatrix layout holds: four consecutive lanes per row (lanes"
        " 0-3 row 0, lanes 4-7 row 1, ...), two neighbouring columns per lane, half picking one"
        " of them.",
        "Register 1 adds 8 rows; register 2 adds 8 columns; register 3 both.",
        "Worked example, lane 13, reg 3, half 1: inside its block lane 13 sits in row 3 (lanes "
        "12-15), columns 2-3, half 1 is column 3. Register 3 is the lower-right block: row 3 + "
        "8 = 11, column 3 + 8 = 11.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 5. Kernel: load the A operand from a padded tile
# ---------------------------------------------------------------------------------------------

A_KERNEL_NAME = "load_a_operand"


def describe_a_value(v: int) -> str:
    """Values are ids row * 16 + col of the 16x16 A tile."""
    if v >= 256:
        return f"value {v} (not an element of A)"
    r, c = divmod(int(v), 16)
    return f"A[{r}][{c}]"


def _a_staged(sld: int) -> np.ndarray:
    """The shared memory (bytes) of the kernel: A = ids 0..255, rows ``sld`` elements apart."""
    smem = np.zeros((16, sld), dtype=np.uint16)
    smem[:, :16] = np.arange(256, dtype=np.uint16).reshape(16, 16)
    return smem.reshape(-1).view(np.uint8)


def a_operand_expected(sld: int) -> np.ndarray:
    """What ldmatrix.x4 gives each lane for A = ids 0..255 staged with row stride ``sld``."""
    place = tiles.mma_a()
    addrs = place.expected_addresses(place.tile(0, sld * 2))
    return emulator.ldmatrix(_a_staged(sld), addrs, num=4)


def a_operand_run(sld: int) -> KernelRun:
    a = np.arange(256, dtype=np.uint16)
    return KernelRun(label=f"tile row stride {sld} elements", grid=(1,), block=(32,),
                     args=[a, np.int32(sld), np.zeros(128, dtype=np.uint32)], out_index=2,
                     expected=a_operand_expected(sld), shared_mem=16 * sld * 2,
                     describe_value=describe_a_value, loaded_from=tiles.mma_a(),
                     suspects=diagnosis.Deferred(lambda: diagnosis.load_suspects(
                         _a_staged(sld), tiles.mma_a(), 0, 2 * sld, trans=False)))


a_operand_kernel = KernelExercise(
    key="ldmatrix.a_operand_kernel",
    title="kernel: load the A operand with one ldmatrix.x4",
    kernel_name=A_KERNEL_NAME,
    visible=lambda: [a_operand_run(16), a_operand_run(56)],
    hidden_cases=lambda rng: [a_operand_run(s) for s in (24, 40)],
    advice_for=(
        (lambda src: ".x4" not in src, "the A operand is four 8x8 matrices: use .x4"),
        (lambda src: "cvta" not in src and "__cvta_generic_to_shared" not in src,
         "ldmatrix with .shared needs a shared-window address: convert the pointer with "
         "__cvta_generic_to_shared (or cvta.to.shared)"),
    ),
    hints=(
        "Reuse your a_operand_rows formula with base = the tile's shared address and stride = "
        "2 * sld bytes.",
        "const unsigned base = (unsigned)__cvta_generic_to_shared(tile); then add "
        "(lane % 16) * sld * 2 + (lane / 16) * 16.",
        'asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : '
        '"=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));',
    ),
)

# ---------------------------------------------------------------------------------------------
# 6. Spot the bug: a wrapper named x2 that issues x4
# ---------------------------------------------------------------------------------------------

x2_wrapper_bug = ChoiceExercise(
    key="ldmatrix.x2_wrapper_bug",
    title="spot the bug: the x2 wrapper",
    correct="c",
    explanations={
        "a": "the name of a C++ function changes nothing; only the PTX string decides what the "
             "hardware does",
        "b": "PTX is not type-checked against the wrapper's name: four output operands and a "
             ".x4 string compile fine",
        "c": "the string says .x4, so all 32 lanes supply row addresses: lanes 16-31 point at "
             "whatever they hold (here garbage or out of range), and registers 2 and 3 get "
             "filled. Name wrappers after the instruction they issue",
        "d": "ldmatrix never reads global memory; the addresses are shared-memory addresses",
    },
    hints=("Read the string inside asm(), not the function's name.",
           "How many matrices does .x4 load, and which lanes supply their row addresses?"),
)
