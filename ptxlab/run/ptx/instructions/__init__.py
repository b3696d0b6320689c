"""Compilers from a parsed PTX instruction to a closure, one module per instruction family.

Each family registers the opcodes it knows with :func:`~.registry.handles`. An opcode nobody
registered, or a form a family does not model, becomes an "unsupported instruction" error that
names the instruction and suggests a GPU (raised only if the instruction is reached).
"""
from __future__ import annotations

from .registry import PTX_OPCODES, compile_instruction, handles, supported_opcodes

# Importing the families fills the table (each registers its opcodes as it is imported).
from . import control, convert, integer, floating, compare, memory_ops, warp  # noqa: E402,F401

__all__ = ["PTX_OPCODES", "handles", "compile_instruction", "supported_opcodes"]
