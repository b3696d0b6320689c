# %% [markdown]
# # 9 · 8-bit and packed matrices: the forms of sm_100a-class GPUs
#
# ```
# ldmatrix.sync.aligned.m16n16.{x1,x2}.trans.shared.b8                     r, [p];
# ldmatrix.sync.aligned.m16n16.{x1,x2}.trans.shared.b8x16.{b6x16_p32,b4x16_p64} r, [p];
# ldmatrix.sync.aligned.m8n16.{x1,x2,x4}.shared.b8x16.{b6x16_p32,b4x16_p64}  r, [p];
# stmatrix.sync.aligned.m16n8.{x1,x2,x4}.trans.shared.b8                    [p], r;
# ```
#
# Notebooks 2-4 moved 8x8 matrices of **16-bit** elements. FP8, FP6 and FP4 kernels keep their
# matrices in 8-bit bytes, or pack 6-bit and 4-bit numbers into them, and Blackwell-class GPUs
# (targets `sm_100a`, `sm_110a`, `sm_120a` and their families) added forms for exactly that
# data. Every shared-memory row is still 16 bytes and still named by one lane's address; what
# changes is what a *row* holds (16 bytes, or 16 packed elements plus padding) and which lane
# gets which byte.
#
# No GPU this course can count on runs these forms (an H100 is sm_90). The CPU model runs them:
# the same layouts as data, the same emulator, and the rules of ptxas 13 for where they are
# legal. `ptxlab layout "<instruction>"` prints any form's map in a terminal.

# %%
import numpy as np

from ptxlab import backends, emulator, gpu, layout_table, matrix_forms, render
from ptxlab.exercises import blackwell as ex

print(backends.describe())
st = gpu.status()
print("this GPU:", st.device_label if st.available else "none",
      "| runs the 8-bit forms:", st.available and st.cc_number >= 100)

# %% [markdown]
# ## Why the 16-bit forms cannot do it
#
# Take a 16x16 tile of bytes, byte `(r, c)` holding `16r + c`, and try to turn it around with
# the `.trans` load you know, `ldmatrix.m8n8.x2.trans.b16`: to that instruction a 16-byte row is
# eight 16-bit elements, so it transposes **pairs** of bytes. The byte-wise
# `ldmatrix.m16n16.x1.trans.b8` gives each lane four bytes of one *column*, as the FP8 `mma`
# wants its B operand.

# %%
tile = np.arange(256, dtype=np.uint8)                   # 16 rows of 16 bytes
rows8 = np.arange(32) % 16 * 16                          # lane t names row t % 16
as_b16 = emulator.ldmatrix(tile, rows8, num=2, trans=True)
as_b8 = emulator.ldmatrix(tile, rows8, num=1, trans=True, shape="m16n16", dtype="b8")
for name, regs in (("m8n8.x2.trans.b16 ", as_b16), ("m16n16.x1.trans.b8", as_b8)):
    got = np.ascontiguousarray(regs[0, :1]).view(np.uint8)
    print(f"{name}: lane 0, register 0 holds bytes", [(int(v) // 16, int(v) % 16) for v in got])

# %% [markdown]
# The first keeps `(0,0), (0,1)` together: a 16-bit transpose moves bytes two by two. The second
# walks down column 0: `(0,0), (1,0), (2,0), (3,0)`.
#
# Sub-byte data has a second problem: 16 six-bit numbers fill 12 bytes, 16 four-bit numbers 8.
# The packed forms (`.b8x16.b6x16_p32`, `.b8x16.b4x16_p64`) read a 16-byte row holding 16 packed
# elements and padding, and unpack each element into a byte of its own (zero-extended), so the
# registers look exactly like an 8-bit load's.

# %% [markdown]
# ## The maps
#
# Each picture is drawn from the byte maps the emulator and the CPU model use. A cell is one
# byte of a shared-memory matrix (rows are the rows named by the lanes' addresses); its colour
# and label say which lane, register and byte receives (or stores) it.
#
# Under each picture is the CuTe copy atom that issues the same instruction, with its layouts in
# CuTe's `shape:stride` notation: *registers* maps (lane, bit of the lane's registers) to a bit
# of a reference array, *shared rows* maps (the lane whose address names a row, bit of that
# 16-byte row) to the same array. Bit `8k + i` of register `r` is value `32r + 8k + i`. The
# project's tests evaluate both with pycute and check, lane by lane and byte by byte, that the
# atom moves what the picture says.
#
# **`ldmatrix.m16n16.x1.trans.b8`**: 16 rows, named by lanes 0-15; two registers per lane.
# Lane `t` receives rows `4(t % 4) .. 4(t % 4) + 3` of column `t // 4` (register 0) and of
# column `t // 4 + 8` (register 1). CuTe's atom, `SM100_U8x8_LDSM_T` (8 bytes per lane),
# **reorders the bytes after the instruction** so that its registers look like those of
# `SM100_U8x8_STSM_T` (`stmatrix.m16n8.x2.trans.b8`): its layout is the picture's with that
# reorder applied.

# %%
m16n16 = matrix_forms.parse_form("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8")
render.side_by_side(render.fragment_map_html(m16n16.fragment, form=m16n16),
                    render.lane_registers_html(m16n16.fragment, 5))

# %% [markdown]
# **`ldmatrix.m8n16.x1 ... .b8x16.b4x16_p64`** (and `b6x16_p32`): 8 rows of 16 packed elements;
# lane `t` receives elements `4(t % 4) .. 4(t % 4) + 3` of row `t // 4`, one per byte. There
# is no `.trans` form. CuTe calls the packed loads after their source and destination:
# `SM100_SU4_DU8x16_x1_LDSM_N` (4-bit source, 16 bytes out per row) is this one,
# `SM100_SU6_DU8x16_x1_LDSM_N` the `b6x16_p32` form, with `_x2` and `_x4` for `.x2` and `.x4`.
# Their register layouts are those of `SM75_U32x{1,2,4}_LDSM_N` (notebook 10): a packed row,
# once unpacked, arrives like a 16-byte row of a 16-bit load.

# %%
m8n16 = matrix_forms.parse_form("ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.b4x16_p64")
render.fragment_map_html(m8n16.fragment, form=m8n16)

# %% [markdown]
# **`stmatrix.m16n8.x1.trans.b8`**: each register holds a 16x8 byte matrix in the layout of an
# `mma` accumulator (lane `t` byte `b` is element `(t // 4 + 8(b // 2), 2(t % 4) + b % 2)`); the
# store writes it **transposed**, 8 rows of 16 bytes. The picture shows the rows as stored;
# CuTe's atom is `SM100_U8x4_STSM_T` (4 bytes per lane).

# %%
m16n8 = matrix_forms.parse_form("stmatrix.sync.aligned.m16n8.x1.trans.shared.b8")
render.fragment_map_html(m16n8.fragment, form=m16n8)

# %% [markdown]
# The same maps as text, the way `ptxlab layout` prints them (shared-memory side first):

# %%
text = layout_table.render_text(matrix_forms.parse_form(
    "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8"))
print("\n".join(text.splitlines()[:14]), "\n...")

# %% [markdown]
# ## Exercise 1 · the row addresses of an m16n16 load
#
# Two 16x16 byte matrices sit side by side in a shared tile whose rows start `stride` bytes
# apart at `base`: matrix 0 in columns 0-15, matrix 1 in columns 16-31. Which address does
# `lane` give to `ldmatrix.m16n16.x2.trans.b8`? (A matrix has 16 rows now.)

# %% solution id=m16n16_rows
def m16n16_rows(lane, base, stride):
    """Byte address lane `lane` gives to ldmatrix.m16n16.x2.trans.b8."""
    ### BEGIN SOLUTION
    return base + (lane % 16) * stride + (lane // 16) * 16
    ### END SOLUTION


ex.m16n16_rows.check(m16n16_rows);

# %% tests id=m16n16_rows_tests points=1
ex.m16n16_rows.grade(m16n16_rows)
### BEGIN HIDDEN TESTS
ex.m16n16_rows.grade(m16n16_rows, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 · which byte each lane receives
#
# For `ldmatrix.m16n16.trans.b8`: byte `byte` (0 = least significant) of register `reg` of
# `lane` holds which byte `(row, col)` of the stored matrix? Return `(row, col)`. (The check
# uses `.x2` too, where registers 2 and 3 hold the second matrix the same way.)

# %% solution id=received
def received(lane, reg, byte):
    """(row, col) of the stored 16x16 byte matrix held in byte `byte` of `reg` of `lane`."""
    ### BEGIN SOLUTION
    return 4 * (lane % 4) + byte, lane // 4 + 8 * (reg % 2)
    ### END SOLUTION


ex.received.check(received);

# %% tests id=received_tests points=2
ex.received.grade(received)
### BEGIN HIDDEN TESTS
ex.received.grade(received, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 · where stmatrix.m16n8 writes each byte
#
# For `stmatrix.m16n8.x1.trans.b8`: byte `byte` of register `reg` of `lane` is written to which
# row (the row named by lane `row`'s address) and which byte `col` of it? Return `(row, col)`.

# %% solution id=stored
def stored(lane, reg, byte):
    """(row, col) of shared memory that stmatrix.m16n8.trans.b8 writes from (lane, reg, byte)."""
    ### BEGIN SOLUTION
    return 2 * (lane % 4) + byte % 2, lane // 4 + 8 * (byte // 2)
    ### END SOLUTION


ex.stored.check(stored);

# %% tests id=stored_tests points=2
ex.stored.grade(stored)
### BEGIN HIDDEN TESTS
ex.stored.grade(stored, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Packed rows: what the ISA says and what the model assumes
#
# The PTX ISA states the sizes only: `b6x16_p32` is 16 six-bit elements and 32 bits of padding,
# `b4x16_p64` 16 four-bit elements and 64 bits of padding, in each 16-byte row, and each element
# lands in the low bits of its own byte. **Where** the padding sits and in which bit order the
# elements are packed it does not say. The model assumes the elements first, little-endian
# (element `i` at bits `bits*i ..` of the row), the padding in the last bytes, and says so in
# `docs/blackwell_forms.md`. The map from row and element index to lane and byte does not
# depend on that assumption:

# %%
row = emulator.pack_row_elements(np.arange(16) % 16, "b4x16_p64")
print("16 four-bit elements 0..15 as one packed row:", " ".join(f"{b:02x}" for b in row))
print("unpacked again:", emulator.unpack_row_elements(row, "b4x16_p64").tolist())

# %% [markdown]
# ## Exercise 4 · which lane receives a packed element
#
# `ldmatrix.m8n16.x1.shared.b8x16.b4x16_p64` loads 8 packed rows. Which lane receives element
# `elem` (0-15) of row `row` (0-7)?

# %% solution id=packed_lane
def packed_lane(row, elem):
    """The lane that receives element `elem` of packed row `row` (ldmatrix.m8n16.x1)."""
    ### BEGIN SOLUTION
    return 4 * row + elem // 4
    ### END SOLUTION


ex.packed_lane.check(packed_lane);

# %% tests id=packed_lane_tests points=1
ex.packed_lane.grade(packed_lane)
### BEGIN HIDDEN TESTS
ex.packed_lane.grade(packed_lane, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## A kernel no GPU here can run
#
# A kernel that uses these forms must be compiled for an sm_100a-class target
# (`--gpu-architecture=compute_100a`, or `nvcc -arch=sm_100a`). `backends.launch` picks where it
# runs: on a machine without a GPU, or with one older than sm_100 (an H100 is sm_90), it says so
# and runs the kernel on the CPU model, with the same result a Blackwell GPU would give.

# %%
DEMO = r"""
extern "C" __global__ void demo(const unsigned char* tile, unsigned* out)
{
    __shared__ __align__(16) unsigned char smem[256];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) smem[i] = tile[i];
    __syncwarp();
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + (lane % 16) * 16;
    unsigned r0, r1;
    asm volatile("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    out[2 * lane] = r0;
    out[2 * lane + 1] = r1;
}
"""
where, why = backends.choose_backend(DEMO)
print(f"runs on: {where} ({why})")
res = backends.launch(DEMO, "demo", args=[tile, np.zeros(64, np.uint32)],
                      options=ex.BLACKWELL_OPTIONS)
print(f"ran on: {res.device}; equal to the emulator:",
      np.array_equal(res.outputs[1].reshape(32, 2), as_b8))

# %% [markdown]
# ## Exercise 5 · the kernel
#
# Complete the kernel: the 16x16 byte tile `tile` is staged in shared memory with rows `sld`
# bytes apart (`sld` a multiple of 16). Load it with one `ldmatrix.m16n16.x1.trans.b8` and write
# lane `t`'s registers to `out[2t]` and `out[2t + 1]`. The check runs it on the CPU model (and
# says so on a GPU too old for it).

# %% solution id=m16n16_kernel
LOAD_M16N16 = r"""
extern "C" __global__ void load_m16n16(const unsigned char* tile, int sld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 256; i += 32) smem[(i / 16) * sld + i % 16] = tile[i];
    __syncwarp();
    const unsigned s_tile = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    unsigned r0 = 0, r1 = 0;
    // BEGIN SOLUTION
    const unsigned addr = s_tile + (lane % 16) * sld;
    asm volatile("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    // END SOLUTION
    out[2 * lane] = r0;
    out[2 * lane + 1] = r1;
}
"""
ex.m16n16_kernel.check(LOAD_M16N16);

# %% tests id=m16n16_kernel_tests points=3
ex.m16n16_kernel.grade(LOAD_M16N16)
### BEGIN HIDDEN TESTS
ex.m16n16_kernel.grade(LOAD_M16N16, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Where these forms are legal
#
# ptxas 13 accepts the 8-bit and packed forms only for an **architecture-specific** (`a`) or
# **family** (`f`) target of sm_100 or newer, in a module of PTX ISA `.version` 8.6 or later;
# plain `sm_100`/`sm_120` and every older target refuse them. The CPU model gives the same
# verdicts, with what to change:

# %%
for target, version in (("sm_90", "8.8"), ("sm_100", "8.8"), ("sm_100a", "8.5"),
                        ("sm_100a", "8.6"), ("sm_120f", "8.8")):
    print(f".target {target:8} .version {version}: {ex.gate_verdict(target, version)}\n")

# %% [markdown]
# ## Exercise 6 · which module compiles it?
#
# Which `.target` / `.version` pair accepts `ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8`?
# **a)** `sm_90`, 8.6 **b)** `sm_100`, 8.6 **c)** `sm_100a`, 8.6 **d)** `sm_120a`, 8.5

# %% solution id=gates
def gates_answer():
    ### BEGIN SOLUTION
    return "c"
    ### END SOLUTION


ex.gates.check(gates_answer);

# %% tests id=gates_tests points=1
ex.gates.grade(gates_answer)

# %% [markdown]
# ## CuTe's names for them
#
# CuTe (CUTLASS 3 and later) wraps these forms in copy atoms named after what a lane moves:
#
# | instruction (`.x1`, `.x2`, `.x4`) | CuTe atoms |
# | --- | --- |
# | `ldmatrix.m16n16.trans.b8` | `SM100_U8x8_LDSM_T`, `SM100_U8x16_LDSM_T` (no `.x4`) |
# | `ldmatrix.m8n16 ... .b8x16.b4x16_p64` | `SM100_SU4_DU8x16_x{1,2,4}_LDSM_N` |
# | `ldmatrix.m8n16 ... .b8x16.b6x16_p32` | `SM100_SU6_DU8x16_x{1,2,4}_LDSM_N` |
# | `ldmatrix.m16n16.trans ... .b8x16.{b6x16_p32,b4x16_p64}` | none |
# | `stmatrix.m16n8.trans.b8` | `SM100_U8x4_STSM_T`, `SM100_U8x8_STSM_T`, `SM100_U8x16_STSM_T` |
#
# The two `LDSM_T` atoms reorder the bytes after the instruction.
#
# `render.cute_atom_html(form)` shows any of them with its layouts, as under the maps above; the
# project's tests check every pair against this model with pycute. Notebook 10 does the same for
# the 16-bit forms.

# %%
render.cute_atom_html(matrix_forms.parse_form(
    "ldmatrix.sync.aligned.m8n16.x4.shared.b8x16.b6x16_p32"))

# %% [markdown]
# ## What to remember
#
# * 8-bit matrices are 16x16 (`ldmatrix.m16n16 .trans .b8`, two registers per matrix, 16
#   address lanes per matrix) or 16x8 stored transposed (`stmatrix.m16n8 .trans .b8`).
# * 6-bit and 4-bit data is read from 16-byte rows of 16 packed elements and unpacked one per
#   byte (`.b8x16.b6x16_p32`, `.b8x16.b4x16_p64`; `m8n16` or `m16n16 .trans`).
# * Only `sm_100a`/`sm_110a`/`sm_120a`-class targets (or their families) with PTX 8.6+ have
#   them; elsewhere the CPU model runs them.

# %% [markdown]
# ## Your progress

# %%
from ptxlab import progress

progress.show()
