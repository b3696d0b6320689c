"""Compilers from a parsed PTX instruction to a closure, one module per instruction family.

Each family registers the opcodes it knows with :func:`handles`. An opcode nobody registered,
or a form a family does not model, becomes an "unsupported instruction" error that names the
instruction and suggests a GPU (raised only if the instruction is reached).
"""
from __future__ import annotations

from ..parser import Instruction
from ..program import DecodeContext, Unsupported

_TABLE: dict = {}


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
        raise Unsupported(f"{ins.full_opcode} is not supported by the CPU model")
    return fn(ins, cx)


def supported_opcodes() -> list[str]:
    return sorted(_TABLE)


from . import control, convert, integer, floating, compare, memory_ops, warp  # noqa: E402,F401
