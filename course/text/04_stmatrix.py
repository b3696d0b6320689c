# %% [markdown]
# # 4 · `stmatrix`: a fragment back into shared memory
#
# ```
# stmatrix.sync.aligned.m8n8.x1{.trans}.shared.b16  [addr], {r0};
# stmatrix.sync.aligned.m8n8.x2{.trans}.shared.b16  [addr], {r0, r1};
# stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16  [addr], {r0, r1, r2, r3};
# ```
#
# `stmatrix` is `ldmatrix` run backwards. The warp holds one, two or four 8x8 matrices of
# 16-bit elements in the fragment layout you know from notebook 2, and writes them to shared
# memory, one 16-byte row per address. The same two maps decide everything, with the data
# flowing the other way:
#
# * **who gives the addresses?** Exactly as for `ldmatrix`: lanes `8i..8i+7` give the start
#   addresses of rows 0-7 of matrix `i`. With `.x1` and `.x2` the higher lanes' addresses are
#   not read. Rows need not be next to each other, but each must start on a 16-byte boundary.
# * **who supplies what?** Register `i` of every lane holds a piece of matrix `i`: lane `t`
#   supplies row `t // 4`, columns `2(t % 4)` (low half) and `2(t % 4) + 1` (high half).
#   With `.trans` the same register half is written to the *transposed* place: column
#   `t // 4`, rows `2(t % 4)` and `2(t % 4) + 1`.
#
# So a `stmatrix` with the same addresses and qualifiers as an `ldmatrix` puts back exactly
# what that `ldmatrix` read. Its main job is the other end of a matrix multiply: writing the
# accumulator of `mma.sync` to shared memory, from where whole rows go out to global memory.

# %%
import numpy as np

from ptxlab import backends, emulator, gpu, layouts, render, widgets
from ptxlab.backends import launch
from ptxlab.exercises import stmatrix as ex
from ptxlab.exercises import tiles

print(backends.describe())

# %% [markdown]
# ## Which GPUs have it
#
# `stmatrix` needs Hopper (**sm_90**); on an older GPU a kernel that uses it runs on the CPU
# model instead, and every result says where it ran (`res.device`).
#
# <details><summary>Why, and what the compiler says</summary>
#
# `ldmatrix` and `movmatrix` compile for Turing (sm_75) and newer, `mma.m16n8k16` for Ampere
# (sm_80), but `stmatrix` only for Hopper (sm_90). Compiling a kernel that uses it for an sm_80
# target (an A100; an RTX 30xx, sm_86, alike) stops in the PTX assembler with
#
# ```
# error   : Feature 'stmatrix' requires .target sm_90 or higher
# ```
#
# The course asks, before each launch, which instructions a kernel uses
# (`gpu.required_compute_capability`) and which GPU is here. On such a GPU, kernels without
# `stmatrix` still run on the GPU.
# </details>

# %%
status = gpu.status()
print("GPU here:", status.message)
print("stmatrix on this GPU:", status.supports("stmatrix"))
print("oldest GPU for each:", {k: f"sm_{v}" for k, v in gpu.INSTRUCTION_MIN_SM.items()
                               if k.endswith("matrix")})

# %% [markdown]
# ## A live store: `.x1`
#
# Every lane puts a number that says who it is into its register: `100 * lane` in the low half,
# `100 * lane + 1` in the high half. Lanes 0-7 give the addresses of the 8 rows of a tile
# (row `t` for lane `t`), the warp executes `stmatrix.x1`, and the tile is copied out.
# Read the tile below: the hundreds are the lane that supplied each element.

# %%
STORE_X1 = r"""
extern "C" __global__ void store_x1(const unsigned* frag, unsigned short* out)
{
    __shared__ __align__(16) unsigned short tile[8 * 8];
    const unsigned lane = threadIdx.x % 32;
    const unsigned r0 = frag[lane];
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&tile[(lane % 8) * 8]));
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n"
                 :: "r"(addr), "r"(r0) : "memory");
    __syncwarp();
    for (unsigned i = lane; i < 64; i += 32) out[i] = tile[i];
}
"""
lanes = np.arange(32)
frag = emulator.pack_b16(100 * lanes, 100 * lanes + 1)
need, uses = gpu.required_compute_capability(STORE_X1)
print(f"this kernel uses {', '.join(uses)}: it needs sm_{need} or newer")
res = launch(STORE_X1, "store_x1", args=[frag, np.zeros(64, np.uint16)])
tile = res.outputs[1].reshape(8, 8)
model = np.zeros(128, np.uint8)
emulator.stmatrix(model, lanes % 8 * 16, frag.reshape(32, 1), num=1)
lay = layouts.stmatrix_fragment(1)
same = np.array_equal(tile, model.view(np.uint16).reshape(8, 8))
print(f"ran on: {res.device}; equal to the emulator: {same}")
render.side_by_side(
    render.registers_html(frag[:8], title="lanes 0-7: r0 as (hi | lo)"),
    render.matrix_html(tile, lay.owners[0, ..., 0], title="the stored tile, coloured by the "
                       "lane whose register supplied each element"),
    render.legend_html(range(0, 32, 4)))

# %% [markdown]
# Row 1 of the tile was *addressed* by lane 1 but *supplied* by lanes 4-7. That gap between
# the lane that gives an address and the lanes that give the data is the whole difficulty of
# `stmatrix`, as it was for `ldmatrix`. Step through the rows of an `.x2` store: for each, the
# lane that gives its address and the four lanes whose registers fill it.

# %%
widgets.LanePlayer.rows(num=2, instruction="stmatrix")

# %% [markdown]
# And `stmatrix` really undoes `ldmatrix`: load four matrices from scattered rows, store them
# back through the same addresses into empty memory, with and without `.trans`, and compare.

# %%
rng = np.random.default_rng(4)
smem = rng.integers(0, 1 << 16, 1024, dtype=np.uint16).view(np.uint8)
addrs = rng.permutation(64)[:32] * 32          # 32 distinct rows, anywhere in the buffer
rows = (addrs[:, None] + np.arange(16)).ravel()
for trans in (False, True):
    regs = emulator.ldmatrix(smem, addrs, num=4, trans=trans)
    back = np.zeros_like(smem)
    emulator.stmatrix(back, addrs, regs, num=4, trans=trans)
    print(f"trans={trans}: every addressed row written back unchanged:",
          np.array_equal(back[rows], smem[rows]))

# %% [markdown]
# ## The accumulator of `mma` (f16)
#
# With f16 accumulators, `mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16` leaves
# D (16 rows x 8 columns) in **two** registers per lane, two halves each, and each register is
# one 8x8 block in the layout `stmatrix` expects: `d0` holds rows 0-7, `d1` rows 8-15. So one
# `stmatrix.x2` writes D out. (With f32 accumulators there are four registers of one element
# each; they must first be converted and packed two to a register.) Hover the cells:

# %%
form = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
render.fragment_map_html(form.d, titles=["D (16x8, f16): lane / register.half"])

# %% [markdown]
# ## Exercise 1 · the f16 accumulator fragment
#
# Which element of D does half `half` of register `reg` of `lane` hold? Return `(row, col)`.

# %% solution id=d_fragment
def d_fragment(lane, reg, half):
    """(row, col) of D held in `half` of register `reg` of `lane` (m16n8k16, f16 accumulators)."""
    ### BEGIN SOLUTION
    return lane // 4 + 8 * reg, 2 * (lane % 4) + half
    ### END SOLUTION


ex.d_fragment.check(d_fragment);

# %% tests id=d_fragment_tests points=2
ex.d_fragment.grade(d_fragment)
### BEGIN HIDDEN TESTS
ex.d_fragment.grade(d_fragment, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 · row addresses that store D
#
# D goes to a row-major tile in shared memory: row `r` of D (8 elements, 16 bytes) starts at
# byte `base + r * stride`. Write the address each lane gives to the `stmatrix.x2` that stores
# `{d0, d1}`. The table under the cell draws your formula; wrong lanes turn red.

# %% solution id=d_rows
def d_rows(lane, base, stride):
    """Row address lane `lane` gives to stmatrix.x2 storing D (16x8) row-major."""
    ### BEGIN SOLUTION
    return base + (lane % 16) * stride
    ### END SOLUTION


ex.d_rows.check(d_rows);

# %% tests id=d_rows_tests points=2
ex.d_rows.grade(d_rows)
### BEGIN HIDDEN TESTS
ex.d_rows.grade(d_rows, hidden=True)
### END HIDDEN TESTS

# %%
widgets.AddressTable(d_rows, stride=32, arrangement="C/D f16 of m16n8k16 (stmatrix)",
                     instruction="stmatrix")

# %% [markdown]
# ## Storing D column-major: `.trans`
#
# Sometimes the next step wants D column by column (Dᵀ row by row): for instance when D
# becomes the B operand of another multiply, or is written to a column-major output. `.trans`
# does it without any extra instruction: each 8x8 matrix is written turned around, so
# stored row `j` of matrix `i` receives *column* `j` of that block. Here the emulator stores
# the same D with and without `.trans`; element `(r, c)` of D holds `8r + c`.

# %%
d_ids = np.arange(128, dtype=np.uint16).reshape(16, 8)
d_regs = emulator.matrices_to_fragment(d_ids[None], form.d)
row_major = ex.emulated_store(d_regs, tiles.mma_cd_f16(), 8)
col_major = ex.emulated_store(d_regs, ex.d_column_major(), 16, trans=True)
render.side_by_side(
    render.matrix_html(row_major, form.d.owners[0, ..., 0], title=".x2: D row-major (16x8)"),
    render.matrix_html(col_major, form.d.owners[0, ..., 0].T,
                       title=".x2.trans: D column-major, i.e. Dᵀ (8x16)"))

# %% [markdown]
# ## Exercise 3 · row addresses for the column-major store
#
# Dᵀ is stored as 8 rows (one per column of D) of 16 elements: stored row `n` starts at
# `base + n * stride`. Matrix 0 of the store is D's rows 0-7, matrix 1 rows 8-15. Write the
# address each lane gives to `stmatrix.x2.trans`.

# %% solution id=d_trans_rows
def d_trans_rows(lane, base, stride):
    """Row address lane `lane` gives to stmatrix.x2.trans storing D column-major."""
    ### BEGIN SOLUTION
    return base + (lane % 8) * stride + (lane // 8 % 2) * 16
    ### END SOLUTION


ex.d_trans_rows.check(d_trans_rows);

# %% tests id=d_trans_rows_tests points=2
ex.d_trans_rows.grade(d_trans_rows)
### BEGIN HIDDEN TESTS
ex.d_trans_rows.grade(d_trans_rows, hidden=True)
### END HIDDEN TESTS

# %%
widgets.AddressTable(d_trans_rows, stride=32, instruction="stmatrix",
                     arrangement="C/D f16 of m16n8k16 stored column-major (stmatrix .trans)")

# %% [markdown]
# ## Exercise 4 · a kernel that stores an mma result
#
# The kernel below computes D = A·B with one `mma` (A and B loaded as in notebooks 2 and 3,
# f16 accumulators starting from zero), then must store D into the shared tile `sd`, whose
# rows are `sld` **elements** apart, and the tile is copied out. The tile is filled with
# `0xFFFF` first, so rows that nobody stores stand out. Replace the placeholder between the
# markers: the row address of this lane, then the `stmatrix`.
#
# The check runs the kernel and compares every stored element with the emulator; a wrong cell
# is reported by the element of D it received. (A is a permutation matrix and B holds 0..127,
# so every element of D is a different whole number.)

# %% solution id=store_d_kernel
STORE_D = r"""
extern "C" __global__ void store_d(const unsigned short* a, const unsigned short* b, int sld,
                                   unsigned short* out)
{
    __shared__ __align__(16) unsigned short sa[16 * 16];      // A, row-major
    __shared__ __align__(16) unsigned short sb[16 * 8];       // B, row-major (one row per k)
    extern __shared__ __align__(16) unsigned short sd[];      // D: 16 rows of sld elements
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) sa[i] = a[i];
    for (unsigned i = lane; i < 128; i += 32) sb[i] = b[i];
    for (unsigned i = lane; i < 16 * sld; i += 32) sd[i] = 0xFFFF;
    __syncwarp();

    unsigned a0, a1, a2, a3, b0, b1, d0, d1;
    const unsigned a_row = static_cast<unsigned>(
        __cvta_generic_to_shared(&sa[(lane % 16) * 16 + (lane / 16) * 8]));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(a_row));
    const unsigned b_row = static_cast<unsigned>(__cvta_generic_to_shared(&sb[(lane % 16) * 8]));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b0), "=r"(b1) : "r"(b_row));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
                 "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
                 : "=r"(d0), "=r"(d1)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0u), "r"(0u));

    // BEGIN SOLUTION
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(sd));
    const unsigned addr = base + (lane % 16) * sld * 2;
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n"
                 :: "r"(addr), "r"(d0), "r"(d1) : "memory");
    // END SOLUTION

    __syncwarp();
    for (unsigned i = lane; i < 128; i += 32) out[i] = sd[(i / 8) * sld + i % 8];
}
"""
ex.store_d_kernel.check(STORE_D);

# %% tests id=store_d_kernel_tests points=3
ex.store_d_kernel.grade(STORE_D)
### BEGIN HIDDEN TESTS
ex.store_d_kernel.grade(STORE_D, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 · spot the bug
#
# An article stores the f16 accumulator of an m16n8k16 `mma` (in `d0`, `d1`) into a
# row-major 16x8 half-precision array in shared memory like this:
#
# ```c++
# __shared__ __align__(16) half s_d[16 * 8];
# const unsigned p = __cvta_generic_to_shared(s_d + lane / 4);
# asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};"
#              :: "r"(p), "r"(d0), "r"(d1));
# ```
#
# What is wrong?
# **a)** nothing: `lane / 4` is the row of D each lane holds, so every row lands in place
# **b)** the address uses the row a lane *holds* instead of the row it *addresses*: several
# lanes name row 0, and most addresses are not 16-byte aligned
# **c)** `.x2` needs all 32 lanes to give a row address, and lanes 16-31 give duplicates
# **d)** D is row-major, so the store needs `.trans`

# %% solution id=holder_row_bug
def holder_row_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.holder_row_bug.check(holder_row_answer);

# %% tests id=holder_row_bug_tests points=1
ex.holder_row_bug.grade(holder_row_answer)

# %% [markdown]
# The emulator refuses both halves of the mistake, and names the lane. First the article's
# addresses (`lane / 4` elements = `2 * (lane / 4)` bytes), then with the alignment repaired
# but the row still the holder's (`lane / 4` rows), then the right ones:

# %%
for label, byte_addr in (("s_d + lane / 4", 2 * (lanes // 4)),
                         ("s_d + (lane / 4) * 8", 16 * (lanes // 4)),
                         ("s_d + (lane % 16) * 8", 16 * (lanes % 16))):
    try:
        emulator.stmatrix(np.zeros(256, np.uint8), byte_addr, d_regs, num=2)
        print(f"{label:22} stores D")
    except emulator.EmulatorError as err:
        print(f"{label:22} {type(err).__name__}: {err}")

# %% [markdown]
# ## What to remember
#
# * `stmatrix` is `ldmatrix` in reverse: lanes `8i..8i+7` give the row addresses of matrix
#   `i`, and lane `t`'s register `i` supplies row `t // 4`, columns `2(t % 4)`, `2(t % 4) + 1`.
#   The lane that addresses a row is not a lane that supplies it.
# * `.trans` writes every 8x8 block turned around, so a row-major fragment lands column-major.
# * The f16 accumulator of m16n8k16 is two stacked 8x8 blocks: `stmatrix.x2` with lanes 0-15
#   pointing at rows 0-15 stores it; `.x2.trans` with 16-byte steps stores it column-major.
# * Two lanes giving one row address: the PTX ISA does not say which row is stored there. The
#   H100 stored the lower lane's row in every one of 500 tries (5 lane pairs, 100 each,
#   `reports/hardware/stmatrix_same_row.json`, 2026-11-26), but that is one GPU's behaviour,
#   not a promise, so the CPU model refuses such a store (`UndefinedResult`).
#   Every row address must be 16-byte aligned.
# * `stmatrix` needs sm_90. On an older GPU the kernel does not compile for that GPU; the
#   course then runs it on the CPU model and says so.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
