"""CuTe's copy and mma atoms beside our layouts: which atom is which of our forms, and its layouts.

CuTe (CUTLASS 3+) describes each warp instruction as an *atom* whose traits carry thread-value
layouts: ``SrcLayout``/``DstLayout`` map ``(thread, value)`` to a bit of a reference array (copy
atoms), ``ALayout``/``BLayout``/``CLayout`` map ``(thread, value)`` to an element of the M x K,
N x K and M x N operands (column-major index, mma atoms). The layouts below are transcribed from
the headers of CUTLASS 4.2 (``nvidia-cutlass`` on the package index, under
``cutlass_library/source/include/``), resolving CuTe's ``typename Copy_Traits<...>::DstLayout``
aliases; ``tests/test_cute_atoms.py`` re-reads the installed headers and checks, with pycute,
that every atom agrees with our layouts element for element.

How our maps read in CuTe's reference space (``reference_bit``): for the ldmatrix/stmatrix
atoms the reference array is the matrices in shared memory, rows of 128 bits one after another,
matrix after matrix: bit ``1024*matrix + 128*row + 8*byte + bit``. A register-side value of a
``U32`` atom is one bit of a lane's 32-bit register (``value = bit + 32*reg``), of a ``U16`` atom
one bit of a 16-bit half (``value = bit + 16*(half + 2*reg)``); a shared-side value is one bit
of the 128-bit row a lane's address names.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import layouts
from .cute_layout import Layout, parse_layout

COPY_SM75 = "cute/atom/copy_traits_sm75.hpp"
COPY_SM90 = "cute/atom/copy_traits_sm90.hpp"
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
    value_bits: int      # bits of one register-side value unit (32 for U32, 16 for U16 atoms)

    @property
    def instruction(self) -> str:
        if self.opcode == "movmatrix":
            return "movmatrix.sync.aligned.m8n8.trans.b16"
        return (f"{self.opcode}.sync.aligned.m8n8.x{self.num}{'.trans' if self.trans else ''}"
                f".shared.b16")

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


def copy_atom(opcode: str, num: int = 1, trans: bool = False) -> CopyAtom | None:
    """The CuTe atom that is ``opcode.m8n8.x{num}{.trans}.b16`` (``None`` if CuTe has none)."""
    for atom in COPY_ATOMS:
        if (atom.opcode, atom.num, atom.trans) == (opcode, num, trans):
            return atom
    return None


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
