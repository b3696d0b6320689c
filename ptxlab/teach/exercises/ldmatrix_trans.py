"""Exercises of the ldmatrix .trans notebook: column-wise loads and the B operand of mma."""
from __future__ import annotations

import numpy as np

from ...model import emulator, layouts
from .. import diagnosis, tiles
from ..checks import AddressTask
from . import cases
from .base import AddressExercise, ChoiceExercise, FragmentExercise
from .kernel_exercise import KernelExercise, KernelRun

# ---------------------------------------------------------------------------------------------
# 1. What does .trans deliver?
# ---------------------------------------------------------------------------------------------

trans_receive = FragmentExercise(
    key="ldmatrix_trans.receive",
    title="ldmatrix .trans: which stored element lands in (lane, reg, half)",
    answer_names=("matrix", "row", "col"),
    visible=lambda: cases.ldmatrix_cases((2,), trans=True),
    hidden_cases=lambda: cases.ldmatrix_cases((1, 4), trans=True),
    mistakes=(
        (lambda lane, reg, half: (reg, lane // 4, 2 * (lane % 4) + half),
         "that is the layout without .trans: with .trans a lane's two elements come from one "
         "column of the stored matrix (two neighbouring rows), so row and column swap roles"),
        (lambda lane, reg, half: (reg, 2 * (lane % 4), lane // 4 + half),
         "the two halves of a register sit in neighbouring *rows* of the stored matrix "
         "(the same column): row = 2 * (lane % 4) + half"),
    ),
    hints=(
        ".trans hands out the stored matrix column by column, exactly as the plain form hands "
        "out rows: swap the roles of row and column.",
        "Without .trans lanes 0-3 share stored row 0, two columns each, lanes 4-7 row 1, ... "
        "With .trans lanes 0-3 share stored column 0, two rows each, lanes 4-7 column 1, ...",
        "Worked example, lane 6, reg 1, half 1: lanes 4-7 share stored column 1; lane 6 is the "
        "third of them (place 2), so it holds rows 4 and 5, and half 1 is row 5: (matrix 1, row"
        " 5, col 1).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 2./3. Row addresses for B stored row-major (.trans) and column-major (no .trans)
# ---------------------------------------------------------------------------------------------


def _tasks(placement, params, trans):
    return [AddressTask(placement, b, s, (b, s), trans=trans) for b, s in params]


def _random(placement, trans):
    def make(rng):
        return [AddressTask(placement, b, s, (b, s), trans=trans) for b, s in
                (cases.random_tile_params(rng, placement) for _ in range(8))]
    return make


b_row_major_rows = AddressExercise(
    key="ldmatrix_trans.b_row_major_rows",
    title="ldmatrix .x2.trans: row addresses of B stored row-major",
    arg_names=("lane", "base", "stride"),
    visible=lambda: (_tasks(tiles.mma_b_row_major(), ((0, 16), (256, 48)), True)
                     + cases.drawn(_random(tiles.mma_b_row_major(), True), 1)),
    hidden_cases=_random(tiles.mma_b_row_major(), True),
    mistakes=(
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8 % 2) * 16,
         "that is the column-major recipe; here B is row-major (a stored row per k), so matrix "
         "1 (k = 8..15) is 8 rows further down, not 16 bytes to the right"),
        (lambda lane, base, stride: base + lane * 16,
         "rows of the stored B are `stride` bytes apart, not 16"),
    ),
    hints=(
        "Register i of the B fragment holds k = 8i..8i+7: matrix i is stored rows 8i..8i+7.",
        "Lanes 0-15 therefore point at stored rows k = 0..15, one after the other.",
    ),
)

b_col_major_rows = AddressExercise(
    key="ldmatrix_trans.b_col_major_rows",
    title="ldmatrix .x2: row addresses of B stored column-major",
    arg_names=("lane", "base", "stride"),
    visible=lambda: (_tasks(tiles.mma_b_col_major(), ((0, 32), (512, 64)), False)
                     + cases.drawn(_random(tiles.mma_b_col_major(), False), 1)),
    hidden_cases=_random(tiles.mma_b_col_major(), False),
    mistakes=(
        (lambda lane, base, stride: base + (lane % 16) * stride,
         "stored column-major, B has only 8 stored rows (one per column n); matrix 1 holds "
         "k = 8..15, the right half of those same rows: add 16 bytes, not 8 rows"),
        (lambda lane, base, stride: base + (lane % 8) * stride + (lane // 8 % 2) * 8,
         "k = 8 starts 8 elements = 16 bytes into the stored row"),
    ),
    hints=(
        "Column-major B is B^T stored row by row: stored row n holds B[0..15][n].",
        "Matrix 0 = k 0..7 = the left halves of stored rows 0..7; matrix 1 = k 8..15 = the "
        "right halves.",
    ),
)

# ---------------------------------------------------------------------------------------------
# 4. The B fragment as (k, n)
# ---------------------------------------------------------------------------------------------


def _b_cases(shapes):
    return [(layouts.mma_form(s, "f16", "f16", "f32", "f32").b, cases.row_col, ()) for s in shapes]


b_fragment = FragmentExercise(
    key="ldmatrix_trans.b_fragment",
    title="m16n8k16 B fragment: (lane, reg, half) -> (k, n)",
    answer_names=("k", "n"),
    visible=lambda: _b_cases(("m16n8k16",)),
    hidden_cases=lambda: _b_cases(("m16n8k8",)),
    mistakes=(
        (lambda lane, reg, half: (lane // 4 + 8 * reg, 2 * (lane % 4) + half),
         "that is A's pattern; B's register halves run down a column: k = 2 * (lane % 4) + "
         "half (+ 8 per register), n = lane // 4"),
        (lambda lane, reg, half: (2 * (lane % 4) + half, lane // 4 + 8 * reg),
         "B is 16 x 8 (k x n): the second register moves k by 8, n stays lane // 4"),
    ),
    hints=(
        "A group of four consecutive lanes owns one column n of B: lanes 0-3 column 0, lanes "
        "4-7 column 1, and so on.",
        "Within that column, a lane's place in its group (0-3) picks a pair of k values: place "
        "p holds k = 2p and 2p + 1; register 1 adds 8 to k.",
        "Worked example, lane 14, reg 1, half 1: lanes 12-15 own column n = 3; lane 14 is at "
        "place 2, so k = 4 or 5, half 1 is k = 5; register 1 adds 8: (k 13, n 3).",
    ),
)

# ---------------------------------------------------------------------------------------------
# 5. Spot the bug: a transposing macro defined, the plain one called
# ---------------------------------------------------------------------------------------------

trans_macro_bug = ChoiceExercise(
    key="ldmatrix_trans.trans_macro_bug",
    title="spot the bug: .trans defined, plain form called",
    correct="b",
    explanations={
        "a": "(0, 8) is what mma wants (B[0][0], B[1][0]); the code would give it only if it "
             "called the .trans macro it defined",
        "b": "the call goes through the non-.trans macro, so lane 0 gets the first two elements "
             "of stored row 0: B[0][0] = 0 and B[0][1] = 1, two different n. mma then computes "
             "with the wrong B, silently",
        "c": "nothing is transposed twice; the transposing macro is never called",
        "d": "both macros are valid PTX; choosing the wrong one is a silent bug, not a compile "
             "error",
    },
    hints=("Which of the two macros does the load line actually call?",
           "Without .trans, lane 0 receives row 0, columns 0 and 1 of the stored matrix."),
)

# ---------------------------------------------------------------------------------------------
# 6. Kernel: load B (row-major, 16 x 8) with ldmatrix.x2.trans
# ---------------------------------------------------------------------------------------------

B_KERNEL_NAME = "load_b_operand"


def describe_b_value(v: int) -> str:
    """Values are ids k * 8 + n of the 16x8 B tile."""
    if v >= 128:
        return f"value {v} (not an element of B)"
    k, n = divmod(int(v), 8)
    return f"B[{k}][{n}]"


def _b_staged(sld: int, col_major: bool = False) -> np.ndarray:
    """The kernel's shared memory (bytes): B = ids k * 8 + n, stored row-major (16 rows of
    ``sld`` elements) or column-major (stored row n holds B[0..15][n], 8 rows)."""
    b = np.arange(128, dtype=np.uint16).reshape(16, 8)
    stored = b.T if col_major else b
    smem = np.zeros((stored.shape[0], sld), dtype=np.uint16)
    smem[:, :stored.shape[1]] = stored
    return smem.reshape(-1).view(np.uint8)


def b_operand_expected(sld: int) -> np.ndarray:
    place = tiles.mma_b_row_major()
    addrs = place.expected_addresses(place.tile(0, sld * 2))
    return emulator.ldmatrix(_b_staged(sld), addrs, num=2, trans=True)


#: The .trans mistake of each way of storing B, in the notebook's terms.
B_TRANS_CAUSES = {
    False: "B is stored row-major but mma wants it column by column: the load needs .trans "
           "{proof}",
    True: "this load uses .trans where it must not: stored column-major, each stored row "
          "already is a column of B, which is what mma hands each lane; .trans turns every "
          "8x8 block around {proof}",
}


def _b_run(label: str, sld: int, stored_rows: int, threads: int = 32) -> KernelRun:
    """A launch of a kernel ``(b, sld, out)`` that stages B's ids 0..127 in ``stored_rows``
    rows of ``sld`` elements (16: row-major, loaded with .trans; 8: column-major, without) and
    must leave B's mma fragment in ``out`` (two words a lane)."""
    col_major = stored_rows == 8
    place = tiles.mma_b_col_major() if col_major else tiles.mma_b_row_major()
    suspects = diagnosis.Deferred(lambda: diagnosis.load_suspects(
        _b_staged(sld, col_major), place, 0, 2 * sld, trans=not col_major,
        trans_cause=B_TRANS_CAUSES[col_major]))
    return KernelRun(label=label, args=[np.arange(128, dtype=np.uint16), np.int32(sld),
                                        np.zeros(64, dtype=np.uint32)],
                     out_index=2, expected=b_operand_expected(8), shared_mem=stored_rows * sld * 2,
                     block=(threads,), describe_value=describe_b_value, suspects=suspects,
                     loaded_from=place)


def b_operand_run(sld: int) -> KernelRun:
    return _b_run(f"tile row stride {sld} elements", sld, 16)


b_operand_kernel = KernelExercise(
    key="ldmatrix_trans.b_operand_kernel",
    title="kernel: load a row-major B with ldmatrix.x2.trans",
    kernel_name=B_KERNEL_NAME,
    visible=lambda: [b_operand_run(8), b_operand_run(40)],
    hidden_cases=lambda rng: [b_operand_run(s) for s in (16, 24, 8 * int(rng.integers(6, 13)))],
    advice_for=(
        (lambda src: ".trans" not in src,
         "B is stored row-major but mma wants it column by column: the load needs .trans"),
        (lambda src: ".x2" not in src, "B of m16n8k16 is two 8x8 matrices: use .x2"),
    ),
    hints=(
        "Your b_row_major_rows formula gives the address; base = the tile's shared address, "
        "stride = 2 * sld bytes.",
        'asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : '
        '"=r"(r0), "=r"(r1) : "r"(addr));',
    ),
)

# ---------------------------------------------------------------------------------------------
# 7. Kernel: load a column-major B with ldmatrix.x2 (no .trans)
# ---------------------------------------------------------------------------------------------

B_COL_MAJOR_KERNEL_NAME = "load_b_col_major"


def b_col_major_run(sld: int) -> KernelRun:
    """B stored column-major: stored row n holds B[0..15][n], rows ``sld`` elements apart. The
    registers must be B's fragment, the same as from the row-major tile of exercise 6."""
    return _b_run(f"stored row stride {sld} elements", sld, 8)


def _uses_trans(src: str) -> bool:
    return ".trans" in src


b_col_major_kernel = KernelExercise(
    key="ldmatrix_trans.b_col_major_kernel",
    title="kernel: load a column-major B with ldmatrix.x2",
    kernel_name=B_COL_MAJOR_KERNEL_NAME,
    visible=lambda: [b_col_major_run(16), b_col_major_run(24), b_col_major_run(80)],
    hidden_cases=lambda rng: [b_col_major_run(int(s)) for s in
                              (40, 8 * int(rng.integers(2, 13)))],
    advice_for=(
        (_uses_trans,
         "this load uses .trans where it must not: stored column-major, each stored row already "
         "is a column of B, which is what mma hands each lane; .trans turns every 8x8 block "
         "around (the opposite of exercise 6, where row-major B needed it)"),
        (lambda src: ".x2" not in src, "B of m16n8k16 is two 8x8 matrices: use .x2"),
    ),
    hints=(
        "Your b_col_major_rows formula gives the address; base = the tile's shared address, "
        "stride = 2 * sld bytes.",
        "Matrix 1 (k = 8..15) is the right half of the same 8 stored rows: 16 bytes further.",
        'asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : '
        '"=r"(r0), "=r"(r1) : "r"(addr));',
    ),
)

# ---------------------------------------------------------------------------------------------
# 8. Kernel: four warps stage B, one warp loads it (the barrier is the exercise)
# ---------------------------------------------------------------------------------------------

BLOCK_KERNEL_NAME = "block_load_b"
#: Threads of the block: four warps copy B into shared memory together.
BLOCK_THREADS = 128


def block_load_run(sld: int) -> KernelRun:
    """One block of four warps; only warp 0's registers are compared (it is the one loading)."""
    return _b_run(f"4 warps, tile row stride {sld} elements", sld, 16, BLOCK_THREADS)


block_load_kernel = KernelExercise(
    key="ldmatrix_trans.block_load_kernel",
    title="kernel: four warps stage B, warp 0 loads it",
    kernel_name=BLOCK_KERNEL_NAME,
    visible=lambda: [block_load_run(8), block_load_run(24), block_load_run(40)],
    hidden_cases=lambda rng: [block_load_run(int(s)) for s in
                              (16, 8 * int(rng.integers(4, 9)))],
    advice_for=(
        (lambda src: ".trans" not in src,
         "B is staged row-major, as in exercise 6: the load needs .trans"),
    ),
    hints=(
        "Thread t copies element t: warp 1 writes rows 4-7 of B, warp 2 rows 8-11, warp 3 rows "
        "12-15. What guarantees they are written when warp 0 reads them?",
        "__syncthreads() after the copy, before the 'if' that selects warp 0 (CUDA asks that "
        "every thread of the block reaches it).",
        "__syncthreads(); then if (threadIdx.x < 32) { the load of exercise 6 and the two "
        "stores to out }",
    ),
)
