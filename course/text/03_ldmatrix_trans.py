# %% [markdown]
# # 3 · `ldmatrix .trans` and the B operand
#
# `mma.sync.aligned.m16n8k16.row.col` wants B (16x8, `k` by `n`) handed out **column by
# column**: lane `t` holds column `n = t // 4`, rows `k = 2(t % 4)` and `2(t % 4) + 1` (and
# `k + 8` in its second register). Whether a plain `ldmatrix` delivers that depends on how B is
# stored:
#
# * B stored **column-major** (each column of 16 `k` values contiguous, i.e. Bᵀ row by row):
#   a plain `ldmatrix.x2` already hands out columns of B, because they are the stored rows;
# * B stored **row-major** (a stored row per `k`): the stored rows are the wrong way round, and
#   `.trans` fixes that: it hands out each stored 8x8 matrix column by column.
#
# `.trans` changes only which lanes receive which element; the addresses are still the starts
# of the 8 **stored** rows of each matrix.

# %%
import numpy as np

from ptxlab import backends, emulator, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import ldmatrix_trans as ex

print(backends.describe())

# %% [markdown]
# ## A live load: `.x1.trans`
#
# Same kernel as in notebook 2, one word changed. Element `(r, c)` of the stored matrix holds
# `8r + c`; look at where each value lands now.

# %%
LOAD_X1_TRANS = r"""
extern "C" __global__ void load_x1_trans(const unsigned short* src, unsigned* out)
{
    __shared__ __align__(16) unsigned short tile[8 * 8];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 64; i += 32) tile[i] = src[i];
    __syncwarp();
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&tile[(lane % 8) * 8]));
    unsigned r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r0) : "r"(addr));
    out[lane] = r0;
}
"""
src = np.arange(64, dtype=np.uint16)
res = launch(LOAD_X1_TRANS, "load_x1_trans", block=(32,), args=[src, np.zeros(32, np.uint32)])
regs = res.outputs[1].reshape(32, 1)
lay = layouts.ldmatrix_fragment(1, trans=True)
model = emulator.ldmatrix(src.view(np.uint8), np.arange(32) % 8 * 16, num=1, trans=True)
print(f"ran on: {res.device}; equal to the emulator: {np.array_equal(regs, model)}")
render.side_by_side(
    render.registers_html(regs[:8], title="lanes 0-7: r0 as (hi | lo)"),
    render.matrix_html(emulator.fragment_to_matrices(regs, lay)[0], lay.owners[0, ..., 0],
                       title="stored matrix, coloured by the lane that received each element"))

# %% [markdown]
# Lane 0 now holds `0` and `8`: elements (0, 0) and (1, 0), the top of **column** 0. The four
# lanes of a group share a stored column instead of a stored row. Step through the rows: the
# addresses are given exactly as without `.trans`, but each stored row now lands in one
# *column* of the fragment, one element in each of eight lanes.

# %%
widgets.LanePlayer.rows(num=2, trans=True)

# %% [markdown]
# <details><summary>Both layouts side by side, lane by lane</summary>
#
# The fragment map below draws the stored matrices coloured by receiving lane; tick `.trans`
# to compare the two layouts, pick a lane to see what it holds.
# </details>

# %%
widgets.FragmentMap(num=2, trans=True, lane=1)

# %% [markdown]
# ## Exercise 1 · who receives what, with `.trans`
#
# After `ldmatrix.x2.trans`, which element of which *stored* matrix sits in half `half` of
# register `reg` of `lane`? Return `(matrix, row, col)`.

# %% solution id=trans_receive
def trans_receive(lane, reg, half):
    """(matrix, row, col) of the stored matrix held in (lane, reg, half) after .trans."""
    ### BEGIN SOLUTION
    return reg, 2 * (lane % 4) + half, lane // 4
    ### END SOLUTION


ex.trans_receive.check(trans_receive);

# %% tests id=trans_receive_tests points=2
ex.trans_receive.grade(trans_receive)
### BEGIN HIDDEN TESTS
ex.trans_receive.grade(trans_receive, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## The B fragment of m16n8k16
#
# B is 16x8 (`k` rows, `n` columns) in two registers. Group `g = lane // 4` owns column
# `n = g`; register 0 holds `k = 0..7`, register 1 `k = 8..15`.

# %%
form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
render.fragment_map_html(form.b, titles=["B (16x8): lane / register.half"], row_label="k",
                         col_label="n")

# %% [markdown]
# ## Exercise 2 · the B fragment as `(k, n)`

# %% solution id=b_fragment
def b_fragment(lane, reg, half):
    """(k, n) of B held in `half` of register `reg` of `lane` (m16n8k16, f16)."""
    ### BEGIN SOLUTION
    return 2 * (lane % 4) + half + 8 * reg, lane // 4
    ### END SOLUTION


ex.b_fragment.check(b_fragment);

# %% tests id=b_fragment_tests points=2
ex.b_fragment.grade(b_fragment)
### BEGIN HIDDEN TESTS
ex.b_fragment.grade(b_fragment, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 · B stored row-major: `.x2.trans`
#
# B sits in shared memory row-major: stored row `k` (8 elements, 16 bytes) starts at
# `base + k * stride`. Matrix 0 of the load is `k = 0..7`, matrix 1 `k = 8..15`. Write the
# address each lane supplies to `ldmatrix.x2.trans`. Check it in the table below too.

# %% solution id=b_row_major_rows
def b_row_major_rows(lane, base, stride):
    """Row address for ldmatrix.x2.trans loading a row-major B (16 x 8)."""
    ### BEGIN SOLUTION
    return base + (lane % 16) * stride
    ### END SOLUTION


ex.b_row_major_rows.check(b_row_major_rows);

# %% tests id=b_row_major_rows_tests points=2
ex.b_row_major_rows.grade(b_row_major_rows)
### BEGIN HIDDEN TESTS
ex.b_row_major_rows.grade(b_row_major_rows, hidden=True)
### END HIDDEN TESTS

# %%
widgets.AddressTable(b_row_major_rows, stride=32, arrangement="B of m16n8k16 stored row-major (.trans)")

# %% [markdown]
# ## Exercise 4 · B stored column-major: plain `.x2`
#
# Now B is stored column-major: stored row `n` holds `B[0..15][n]` (16 elements, 32 bytes) and
# starts at `base + n * stride`. No `.trans` is needed. Matrix 0 is `k = 0..7` (the left half
# of each stored row), matrix 1 `k = 8..15` (the right half).

# %% solution id=b_col_major_rows
def b_col_major_rows(lane, base, stride):
    """Row address for ldmatrix.x2 loading a column-major B (16 x 8)."""
    ### BEGIN SOLUTION
    return base + (lane % 8) * stride + (lane // 8 % 2) * 16
    ### END SOLUTION


ex.b_col_major_rows.check(b_col_major_rows);

# %% tests id=b_col_major_rows_tests points=2
ex.b_col_major_rows.grade(b_col_major_rows)
### BEGIN HIDDEN TESTS
ex.b_col_major_rows.grade(b_col_major_rows, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 · spot the bug
#
# An article defines two macros and then loads a **row-major** B (element `B[k][n] = 8k + n`)
# like this:
#
# ```c++
# #define LDMATRIX_X2(R0, R1, addr)   asm volatile("ldmatrix.sync.aligned.x2.m8n8.shared.b16 ..."
# #define LDMATRIX_X2_T(R0, R1, addr) asm volatile("ldmatrix.sync.aligned.x2.trans.m8n8.shared.b16 ..."
#
# LDMATRIX_X2(RB[0], RB[1], s_b + (lane_id % 16) * 8);
# ```
#
# What pair (low half, high half) does lane 0's `RB[0]` hold?
# **a)** `(0, 8)`  **b)** `(0, 1)`  **c)** `(0, 16)`  **d)** nothing, it does not compile

# %% solution id=trans_macro_bug
def trans_macro_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.trans_macro_bug.check(trans_macro_answer);

# %% tests id=trans_macro_bug_tests points=1
ex.trans_macro_bug.grade(trans_macro_answer)

# %% [markdown]
# ## Exercise 6 · a kernel that loads a row-major B
#
# B (16x8, `B[k][n] = 8k + n`) is staged row-major with rows `sld` elements apart. Load it
# with one `ldmatrix.x2.trans` so the registers are exactly B's mma fragment.

# %% solution id=b_operand_kernel
B_KERNEL = r"""
extern "C" __global__ void load_b_operand(const unsigned short* b, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];    // 16 rows of sld elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 128; i += 32)
        tile[(i / 8) * sld + i % 8] = b[i];
    __syncwarp();

    unsigned r0, r1;
    // BEGIN SOLUTION
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned addr = base + (lane % 16) * sld * 2;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    // END SOLUTION

    out[lane * 2 + 0] = r0;
    out[lane * 2 + 1] = r1;
}
"""
ex.b_operand_kernel.check(B_KERNEL);

# %% tests id=b_operand_kernel_tests points=3
ex.b_operand_kernel.grade(B_KERNEL)
### BEGIN HIDDEN TESTS
ex.b_operand_kernel.grade(B_KERNEL, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7 · a kernel that loads a column-major B
#
# The same B, now staged **column-major**: stored row `n` holds column `n` of B
# (`B[0][n] .. B[15][n]`), the 8 stored rows are `sld` elements apart. The registers must come
# out exactly as in Exercise 6: they are B's mma fragment whichever way B was stored. Only the
# addresses and the qualifiers of the load change.

# %% solution id=b_col_major_kernel
B_COL_KERNEL = r"""
extern "C" __global__ void load_b_col_major(const unsigned short* b, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];    // 8 rows (n) of sld elements (k)
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 128; i += 32)                  // i = 8k + n
        tile[(i % 8) * sld + i / 8] = b[i];
    __syncwarp();

    unsigned r0, r1;
    // BEGIN SOLUTION
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned addr = base + (lane % 8) * sld * 2 + (lane / 8 % 2) * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    // END SOLUTION

    out[lane * 2 + 0] = r0;
    out[lane * 2 + 1] = r1;
}
"""
ex.b_col_major_kernel.check(B_COL_KERNEL);

# %% tests id=b_col_major_kernel_tests points=3
ex.b_col_major_kernel.grade(B_COL_KERNEL)
### BEGIN HIDDEN TESTS
ex.b_col_major_kernel.grade(B_COL_KERNEL, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 · four warps stage B, one warp loads it
#
# In a real kernel a whole block copies a tile into shared memory together, and then each warp
# loads the part it needs. Here a block of **four warps** copies the row-major B of Exercise 6
# (thread `t` copies element `t`, so warp 1 writes rows 4-7, warp 2 rows 8-11, warp 3 rows
# 12-15), and **warp 0** alone must load B with `ldmatrix.x2.trans` and write its registers to
# `out` (two words per lane, as in Exercise 6). Fill in the part between the markers.
#
# This is where a race hides. Without a barrier warp 0 may read rows the other warps have not
# written yet. On a GPU the kernel often gives the right registers anyway, by timing: the
# course's racy twin of this kernel gave the right answer 20 times out of 20 on an H100
# (`reports/hardware/SANITIZER.md`). The check runs every kernel through the CPU model's race
# detector too, on every machine, so a race fails here whatever the GPU happened to do.
#
# <details><summary>Which barrier?</summary>
#
# `__syncwarp()` only orders the threads of one warp. Writes by *other* warps need the block's
# barrier, `__syncthreads()` (PTX `bar.sync 0`). CUDA asks that every thread of the block
# reaches the same `__syncthreads()`, so put it before the `if` that selects warp 0, not in it.
# </details>

# %% solution id=block_load_kernel
BLOCK_KERNEL = r"""
extern "C" __global__ void block_load_b(const unsigned short* b, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];    // 16 rows of sld elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = threadIdx.x; i < 128; i += blockDim.x)   // all four warps copy
        tile[(i / 8) * sld + i % 8] = b[i];

    // BEGIN SOLUTION
    __syncthreads();                       // every warp's copy is done and visible
    if (threadIdx.x >= 32) return;         // from here on, warp 0 only
    const unsigned tile_base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned row_addr = tile_base + (lane % 16) * sld * 2;
    unsigned b0, b1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b0), "=r"(b1) : "r"(row_addr));
    out[2 * lane] = b0;
    out[2 * lane + 1] = b1;
    // END SOLUTION
}
"""
ex.block_load_kernel.check(BLOCK_KERNEL);

# %% tests id=block_load_kernel_tests points=3
ex.block_load_kernel.grade(BLOCK_KERNEL)
### BEGIN HIDDEN TESTS
ex.block_load_kernel.grade(BLOCK_KERNEL, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## What to remember
#
# * `.trans` keeps the addresses (stored rows) and hands each stored matrix out column-wise:
#   lane `t` gets column `t // 4`, rows `2(t % 4)` and `2(t % 4) + 1`.
# * B of `mma ... .row.col` is consumed column by column: row-major B needs `.trans`,
#   column-major B does not (and `.trans` there turns every block the wrong way).
# * Shared memory written by other warps needs `__syncthreads()` before it is read; a GPU that
#   gives the right answer without it was lucky.
# * Calling the wrong one of two look-alike macros is a silent bug: the results are just wrong.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
