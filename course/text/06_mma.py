# %% [markdown]
# # 6 · `mma.sync`: a warp multiplies a tile
#
# ```
# mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32  {d0, d1, d2, d3}, {a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3};
# ```
#
# One instruction, executed by all 32 lanes of a warp together, computes **D = A·B + C** for
# a whole tile: A is M x K, B is K x N, C and D are M x N. The shape is in the name
# (`m16n8k16`: M = 16, N = 8, K = 16), and so are the types, in the order D, A, B, C
# (`.f32.f16.f16.f32`: f16 inputs, f32 accumulators). No lane holds a whole matrix: each
# holds a few elements of A, B and C in its registers (a **fragment**), and receives a few
# elements of D. Which elements is fixed by the instruction, and that is what this notebook is
# about: the fragments of every variant, what the types do to the numbers, and a warp that
# loads a tile with `ldmatrix`, multiplies it and stores it back.
#
# `.sync.aligned` means what it meant for `ldmatrix`: all 32 lanes execute the same `mma`
# together, from converged code.

# %%
import numpy as np

from ptxlab import backends, emulator, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import mma as ex

print(backends.describe())

# %% [markdown]
# ## The variants of this course
#
# The table is computed from `ptxlab.layouts.MMA_VARIANTS`. A "register" is always 32 bits:
# 16-bit inputs come two to a register, 8-bit inputs four, tf32 and 32-bit accumulators one.
# The header `kernels/mma.cuh` wraps each variant in a function named after it
# (`ptxlab::mma_m16n8k16_f32_f16_f16_f32(d, a, b, c)`, register counts part of the type);
# `#include "mma.cuh"` works in every kernel of the course.

# %%
ex.variants_html()

# %% [markdown]
# ## The fragments of `m16n8k16` with f16 inputs
#
# Every fragment is built from the same piece you met with `ldmatrix`: split the lane into a
# **group** `g = lane // 4` (0-7) and `t = lane % 4` (0-3). In an 8-row block, group `g` holds
# row `g`, and lane `t` of the group holds the elements `2t` and `2t + 1` of that row, packed
# in one register (lower column in the low half).
#
# * **A** (16 x 16) is four such blocks, one per register, in the order upper-left,
#   **lower-left**, upper-right, lower-right: `a0` rows 0-7/k 0-7, `a1` rows 8-15/k 0-7, `a2`
#   rows 0-7/k 8-15, `a3` rows 8-15/k 8-15 (notebook 2). Here `a0..a3` name the four
#   **registers**, as in the instruction's operand list. The PTX ISA's fragment figures name
#   the **elements** instead: `a0..a7`, two per register, so its `a0, a1` are the two halves
#   of register `a0` here, its `a2, a3` those of `a1`, and so on.
# * **B** (16 x 8, `k` by `n`) is handed out by **columns**: group `g` holds column `n = g`,
#   lane `t` the pair `k = 2t, 2t + 1`; `b1` continues at `k + 8` (notebook 3).
# * **C and D** (16 x 8): with f32 accumulators each lane holds four single floats: `d0, d1`
#   are row `g`, columns `2t` and `2t + 1`; `d2, d3` the same columns of row `g + 8`.
#
# The picture draws the three fragments side by side, each cell naming the lane that holds it,
# in that lane's colour in all three; thick lines part the registers. Press play (or move the
# slider) to follow one lane: its cells name the register and element, and the lines under the
# picture list what it holds. The drop-down shows the other variants of the course.

# %%
f32_form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
widgets.LanePlayer.mma(("m16n8k16", "f16", "f16", "f32", "f32"), lane=5)

# %% [markdown]
# <details><summary>What <code>.row.col</code> says, and how B may be stored</summary>
#
# `.row` and `.col` name the layouts of A and B: A is "row-major", B "column-major". It is a
# statement about the **registers**, not about your memory: in A's registers, the two elements
# packed together are neighbours along a *row* of A; in B's, neighbours along a *column* of B.
# In both cases they are two consecutive values of `k`, which is the index a dot product runs
# over: lane `t` holds `A[g][2t..2t+1]` and `B[2t..2t+1][g]`, the matching halves of a row of
# A and a column of B. (For these shapes `.row.col` is the only form PTX has.)
#
# How B is stored in shared memory is your choice, and it decides the load:
#
# * stored as an **N x K** array (a row of 16 `k` values per column `n`, i.e. B column-major):
#   the stored rows already are B's columns, and a plain `ldmatrix.x2` hands them out right;
# * stored **K x N** row-major (a row per `k`): `ldmatrix.x2.trans` turns each 8x8 block
#   around on the way (notebook 3).
#
# </details>

# %% [markdown]
# ## A first live `mma`
#
# Before any `ldmatrix`, the fragments are made in Python: `ex.fragments(form, A, B, C)` places
# every element where `ptxlab.layouts` says the instruction expects it, giving each lane's
# registers. The kernel reads its registers, executes one `mma` through the `mma.cuh` wrapper
# and writes D's registers out; `ex.result_matrix` puts each element of D back at its
# `(row, col)`. The picture colours every element of D by the lane that received it.

# %%
MMA_ON_FRAGMENTS = r"""
#include "mma.cuh"

extern "C" __global__ void mma_on_fragments(const unsigned* a, const unsigned* b,
                                            const float* c, float* d)
{
    const unsigned lane = threadIdx.x % 32;
    unsigned a_frag[4], b_frag[2];
    float c_frag[4], d_frag[4];
    for (int i = 0; i < 4; ++i) a_frag[i] = a[lane * 4 + i];
    for (int i = 0; i < 2; ++i) b_frag[i] = b[lane * 2 + i];
    for (int i = 0; i < 4; ++i) c_frag[i] = c[lane * 4 + i];
    ptxlab::mma_m16n8k16_f32_f16_f16_f32(d_frag, a_frag, b_frag, c_frag);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = d_frag[i];
}
"""
rng = np.random.default_rng(6)
A = rng.integers(-3, 4, (16, 16)).astype(np.float16)
B = rng.integers(-3, 4, (16, 8)).astype(np.float16)
C = (100 * np.arange(16)[:, None] + np.arange(8)).astype(np.float32)   # C[r][c] = 100r + c
a, b, c = ex.fragments(f32_form, A, B, C)
res = launch(MMA_ON_FRAGMENTS, "mma_on_fragments", block=(32,),
             args=[a.ravel(), b.ravel(), c.view(np.float32).ravel(), np.zeros(128, np.float32)])
D = ex.result_matrix(f32_form, res.outputs[3].view(np.uint32).reshape(32, 4))
exact = A.astype(np.float64) @ B.astype(np.float64) + C
print(f"ran on: {res.device}; D equals numpy's A @ B + C: {np.array_equal(D, exact)}")
render.side_by_side(
    render.matrix_html(D, f32_form.d.owners[0, ..., 0], title="D = A·B + C, coloured by lane"),
    render.lane_registers_html(f32_form.d, 5, values=res.outputs[3].view(np.uint32).reshape(32, 4)),
    render.legend_html(range(0, 32, 4)))

# %% [markdown]
# ## Exercise 1 · the accumulator fragment
#
# Write `accumulator(lane, reg)`: which element `(row, col)` of C (or D) does register `reg`
# (0-3) of `lane` hold, with 32-bit accumulators? The map below draws your answer (wrong cells
# red). The hidden tests try the 32-bit accumulators of the other variants too.

# %% solution id=accumulator
def accumulator(lane, reg):
    """(row, col) of C/D held in register `reg` of `lane` (f32 or s32 accumulators)."""
    ### BEGIN SOLUTION
    return lane // 4 + 8 * (reg // 2), 2 * (lane % 4) + reg % 2
    ### END SOLUTION


ex.accumulator.check(accumulator);

# %% tests id=accumulator_tests points=2
ex.accumulator.grade(accumulator)
### BEGIN HIDDEN TESTS
ex.accumulator.grade(accumulator, hidden=True)
### END HIDDEN TESTS

# %%
widgets.FragmentMap("mma operand D", mma=("m16n8k16", "f16", "f16", "f32", "f32"), lane=6,
                    formula=lambda lane, reg, half: accumulator(lane, reg))

# %% [markdown]
# ## Other element widths: bf16, tf32, s8, and `m16n8k8`
#
# The rule behind every operand is the one above, with one change: a register holds
# `32 // bits` elements, so a block is 8 rows by `4 * (32 // bits)` columns:
#
# | inputs | per register | A block | shapes |
# | --- | --- | --- | --- |
# | f16, bf16 | 2 | 8 x 8 | m16n8k16 (A 4 regs, B 2), m16n8k8 (A 2 regs, B 1) |
# | tf32 | 1 | 8 x 4 | m16n8k8 (A 4 regs, B 2) |
# | s8 | 4 | 8 x 16 | m16n8k32 (A 4 regs, B 2) |
#
# A's registers still walk its blocks down, then right; B's registers walk down `k`, and lane
# `t` starts at `k = (32 // bits) * t`. bf16 has exactly the layout of f16. The accumulators do
# not change at all: 32-bit C/D has the layout of Exercise 1 in every variant. Below, tf32
# (`m16n8k8`) and s8 (`m16n8k32`, lane 6 picked out); the player above shows every variant.

# %%
tf32_form = layouts.mma_form("m16n8k8", "tf32", "tf32", "f32", "f32")
s8_form = layouts.mma_form("m16n8k32", "s8", "s8", "s32", "s32")
render.side_by_side(render.mma_fragments_svg(tf32_form), render.mma_fragments_svg(s8_form, lane=6))

# %% [markdown]
# ## Exercise 2 · the B fragment for any width
#
# Write `b_fragment(lane, reg, elem, bits)`: for inputs of `bits` bits (8, 16 or 32), which
# `(k, n)` of B does element `elem` (0 = lowest bits) of register `reg` of `lane` hold? The
# check tries f16 (`m16n8k16`) and tf32 (`m16n8k8`); the hidden tests add s8 (`m16n8k32`),
# `m16n8k8` with f16 and bf16. Draw your formula for s8 below before you submit.

# %% solution id=b_fragment
def b_fragment(lane, reg, elem, bits):
    """(k, n) of B held in element `elem` of register `reg` of `lane`, `bits`-bit inputs."""
    ### BEGIN SOLUTION
    per = 32 // bits
    return per * (lane % 4) + elem + 4 * per * reg, lane // 4
    ### END SOLUTION


ex.b_fragment.check(b_fragment);

# %% tests id=b_fragment_tests points=2
ex.b_fragment.grade(b_fragment)
### BEGIN HIDDEN TESTS
ex.b_fragment.grade(b_fragment, hidden=True)
### END HIDDEN TESTS

# %%
widgets.FragmentMap("mma operand B", mma=("m16n8k32", "s8", "s8", "s32", "s32"),
                    formula=lambda lane, reg, half: b_fragment(lane, reg, half, 8))

# %% [markdown]
# ## What the types mean
#
# **Inputs.** f16 has 10 mantissa bits and tops out at 65504; bf16 keeps f32's 8 exponent
# bits (the same range) with only 7 mantissa bits; tf32 is 19 bits: the sign, f32's 8 exponent
# bits and 10 mantissa bits. Every product of two such inputs is exact in the tensor core.
#
# **Accumulators.** C and D share a type, the accumulator type. It is both the precision of
# the result and the size of the fragment: f16 accumulators pack two elements per register
# (2 registers per lane), f32 ones take 4. Summing many products quickly leaves f16's range
# and its 11 significant bits behind, which is why f16 inputs are usually accumulated in f32.
# Below, the same A and B (`A[r][k] = 8(r+1)`, `B[k][c] = 4(c+1)`, C = 1, so
# `D[r][c] = 512(r+1)(c+1) + 1`) with both accumulators, on live kernels (the reference
# kernels of `kernels/reference/mma_ref.cu`, through `ex.run_mma`).

# %%
A = np.repeat(8.0 * np.arange(1, 17)[:, None], 16, axis=1)
B = np.repeat(4.0 * np.arange(1, 9)[None, :], 16, axis=0)
C = np.ones((16, 8))
f16_acc = ex.run_mma(("m16n8k16", "f16", "f16", "f16", "f16"), A, B, C)
f32_acc = ex.run_mma(("m16n8k16", "f16", "f16", "f32", "f32"), A, B, C)
print(f"ran on: {f32_acc.device}")
render.side_by_side(
    render.matrix_html(f16_acc.D, f16_acc.form.d.owners[0, ..., 0], fmt="g",
                       title="f16 accumulators (2 regs/lane)"),
    render.matrix_html(f32_acc.D, f32_acc.form.d.owners[0, ..., 0], fmt="g",
                       title="f32 accumulators (4 regs/lane)"))

# %% [markdown]
# With f16 accumulators the `+ 1` is gone as soon as the result passes 2048 (f16 has no odd
# integers there), and the last element, 65537, overflows to infinity. The f32 results are
# exact. Note too that the two pictures are coloured alike: the f16 accumulator fragment
# holds the same elements per lane, two to a register: `d0` = row `g`, `d1` = row `g + 8`.
#
# The same numbers in every input type (`tf32 (read)` is what the tensor core computes with
# when a register holds the f32 pattern of the value):

# %%
print(ex.formats_table([1 / 3, 300.7, 2049, 70000.0, 1e-6, 1 + 2**-11 + 2**-12]))

# %% [markdown]
# ### tf32: thirteen bits the tensor core does not read
#
# A tf32 operand is a 32-bit register. The PTX ISA promises only what a tf32 *value* is (f32's
# range, at least 10 mantissa bits, its layout in the register implementation-defined) and
# that `cvt.rna.tf32.f32` makes one; what an `mma` makes of an arbitrary f32 pattern it does
# not say. What the H100 does, measured with random low bits
# (`reports/hardware/MMA_ROUNDING.md`, 2026-11-24): it reads the upper 19 bits and **ignores
# the low 13**: nothing is rounded, the extra mantissa bits are simply dropped. Code that wants
# defined, rounded inputs converts first with `cvt.rna.tf32.f32` (round to nearest, ties away
# from zero), which leaves a pattern whose low 13 bits are zero.
#
# The kernel below multiplies a 16x8 A by the 8x8 identity, so D is A as the tensor core read
# it, once with the raw f32 patterns and once rounded with `cvt.rna` first.
# `A[r][c] = 1 + (8r + c) * 2^-14`, so `(A - 1) * 2^14` is the element's id 0-127; a tf32
# step near 1 is `2^-10`, 16 ids wide. The pictures show `(D - 1) * 2^14`: the raw ids are cut
# down to a multiple of 16, the rounded ones go to the nearest multiple (8 and up round up).

# %%
TF32_KERNEL = r"""
#include "mma.cuh"

// a, b: f32 values in fragment order; round_first != 0: round each with cvt.rna.tf32.f32
extern "C" __global__ void tf32_mma(const float* a, const float* b, int round_first, float* d)
{
    const unsigned lane = threadIdx.x % 32;
    unsigned ra[4], rb[2];
    for (int i = 0; i < 4; ++i) {
        const float x = a[lane * 4 + i];
        if (round_first) asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(ra[i]) : "f"(x));
        else ra[i] = __float_as_uint(x);
    }
    for (int i = 0; i < 2; ++i) {
        const float x = b[lane * 2 + i];
        if (round_first) asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(rb[i]) : "f"(x));
        else rb[i] = __float_as_uint(x);
    }
    const float rc[4] = {0.f, 0.f, 0.f, 0.f};
    float rd[4];
    ptxlab::mma_m16n8k8_f32_tf32_tf32_f32(rd, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = rd[i];
}
"""
A = 1 + np.arange(128).reshape(16, 8) * 2.0**-14
a, b, _ = ex.fragments(tf32_form, A, np.eye(8), np.zeros((16, 8)))
views = [render.matrix_html((A - 1) * 2**14, tf32_form.a.owners[0, ..., 0], fmt="g",
                            title="(A - 1) * 2^14, coloured by lane")]
for round_first in (0, 1):
    res = launch(TF32_KERNEL, "tf32_mma", block=(32,),
                 args=[a.view(np.float32).ravel(), b.view(np.float32).ravel(),
                       np.int32(round_first), np.zeros(128, np.float32)])
    D = ex.result_matrix(tf32_form, res.outputs[3].view(np.uint32).reshape(32, 4))
    views.append(render.matrix_html((D - 1) * 2**14, tf32_form.d.owners[0, ..., 0], fmt="g",
                                    title=["raw f32 bits: truncated",
                                           "after cvt.rna.tf32.f32: rounded"][round_first]))
print(f"ran on: {res.device}")
render.side_by_side(*views)

# %% [markdown]
# ## Exercise 3 · what a tf32 operand is worth
#
# Write `tf32_operand(bits)`: given the 32-bit pattern in an A or B register of a tf32 `mma`,
# return the f32 pattern the H100's tensor core actually computes with. (The check compares
# with the emulator, which models the H100.)

# %% solution id=tf32_operand
def tf32_operand(bits):
    """The f32 bit pattern a tf32 mma computes with, for an operand register `bits`."""
    ### BEGIN SOLUTION
    return bits & 0xFFFFE000
    ### END SOLUTION


ex.tf32_operand.check(tf32_operand);

# %% tests id=tf32_operand_tests points=1
ex.tf32_operand.grade(tf32_operand)
### BEGIN HIDDEN TESTS
ex.tf32_operand.grade(tf32_operand, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### s8: exact integers, and a 32-bit accumulator that wraps
#
# `mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32` multiplies signed bytes and adds in
# 32-bit integers. Every product and every sum is exact, with one catch: D is an s32 register,
# and without the `.satfinite` qualifier (not used here) a result outside the s32 range
# **wraps around** modulo 2^32, as integer adds do in C.
#
# ## Exercise 4 · predict D[0][0]
#
# Row 0 of A holds 32 times `-128`, column 0 of B holds 32 times `-128`, and
# `C[0][0] = 2147000000`. What does `D[0][0]` hold after the s8 `mma`?
#
# **a)** `2147483647`  **b)** `-2147443008`  **c)** `2147524288`  **d)** the instruction does
# not accept it: `(-128) * (-128)` does not fit in 8 bits

# %% solution id=s8_wraparound
def s8_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.s8_wraparound.check(s8_answer);

# %% tests id=s8_wraparound_tests points=1
ex.s8_wraparound.grade(s8_answer)

# %% [markdown]
# The same on a live kernel: every row of A and column of B is `-128`, and C grows by 100000
# from column to column; column 4 is the question's case. The right half of D crosses the top
# of the s32 range.

# %%
A = np.full((16, 32), -128)
B = np.full((32, 8), -128)
C = np.tile(ex.S8_C00 + 100_000 * (np.arange(8) - 4), (16, 1))
run = ex.run_mma(("m16n8k32", "s8", "s8", "s32", "s32"), A, B, C)
print(f"ran on: {run.device}")
print("C[0]     :", C[0].tolist())
print("D[0]     :", run.D[0].tolist())
print("exact sum:", (A[0] @ B[:, 0] + C[0]).tolist())

# %% [markdown]
# ### Real numbers: the last bits
#
# Everything so far used numbers whose sums are exact, so the GPU, the CPU model and numpy all
# agree. With arbitrary real inputs the tensor core does not give numpy's answer, because it
# does not round to nearest: an f32 result can be an ulp or more away from numpy's.
#
# <details><summary>How the tensor core adds, as measured on an H100</summary>
#
# Measured on an H100 (`docs/emulator.md`), it takes every product
# exactly, aligns the products and C to the largest exponent among them, cuts each term
# off 25 bits below it (toward zero), adds them all at once, and cuts the sum down to
# f32, again toward zero. So an f32 result can be an ulp away from the correctly rounded
# `A @ B + C`, and several where large products cancel and leave a small result (the bits
# cut off then matter more). The CPU model computes the same way
# (`ptxlab.tensorcore`), so what follows is what a GPU gives too; on a GPU, the last line
# checks exactly that.
#
# </details>

# %%
rng = np.random.default_rng(7)
A = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
B = rng.uniform(-1, 1, (16, 8)).astype(np.float16)
C = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
live = ex.run_mma(f32_form, A, B, C)
exact = A.astype(np.float64) @ B.astype(np.float64) + C
nearest = exact.astype(np.float32)
ulps = ex.ulp_distance(live.D, nearest)
r, c = np.unravel_index(np.argmax(ulps), ulps.shape)
print(f"ran on: {live.device}")
print(f"{int((ulps > 0).sum())} of 128 elements differ from numpy's round-to-nearest, by at "
      f"most {int(ulps.max())} ulp")
for label, value in (("exact", exact), ("numpy, nearest f32", nearest), ("tensor core", live.D)):
    print(f"D[{r}][{c}], {label + ':':<20} {float(value[r, c])!r}")
print("the CPU model gives the same bits:",
      np.array_equal(ex.emulate_mma(f32_form, A, B, C), live.D))
render.matrix_html(live.D, f32_form.d.owners[0, ..., 0], fmt=".4f", wrong=ulps > 0,
                   expected=nearest, title="D; red: not numpy's rounded value (hover: numpy's)")

# %% [markdown]
# ## One warp, one tile, end to end
#
# Now the whole path a tensor-core kernel takes, for one 16x8 tile:
#
# 1. **A** (16x16, row-major in shared memory): `ldmatrix.x4`, lanes 0-15 pointing at rows
#    0-15, lanes 16-31 at the same rows 8 elements further right;
# 2. **B**: `ldmatrix.x2.trans` from a row-major K x N tile (lanes 0-15 at rows `k` = 0-15),
#    or a plain `ldmatrix.x2` from an N x K one (lanes 0-7 at rows `n`, lanes 8-15 at the same
#    rows 8 elements further right);
# 3. `mma` with **f16 accumulators**;
# 4. **D** back to shared memory with `stmatrix.x2`: the f16 accumulator fragment is exactly
#    the `ldmatrix`/`stmatrix` fragment of two 8x8 matrices (rows 0-7 in `d0`, rows 8-15 in
#    `d1`), so lanes 0-15 just point at the 16 rows of D.
#
# `stmatrix` needs sm_90 (Hopper); on an older GPU this cell runs on the CPU model. The kernel
# takes `b_is_nk` to choose how B is stored.

# %%
TILE_F16 = r"""
#include "ldmatrix.cuh"
#include "mma.cuh"
#include "stmatrix.cuh"

extern "C" __global__ void tile_f16(const unsigned short* a, const unsigned short* b,
                                    int b_is_nk, unsigned short* d)
{
    __shared__ __align__(16) unsigned short sa[16 * 16];   // A: 16 rows of 16
    __shared__ __align__(16) unsigned short sb[16 * 8];    // B: 16 rows of 8, or 8 rows of 16
    __shared__ __align__(16) unsigned short sd[16 * 8];    // D: 16 rows of 8
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) sa[i] = a[i];
    for (unsigned i = lane; i < 128; i += 32) sb[i] = b[i];
    __syncwarp();

    unsigned ra[4], rb[2], rd[2];
    const unsigned rc[2] = {0u, 0u};                        // C = 0 (two f16 zeros each)
    ptxlab::ldmatrix_x4(ra, &sa[(lane % 16) * 16 + (lane / 16) * 8]);
    if (b_is_nk)
        ptxlab::ldmatrix_x2(rb, &sb[(lane % 8) * 16 + (lane / 8 % 2) * 8]);
    else
        ptxlab::ldmatrix_x2_trans(rb, &sb[(lane % 16) * 8]);
    ptxlab::mma_m16n8k16_f16_f16_f16_f16(rd, ra, rb, rc);
    ptxlab::stmatrix_x2(&sd[(lane % 16) * 8], rd);
    __syncwarp();
    for (unsigned i = lane; i < 128; i += 32) d[i] = sd[i];
}
"""
rng = np.random.default_rng(16)
A = rng.integers(-3, 4, (16, 16)).astype(np.float16)
B = rng.integers(-3, 4, (16, 8)).astype(np.float16)
f16_form = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
pictures = []
for b_is_nk, stored in ((0, B), (1, B.T)):
    res = launch(TILE_F16, "tile_f16", block=(32,),
                 args=[A.view(np.uint16).ravel(), np.ascontiguousarray(stored).view(np.uint16).ravel(),
                       np.int32(b_is_nk), np.zeros(128, np.uint16)])
    D = res.outputs[3].view(np.float16).reshape(16, 8)
    ok = np.array_equal(D.astype(np.float64), A.astype(np.float64) @ B.astype(np.float64))
    pictures.append(render.matrix_html(D, f16_form.d.owners[0, ..., 0], fmt="g",
                                       title=f"B stored {'N x K' if b_is_nk else 'K x N'}: "
                                             f"D {'=' if ok else '!='} A @ B (numpy)"))
print(f"ran on: {res.device}")
render.side_by_side(*pictures, render.legend_html(range(0, 32, 4)))

# %% [markdown]
# ## A wider B: two n-blocks with one `ldmatrix.x4.trans`
#
# A real kernel multiplies A by a B much wider than 8 columns, one `mma` per 8 columns
# (**n-block**). Instead of one `ldmatrix.x2.trans` per n-block, it loads two at once with
# `ldmatrix.x4.trans`: matrices 0 and 1 become `b0, b1` of n-block `j` (columns 8j..8j+7,
# `k` = 0-7 and 8-15), matrices 2 and 3 `b0, b1` of n-block `j + 1`. Registers `r0, r1` feed
# the first `mma`, `r2, r3` the second.
#
# ## Exercise 5 · row addresses for two n-blocks
#
# B is a row-major 16 x N tile in shared memory: stored row `k` starts at `base + k * stride`
# (bytes). Write the address lane `lane` supplies to the `ldmatrix.x4.trans` that loads
# n-blocks `j` and `j + 1`. The table under it compares your formula lane by lane.

# %% solution id=b_pair_rows
def b_pair_rows(lane, j, base, stride):
    """Row address for ldmatrix.x4.trans loading n-blocks j and j+1 of a row-major B."""
    ### BEGIN SOLUTION
    return base + (lane % 16) * stride + (j + lane // 16) * 16
    ### END SOLUTION


ex.b_pair_rows.check(b_pair_rows);

# %% tests id=b_pair_rows_tests points=2
ex.b_pair_rows.grade(b_pair_rows)
### BEGIN HIDDEN TESTS
ex.b_pair_rows.grade(b_pair_rows, hidden=True)
### END HIDDEN TESTS

# %%
ex.b_pair_table(b_pair_rows, j=1, n_cols=32, base=0, stride=64)

# %% [markdown]
# ## Exercise 6 · the whole tile in a kernel
#
# Complete the kernel: one warp computes **D = A·B + C** with f32 accumulators
# (`mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`).
#
# * A (16x16) is staged in shared memory `sa` with rows `lda` elements apart; B (16x8, K x N,
#   row-major) in `sb` with rows `ldb` elements apart. Load A with `ldmatrix.x4` and B with
#   `ldmatrix.x2.trans`.
# * C and D are 16x8 row-major f32 arrays in global memory: read your `rc[0..3]` from `c` and
#   store `rd[0..3]` to `d` at the accumulator positions (Exercise 1).
# * Store D with plain stores here: `stmatrix` moves 16-bit elements, so an f32 D goes through
#   it only as pairs of 16-bit halves (one 32-bit register per element, a row of 8 halves is 4
#   floats), and the rows then land in shared memory in an order that takes a second pass to
#   undo. The capstone's f32 epilogue does exactly that (`kernels/capstone/gemm.cu`); for one
#   tile, direct stores are simpler.
#
# The wrappers of `ldmatrix.cuh` and `mma.cuh` are included; writing the `asm` yourself is
# fine too. The check runs the kernel and compares every element of D with the emulator;
# hidden tests use other values and padded rows (`lda`, `ldb` larger than the tile).

# %% solution id=tile_kernel
TILE_KERNEL = r"""
#include "ldmatrix.cuh"
#include "mma.cuh"

extern "C" __global__ void tile_mma(const unsigned short* a, const unsigned short* b,
                                    const float* c, int lda, int ldb, float* d)
{
    extern __shared__ __align__(16) unsigned short smem[];
    unsigned short* sa = smem;                  // A: 16 rows of lda elements
    unsigned short* sb = smem + 16 * lda;       // B: 16 rows of ldb elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) sa[(i / 16) * lda + i % 16] = a[i];
    for (unsigned i = lane; i < 128; i += 32) sb[(i / 8) * ldb + i % 8] = b[i];
    __syncwarp();

    unsigned ra[4], rb[2];
    float rc[4], rd[4];
    // BEGIN SOLUTION
    ptxlab::ldmatrix_x4(ra, &sa[(lane % 16) * lda + (lane / 16) * 8]);
    ptxlab::ldmatrix_x2_trans(rb, &sb[(lane % 16) * ldb]);
    const unsigned g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    ptxlab::mma_m16n8k16_f32_f16_f16_f32(rd, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = rd[i];
    // END SOLUTION
}
"""
ex.tile_kernel.check(TILE_KERNEL);

# %% tests id=tile_kernel_tests points=4
ex.tile_kernel.grade(TILE_KERNEL)
### BEGIN HIDDEN TESTS
ex.tile_kernel.grade(TILE_KERNEL, hidden=True)
### END HIDDEN TESTS

# %%
ex.show_tile(TILE_KERNEL)

# %% [markdown]
# ## Exercise 7 · spot the bug
#
# A kernel loads A (16x16, row-major, rows `lda` elements apart) by pointing the four groups
# of eight lanes at its blocks "in reading order", left to right, then top to bottom:
#
# ```c++
# // lanes 0-7: upper-left, 8-15: upper-right, 16-23: lower-left, 24-31: lower-right
# const unsigned row = (lane / 16) * 8 + lane % 8;
# const unsigned col = (lane / 8 % 2) * 8;
# ptxlab::ldmatrix_x4(ra, &sa[row * lda + col]);
# ptxlab::mma_m16n8k16_f32_f16_f16_f32(acc, ra, rb, acc);   // acc = A·B + acc
# ```
#
# What does the `mma` compute?
#
# - **a)** the right D: the tensor core sorts the four blocks out by itself
# - **b)** a wrong D, silently: the mma multiplies an A whose upper-right and lower-left 8x8
#   blocks are exchanged
# - **c)** D = Aᵀ·B + C: the blocks arrive transposed
# - **d)** nothing: the load faults because lanes 8-15 point at the wrong rows

# %% solution id=swapped_a_blocks
def swapped_blocks_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.swapped_a_blocks.check(swapped_blocks_answer);

# %% tests id=swapped_a_blocks_tests points=1
ex.swapped_a_blocks.grade(swapped_blocks_answer)

# %% [markdown]
# ## What to remember
#
# * `mma.sync.aligned.{shape}.row.col.{D}.{A}.{B}.{C}`: D = A·B + C for one warp's tile; the
#   types are listed D, A, B, C.
# * Every fragment is made of 8-row blocks: group `g = lane // 4` holds row `g` of a block,
#   lane `t = lane % 4` holds `32 // bits` neighbouring elements of it per register.
# * A's registers: upper-left, lower-left, upper-right, lower-right. B's registers hold
#   columns (`.col`): lane `t` has consecutive `k` of column `n = g`. 32-bit C/D: `d0, d1` in
#   row `g`, `d2, d3` in row `g + 8`; f16 C/D packs the same elements two to a register.
# * f16/bf16/tf32 products are exact; the accumulator type sets the precision of the sums.
#   tf32 operands lose their low 13 bits unless you round with `cvt.rna.tf32.f32`; s8 sums
#   are exact and wrap modulo 2^32 without `.satfinite`. For real inputs the tensor core
#   truncates where numpy rounds to nearest: the last bits can differ.
# * The pipeline: `ldmatrix.x4` for A, `ldmatrix.x2.trans` (row-major K x N) or `.x2` (N x K)
#   for B, `mma`, then `stmatrix` for 16-bit D or plain stores for f32.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
