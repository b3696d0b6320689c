# %% [markdown]
# # 10 · Will it lower to `ldmatrix`? The layout-fit rule, CuTe side by side, and a trap clinic
#
# A compiler that copies a tile between shared memory and registers (TVM's TIRx, CuTe, Triton)
# holds two **layouts**: where each element sits in the warp's registers, and where it sits in
# shared memory. One `ldmatrix` (or `stmatrix`) can do the copy exactly when those two,
# composed, are the instruction's own map: every 16-byte row it moves is contiguous and
# 16-byte aligned in shared memory, and every lane's registers hold what the instruction puts
# there. This notebook writes layouts in **CuTe's notation**, `shape:stride`, and lets the rule
# decide: which form, which `.num`, `.trans` or not, with which per-lane address, or precisely
# why not.

# %%
import numpy as np

from IPython.display import display

from ptxlab import cute_atoms, layout_fit, traps, widgets
from ptxlab.exercises import layout_fit as ex

# %% [markdown]
# ## Layouts in `shape:stride`
#
# A CuTe layout maps a coordinate to an offset: `(8,16):(16,1)` is an 8x16 tile stored row by
# row (element `(m, n)` at offset `16m + n`), `(8,16):(1,8)` the same tile stored column by
# column. Shapes nest: `((4,8),2):((16,1),8)` reads "32 threads as `(4, 8)`, 2 values each".
#
# The **register side** is a thread-value layout: `(thread, value) -> element of the tile`, the
# element numbered column-major (`m + 8n` in an 8-row tile), as CuTe numbers them. The m8n8
# fragment of notebook 2 (lane `t` holds row `t // 4`, columns `2(t % 4)` and `2(t % 4) + 1`)
# is `((4,8),2):((16,1),8)`: thread `t = t0 + 4 t1` and value `v` go to `16 t0 + t1 + 8 v`,
# i.e. row `t1`, column `2 t0 + v`. For `.x2` and `.x4`, the next blocks of 8 columns come in
# more values: `((4,8),(2,2)):((16,1),(8,64))`.
#
# The **shared side** maps the same tile to offsets in elements. The rule composes the two:

# %%
frag_x2 = ex.FRAGMENT[2]
fit = layout_fit.fit_copy(frag_x2, "(8,16):(16,1)")
print(fit)
print(layout_fit.fit_copy(frag_x2, "(8,16):(1,8)"))

# %% [markdown]
# Row-major shared memory gives the plain load; column-major gives `.trans`, because a fragment
# *column* is then what sits contiguously. Every answer says how each lane forms its address.
# The same rule is a command: `ptxlab fit '((4,8),(2,2)):((16,1),(8,64))' '(8,16):(16,1)'`.
#
# ## When it declines
#
# The rule tries every form of the element width, widest `.num` first, and says why the best
# attempt failed, with the lane and the bytes:

# %%
for reg, smem, dtype in ((frag_x2, "(8,16):(16,1)", "f64"),     # no 64-bit form, not even as units
                         ("((4,8),3):((16,1),8)", "(8,24):(24,1)", "f16"),  # 3 values a lane
                         ("(32,4):(4,1)", "(8,16):(16,1)", "f16"),      # not a fragment
                         (frag_x2, "(8,16):(32,2)", "f16"),             # rows not contiguous
                         (frag_x2, "(8,16):(20,1)", "f16")):            # 40-byte rows
    print(layout_fit.fit_copy(reg, smem, dtype), "\n")

# %% [markdown]
# The same rule knows the 8-bit forms of notebook 9, and gates them by target:

# %%
m16n16 = "((4,8),(4,2)):((4,16),(1,128))"     # lane t: rows 4(t%4).., columns t//4 and t//4+8
print(layout_fit.fit_copy(m16n16, "(16,16):(16,1)", "e4m3"))
print(layout_fit.fit_copy(m16n16, "(16,16):(16,1)", "e4m3", target="sm_90"))

# %% [markdown]
# ## Other widths: the bits are what moves
#
# `ldmatrix` and `stmatrix` do not look at the data: a `.b16` form moves 16-bit units, whatever
# they hold. So an 8-bit or 32-bit copy lowers to a `.b16` form when its **16-bit units** line
# up: two 8-bit elements side by side in one 16-bit half of a register and side by side in
# shared memory make a unit; a 32-bit element is two units (low half first) in one register,
# contiguous in shared memory. CUTLASS loads int8 and fp8 `mma` operands this way
# (`SM75_U32x4_LDSM_N`). The m16n8k32 e4m3 A fragment (lane `t`: row `t // 4` (+8), bytes
# `4(t % 4) ..` of each 16) from a row-major tile, and the m16n8k8 tf32 A fragment:

# %%
print(layout_fit.fit_copy("((4,8),(4,2,2)):((64,1),(16,8,256))", "(16,32):(32,1)", "e4m3"), "\n")
print(layout_fit.fit_copy("((4,8),(2,2)):((16,1),(8,64))", "(16,8):(8,1)", "tf32"))

# %% [markdown]
# `.trans` never applies to such a copy: it transposes whole 16-bit units, so it would hand a
# register a 2x2 block of bytes, or deliver the two halves of one 32-bit element to two lanes.
# A transposed 8-bit copy needs the sm_100a-class `.trans .b8` forms above; a transposed 32-bit
# one, and any 64-bit one, has no form at all:

# %%
print(layout_fit.fit_copy("((4,8),(2,2)):((16,1),(8,64))", "(16,8):(1,16)", "tf32"))

# %% [markdown]
# <details><summary>How TVM's TIRx states the same rule</summary>
#
# TIRx regroups both layouts to `[T/32, 8, 4, M/(2·num), num, 2]` (warps, the 8 rows of a tile,
# the 4 column pairs, the tiles along M, the `num` tiles, the element pair), requires the
# register side's strides to be the fragment's `(4, 1, 1)` on `(8, 4, 2)`, and reads `.trans`
# off the shared side: row-major with a row stride that is a multiple of 8 elements gives the
# plain form, column-major the `.trans` form; it tries `num` = 4, 2, 1 and falls back to plain
# loads if none fits. The rule here decides on the composition itself, so it also accepts a
# register side that is a fragment only once composed with its shared side, and it checks the
# alignment of every row start (a tile offset too), not only the row stride.
#
# </details>
#
# That last point matters. The TVM article says its multiple-of-8 checks keep *every tile*
# 16-byte aligned, but the checks it shows look at the row stride only, not at the stride
# between the `num` tiles. Two 8x8 tiles side by side with the second 12 elements in (rows 24
# elements apart) pass those checks; its row 0 starts at byte 24:

# %%
print(layout_fit.fit_copy(frag_x2, "(8,(8,2)):(24,(1,12))"))
print(layout_fit.fit_copy(frag_x2, "(8,(8,2)):(24,(1,16))"))

# %% [markdown]
#
# ## Exercise 1 · will it lower?
#
# For each copy, give `(num, trans)` if it lowers to one `ldmatrix`/`stmatrix` form, or the
# reason it does not: `"dtype"`, `"values"`, `"register"`, `"contiguous"` or `"aligned"`. The
# register layouts `FRAGMENT[n]` are the m8n8 fragments above.
#
# | case | register side | shared side | type | direction |
# | --- | --- | --- | --- | --- |
# | A | `FRAGMENT[4]` | `(8,32):(32,1)` | f16 | load |
# | B | `FRAGMENT[2]` | `(8,16):(1,8)` | f16 | load |
# | C | `FRAGMENT[2]` | `(8,16):(24,1)` | f16 | store |
# | D | `FRAGMENT[2]` | `(8,16):(20,1)` | f16 | load |
# | E | `FRAGMENT[2]` | `(8,16):(16,1)` | f64 | load |
# | F | `(32,4):(4,1)` | `(8,16):(16,1)` | f16 | load |
#
# Work it out by hand first; `layout_fit.fit_copy` is there to confirm afterwards.

# %% solution id=will_it_fit
def will_it_fit():
    """{case: (num, trans) or reason} for the copies A-F."""
    ### BEGIN SOLUTION
    return {"A": (4, False), "B": (2, True), "C": (2, False), "D": "aligned", "E": "dtype",
            "F": "register"}
    ### END SOLUTION


ex.will_it_fit.check(will_it_fit);

# %% tests id=will_it_fit_tests points=3
ex.will_it_fit.grade(will_it_fit)

# %% [markdown]
# ## Exercise 2 · the address formula it emits
#
# An 8x32 f16 tile, register side `FRAGMENT[4]`, stored row-major with rows `pitch` elements
# apart (padding keeps the rows off each other's banks, notebook 7), at byte `base`: one
# `ldmatrix.x4`. Which byte address does `lane` give? (`pitch` is a multiple of 8.)

# %% solution id=fit_addresses
def fit_addresses(lane, base, pitch):
    """Address lane `lane` gives to the x4 load of an 8x32 f16 tile with rows `pitch` apart."""
    ### BEGIN SOLUTION
    return base + (lane % 8) * 2 * pitch + (lane // 8) * 16
    ### END SOLUTION


ex.fit_addresses.check(fit_addresses);

# %% tests id=fit_addresses_tests points=2
ex.fit_addresses.grade(fit_addresses)
### BEGIN HIDDEN TESTS
ex.fit_addresses.grade(fit_addresses, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## CuTe side by side
#
# CuTe describes each instruction as a copy **atom** with two thread-value layouts: `SrcLayout`
# and `DstLayout` map `(thread, value)` to a **bit** of a reference array, here the matrices'
# 128-bit rows one after another (bit `1024·matrix + 128·row + bit in the row`). Our fragment,
# written the same way, is the atom's register side, bit for bit; the project's tests check
# every pair with pycute, CuTe's own Python layout algebra. The fragment maps of the course now
# name the atom under the picture:

# %%
widgets.FragmentMap(num=2, trans=True)

# %%
for atom in cute_atoms.COPY_ATOMS:
    same = np.array_equal(cute_atoms.evaluate(atom.register_side),
                          cute_atoms.register_bits(atom.opcode, atom.num, atom.trans))
    print(f"{atom.name:20} {atom.instruction:48} register side {atom.register_side:42} "
          f"= ours: {same}")

# %% [markdown]
# `U32` atoms move whole registers (no `.trans`), `U16` atoms move 16-bit halves between lanes
# (`.trans`); the count is values per lane. The `mma` atom `SM80_16x8x16_F32F16F16F32_TN` gives
# A, B and C as `(thread, value) -> element` of the `M x K`, `N x K` and `M x N` operands:

# %%
print(cute_atoms.caption(cute_atoms.mma_atom("m16n8k16", "f16", "f16", "f32", "f32")))

# %% [markdown]
# ## Exercise 3 · which atom?
#
# Which CuTe atom is `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`?
# **a)** `SM75_U32x4_LDSM_N` **b)** `SM75_U16x8_LDSM_T` **c)** `SM90_U16x8_STSM_T`
# **d)** `SM75_U16x4_LDSM_T`

# %% solution id=cute_atom
def cute_atom_answer():
    ### BEGIN SOLUTION
    return "b"
    ### END SOLUTION


ex.cute_atom.check(cute_atom_answer);

# %% tests id=cute_atom_tests points=1
ex.cute_atom.grade(cute_atom_answer)

# %% [markdown]
# ## Trap clinic
#
# Articles about these instructions make, or invite, a handful of mistakes. Each trap below is
# a small kernel run on the CPU model, beside its fix; where ptxas refuses the bad kernel, its
# message (measured with ptxas 13) is quoted.

# %%
for key in traps.TRAPS:
    display(traps.trap_html(key))

# %% [markdown]
# ## Exercise 4 · fix the stride trap
#
# The 8x16 f16 tile `tile` is staged in shared memory with rows `ld` elements apart. Load it with
# one `ldmatrix.x2` (matrix 0 = columns 0-7, matrix 1 = columns 8-15) and write lane `t`'s two
# registers to `out[2t]`, `out[2t + 1]`. The address formula of the clinic's bad kernel is
# there: fix it (the fit rule gives the right one).

# %% solution id=x2_kernel
LOAD_8X16 = r"""
extern "C" __global__ void load_8x16(const unsigned short* tile, int ld, unsigned* out)
{
    extern __shared__ __align__(16) unsigned short smem[];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 128; i += 32) smem[(i / 16) * ld + i % 16] = tile[i];
    __syncwarp();
    const unsigned s_tile = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    // BEGIN SOLUTION
    const unsigned addr = s_tile + (lane % 8) * ld * 2 + ((lane / 8) % 2) * 16;
    // END SOLUTION
    unsigned r0, r1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(addr));
    out[2 * lane] = r0;
    out[2 * lane + 1] = r1;
}
"""
ex.x2_kernel.check(LOAD_8X16);

# %% tests id=x2_kernel_tests points=3
ex.x2_kernel.grade(LOAD_8X16)
### BEGIN HIDDEN TESTS
ex.x2_kernel.grade(LOAD_8X16, hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## What to remember
#
# * A copy is one `ldmatrix`/`stmatrix` exactly when the composed layouts are the instruction's
#   map: each moved row 16 contiguous, 16-byte aligned bytes; the register side the fragment.
#   A contiguous fragment row means no `.trans`, a contiguous fragment column `.trans`; the
#   widest `.num` whose registers the values fill wins.
# * CuTe's `SM75_U32xN_LDSM_N`, `SM75_U16xN_LDSM_T`, `SM90_*_STSM_*` atoms are these forms;
#   their register-side layouts are our fragments bit for bit.
# * `.b16` not `.f16`; `.shared::cta` is plain `.shared`; braces around `.reg` in inline asm;
#   every row address a multiple of 16 bytes.

# %% [markdown]
# ## Your progress

# %%
from ptxlab import progress

progress.show()
