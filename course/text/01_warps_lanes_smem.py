# %% [markdown]
# # 1 · Warps, lanes and shared memory
#
# The four instructions of this course (`ldmatrix`, `stmatrix`, `movmatrix`, `mma.sync`) are
# **warp-collective**: 32 threads execute one instruction together, and each thread (a *lane*)
# contributes or receives a piece of a matrix. Before meeting them, this notebook settles the
# vocabulary they rely on:
#
# 1. where your kernels run (a GPU, or the CPU model when there is none);
# 2. lanes and warps;
# 3. shared-memory addresses, the `cvta` conversion and 16-byte alignment;
# 4. banks;
# 5. running whole programs as you find them in articles.
#
# Every exercise has a `check` you can run as often as you like, and `.hint()` for a nudge;
# after the last hint, `.reveal()` shows the solution (your progress notes that you looked).
#
# <details><summary><b>How your work is graded</b> (when a class hands these notebooks in)</summary>
#
# When a class hands these notebooks in, the grader runs your
# notebook in a sandbox, then asks it for your *answers*: the values your functions return on
# inputs the grader picks for that run (new addresses, strides and data every time), your kernel
# source, your choices. It judges them itself, outside your notebook, and launches your kernels
# itself on data your code never saw, so a kernel must really move what it is given. The course
# ships its own reference (the layout tables in `layouts`, the `emulator`, the exercises'
# expected values in `ex`): use them freely to explore, but an answer cell that calls them (or
# imports `ptxlab`, `os`, `importlib`, uses `exec`/`eval`/`__import__`/`open`, or `#include`s a
# file other than the course's instruction headers) is flagged, and a person grades that
# exercise. The `ex.<exercise>.check(...)` line in an answer cell is fine.
#
# </details>

# %%
import numpy as np

from ptxlab import backends, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import basics as ex

print(backends.describe())

# %% [markdown]
# ## Where do kernels run?
#
# Every kernel in this course is CUDA source with inline PTX, passed as a string to
# `ptxlab.backends.launch`. With an NVIDIA GPU and CuPy installed it is compiled (NVRTC) and run
# on the GPU. Without one it runs on the **CPU model**: the same source is compiled to PTX and
# interpreted instruction by instruction, with the matrix instructions executed by
# `ptxlab.emulator`, which was checked bit for bit against an H100. The line above says which
# one you have; every result below says which backend produced it.
#
# <details><summary>Which GPU runs which instruction</summary>
#
# | instruction | target (GPU) | PTX ISA version |
# | --- | --- | --- |
# | `ldmatrix` | sm_75 (Turing) or newer | 6.5 |
# | `movmatrix` | sm_75 (Turing) or newer | 7.8 (CUDA 11.8) |
# | `mma.sync.m16n8k16` | sm_80 (Ampere) or newer | 7.0 |
# | `stmatrix` | sm_90 (Hopper) or newer | 7.8 (CUDA 11.8) |
#
# On an older GPU, a kernel that needs a newer instruction falls back to the CPU model instead
# of failing.
#
# </details>

# %% [markdown]
# ## Lanes and warps
#
# A block of threads is cut into warps of 32 consecutive threads. Inside a warp, a thread's
# position is its **lane** (0-31), which PTX exposes as the special register `%laneid`. The
# kernel below runs one block of 64 threads, i.e. two warps, and every thread reports its lane
# and warp. It also takes the address of row `lane % 8` of a small `__shared__` tile, both as a
# generic pointer and converted to the shared window with `cvta.to.shared`.

# %%
WHERE_AM_I = r"""
extern "C" __global__ void where_am_i(unsigned* lane_out, unsigned* warp_out,
                                      unsigned* shared_out, unsigned long long* generic_out)
{
    __shared__ __align__(16) unsigned short tile[8 * 8];   // an 8x8 tile of 16-bit elements
    const unsigned t = threadIdx.x;
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    const unsigned short* row_start = &tile[(lane % 8) * 8];   // start of row lane % 8
    unsigned shared_addr;
    asm volatile("{ .reg .u64 s64;\n\t"
                 "cvta.to.shared.u64 s64, %1;\n\t"                // generic -> shared window
                 "cvt.u32.u64 %0, s64; }"                          // shared addresses fit 32 bits
                 : "=r"(shared_addr) : "l"(row_start));
    lane_out[t] = lane;
    warp_out[t] = t / 32;
    shared_out[t] = shared_addr;
    generic_out[t] = reinterpret_cast<unsigned long long>(row_start);
}
"""
n = 64
res = launch(WHERE_AM_I, "where_am_i", grid=(1,), block=(n,),
             args=[np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32),
                   np.zeros(n, np.uint64)])
lane, warp, shared, generic = res.outputs
print(f"ran on: {res.device} ({res.backend})")
rows = [{"lane": int(lane[t]), "thread": t, "warp": int(warp[t]), "shared": int(shared[t]),
         "generic": f"0x{int(generic[t]):x}"} for t in range(0, n, 5)]
render.address_table_html(rows, title="every fifth thread",
                          columns=[("thread", "threadIdx.x"), ("warp", "warp"), ("lane", "%laneid"),
                                   ("shared", "shared address"), ("generic", "generic address")])

# %% [markdown]
# Things to notice:
#
# * the lane is `threadIdx.x % 32`, the warp `threadIdx.x / 32`;
# * the **shared** address of row `r` is the tile's shared address plus `r * 16`: each row holds
#   8 elements of 2 bytes. It is a small byte offset into the block's shared memory; the
#   instructions of this course take exactly this kind of address (`.shared` state space);
# * the **generic** address is the same byte seen through the unified address space; `cvta`
#   converts one into the other. In CUDA C++ `__cvta_generic_to_shared(p)` does the same.
#
# ## Exercise 1 · the byte address of an element
#
# A tile of 16-bit elements is stored row by row in shared memory, starting at byte `base`,
# with consecutive rows `stride` **bytes** apart (the stride may be larger than a row: the tile
# may be cut out of a wider matrix). Write the byte address of element `(row, col)`.

# %% solution id=element_address
def element_address(row, col, base, stride):
    """Byte address of element (row, col) of a tile of 16-bit elements."""
    ### BEGIN SOLUTION
    return base + row * stride + 2 * col
    ### END SOLUTION


ex.element_address.check(element_address);

# %% tests id=element_address_tests points=1
ex.element_address.grade(element_address)
### BEGIN HIDDEN TESTS
ex.element_address.grade(element_address, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 16-byte alignment
#
# `ldmatrix` and `stmatrix` move whole **rows** of 8 elements = 16 bytes, and each row address
# must be a multiple of 16. With a 16-byte aligned tile base and a row stride that is a multiple
# of 16, every row start is aligned; a stride of, say, 24 bytes is not usable.
#
# ## Exercise 2 · which address can start a row?
#
# Which of these shared addresses can a lane hand to `ldmatrix` as a row address?
# **a)** `0x1008`  **b)** `0x1010`  **c)** `0x1004`  **d)** `0x1001`.
# Return the letter.

# %% solution id=row_alignment
def row_alignment_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.row_alignment.check(row_alignment_answer);

# %% tests id=row_alignment_tests points=1
ex.row_alignment.grade(row_alignment_answer)

# %% [markdown]
# ## Banks
#
# Shared memory is built from 32 **banks**, each 4 bytes wide; consecutive 4-byte words go to
# consecutive banks and wrap around every 128 bytes. In one request a bank can deliver one word;
# if the lanes served together need two *different* words of the same bank, the request is
# split (a **bank conflict**) and takes longer. Notebook 7 is all about avoiding this for
# `ldmatrix`; for now, learn to find the bank of an address.
#
# ## Exercise 3 · the bank of an address

# %% solution id=bank_of
def bank_of(address):
    """Bank (0..31) that serves the byte at `address`."""
    ### BEGIN SOLUTION
    return (address // 4) % 32
    ### END SOLUTION


ex.bank_of.check(bank_of);

# %% tests id=bank_of_tests points=1
ex.bank_of.grade(bank_of)
### BEGIN HIDDEN TESTS
ex.bank_of.grade(bank_of, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The view below reads the eight 16-byte rows of one 8x8 matrix from a tile whose rows are
# 128 bytes long (64 elements). All eight rows start in the same banks, so they conflict: one
# matrix needs eight wavefronts instead of one. Change *row bytes* or add *padding* and watch
# the red disappear; notebook 7 explains why.

# %%
widgets.BankView(row_bytes=128, num=1)

# %% [markdown]
# ## Exercise 4 · spot the bug
#
# A published `ldmatrix` example (a reprint of a blog post; other copies of it read
# `<<<1, 32>>>`) is launched like this:
#
# ```c++
# ldmatrix<<<132>>>(d_value);
# ```
#
# and its kernel computes each lane's row address from `threadIdx.x`. nvcc compiles it: the
# block size is left out, and nvcc fills in 1. What is wrong?
#
# **a)** nothing, 132 threads are fine for a warp instruction
# **b)** it should be 132 threads per block to use every SM of an H100
# **c)** the launch is 132 blocks of **one** thread; it should be `<<<1, 32>>>`, one warp
# whose 32 lanes supply the row addresses
# **d)** it faults because 132 is not a multiple of 32
#
# <details><summary>What nvcc makes of <code>&lt;&lt;&lt;132&gt;&gt;&gt;</code></summary>
#
# nvcc rewrites a launch into a call of `__cudaPushCallConfiguration(grid, block, shared,
# stream)` with the arguments between the angle brackets, and that function declares
# `dim3 blockDim = 1`. So `<<<132>>>` is `<<<132, 1>>>`: 132 blocks of one thread
# (`nvcc -cuda` shows the rewrite; `measure/gpu/probe_launch_config.py` runs it: on the H100 the
# kernel saw `gridDim` (132, 1, 1), `blockDim` (1, 1, 1) and one lane per warp,
# `reports/hardware/launch_config.json`, 2026-11-26). Each block's warp then has a single lane:
# `ldmatrix` is `.sync.aligned`, an instruction of all 32 lanes of a warp, and the 31 row
# addresses and fragments the kernel expects from lanes 1-31 do not exist. The PTX ISA leaves
# such an execution undefined; it is no launch error, so nothing reports it.
# </details>

# %% solution id=launch_132
def launch_132_answer():
    ### BEGIN SOLUTION
    return "c"
    ### END SOLUTION


ex.launch_132_bug.check(launch_132_answer);

# %% tests id=launch_132_tests points=1
ex.launch_132_bug.grade(launch_132_answer)

# %% [markdown]
# ## A first look at what comes next
#
# Two views you will use in every notebook. The **address view** draws, for each lane, the
# row address it supplies to `ldmatrix` and which lanes receive that row; type a formula to see
# where yours differs (wrong lanes turn red, lane by lane in the table). The **fragment map**
# shows which lane holds which element after the load; pick a lane with the slider, hover a
# cell for details.

# %%
widgets.AddressTable("base + lane * stride", num=1, stride=16)

# %%
widgets.FragmentMap(num=1, lane=5)


# %% [markdown]
# ## Run what you read
#
# Articles, repositories and the PTX ISA show these instructions inside whole programs: a host
# `main` that allocates and copies memory, a `<<<grid, block>>>` launch, a kernel whose lanes
# `printf` what they received. Paste such a program into a cell that starts with `%%cuda` and it
# runs as printed, on whichever backend is here: the GPU if there is one, else the CPU model.
# `%load_ext ptxlab` (once per notebook) makes `%%cuda` available.
#
# The program below is written in that style. One warp copies a 16x8 tile of 16-bit values
# into shared memory (row `r`, column `c` holds `100 * r + c`, so every value names its place)
# and loads it with `ldmatrix...x2`, two 8x8 matrices; each lane prints the two halves of each
# of its two registers.

# %%
%load_ext ptxlab

# %%
%%cuda
// ldmatrix .x2: one warp loads a 16x8 tile of 16-bit values (two 8x8 matrices) from shared memory.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

__global__ void load_x2(const uint16_t* src) {
  __shared__ __align__(16) uint16_t tile[16 * 8];
  const unsigned lane = threadIdx.x;
  for (unsigned i = lane; i < 16 * 8; i += 32) tile[i] = src[i];
  __syncthreads();
  // Lanes 0-15 each give the shared address of one 16-byte row: rows 0-7 are matrix 0,
  // rows 8-15 matrix 1 (lanes 16-31's addresses are not read by .x2).
  uint32_t row = static_cast<uint32_t>(__cvta_generic_to_shared(&tile[(lane % 16) * 8]));
  uint32_t r0, r1;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1) : "r"(row));
  // The low half of a register is the left element of the pair, the high half the right one.
  printf("lane %2u | r0: %4u %4u | r1: %4u %4u\n", lane,
         r0 & 0xFFFFu, r0 >> 16, r1 & 0xFFFFu, r1 >> 16);
}

int main() {
  uint16_t host[16 * 8];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      host[r * 8 + c] = static_cast<uint16_t>(100 * r + c);   // row 12, column 3 holds 1203
  uint16_t* dev;
  cudaMalloc(&dev, sizeof host);
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  load_x2<<<1, 32>>>(dev);
  cudaDeviceSynchronize();
  cudaFree(dev);
  return 0;
}

# %% [markdown]
# What happened:
#
# * nvcc built the program. On the CPU model its host code (`main`, the loop that fills `host`,
#   `cudaMalloc`, `cudaMemcpy`) ran natively as an ordinary program: the lab links it against
#   its own CUDA runtime, which hands every request for the device to the model, and the launch
#   `load_x2<<<1, 32>>>` ran there, bit-exactly. With a GPU the whole program runs on the GPU,
#   exactly as nvcc built it. The device `printf` output appears at `cudaDeviceSynchronize`, as
#   on a GPU.
# * One line on stderr, `[ptxlab] running cell.cu on ...`, says where it ran and why.
# * The printout is the fragment layout of notebook 2: lane `L` holds row `L / 4`, columns
#   `2 * (L % 4)` and `2 * (L % 4) + 1` of the first matrix in `r0` and of the second matrix
#   (rows 8-15) in `r1`, the left element in the low half.
#
# In a terminal, `ptxlab run FILE.cu` does the same with a file. `--cpu` runs every launch on
# the CPU model even where there is a GPU, `--gpu` insists on the GPU, and the program's own
# arguments go after `--` (`ptxlab run --cpu FILE.cu -- 64`); a cell takes the same choices
# (`%%cuda --cpu`, `%%cuda --gpu`, `%%cuda -- 64`). If a kernel faults on the CPU model (an
# address outside its buffers, say), the lab prints a report naming the kernel, block, warp,
# lane and the PTX and CUDA lines, and from then on the program's CUDA calls return the error a
# GPU gives ("an illegal memory access was encountered").


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
