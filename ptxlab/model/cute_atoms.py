"""CuTe's copy and mma atoms beside our layouts: which atom is which of our forms, and its layouts.

CuTe (CUTLASS 3+) describes each warp instruction as an *atom* whose traits carry thread-value
layouts: ``SrcLayout``/``DstLayout`` map ``(thread, value)`` to a bit of a reference array (copy
atoms), ``ALayout``/``BLayout``/``CLayout`` map ``(thread, value)`` to an element of the M x K,
N x K and M x N operands (column-major index, mma atoms). The layouts below are transcribed from
the headers of CUTLASS 4.2 (``nvidia-cutlass`` on the package index, under
``cutlass_library/source/include/``), resolving CuTe's ``typename Copy_Traits<...>::DstLayout``
aliases; ``tests/model/test_cute_atoms.py`` re-reads the installed headers and checks, with pycute,
that every atom agrees with our layouts element for element.

How our maps read in CuTe's reference space (``reference_bit``): for the ldmatrix/stmatrix
atoms the reference array is the matrices in shared memory, rows of 128 bits one after another,
matrix after matrix: bit ``1024*matrix + 128*row + 8*byte + bit``. A register-side value of a
``U32`` atom is one bit of a lane's 32-bit register (``value = bit + 32*reg``), of a ``U16`` atom
one bit of a 16-bit half (``value = bit + 16*(half + 2*reg)``), of a ``U8`` atom one bit of a
byte (``value = bit + 8*(byte + 4*reg)``): the same number each time; a shared-side value is one
bit of the 128-bit row a lane's address names.

The SM100 atoms (``copy_traits_sm100.hpp``) issue the sm_100a-class 8-bit and packed forms of
:mod:`ptxlab.model.matrix_forms`. Their reference array orders the rows as the atom's shared
side says (``SM100_U8x8_LDSM_T`` puts the row of lane 2 at bit 1024, not 256), so
:func:`atom_register_bits` places each row where the atom's shared side puts the row of the lane
that names it. CuTe's two ``LDSM_T`` atoms also reorder the bytes after the instruction
(``CopyAtom.reorder``), so that their register layout is ``STSM_T``'s; CuTe offers no atom for
the m16n16 packed forms.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import layouts, matrix_forms
from .cute_layout import Layout, parse_layout

COPY_SM75 = "cute/atom/copy_traits_sm75.hpp"
COPY_SM90 = "cute/atom/copy_traits_sm90.hpp"
COPY_SM100 = "cute/atom/copy_traits_sm100.hpp"
MMA_SM80 = "cute/atom/mma_traits_sm80.hpp"

_LDSM_N_SRC = {1: "((8,4),128):((128,0),1)", 2: "((16,2),128):((128,0),1)", 4: "(32,128):(128,1)"}
_LDSM_N_DST = {1: "(32,32):(32,1)", 2: "(32,(32,2)):(32,(1,1024))", 4: "(32,(32,4)):(32,(1,1024))"}
_LDSM_T_DST = {1: "((4,8),(16,2)):((256,16),(1,128))",
               2: "((4,8),(16,2,2)):((256,16),(1,128,1024))",
               4: "((4,8),(16,2,4)):((256,16),(1,128,1024))"}


@dataclass(frozen=True)
class CopyAtom:
    """One CuTe copy atom and the form of ours that it is."""

    name: str
    header: str
    opcode: str          # "ldmatrix" | "stmatrix" | "movmatrix"
    num: int
    trans: bool
    src: str             # SrcLayout, (thread, value) -> reference bit
    dst: str             # DstLayout
    value_bits: int      # bits of one register-side value unit (32 U32, 16 U16, 8 U8 atoms)
    shape: str = "m8n8"
    dtype: str = "b16"   # or "b8", or the packed source "b6x16_p32" / "b4x16_p64"
    #: CuTe's byte shuffle after the instruction: byte ``k`` of the atom's register ``d`` is byte
    #: ``reorder[4*d + k] = (reg, byte)`` of the instruction's registers; empty: none.
    reorder: tuple[tuple[int, int], ...] = ()

    @property
    def form(self) -> matrix_forms.MatrixForm:
        """The instruction the atom issues, as our model's form."""
        space = "generic" if self.opcode == "movmatrix" else "shared"
        return matrix_forms.MatrixForm(self.opcode, self.shape, self.num, self.trans,
                                       self.dtype, space)

    @property
    def instruction(self) -> str:
        return self.form.ptx

    @property
    def arch_header(self) -> str:
        """The header whose ``asm`` issues the instruction (``cute/arch/copy_sm*.hpp``)."""
        return self.header.replace("atom/copy_traits_", "arch/copy_")

    @property
    def register_side(self) -> str:
        """The layout of the side held in registers (Dst for a load, Src for a store)."""
        return self.dst if self.opcode == "ldmatrix" else self.src

    @property
    def shared_side(self) -> str | None:
        return {"ldmatrix": self.src, "stmatrix": self.dst}.get(self.opcode)


@dataclass(frozen=True)
class MmaAtom:
    """One CuTe mma atom: ``(thread, value) -> element`` of A (M x K), B (N x K), C (M x N)."""

    name: str
    header: str
    form: tuple[str, str, str, str, str]   # (shape, atype, btype, ctype, dtype) as in layouts
    a: str
    b: str
    c: str


def _copy_atoms() -> tuple[CopyAtom, ...]:
    atoms = []
    for num in (1, 2, 4):
        atoms.append(CopyAtom(f"SM75_U32x{num}_LDSM_N", COPY_SM75, "ldmatrix", num, False,
                              _LDSM_N_SRC[num], _LDSM_N_DST[num], 32))
        atoms.append(CopyAtom(f"SM75_U16x{2 * num}_LDSM_T", COPY_SM75, "ldmatrix", num, True,
                              _LDSM_N_SRC[num], _LDSM_T_DST[num], 16))
        # CuTe defines each STSM atom as the matching LDSM atom with Src and Dst exchanged.
        atoms.append(CopyAtom(f"SM90_U32x{num}_STSM_N", COPY_SM90, "stmatrix", num, False,
                              _LDSM_N_DST[num], _LDSM_N_SRC[num], 32))
        atoms.append(CopyAtom(f"SM90_U16x{2 * num}_STSM_T", COPY_SM90, "stmatrix", num, True,
                              _LDSM_T_DST[num], _LDSM_N_SRC[num], 16))
    # movmatrix: CuTe's layouts say only which register bits each lane holds, on both sides;
    # the transposition is the instruction's effect, not a layout change.
    atoms.append(CopyAtom("SM75_U32x1_MOVM_T", COPY_SM75, "movmatrix", 1, True,
                          "(32,32):(32,1)", "(32,32):(32,1)", 32))
    return tuple(atoms)


# SM100: ldmatrix.m16n16.{x1,x2}.trans.b8 (U8x8, U8x16 _LDSM_T, bytes reordered after the
# instruction), the packed loads ldmatrix.m8n16.x{1,2,4}.b8x16.{b4x16_p64,b6x16_p32}
# (SU4/SU6 source, DU8x16 destination: the m8n8 _LDSM_N layouts) and
# stmatrix.m16n8.x{1,2,4}.trans.b8 (U8x4, U8x8, U8x16 _STSM_T).
_U8_T = {1: "((4,8),(8,2,2)):((256,8),(1,128,64))",
         2: "((4,8),(8,2,2,2)):((256,8),(1,128,64,1024))",
         4: "((4,8),(8,2,2,4)):((256,8),(1,128,64,1024))"}
_M16N16_SRC = {1: "((2,2,4,2),128):((128,1024,256,0),1)",
               2: "((2,2,4,2),128):((128,1024,256,2048),1)"}


def _ldsm_t_reorder(regs: int) -> tuple[tuple[int, int], ...]:
    """``dst0 = {tmp0.x, tmp0.y, tmp1.x, tmp1.y}``, ``dst1 = {tmp0.z, tmp0.w, tmp1.z, tmp1.w}``
    for each pair of registers."""
    out = []
    for d in range(regs):
        pair, half = 2 * (d // 2), d % 2
        out += [(pair, 2 * half), (pair, 2 * half + 1), (pair + 1, 2 * half),
                (pair + 1, 2 * half + 1)]
    return tuple(out)


def _sm100_atoms() -> tuple[CopyAtom, ...]:
    atoms = []
    for num, name in ((1, "U8x8"), (2, "U8x16")):
        atoms.append(CopyAtom(f"SM100_{name}_LDSM_T", COPY_SM100, "ldmatrix", num, True,
                              _M16N16_SRC[num], _U8_T[2 * num], 8, shape="m16n16", dtype="b8",
                              reorder=_ldsm_t_reorder(2 * num)))
    for bits, dtype in ((4, "b4x16_p64"), (6, "b6x16_p32")):
        for num in (1, 2, 4):
            atoms.append(CopyAtom(f"SM100_SU{bits}_DU8x16_x{num}_LDSM_N", COPY_SM100, "ldmatrix",
                                  num, False, _LDSM_N_SRC[num], _LDSM_N_DST[num], 8,
                                  shape="m8n16", dtype=dtype))
    for num, name in ((1, "U8x4"), (2, "U8x8"), (4, "U8x16")):
        atoms.append(CopyAtom(f"SM100_{name}_STSM_T", COPY_SM100, "stmatrix", num, True,
                              _U8_T[num], _LDSM_N_SRC[num], 8, shape="m16n8", dtype="b8"))
    return tuple(atoms)


#: The atoms of the m8n8 .b16 forms and movmatrix (reference bit ``1024*matrix + 128*row + bit``,
#: compared with :func:`register_bits`).
COPY_ATOMS: tuple[CopyAtom, ...] = _copy_atoms()

_SM80_16x8_ROW = "((4,8),(2,2)):((32,1),(16,8))"      # CuTe's SM80_16x8_Row, every C here
_K16_A, _K16_B = "((4,8),(2,2,2)):((32,1),(16,8,128))", "((4,8),(2,2)):((16,1),(8,64))"

# One atom per mma variant of the course. The F32 and BF16 atoms inherit every layout of
# SM80_16x8x{8,16}_F16F16F16F16_TN (MMA_Traits<...> : MMA_Traits<...F16F16F16F16_TN>).
MMA_ATOMS: tuple[MmaAtom, ...] = (
    MmaAtom("SM80_16x8x16_F16F16F16F16_TN", MMA_SM80, ("m16n8k16", "f16", "f16", "f16", "f16"),
            a=_K16_A, b=_K16_B, c=_SM80_16x8_ROW),
    MmaAtom("SM80_16x8x16_F32F16F16F32_TN", MMA_SM80, ("m16n8k16", "f16", "f16", "f32", "f32"),
            a=_K16_A, b=_K16_B, c=_SM80_16x8_ROW),
    MmaAtom("SM80_16x8x16_F32BF16BF16F32_TN", MMA_SM80,
            ("m16n8k16", "bf16", "bf16", "f32", "f32"), a=_K16_A, b=_K16_B, c=_SM80_16x8_ROW),
    MmaAtom("SM80_16x8x8_F32F16F16F32_TN", MMA_SM80, ("m16n8k8", "f16", "f16", "f32", "f32"),
            a=_SM80_16x8_ROW, b="((4,8),2):((16,1),8)", c=_SM80_16x8_ROW),
    MmaAtom("SM80_16x8x8_F32TF32TF32F32_TN", MMA_SM80, ("m16n8k8", "tf32", "tf32", "f32", "f32"),
            a="((4,8),(2,2)):((16,1),(8,64))", b="((4,8),2):((8,1),32)", c=_SM80_16x8_ROW),
    MmaAtom("SM80_16x8x32_S32S8S8S32_TN", MMA_SM80, ("m16n8k32", "s8", "s8", "s32", "s32"),
            a="((4,8),(4,2,2)):((64,1),(16,8,256))", b="((4,8),(4,2)):((32,1),(8,128))",
            c=_SM80_16x8_ROW),
)


#: The atoms of the sm_100a-class 8-bit and packed forms (compared with
#: :func:`atom_register_bits`, their rows placed where each atom's shared side puts them).
SM100_COPY_ATOMS: tuple[CopyAtom, ...] = _sm100_atoms()

#: Every copy atom the course names.
ALL_COPY_ATOMS: tuple[CopyAtom, ...] = COPY_ATOMS + SM100_COPY_ATOMS


def copy_atom(opcode: str, num: int = 1, trans: bool = False, *, shape: str = "m8n8",
              dtype: str = "b16") -> CopyAtom | None:
    """The CuTe atom that is ``opcode.{shape}.x{num}{.trans}.{dtype}`` (``None`` if CuTe has
    none, as for the m16n16 packed loads)."""
    for atom in ALL_COPY_ATOMS:
        if (atom.opcode, atom.num, atom.trans, atom.shape, atom.dtype) == (
                opcode, num, trans, shape, dtype):
            return atom
    return None


def copy_atom_for(form: matrix_forms.MatrixForm) -> CopyAtom | None:
    """The CuTe atom that issues ``form`` (any space), or ``None``."""
    num = 1 if form.op == "movmatrix" else form.num
    return copy_atom(form.op, num, form.trans, shape=form.shape, dtype=form.dtype)


def mma_atom(shape: str, atype: str, btype: str, ctype: str, dtype: str) -> MmaAtom | None:
    for atom in MMA_ATOMS:
        if atom.form == (shape, atype, btype, ctype, dtype):
            return atom
    return None


def caption(atom: CopyAtom | MmaAtom) -> str:
    """One line for a picture: the atom's name and its register-side layout."""
    if isinstance(atom, MmaAtom):
        return f"CuTe {atom.name}: A {atom.a}, B {atom.b}, C {atom.c}"
    return f"CuTe {atom.name}: (thread, value) -> bit {atom.register_side}"


def caption_lines(atom: CopyAtom) -> list[str]:
    """A copy atom beside one of our maps: its name, the instruction it issues, its register
    and shared-memory layouts and the byte reorder it applies after the instruction."""
    lines = [f"CuTe {atom.name} issues {atom.instruction}",
             f"  registers (thread, value) -> bit {atom.register_side}"]
    if atom.shared_side is not None:
        lines.append(f"  shared rows (thread, value) -> bit {atom.shared_side}")
    if atom.reorder:
        regs = len(atom.reorder) // 4
        lines.append("  then reorders bytes: " + ", ".join(
            f"r{d} = {{{', '.join(f'r{r}.b{b}' for r, b in atom.reorder[4 * d:4 * d + 4])}}}"
            for d in range(regs)))
    return lines


# ---------------------------------------------------------------------------------------------
# Our layouts in CuTe's reference space
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def register_bits(opcode: str, num: int, trans: bool) -> np.ndarray:
    """``(32, values)``: the reference bit that each (lane, value bit) of our fragment holds,
    ``value = bit + 32 * reg`` (for a U16 atom the same number: ``bit + 16*(half + 2*reg)``)."""
    frag = (layouts.movmatrix_fragment() if opcode == "movmatrix"
            else layouts.ldmatrix_fragment(num, trans))
    regs = frag.regs
    out = np.zeros((layouts.WARP_SIZE, 32 * regs), dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        for reg in range(regs):
            for elem in range(frag.elems_per_reg):
                m, r, c = frag.element(lane, reg, elem)
                for bit in range(frag.elem_bits):
                    reg_bit = elem * frag.elem_bits + bit
                    out[lane, 32 * reg + reg_bit] = 1024 * m + 128 * r + frag.elem_bits * c + bit
    return out


@lru_cache(maxsize=None)
def shared_bits(num: int) -> np.ndarray:
    """``(32, 128)``: the reference bit of each bit of the row each lane's address names; lanes
    whose address is not used repeat lane ``lane % (8*num)`` (CuTe's stride 0)."""
    out = np.zeros((layouts.WARP_SIZE, 128), dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        m, r = layouts.address_role(lane % (8 * num), num)
        out[lane] = 1024 * m + 128 * r + np.arange(128)
    return out


def atom_register_bits(atom: CopyAtom, shared: np.ndarray | None = None) -> np.ndarray:
    """``(32, 32*regs)``: our model's map of the instruction ``atom`` issues, in the atom's
    reference space: the reference bit that bit ``i`` of byte ``k`` of the atom's register ``d``
    of each lane holds (``value = i + 8*k + 32*d``).

    Our byte map says which (matrix, row, byte) the instruction puts in (lane, reg, byte); the
    atom's ``reorder`` says which instruction byte its register byte is; the atom's shared side
    (``shared``, ``(32, 128)``; evaluated from ``atom.shared_side`` if not given) says where in
    the reference the row named by each lane's address lies. For a load and a store alike.
    """
    f = atom.form
    if atom.shared_side is None:
        raise ValueError(f"{atom.name} has no shared-memory side")
    shared = evaluate(atom.shared_side) if shared is None else shared
    bmap, roles = matrix_forms.byte_map(f), matrix_forms.address_lanes(f)
    start = {(int(m), int(r)): int(shared[lane, 0]) for lane, (m, r) in enumerate(roles) if m >= 0}
    out = np.zeros((layouts.WARP_SIZE, 32 * f.regs), dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        for d in range(f.regs):
            for k in range(4):
                reg, byte = atom.reorder[4 * d + k] if atom.reorder else (d, k)
                m, r, c = (int(x) for x in bmap[lane, reg, byte])
                out[lane, 32 * d + 8 * k:32 * d + 8 * k + 8] = start[(m, r)] + 8 * c + np.arange(8)
    return out


def mma_elements(shape: str, atype: str, btype: str, ctype: str, dtype: str,
                 operand: str) -> np.ndarray:
    """``(32, values)``: CuTe's element index (column-major, M x K / N x K / M x N) of each
    (lane, value) of our mma operand, ``value = elem + per_reg * reg``."""
    form = layouts.mma_form(shape, atype, btype, ctype, dtype)
    frag = {"A": form.a, "B": form.b, "C": form.c, "D": form.d}[operand]
    out = np.zeros((layouts.WARP_SIZE, frag.regs * frag.elems_per_reg), dtype=np.int64)
    for lane in range(layouts.WARP_SIZE):
        for reg in range(frag.regs):
            for elem in range(frag.elems_per_reg):
                _, row, col = frag.element(lane, reg, elem)
                if operand == "B":   # CuTe's B is N x K: index n + N*k
                    index = col + form.n * row
                else:                # A: m + M*k; C/D: m + M*n
                    index = row + frag.rows * col
                out[lane, elem + frag.elems_per_reg * reg] = index
    return out


def evaluate(layout: str) -> np.ndarray:
    """``(threads, values)`` table of a (thread, value) layout, by our own evaluator."""
    lay: Layout = parse_layout(layout)
    t = np.arange(lay.mode(0).size)[:, None]
    v = np.arange(lay.mode(1).size)[None, :]
    return np.asarray(lay(t + lay.mode(0).size * v), dtype=np.int64)
