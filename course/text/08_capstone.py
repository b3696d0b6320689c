# %% [markdown]
# # 8 · Capstone: a tiled GEMM and a fast transpose
#
# Everything so far, in two real kernels (`kernels/capstone/`), measured on an H100 against the
# best alternatives:
#
# * **`gemm.cu`**: `C = A·B` with fp16 inputs and fp32 accumulation. Data path of one block:
#   global memory `--cp.async-->` swizzled shared tiles (a ring of stages)
#   `--ldmatrix / ldmatrix.trans-->` mma fragments `--mma.sync-->` fp32 accumulators
#   `--stmatrix-->` a staging tile `--16-byte stores-->` C.
# * **`transpose.cu`**: a 16-bit transpose: `cp.async` into a swizzled tile, one
#   `ldmatrix.x4.trans` per 16x16 piece, `stmatrix.x4` at the mirrored position, 16-byte stores.
#
# This notebook walks through how they are built, has you write the pieces that matter,
# checks the real kernels on whatever backend runs here, and shows how fast they are.

# %%
import numpy as np

from ptxlab import backends, layouts, render
from ptxlab.bench import notebook as capstone
from ptxlab.bench.kernels import GEMM_BEST, GEMM_SMALL
from ptxlab.exercises import capstone as ex

print(backends.describe())

# %% [markdown]
# ## Tiling: block, warp, mma
#
# Each block computes a `BM x BN` tile of C, walking K in steps of `BK` (a **k-tile**). Its
# warps split the block tile into **warp tiles**; each warp covers its warp tile with m16n8
# `mma.sync` tiles and keeps all their fp32 accumulators in registers for the whole K loop.
# Every number below is derived from the tile parameters (`ptxlab.bench.kernels.GemmConfig`).
#
# <details><summary>The two configurations</summary>
#
# On the H100 the measured configuration is 128x256 with 8 warps of 64x64; the same source
# with a 64x64 tile and 4 warps is what the CPU model runs in seconds.
#
# </details>

# %%
capstone.tiling_html(("benchmarked on the H100", GEMM_BEST), ("CPU-model size", GEMM_SMALL))

# %%
capstone.warp_map_html(GEMM_SMALL)

# %% [markdown]
# ## `cp.async` stages
#
# `cp.async` copies 16 bytes from global to shared memory without passing through registers,
# and without making the thread wait: copies are grouped (`cp.async.commit_group`) and a thread
# later waits until at most `N` of its groups are still in flight (`cp.async.wait_group N`).
# The GEMM keeps a ring of `STAGES` k-tiles: before the loop it starts `STAGES - 1` of them;
# at k-tile `kt` it waits for tile `kt`, synchronises the block, starts the copy of tile
# `kt + STAGES - 1` into the slot freed by tile `kt - 1`, and computes on tile `kt` while the
# copies fly. The plain form of the loop (the measured kernel overlaps the barrier with the
# last k-step, same idea):

# %%
capstone.kernel_excerpt("capstone/gemm.cu", "int read_stage = 0, write_stage = STAGES - 1;",
                        occurrence=2, max_lines=7)

# %% [markdown]
# ## Swizzled shared tiles
#
# The tiles are stored as rows of 16-byte chunks with the XOR swizzle of notebook 7, so every
# `ldmatrix` is conflict-free (Nsight Compute counted **0** bank conflicts in the whole GEMM).
# A has `BK / 8` chunks per row; B, stored row-major, has `BN / 8`.

# %%
capstone.kernel_excerpt("capstone/gemm.cu", "template <int C>", "return (u32)(row * C")

# %% [markdown]
# ## Exercise 1 · the B address
#
# B is row-major (a stored row per `k`), so the GEMM loads it with `ldmatrix.x4.trans`: one
# load gives the B fragments of **two** n8 tiles for one k16 step, register `i` being matrix
# `i`: (k 0-7 | k 8-15) of the first n8 tile, then of the second. Write the byte offset,
# inside the swizzled B tile (rows of `chunks` chunks), that lane `lane` supplies for the
# 16x16 block of B starting at row `k0`, chunk `n_chunk` (= column `8 * n_chunk`).

# %% solution id=b_trans_offset
def b_trans_offset(lane, k0, n_chunk, chunks):
    """Byte offset lane `lane` gives ldmatrix.x4.trans for B rows k0.., chunks n_chunk, +1."""
    ### BEGIN SOLUTION
    row = k0 + lane % 16
    chunk = n_chunk + lane // 16
    return (row * chunks + (chunk ^ (row % 8))) * 16
    ### END SOLUTION


ex.b_trans_offset.check(b_trans_offset);

# %% tests id=b_trans_offset_tests points=2
ex.b_trans_offset.grade(b_trans_offset)
### BEGIN HIDDEN TESTS
ex.b_trans_offset.grade(b_trans_offset, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## One k16 step of a warp
#
# Per k16 step, a warp loads one A fragment per m16 row of its warp tile (`ldmatrix.x4`) and
# one B pair per two n8 columns (`ldmatrix.x4.trans`), then issues an `mma.sync` for every
# (m16, n8) pair: 4 + 4 loads feed 32 mma in the benchmarked configuration. The per-lane
# offsets are computed once before the loop (`a_off`, `b_off`), because the swizzle only
# depends on row bits the loop never changes.

# %%
capstone.kernel_excerpt("capstone/gemm.cu", "__device__ __forceinline__ void load_fragments",
                        "}  // namespace gemm")

# %% [markdown]
# ## Exercise 2 · which element of C does an accumulator hold?
#
# A warp keeps `float acc[MT][NT][4]`: `acc[i][j]` is the f32 C fragment of the mma tile in
# m16 row `i` and n8 column `j` of its warp tile. Write `acc_position(lane, i, j, e)`: the
# `(row, col)` inside the warp tile of `acc[i][j][e]` of lane `lane`. (The C fragment:
# `ptxlab.layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32").c`, drawn below with A and
# B, lane 5 picked out: its `c0..c3` are `acc[i][j][0..3]`.)

# %%
form = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")
render.mma_fragments_svg(form, lane=5)

# %% solution id=acc_position
def acc_position(lane, i, j, e):
    """(row, col) inside the warp tile of acc[i][j][e] of `lane`."""
    ### BEGIN SOLUTION
    return 16 * i + lane // 4 + 8 * (e // 2), 8 * j + 2 * (lane % 4) + e % 2
    ### END SOLUTION


ex.acc_position.check(acc_position);

# %% tests id=acc_position_tests points=2
ex.acc_position.grade(acc_position)
### BEGIN HIDDEN TESTS
ex.acc_position.grade(acc_position, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 · a warp's k-loop, as a kernel
#
# One warp, one k-tile, the GEMM's way. A (16x64) and B (64x64, row-major) are copied into
# shared memory with `cp.async`, swizzled by `tile_offset(row, chunk)` (the capstone layout
# for rows of 8 chunks). Complete the loop so the warp computes the 16x16 block of C in
# columns `8 * n_chunk .. 8 * n_chunk + 15`, as two n8 tiles in `acc[0]` and `acc[1]`: for
# each of the 4 k16 steps, one `ldmatrix.x4` for A, one `ldmatrix.x4.trans` for B (your
# `b_trans_offset` with `chunks = 8`), and two `mma.sync` (`mma_f16_f32` from
# `capstone_ptx.cuh` issues `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`). Write the
# two `ldmatrix` as inline PTX. The check compares every accumulator with the emulator running
# the same steps, and recognises the usual slips.

# %% solution id=k_loop_kernel
K_LOOP = r"""
#include "capstone/capstone_ptx.cuh"

// 16-byte chunk `chunk` of row `row` of a tile with 8 chunks (128 bytes) per row, swizzled.
__device__ __forceinline__ u32 tile_offset(int row, int chunk)
{
    return (u32)(row * 8 + (chunk ^ (row & 7))) * 16u;
}

extern "C" __global__ void warp_k_loop(const unsigned short* A, const unsigned short* B,
                                       int n_chunk, float* out)
{
    __shared__ __align__(128) unsigned char smem[(16 + 64) * 128];
    const u32 sA = smem_addr(smem), sB = sA + 16 * 128;
    const int lane = threadIdx.x % 32;
    for (int q = lane; q < 16 * 8; q += 32) cp_async_16(sA + tile_offset(q / 8, q % 8), A + q * 8);
    for (int q = lane; q < 64 * 8; q += 32) cp_async_16(sB + tile_offset(q / 8, q % 8), B + q * 8);
    cp_async_commit();
    cp_async_wait<0>();
    block_sync();

    float acc[2][4] = {};
    for (int ks = 0; ks < 4; ++ks) {
        u32 a[4], b[4];
        // BEGIN SOLUTION
        const u32 a_addr = sA + tile_offset(lane % 16, 2 * ks + lane / 16);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(a_addr));
        const u32 b_addr = sB + tile_offset(16 * ks + lane % 16, n_chunk + lane / 16);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(b_addr));
        mma_f16_f32(acc[0], a, b[0], b[1]);
        mma_f16_f32(acc[1], a, b[2], b[3]);
        // END SOLUTION
    }
    for (int j = 0; j < 2; ++j)
        for (int e = 0; e < 4; ++e) out[lane * 8 + j * 4 + e] = acc[j][e];
}
"""
ex.k_loop_kernel.check(K_LOOP);

# %% tests id=k_loop_kernel_tests points=3
ex.k_loop_kernel.grade(K_LOOP)
### BEGIN HIDDEN TESTS
ex.k_loop_kernel.grade(K_LOOP, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## The epilogue: `stmatrix`
#
# The accumulators leave the warp in the mma C layout: each lane holds pairs of neighbouring
# elements scattered over 16 rows. Storing them straight to global memory would be 4-byte
# writes all over C. Instead the warp packs each pair into one f16x2 register and writes its
# whole tile into a (swizzled) staging area with `stmatrix.x4`, which takes the C fragment
# layout as it is; then each lane reads back 16 contiguous bytes of a row and stores them with
# one 16-byte global store. (For f32 output, each f32 travels as two 16-bit halves; see
# `docs/capstone.md`.)

# %%
capstone.kernel_excerpt("capstone/gemm.cu", "constexpr int EC = WTN / 8;", "st_global_v4(Ch")

# %% [markdown]
# ## Exercise 4 · spot the bug
#
# A variant of the main loop drops the barrier:
#
# ```c++
# for (int kt = 0; kt < KT; ++kt) {
#     cp_async_wait<STAGES - 2>();     // tile kt has arrived
#     if (kt + STAGES - 1 < KT) load_stage(smem, write_stage, plan);
#     cp_async_commit();
#     ... ldmatrix + mma.sync on tile kt ...
# }
# ```
#
# Small tests pass; on a large GEMM a few tiles of C come out wrong, different ones from run
# to run. Why?
# **a)** `cp.async.wait_group` waits for the copies of the whole block, so this is only
# rounding noise
# **b)** `cp.async.wait_group` waits only for the calling thread's copies; a warp's `ldmatrix`
# reads rows other threads copied, and nothing orders those copies (or the refill of a slot
# another warp still reads) before it: a `bar.sync` after the wait is missing
# **c)** `ldmatrix` cannot read data written by `cp.async`
# **d)** the wait should be `cp_async_wait<STAGES - 1>()`

# %% solution id=missing_barrier
def missing_barrier_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.missing_barrier.check(missing_barrier_answer);

# %% tests id=missing_barrier_tests points=1
ex.missing_barrier.grade(missing_barrier_answer)

# %% [markdown]
# ## The transpose
#
# A transpose moves every element, so its speed is set by memory traffic: the goal is to
# read and write global memory only in long 16-byte runs, and to do the actual transposing in
# shared memory and registers. Per 16x16 piece of the input tile, one warp issues one
# `ldmatrix.x4.trans` (each register now holds an 8x8 block *transposed*), and one
# `stmatrix.x4` that writes block `m` to the mirrored position in the output tile. Both tiles
# are swizzled, so neither instruction conflicts.

# %%
capstone.kernel_excerpt("capstone/transpose.cu",
                        "for (int i = 0; i < BLOCKS16 / (THREADS / 32); ++i) {", "stsm_x4(s_out")

# %% [markdown]
# ## Do the real kernels work here?
#
# Every variant (GEMM with B row- or column-major, fp16 or fp32 output; transpose through
# `ldmatrix.trans` or through `movmatrix`) at a small size, on this notebook's backend,
# against a float64 product and an exact transpose.

# %%
capstone.check_kernels()

# %% [markdown]
# ## How fast?
#
# With a GPU that runs the kernels (sm_90), the cell below measures them now: our GEMM against
# cuBLAS (`cupy.matmul`), our transpose against a device-to-device copy and
# `cupy.ascontiguousarray(a.T)`. Without one, it shows the committed H100 report instead and
# says so, with CUTLASS's own `mma.sync` GEMM beside ours.
#
# On the H100 (`reports/capstone/REPORT.md`, 2026-11-26) the transpose runs at 97-119% of copy
# bandwidth from 4096² up (past 100% at 16384² only because the copy itself ran slow there) and,
# timed as CUDA graphs of back-to-back launches, at 2048², 8 MiB of data, 104%. The GEMM picks
# its tiles by problem size (64x128 tiles of 4 warps at 1024³, where 128x256 tiles would leave
# 100 of the 132 SMs idle; 128x256 from 2048³ up) and reaches 420-430 TFLOP/s at 4096³-8192³
# with B row-major: 0.64-0.65 of the `mma.sync` ceiling (657 TFLOP/s, registers only), level
# with CUTLASS's `mma.sync` GEMM (the best of its sweep) from 2048³ up (0.99-1.01, either side
# of 1.00 from run to run) and 1.48-1.50x it at 1024³, and about two thirds of cuBLAS.
#
# <details><summary>What limits an mma.sync GEMM on this GPU</summary>
#
# From 2048³ up every GEMM, ours, CUTLASS's and cuBLAS's, ran at the board's power limit (the
# limit named in every NVML sample; about 695-700 W at 8192³, where the report lists board power), the
# SM clock held at 1.45-1.6 GHz, while the ceiling ran at 1.83-1.86 GHz. Nsight
# Compute puts our tensor pipe 84% busy and CUTLASS's 85%, both at 0.25 `ldmatrix` per `mma`;
# shared memory, L2 and DRAM are not the limit, and there are no bank conflicts. At that clock
# 80% of the ceiling would need the tensor pipe 95% busy or more, more than any `mma.sync` kernel
# measured here reaches.
# </details>
#
# <details><summary>Why cuBLAS goes past the mma.sync ceiling</summary>
#
# It does not use `mma.sync`. Nsight Compute on cuBLAS's 4096³ kernel
# (`nvjet_sm90_hsh_256x128_...`, `reports/capstone/CUBLAS_NCU.md`) counts 2.1 million
# tensor-pipe instructions for the product's 1.37·10¹¹ flops: 65,536 flops each, sixteen times
# an `mma.sync.m16n8k16` (4,096 per warp), which would need 33.5 million. Those are `wgmma`
# instructions, Hopper's warpgroup MMA: four warps together multiply a 64-row tile, reading B
# straight from shared memory and A from shared memory or from registers (no `ldmatrix` for
# an operand in shared memory). Its blocks
# of 384 threads are three warpgroups: in Hopper's usual design two multiply while the third
# brings the next tiles in with the tensor memory accelerator. This course's instructions stop
# at `mma.sync`; `wgmma` is where Hopper's full speed is.
# </details>

# %%
capstone.performance()

# %% [markdown]
# ## Your k-loop as a whole GEMM
#
# Exercise 3's loop is the inner loop of a GEMM. `time_my_gemm` builds a whole GEMM around
# *your* loop body: blocks of 16 warps, each warp a 16x16 tile of C running your four k-steps
# on every k-tile of 64, copied with `cp.async` into two slots and swizzled by your
# `tile_offset`. It checks the product on this notebook's backend (naming the warp, lane and
# accumulator of a wrong element) and, with a GPU, times it beside the capstone GEMM and cuBLAS.
# Without one it shows where the course's own answer landed on the H100: 118-122 TFLOP/s
# from 2048³ up, 0.27-0.30 of the capstone GEMM.
#
# <details><summary>Why it is so much slower than the capstone GEMM</summary>
#
# Per k16 step your warp issues two `ldmatrix.x4` for two `mma.sync`: one load per mma. The
# capstone's 64x64 warp tile issues eight for thirty-two, a quarter per mma, because each A
# fragment serves eight n8 tiles and each B fragment four m16 tiles. An SM's shared memory
# delivers 128 bytes a cycle, so an `ldmatrix.x4` (512 bytes) takes it 4 cycles, while the
# SM's tensor cores finish an `mma.sync.m16n8k16` in about 1.5 (the 657 TFLOP/s ceiling over
# 132 SMs at 1.83 GHz): at one load per mma the loads set the pace, at most about 1.5/4 of
# the ceiling.
# The 64x64 block tile also reads 2.7 times as many bytes of A and B from L2 per flop as the
# capstone's 128x256.
# </details>

# %%
capstone.time_my_gemm(K_LOOP)

# %% [markdown]
# ## What to remember
#
# * A fast GEMM is the four instructions plus data movement: `cp.async` stages keep the copies
#   in flight, swizzled tiles keep `ldmatrix` conflict-free, `ldmatrix(.trans)` hands `mma.sync`
#   its fragments directly, and `stmatrix` turns the accumulator layout back into rows.
# * `cp.async.wait_group` is per thread: a block barrier must follow it before anyone reads
#   what others copied.
# * Accumulator `acc[i][j][e]` sits at row `16i + lane/4 + 8(e/2)`, column
#   `8j + 2(lane%4) + e%2` of the warp tile.
# * A transpose is `ldmatrix.trans` + `stmatrix` at the mirrored block: memory-bound, and close
#   to copy speed when every global access is 16 bytes wide.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
