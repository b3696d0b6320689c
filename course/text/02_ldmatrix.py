# %% [markdown]
# # 2 · `ldmatrix`: eight rows in, a fragment out
#
# ```
# ldmatrix.sync.aligned.m8n8.x1.shared.b16  {r0},             [addr];
# ldmatrix.sync.aligned.m8n8.x2.shared.b16  {r0, r1},         [addr];
# ldmatrix.sync.aligned.m8n8.x4.shared.b16  {r0, r1, r2, r3}, [addr];
# ```
#
# One instruction, executed by the whole warp, reads one, two or four 8x8 matrices of 16-bit
# elements from shared memory and spreads them over the warp's registers in exactly the layout
# `mma.sync` wants. Two questions decide everything:
#
# * **who gives the addresses?** Each matrix row (16 bytes) has its own start address, supplied
#   by one lane: lanes 0-7 give the 8 rows of matrix 0, lanes 8-15 those of matrix 1, and so on.
#   The rows need not be next to each other in memory.
# * **who receives what?** Register `i` of every lane receives a piece of matrix `i`: lane `t`
#   gets row `t // 4`, columns `2*(t % 4)` and `2*(t % 4) + 1`, packed into one 32-bit register
#   with the lower column in the low half.
#
# The lane that *gives* a row's address is not the lane that *receives* its elements: row 1 of
# matrix 0 is addressed by lane 1 but lands in lanes 4-7.

# %%
import numpy as np

from ptxlab import backends, emulator, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import ldmatrix as ex

print(backends.describe())

# %% [markdown]
# ## Who gives the addresses, who receives the row
#
# The picture follows one row at a time (press play, or drag the slider): the lane whose
# address starts the row, the row in shared memory, and the four lanes that receive its eight
# elements. Lanes `8i .. 8i+7` address the rows of matrix `i`
# (`ptxlab.layouts.row_address_lanes(num)`); with `.x1` and `.x2` the higher lanes' addresses
# are ignored.
#
# <details><summary>Older GPUs and the ignored lanes</summary>
#
# PTX compiled for `.target sm_75` or below (the target named at compile time, not the GPU
# that runs it) must give the ignored lanes valid shared addresses too; copying the lower
# lanes' addresses (`lane % 8` for `.x1`, `lane % 16` for `.x2`) is the usual trick, and it is
# harmless for every target.
# </details>

# %%
widgets.LanePlayer.rows(num=4)

# %% [markdown]
# ## A live load: `.x1`
#
# The kernel stages an 8x8 matrix whose element `(r, c)` holds the number `8r + c` in shared
# memory, then each lane `t` passes the address of row `t % 8` and the warp executes
# `ldmatrix.x1`. Each lane writes its register out. Below: the registers as the lanes hold
# them, and the same values put back where they came from, coloured by the lane that received
# them (one colour family per group of four lanes).

# %%
LOAD_X1 = r"""
extern "C" __global__ void load_x1(const unsigned short* src, unsigned* out)
{
    __shared__ __align__(16) unsigned short tile[8 * 8];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 64; i += 32) tile[i] = src[i];
    __syncwarp();
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&tile[(lane % 8) * 8]));
    unsigned r0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(addr));
    out[lane] = r0;
}
"""
src = np.arange(64, dtype=np.uint16)
res = launch(LOAD_X1, "load_x1", block=(32,), args=[src, np.zeros(32, np.uint32)])
regs = res.outputs[1].reshape(32, 1)
lay = layouts.ldmatrix_fragment(1)
model = emulator.ldmatrix(src.view(np.uint8), np.arange(32) % 8 * 16, num=1)
print(f"ran on: {res.device}; equal to the emulator: {np.array_equal(regs, model)}")
render.side_by_side(
    render.registers_html(regs[:12], title="lanes 0-11: register r0 as (hi | lo)"),
    render.matrix_html(emulator.fragment_to_matrices(regs, lay)[0], lay.owners[0, ..., 0],
                       title="each value back at its (row, col), coloured by receiving lane"),
    render.legend_html(range(0, 32, 4)))

# %% [markdown]
# ## Exercise 1 · who receives what
#
# Write `receive(lane, reg, half)`: after `ldmatrix.x4`, which element of which matrix sits in
# half `half` (0 = low 16 bits) of register `reg` of `lane`? Return `(matrix, row, col)`.
# Run the cell: the check names the first wrong lanes and what pattern it sees. The fragment
# map under it draws your formula; wrong cells turn red. `ex.receive.hint()` gives a hint.

# %% solution id=receive
def receive(lane, reg, half):
    """(matrix, row, col) held in `half` of register `reg` of `lane` after ldmatrix.x4."""
    ### BEGIN SOLUTION
    return reg, lane // 4, 2 * (lane % 4) + half
    ### END SOLUTION


ex.receive.check(receive);

# %% tests id=receive_tests points=2
ex.receive.grade(receive)
### BEGIN HIDDEN TESTS
ex.receive.grade(receive, hidden=True)
### END HIDDEN TESTS

# %%
widgets.FragmentMap(num=4, lane=9, formula=receive)

# %% [markdown]
# ## Rows that are not contiguous
#
# Each lane gives its own row address, so the 8 rows of a matrix can be anywhere (16-byte
# aligned). The common case is a tile cut out of a wider matrix: the rows are `stride` bytes
# apart, not 16. Try it in the address table: pick a tile arrangement, `.num`, a base and a
# row stride, and type a formula in `lane`, `num`, `base`, `stride`. Each row of the table says
# which matrix row the lane's address must point at and which lanes will receive it; the
# shared-memory picture colours every row start by the lane that points there.

# %%
widgets.AddressTable("base + (lane % 8) * stride", num=4, stride=64,
                     arrangement="matrices side by side (cols 8i..8i+7)")

# %% [markdown]
# ## Exercise 2 · matrices side by side
#
# `num` matrices sit side by side in a tile: matrix `i` is columns `8i..8i+7` of rows 0-7.
# The tile starts at byte `base`; its rows are `stride` bytes apart. Write the address lane
# `lane` must supply for `ldmatrix.x{num}`. (The formula above is a start: it is wrong for
# lanes 8-31.) Lanes the instruction ignores may return anything.

# %% solution id=side_by_side_rows
def side_by_side_rows(lane, num, base, stride):
    """Row address lane `lane` supplies for ldmatrix.x{num} of matrices side by side."""
    ### BEGIN SOLUTION
    return base + (lane % 8) * stride + (lane // 8) * 16
    ### END SOLUTION


ex.side_by_side_rows.check(side_by_side_rows);

# %% tests id=side_by_side_rows_tests points=2
ex.side_by_side_rows.grade(side_by_side_rows)
### BEGIN HIDDEN TESTS
ex.side_by_side_rows.grade(side_by_side_rows, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## The A operand of `mma.m16n8k16`
#
# `mma.sync.aligned.m16n8k16` multiplies a 16x16 A by a 16x8 B. A lives in four registers per
# lane, and each register is one 8x8 block in the `ldmatrix` layout: `a0` the upper-left
# block, `a1` the **lower-left**, `a2` the upper-right, `a3` the lower-right. So one
# `ldmatrix.x4` loads A, provided lanes 8i..8i+7 point at the rows of block `i`. Each cell
# names the lane holding it; thick lines part the blocks, and the key beside the map names
# each block's register. Hover the cells to see each lane's register and half.

# %%
form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
render.fragment_map_html(form.a, titles=["A (16x16): the lane holding each element"])

# %% [markdown]
# ## Exercise 3 · row addresses of A
#
# A is a 16x16 tile of a row-major matrix in shared memory: byte `base`, rows `stride` bytes
# apart. Write the address each lane supplies to the `ldmatrix.x4` that loads A.

# %% solution id=a_operand_rows
def a_operand_rows(lane, base, stride):
    """Row address lane `lane` supplies for the ldmatrix.x4 that loads A of m16n8k16."""
    ### BEGIN SOLUTION
    return base + (lane % 16) * stride + (lane // 16) * 16
    ### END SOLUTION


ex.a_operand_rows.check(a_operand_rows);

# %% tests id=a_operand_rows_tests points=2
ex.a_operand_rows.grade(a_operand_rows)
### BEGIN HIDDEN TESTS
ex.a_operand_rows.grade(a_operand_rows, hidden=True)
### END HIDDEN TESTS

# %%
widgets.AddressTable(a_operand_rows, stride=48, arrangement="A of m16n8k16 (16x16, row-major)")

# %% [markdown]
# ## Exercise 4 · the A fragment
#
# Now the other direction: which element of A does half `half` of register `reg` of `lane`
# hold? Return `(row, col)` in the 16x16 A.

# %% solution id=a_fragment
def a_fragment(lane, reg, half):
    """(row, col) of A held in `half` of register `reg` of `lane` (m16n8k16, f16)."""
    ### BEGIN SOLUTION
    return lane // 4 + 8 * (reg % 2), 2 * (lane % 4) + half + 8 * (reg // 2)
    ### END SOLUTION


ex.a_fragment.check(a_fragment);

# %% tests id=a_fragment_tests points=2
ex.a_fragment.grade(a_fragment)
### BEGIN HIDDEN TESTS
ex.a_fragment.grade(a_fragment, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 · a kernel that loads A
#
# Complete the kernel: A (16x16, element `(r, c)` = `16r + c`) is staged in shared memory
# with rows `sld` **elements** apart; load it with one `ldmatrix.x4` and the registers are
# written out. Replace the two placeholder lines between the markers with your CUDA (compute
# the lane's address, then the `asm`). The check runs it (on the GPU if you have one) and
# compares every register with the emulator; a wrong lane is reported by the element it got.

# %% solution id=a_operand_kernel
A_KERNEL = r"""
extern "C" __global__ void load_a_operand(const unsigned short* a, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short tile[];    // 16 rows of sld elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32)
        tile[(i / 16) * sld + i % 16] = a[i];
    __syncwarp();

    unsigned r0, r1, r2, r3;
    // BEGIN SOLUTION
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const unsigned addr = base + (lane % 16) * sld * 2 + (lane / 16) * 16;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
    // END SOLUTION

    out[lane * 4 + 0] = r0;
    out[lane * 4 + 1] = r1;
    out[lane * 4 + 2] = r2;
    out[lane * 4 + 3] = r3;
}
"""
ex.a_operand_kernel.check(A_KERNEL);

# %% tests id=a_operand_kernel_tests points=3
ex.a_operand_kernel.grade(A_KERNEL)
### BEGIN HIDDEN TESTS
ex.a_operand_kernel.grade(A_KERNEL, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 · spot the bug
#
# A blog post wraps the `.x4` instruction in a function it names `..._x2` (a slip in the name
# only: its kernel sets up all 32 row addresses and reads four registers, so it works).
# Suppose a reader trusts the name and calls the wrapper to load **two** matrices, with
# lanes 16-31 holding addresses nobody set up:
#
# ```c++
# __device__ void ldmatrix_x2(uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3,
#                             uint32_t addr) {
#   asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
#                : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3) : "r"(addr));
# }
# ```
#
# What happens?
# **a)** two matrices are loaded, because the function is called `ldmatrix_x2`
# **b)** it does not compile: an x2 wrapper cannot have four outputs
# **c)** four matrices are loaded: lanes 16-31's addresses are used too, and r2, r3 are filled
# **d)** it reads global memory for the last two matrices

# %% solution id=x2_wrapper_bug
def x2_wrapper_answer():
    ### BEGIN SOLUTION
    return "c"
    ### END SOLUTION


ex.x2_wrapper_bug.check(x2_wrapper_answer);

# %% tests id=x2_wrapper_bug_tests points=1
ex.x2_wrapper_bug.grade(x2_wrapper_answer)

# %% [markdown]
# ## What to remember
#
# * `ldmatrix.x{n}`: lanes `8i..8i+7` give the row addresses of matrix `i` (16-byte aligned,
#   anywhere in shared memory); register `i` receives matrix `i`.
# * Lane `t` receives row `t // 4`, columns `2(t % 4)` and `2(t % 4) + 1` of each matrix.
# * A of m16n8k16 is four blocks in the order upper-left, lower-left, upper-right,
#   lower-right: lanes 0-15 point at rows 0-15, lanes 16-31 at the same rows 16 bytes further.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
