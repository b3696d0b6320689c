# %% [markdown]
# # 7 · Bank conflicts and swizzling
#
# An `ldmatrix.x4` is one instruction, but shared memory does not serve it in one go. Shared
# memory is 32 **banks** of 4-byte words; in one **wavefront** each bank hands out one word
# (lanes that want the *same* word share it). A warp-wide access is cut into **phases**, and a
# phase costs as many wavefronts as its busiest bank has *different* words to deliver.
#
# For `ldmatrix` and `stmatrix` a phase is **one 8x8 matrix**: its eight 16-byte rows, whose
# addresses lanes `8i..8i+7` supply. Eight rows of 16 bytes are 128 bytes, exactly what one
# wavefront can serve, so a matrix costs one wavefront **if its eight rows fall into eight
# different groups of four banks**, and up to eight if they all fall into the same group.
#
# This notebook finds out when that goes wrong, fixes it two ways (padding and XOR swizzles),
# and ends with a kernel that stores a tile swizzled and reads it back conflict-free.

# %%
import numpy as np

from ptxlab import backends, banks, render, widgets
from ptxlab.bench import notebook as capstone
from ptxlab.exercises import banks as ex
from ptxlab.exercises import tiles

print(backends.describe())

# %% [markdown]
# ## A naive tile
#
# Take a row-major tile of 16-bit elements with 64 elements per row: **128-byte rows**. The
# A operand of an mma (notebook 2) is a 16x16 block of it, loaded with one `ldmatrix.x4`:
# lanes 0-15 point at rows 0-15, lanes 16-31 at the same rows 16 bytes further.
# `ex.lane_rows_chunks` reads from `ptxlab.layouts` which tile row and which 16-byte chunk
# each lane points at; `ptxlab.banks` prices the access.

# %%
rows, chunks = ex.lane_rows_chunks(tiles.mma_a())
naive = rows * 128 + chunks * 16
print("lane  :", list(range(8)))
print("row   :", rows[:8].tolist())
print("offset:", naive[:8].tolist())
print("ldmatrix.x4 cost:", banks.ldmatrix_cost(naive))
for conflict in ex.ldmatrix_conflicts(naive)[:2]:
    print(" ", conflict.describe())
render.bank_table_html(naive[:8], lanes=range(8), title="matrix 0 (lanes 0-7): the banks each "
                       "row touches; red = a bank asked for several different words")

# %% [markdown]
# Every row starts a multiple of 128 bytes after the tile's start, and the banks repeat every
# 128 bytes: all eight rows of matrix 0 land in banks 0-3. The four matrices cost eight
# wavefronts each, 32 instead of 4.
#
# The row width decides it. Row `r`, 16-byte chunk `c` starts at byte `r * row_bytes + 16c`;
# which of the eight groups of four banks serves it is that address divided by 16, modulo 8.
# The table prices every `ldmatrix.x4` of a 16-row tile for four row widths: naive, padded by
# one chunk, and swizzled (below).

# %%
print("wavefronts / conflict-free wavefronts of every ldmatrix.x4 of a 16-row tile")
print(f"{'row bytes':>9} {'naive':>12} {'padded +16 B':>14} {'swizzled':>12}")
for row_bytes in (32, 64, 128, 256):
    costs = [ex.layout_cost(row_bytes), ex.layout_cost(row_bytes, pad=16),
             ex.layout_cost(row_bytes, swizzle=ex.gemm_swizzle)]
    cells = [f"{c.wavefronts} / {c.ideal}" for c in costs]
    print(f"{row_bytes:>9} {cells[0]:>12} {cells[1]:>14} {cells[2]:>12}")

# %% [markdown]
# The model is not a guess. The capstone ran a tile loop over these layouts on an H100 under
# Nsight Compute; the wavefronts and conflicts it counted equal the model's, layout by layout
# (the model's column is recomputed now; the counters are from the committed report).

# %%
capstone.bank_study_html()

# %% [markdown]
# ## Exercise 1 · which banks does a chunk use?
#
# Write `bank_group(row, chunk, row_bytes)`: in a naive row-major tile with rows of `row_bytes`
# bytes, which of the 8 groups of four banks (group `g` = banks `4g..4g+3`) serves 16-byte
# chunk `chunk` of row `row`?

# %% solution id=bank_group
def bank_group(row, chunk, row_bytes):
    """Group (0..7) of four banks serving chunk `chunk` of row `row`."""
    ### BEGIN SOLUTION
    return (row * row_bytes + 16 * chunk) // 16 % 8
    ### END SOLUTION


ex.bank_group.check(bank_group);

# %% tests id=bank_group_tests points=1
ex.bank_group.grade(bank_group)
### BEGIN HIDDEN TESTS
ex.bank_group.grade(bank_group, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Padding
#
# The oldest fix: leave a gap after each row, so that consecutive rows start in different
# banks. The row **pitch** (bytes from one row's start to the next) grows beyond the row.
# Try it in the view below: set *padding* to 16 and the red disappears.

# %%
widgets.BankView(row_bytes=128, num=4)

# %% [markdown]
# ## Exercise 2 · which pitch?
#
# A tile has 64 16-bit elements per row (128 bytes). Which row pitch makes every
# `ldmatrix.x4` of it conflict-free? **a)** 128 B **b)** 136 B **c)** 144 B **d)** 192 B.
# Return the letter.

# %% solution id=padding_choice
def padding_answer():
    ### BEGIN SOLUTION
    return "c"
    ### END SOLUTION


ex.padding_choice.check(padding_answer);

# %% tests id=padding_choice_tests points=1
ex.padding_choice.grade(padding_answer)

# %% [markdown]
# ## Swizzling: move the chunks, not the rows
#
# Padding costs shared memory and, with short rows, moves the conflict elsewhere. A
# **swizzle** keeps the rows packed and permutes the 16-byte chunks *inside* each row instead.
#
# <details><summary>What padding costs, measured</summary>
#
# Padding costs shared memory (16 bytes a row), every address carries an odd pitch, and with
# short rows it moves the conflict elsewhere: in the H100 study above, the tile with 64-byte
# rows padded to 80 bytes needed twice the store wavefronts of the naive one when it was
# filled with 16-byte stores (128 instead of 64).
#
# </details>
#
# The capstone kernels use
#
# ```
# stored slot = chunk ^ (row % 8)          (rows of 8 or more chunks)
# ```
#
# The eight rows of a matrix all read the same logical chunk `c`; XOR with eight different
# values of `row % 8` sends them to eight different slots, so eight different groups of banks.
#
# <details><summary>Why nothing is lost</summary>
#
# XOR is its own inverse and only touches the low three bits, so each row's chunks are merely
# reordered: nothing is lost, and a whole row is still one contiguous 128 bytes.
#
# </details>
#
#
# Below: which logical chunk sits in which slot, naive and swizzled. The outlined cells are
# what matrix 0 of an `ldmatrix` of chunk 0 reads (rows 0-7); red ones share banks.

# %%
render.side_by_side(ex.swizzle_picture(None, chunks=8), ex.swizzle_picture(ex.gemm_swizzle, chunks=8))

# %% [markdown]
# ## Exercise 3 · row addresses in a swizzled tile
#
# A tile with 128-byte rows (64 elements) starts at byte `base` of shared memory and is
# stored with the swizzle above. Write the address lane `lane` supplies to the `ldmatrix.x4`
# that loads the 16x16 A operand whose top-left element is `(row0, col0)` (`col0` a multiple
# of 16). The check names each wrong lane by the row and chunk it points at, and prices the
# load with the bank model once it is right.

# %% solution id=swizzled_a_rows
def swizzled_a_rows(lane, base, row0, col0):
    """Address lane `lane` gives ldmatrix.x4 for the A block at (row0, col0), swizzled tile."""
    ### BEGIN SOLUTION
    row = row0 + lane % 16
    chunk = col0 // 8 + lane // 16
    return base + row * 128 + (chunk ^ (row % 8)) * 16
    ### END SOLUTION


ex.swizzled_a_rows.check(swizzled_a_rows);

# %% tests id=swizzled_a_rows_tests points=2
ex.swizzled_a_rows.grade(swizzled_a_rows)
### BEGIN HIDDEN TESTS
ex.swizzled_a_rows.grade(swizzled_a_rows, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 · design a swizzle for any row width
#
# `chunk ^ (row % 8)` needs rows of at least 8 chunks: with 64-byte rows (4 chunks) it sends
# chunks out of the row. Write `swizzle(row, chunk, chunks)`: the slot, `0..chunks-1`, where
# logical chunk `chunk` of row `row` is stored, for rows of `chunks` = 2, 4, 8 or 16 chunks
# (32 to 256 bytes). It must
#
# * keep every chunk: each row's chunks go to different slots (a bijection);
# * make every phase conflict-free: each matrix of the `ldmatrix.x4` loads of every 16x16
#   block (A-operand order and the order used for B stored column-major), and each group of 8
#   lanes of the 16-byte stores that fill the tile row by row.
#
# The check runs the bank model on all of those and names the phase and the lanes that
# collide. It shows rows of 8 and 4 chunks; the hidden tests add 2 and 16 and taller tiles.
# Any swizzle that passes is fine; it need not be the capstone's.

# %% solution id=swizzle
def swizzle(row, chunk, chunks):
    """Slot (0..chunks-1) where chunk `chunk` of row `row` is stored, rows of `chunks` chunks."""
    ### BEGIN SOLUTION
    if chunks >= 8:
        return chunk ^ (row % 8)
    rows_per_line = 8 // chunks           # rows that share one 128-byte line of banks
    return chunk ^ ((row // rows_per_line) % chunks)
    ### END SOLUTION


ex.swizzle.check(swizzle);

# %% tests id=swizzle_tests points=3
ex.swizzle.grade(swizzle)
### BEGIN HIDDEN TESTS
ex.swizzle.grade(swizzle, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Your swizzle on 64-byte rows, and in the bank view (pick other row widths there; it calls
# your function with `row`, `chunk` and `chunks`):

# %%
ex.swizzle_picture(swizzle, chunks=4)

# %%
widgets.BankView(swizzle=swizzle, row_bytes=64, num=4)

# %% [markdown]
# ## Exercise 5 · the fragment does not move
#
# The swizzle changes where data sits in shared memory, never what `ldmatrix` delivers: the
# registers after a load from the swizzled tile are exactly the A fragment of notebook 2.
# Going the other way makes that concrete. The 16x64 tile (128-byte rows) is stored with
# `chunk ^ (row % 8)`; k-step `ks` loads its A operand from columns `16ks..16ks+15`. Half
# `half` of register `reg` of `lane` holds an element of stored row `row`: at which element
# column of that **stored** row (0..63) did it sit? Return `(row, stored_col)`.

# %% solution id=stored_position
def stored_position(lane, reg, half, ks):
    """(row, stored column) in shared memory of the A element in (lane, reg, half), step ks."""
    ### BEGIN SOLUTION
    row = lane // 4 + 8 * (reg % 2)
    col = 16 * ks + 8 * (reg // 2) + 2 * (lane % 4) + half
    return row, 8 * ((col // 8) ^ (row % 8)) + col % 8
    ### END SOLUTION


ex.stored_position.check(stored_position);

# %% tests id=stored_position_tests points=2
ex.stored_position.grade(stored_position)
### BEGIN HIDDEN TESTS
ex.stored_position.grade(stored_position, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 · a kernel: store swizzled, load with `ldmatrix`
#
# The kernel gets a tile of `rows` x 64 16-bit elements (element `(r, c)` holds the number
# `64r + c`). Its given part stores the tile into shared memory with one 16-byte store per
# lane and chunk, at `swizzled_offset(row, chunk)`; then loads every 16x16 block with
# `load_a`, writing out the registers, the address each lane used, and finally the raw shared
# tile. Write the two device functions:
#
# * `swizzled_offset(row, chunk)`: bytes from the tile's start where chunk `chunk` (0..7) of
#   row `row` is stored (your choice of conflict-free swizzle);
# * `load_a(r, tile, lane, row0, chunk0)`: issue the `ldmatrix.x4` (inline PTX) that loads the
#   A operand whose top-left corner is row `row0`, chunk `chunk0`, from the tile at shared
#   address `tile`, into `r[0..3]`, and return the address this lane gave it.
#
# The check reads back the shared tile (every chunk present exactly once?), compares every
# register with the emulator reading the *plain* tile (the swizzle must be invisible), and
# runs the bank model on the addresses your loads used and on the stores.

# %% solution id=swizzle_roundtrip
ROUNDTRIP = r"""
__device__ unsigned swizzled_offset(unsigned row, unsigned chunk)
{
    // BEGIN SOLUTION
    return row * 128 + (chunk ^ (row % 8)) * 16;
    // END SOLUTION
}

__device__ unsigned load_a(unsigned (&r)[4], unsigned tile, unsigned lane, unsigned row0,
                           unsigned chunk0)
{
    // BEGIN SOLUTION
    const unsigned addr = tile + swizzled_offset(row0 + lane % 16, chunk0 + lane / 16);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    return addr;
    // END SOLUTION
}

extern "C" __global__ void swizzle_roundtrip(const uint4* src, int rows, unsigned* regs,
                                             unsigned* addrs, uint4* dump)
{
    extern __shared__ __align__(128) unsigned char tile[];      // rows x 128 bytes
    const unsigned lane = threadIdx.x % 32;
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    for (unsigned q = lane; q < rows * 8; q += 32)              // chunk q: row q / 8, chunk q % 8
        *reinterpret_cast<uint4*>(tile + swizzled_offset(q / 8, q % 8)) = src[q];
    __syncwarp();
    for (unsigned p = 0; p < rows / 16 * 4; ++p) {              // 16x16 blocks, row by row
        unsigned r[4];
        const unsigned addr = load_a(r, base, lane, 16 * (p / 4), 2 * (p % 4));
        addrs[p * 32 + lane] = addr - base;
        for (int j = 0; j < 4; ++j) regs[(p * 32 + lane) * 4 + j] = r[j];
    }
    __syncwarp();
    for (unsigned q = lane; q < rows * 8; q += 32)
        dump[q] = reinterpret_cast<const uint4*>(tile)[q];
}
"""
ex.swizzle_roundtrip.check(ROUNDTRIP);

# %% tests id=swizzle_roundtrip_tests points=3
ex.swizzle_roundtrip.grade(ROUNDTRIP)
### BEGIN HIDDEN TESTS
ex.swizzle_roundtrip.grade(ROUNDTRIP, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## What to remember
#
# * An `ldmatrix`/`stmatrix` phase is one 8x8 matrix: eight 16-byte rows, one wavefront when
#   they sit in eight different groups of four banks (`address // 16 % 8`).
# * Row-major tiles whose rows are a multiple of 128 bytes put every row in the same banks
#   (8-way); 64-byte rows conflict 4-way.
# * Padding by an odd number of chunks fixes it at the price of memory; an XOR swizzle of the
#   16-byte chunk index with the row (`chunk ^ (row % 8)`, or with the 128-byte line number
#   for short rows) fixes it for free, and keeps every row contiguous.
# * The swizzle is invisible to the registers: store and load must use the same map.


# %% [markdown]
# ## Your progress
#
# Every `check` you ran in your workspace is remembered there: green passed, amber attempted,
# grey not started, crossed where you revealed the solution. `ptxlab progress` in a terminal
# shows the same.

# %%
from ptxlab import progress

progress.show()
