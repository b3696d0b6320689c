"""The table of instruction compilers: each family registers the opcodes it knows with
:func:`handles`; :func:`compile_instruction` looks an instruction up in it.

The families import this module, never the package (whose ``__init__`` imports every family to
fill the table), so no family imports its package back.
"""
from __future__ import annotations

from ..decode_context import DecodeContext, Unsupported
from ..errors import PtxSyntaxError
from ..parser import Instruction

_TABLE: dict = {}

#: Every instruction name of the PTX ISA (8.x), whether or not the CPU model executes it. A name
#: outside this set is a typo in inline asm, which ``ptxas`` would reject: the CPU model reports
#: it as a compile error rather than as an instruction it does not support.
PTX_OPCODES = frozenset("""
abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev
brkpt brx call clusterlaunchcontrol clz cnot copysign cos cp createpolicy cvt cvta discard div
dp2a dp4a elect ex2 exit fence fma fns getctarank griddepcontrol isspacep istypep ld ldmatrix
ldu lg2 lop3 mad mad24 madc mapa match max mbarrier membar min mma mov movmatrix mul mul24
multimem nanosleep neg not or pmevent popc prefetch prefetchu prmt rcp red redux rem ret rsqrt
sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore stacksave stmatrix
sub subc suld suq sured sust szext tanh tcgen05 tensormap testp tex tld4 trap txq vabsdiff
vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote
vset vset2 vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor
""".split())


def handles(*opcodes: str):
    """Register a compiler for the given base opcodes (``"add"``, ``"ld"`` ...)."""
    def deco(fn):
        for op in opcodes:
            _TABLE[op] = fn
        return fn
    return deco


def compile_instruction(ins: Instruction, cx: DecodeContext):
    fn = _TABLE.get(ins.opcode)
    if fn is None:
        if ins.opcode not in PTX_OPCODES:
            raise PtxSyntaxError(f"'{ins.opcode}' is not a PTX instruction (a typo in inline "
                                 "asm?); ptxas rejects it", ins.line, ins.text)
        raise Unsupported(f"{ins.full_opcode} is not supported by the CPU model")
    return fn(ins, cx)


def supported_opcodes() -> list[str]:
    return sorted(_TABLE)


__all__ = ["PTX_OPCODES", "handles", "compile_instruction", "supported_opcodes"]
