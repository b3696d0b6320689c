# %% [markdown]
# # 5 · `movmatrix`: a transpose that never leaves the registers
#
# ```
# movmatrix.sync.aligned.m8n8.trans.b16  d, a;
# ```
#
# The warp holds one 8x8 matrix of 16-bit elements in register `a`, in the fragment layout of
# notebook 2: lane `t` has row `t // 4`, columns `2(t % 4)` (low half) and `2(t % 4) + 1`
# (high half). After the instruction, register `d` holds the **transposed** matrix in that same
# layout. No shared memory is touched: the warp's lanes swap halves among themselves.
#
# The form is fixed: one matrix, `m8n8`, `.b16`, and `.trans` is the only (mandatory)
# qualifier. It is warp-collective like `ldmatrix` (all 32 lanes, converged). It came with PTX
# ISA 7.8 (CUDA 11.8), years after Turing, but it needs only an sm_75 target: ptxas refuses it
# in a module of `.version 7.7` or older, and compiles it for sm_75 and newer.
#
# Because the layout is the same before and after, lane `t` ends up with row `t // 4` of Aᵀ,
# which is *column* `t // 4` of A: elements `A[2(t % 4)][t // 4]` and `A[2(t % 4) + 1][t // 4]`.

# %%
import numpy as np

from ptxlab import backends, emulator, gpu, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import movmatrix as ex

print(backends.describe())
print("movmatrix on this GPU:", gpu.status().supports("movmatrix"))

# %% [markdown]
# ## A live transpose in registers
#
# Each lane starts with its two elements of an 8x8 matrix A whose element `(r, c)` holds the
# number `8r + c` (so lane `t` holds `2t` and `2t + 1`), executes `movmatrix` and writes its
# register out. The picture shows the kernel's registers: on the left `a` before, on the right
# `d` after, each half in its place of the fragment (lane `t` at row `t // 4`, columns
# `2(t % 4)` and `2(t % 4) + 1`). Every element keeps the colour of the lane that held it
# before, so the transpose shows: the rows of colour turn into columns.

# %%
MOVE = r"""
extern "C" __global__ void transpose_in_registers(const unsigned* a, unsigned* d)
{
    const unsigned lane = threadIdx.x % 32;
    unsigned moved;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(moved) : "r"(a[lane]));
    d[lane] = moved;
}
"""
lay = layouts.movmatrix_fragment()
a_ids = np.arange(64, dtype=np.uint16).reshape(8, 8)
a = emulator.matrices_to_fragment(a_ids[None], lay)[:, 0]
res = launch(MOVE, "transpose_in_registers", args=[a, np.zeros(32, np.uint32)])
d = res.outputs[1]
print(f"ran on: {res.device}; equal to the emulator: {np.array_equal(d, emulator.movmatrix(a))}")
render.movmatrix_svg(values=(a, d))

# %% [markdown]
# Lane 0 now holds `0` and `8`: the top of column 0. Lane 1 holds `16` and `24`: the next two
# elements of that column. A group of four lanes now shares a column of A instead of a row.
#
# Press play (or move the slider) to follow one lane at a time: the two elements it gives
# (solid arrows, to the lanes that receive them) and the two it receives (dashed arrows, from
# the lanes that held them).

# %%
widgets.LanePlayer.movmatrix(lane=1)

# %% [markdown]
# ## Exercise 1 · where each element ends up
#
# A kernel loads four stored 8x8 matrices with `ldmatrix.x4` (no `.trans`) and then runs one
# `movmatrix` on each of the four registers. Which element of which stored matrix sits in half
# `half` of register `reg` of `lane` now? Return `(matrix, row, col)`.

# %% solution id=transposed_fragment
def transposed_fragment(lane, reg, half):
    """(matrix, row, col) of the stored matrices held in (lane, reg, half) after
    ldmatrix.x4 and a movmatrix on every register."""
    ### BEGIN SOLUTION
    return reg, 2 * (lane % 4) + half, lane // 4
    ### END SOLUTION


ex.transposed_fragment.check(transposed_fragment);

# %% tests id=transposed_fragment_tests points=2
ex.transposed_fragment.grade(transposed_fragment)
### BEGIN HIDDEN TESTS
ex.transposed_fragment.grade(transposed_fragment, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Does that formula look familiar? It is the layout of `ldmatrix .trans` from notebook 3. The
# emulator agrees for every `.num`, on random memory:

# %%
rng = np.random.default_rng(5)
smem = rng.integers(0, 1 << 16, 1024, dtype=np.uint16).view(np.uint8)
addrs = rng.permutation(64)[:32] * 32
for num in (1, 2, 4):
    plain_then_move = ex.movmatrix_each(emulator.ldmatrix(smem, addrs, num=num))
    print(f".x{num}: ldmatrix + movmatrix == ldmatrix .trans:",
          np.array_equal(plain_then_move, emulator.ldmatrix(smem, addrs, num=num, trans=True)))

# %% [markdown]
# So when the matrix comes from shared memory anyway, `ldmatrix .trans` does in one
# instruction what `ldmatrix` + `movmatrix` does in two: prefer it. `movmatrix` is for data
# that is **already in registers** and was not loaded by `ldmatrix`, or is needed both ways.
#
# <details><summary>When <code>movmatrix</code> is the right tool (and when it cannot be)</summary>
#
# * the result of one `mma` feeding the next one as its B operand (below);
# * a fragment built in registers (computed, converted, or loaded straight from global memory
#   without staging it in shared memory) that must be turned around;
# * a fragment that is used twice, once as it is and once transposed, loaded only once.
#
# `movmatrix` moves 16-bit halves. An f32 accumulator (one element per register) cannot go
# through it as it is: convert and pack two elements per register first.
#
# </details>

# %% [markdown]
# ## Exercise 2 · who sends it
#
# A transpose in registers is a shuffle: apart from the diagonal, every element changes lanes. For
# `movmatrix` on one register, which lane held the element that `lane` receives in half `half`,
# and in which half? Return `(lane, half)` of the sender. (`reg` is the register number; the
# element stays in the same register number, so you may not need it.) The dashed arrows of
# the player above draw the answer for one lane at a time.

# %% solution id=sender
def sender(lane, reg, half):
    """(lane, half) that held, before movmatrix, the element `lane` receives in `half`."""
    ### BEGIN SOLUTION
    return 4 * (2 * (lane % 4) + half) + lane // 8, (lane // 4) % 2
    ### END SOLUTION


ex.sender.check(sender);

# %% tests id=sender_tests points=1
ex.sender.grade(sender)
### BEGIN HIDDEN TESTS
ex.sender.grade(sender, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## The accumulator as the next B operand
#
# With f16 accumulators, D of an m16n8k16 `mma` (16x8) sits in two registers, rows 0-7 and
# rows 8-15. The B operand of the next `mma` is also 16x8 (`k` by `n`), but handed out column
# by column. One `movmatrix` per register turns the first into the second: D can be
# multiplied again (`A₂ · D`) without a round trip through shared memory. The emulator checks it
# against numpy on small whole numbers (exact in f16):

# %%
form = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
f16 = dict(atype="f16", btype="f16", ctype="f16", dtype="f16")
A1, A2 = rng.integers(-1, 2, (2, 16, 16)).astype(np.float16)
B1 = rng.integers(-1, 2, (16, 8)).astype(np.float16)
a1, a2 = (emulator.matrices_to_fragment(m.view(np.uint16)[None], form.a) for m in (A1, A2))
b1 = emulator.matrices_to_fragment(B1.view(np.uint16)[None], form.b)
zero = np.zeros((32, 2), np.uint32)
d1 = emulator.mma("m16n8k16", a1, b1, zero, **f16)                       # D1 = A1 · B1
d2 = emulator.mma("m16n8k16", a2, ex.movmatrix_each(d1), zero, **f16)   # D1 as B
D2 = emulator.fragment_to_matrices(d2, form.d)[0].astype(np.uint16).view(np.float16)
want = (A2.astype(np.float32) @ A1.astype(np.float32) @ B1).astype(np.float16)
print("A2 · (A1 · B1), one movmatrix per register in between:", np.array_equal(D2, want))

# %% [markdown]
# ## Transposing a 16x16 tile
#
# A whole tile is transposed with three kinds of instruction: `ldmatrix.x4` loads it as four 8x8
# blocks (lanes pointing at the rows exactly as for mma's A: matrix 0 = rows 0-7 / columns
# 0-7, matrix 1 = rows 8-15 / columns 0-7, matrix 2 = rows 0-7 / columns 8-15, matrix 3 =
# the rest), four `movmatrix` turn each block around, and one `stmatrix.x4` writes them to the
# output tile. Turning the blocks is not enough: in the transpose the block at `(r0, c0)`
# belongs at `(c0, r0)`, so matrices 1 and 2 **trade places**. That is the store's business:
# its row addresses decide where each matrix goes.
#
# <details><summary>Without <code>stmatrix</code> (before sm_90)</summary>
#
# `stmatrix` needs sm_90. On an older GPU, plain 32-bit stores do the same job: lane `t`
# writes its register `i` to row `t // 4`, columns `2(t % 4)` and `2(t % 4) + 1` of the place
# where block `i` belongs.
#
# </details>

# %%
widgets.AddressTable("base + (lane % 16) * stride + (lane // 16) * 16", stride=32,
                     arrangement="16x16 tile transposed (A's blocks mirrored)",
                     instruction="stmatrix")

# %% [markdown]
# ## Exercise 3 · mirrored row addresses
#
# The output tile is 16x16, row `r` starting at `base + r * stride`. After the four
# `movmatrix`, register `i` holds the transposed matrix `i` of the load. Write the address each
# lane gives to the `stmatrix.x4` of `{r0, r1, r2, r3}`. (The formula in the table above is
# the load's: it is wrong for lanes 8-23.)

# %% solution id=transposed_rows
def transposed_rows(lane, base, stride):
    """Row address lane `lane` gives to the stmatrix.x4 that writes the transposed tile."""
    ### BEGIN SOLUTION
    return base + (lane % 8 + 8 * (lane // 16)) * stride + (lane // 8 % 2) * 16
    ### END SOLUTION


ex.transposed_rows.check(transposed_rows);

# %% tests id=transposed_rows_tests points=2
ex.transposed_rows.grade(transposed_rows)
### BEGIN HIDDEN TESTS
ex.transposed_rows.grade(transposed_rows, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 · the transpose kernel
#
# Complete the kernel: the 16x16 input (element `(r, c)` = `16r + c`) is staged in `src` and
# loaded into `r0..r3` for you; both shared tiles have rows `sld` **elements** apart, and the
# output tile is filled with `0xFFFF` so unwritten rows stand out. Transpose the four
# registers with `movmatrix` and store them with one `stmatrix.x4` into `dst`; the tile is
# then copied out. The check compares every stored element with the emulator and says which
# input element a wrong cell received. (`#include "movmatrix.cuh"` offers
# `ptxlab::movmatrix_trans(x)` if you prefer it to writing the `asm`.)

# %% solution id=transpose_kernel
TRANSPOSE = r"""
extern "C" __global__ void transpose_16x16(const unsigned short* in, int sld, unsigned short* out)
{
    extern __shared__ __align__(16) unsigned short smem[];
    unsigned short* src = smem;                  // input tile: 16 rows of sld elements
    unsigned short* dst = smem + 16 * sld;       // output tile: 16 rows of sld elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 16 * sld; i += 32) {
        src[i] = i % sld < 16 ? in[(i / sld) * 16 + i % sld] : 0;
        dst[i] = 0xFFFF;
    }
    __syncwarp();

    const unsigned s_src = static_cast<unsigned>(__cvta_generic_to_shared(src));
    const unsigned s_dst = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(s_src + (lane % 16) * sld * 2 + (lane / 16) * 16));

    // BEGIN SOLUTION
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;\n" : "+r"(r0));
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;\n" : "+r"(r1));
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;\n" : "+r"(r2));
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %0;\n" : "+r"(r3));
    const unsigned addr = s_dst + (lane % 8 + 8 * (lane / 16)) * sld * 2 + (lane / 8 % 2) * 16;
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
    // END SOLUTION

    __syncwarp();
    for (unsigned i = lane; i < 256; i += 32) out[i] = dst[(i / 16) * sld + i % 16];
}
"""
ex.transpose_kernel.check(TRANSPOSE);

# %% tests id=transpose_kernel_tests points=3
ex.transpose_kernel.grade(TRANSPOSE)
### BEGIN HIDDEN TESTS
ex.transpose_kernel.grade(TRANSPOSE, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Three ways to turn a tile around
#
# Every 8x8 block must be transposed exactly once, and the blocks must land at mirrored
# places. Any one of the three instructions can do the turning; for a tile that passes through
# shared memory, a `.trans` load or store is the cheaper choice, and `movmatrix` earns its
# place when the data is in registers for another reason, as with the accumulator above.
#
# <details><summary>The three ways, instruction by instruction</summary>
#
# | load | in registers | store | instructions per 16x16 |
# | --- | --- | --- | --- |
# | `ldmatrix.x4.trans` | – | `stmatrix.x4` (mirrored) | 2 |
# | `ldmatrix.x4` | 4 × `movmatrix` | `stmatrix.x4` (mirrored) | 6 |
# | `ldmatrix.x4` | – | `stmatrix.x4.trans` (mirrored) | 2 |
#
# Two of them cancel (`movmatrix` plus a `.trans` load or store gives back the untransposed
# blocks).
#
# </details>

# %% [markdown]
# ## Exercise 5 · spot the bug
#
# A kernel holds A (16x16) as mma's A operand in `a0..a3` (loaded as in notebook 2) and wants
# to multiply by Aᵀ instead, without loading again:
#
# ```c++
# a0 = movmatrix_trans(a0);
# a1 = movmatrix_trans(a1);
# a2 = movmatrix_trans(a2);
# a3 = movmatrix_trans(a3);
# mma_m16n8k16(d, a0, a1, a2, a3, b0, b1, c);   // meant: D = Aᵀ · B + C
# ```
#
# What does the `mma` compute?
# **a)** Aᵀ · B + C, as intended
# **b)** not Aᵀ · B + C: the two diagonal blocks are right, the two off-diagonal blocks are not
# **c)** nothing: four `movmatrix` on the registers of one operand does not compile
# **d)** A · B + C: the transpositions cancel

# %% solution id=a_blocks_bug
def a_blocks_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.a_blocks_bug.check(a_blocks_answer);

# %% tests id=a_blocks_bug_tests points=1
ex.a_blocks_bug.grade(a_blocks_answer)

# %% [markdown]
# The emulator, on a random A: with the registers transposed in place, and with `a1` and `a2`
# exchanged.

# %%
a_bits = rng.integers(0, 1 << 16, (16, 16), dtype=np.uint16)
a_regs = emulator.matrices_to_fragment(a_bits[None], form.a)
a_t_regs = emulator.matrices_to_fragment(a_bits.T[None], form.a)
moved = ex.movmatrix_each(a_regs)
print("in place        == Aᵀ:", np.array_equal(moved, a_t_regs))
print("a1, a2 swapped  == Aᵀ:", np.array_equal(moved[:, [0, 2, 1, 3]], a_t_regs))

# %% [markdown]
# ## What to remember
#
# * `movmatrix.sync.aligned.m8n8.trans.b16 d, a`: one 8x8 matrix of 16-bit elements, same
#   layout in and out, the matrix transposed. Lane `t` receives column `t // 4` of the
#   original, rows `2(t % 4)` and `2(t % 4) + 1`; the element comes from lane
#   `4(2(t % 4) + half) + t // 8`.
# * `ldmatrix` + `movmatrix` = `ldmatrix .trans`. Use `movmatrix` for data already in
#   registers: an f16 accumulator becomes the next `mma`'s B operand with one `movmatrix` per
#   register.
# * Transposing a bigger tile block by block also moves the blocks: the off-diagonal blocks
#   trade places, in a store's row addresses or in the register order.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
