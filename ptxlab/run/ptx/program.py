"""Decode a parsed PTX kernel once into a list of Python closures, ready to run many times.

Each instruction becomes a :class:`CodeEntry`: its kind (plain operation, branch, barrier,
warp-collective, call, exit) and a closure ``fn(w, m)`` that executes it for the active lanes
``m`` of warp ``w`` (``m is None`` when all 32 lanes are active). Register names, symbol
addresses, operand types and immediates are resolved here, so running does no parsing.
"""
from __future__ import annotations

from pathlib import Path

from . import memory
from .decode_context import (K_BAR, K_BRA, K_CALL, K_COLL, K_EXIT, K_OP, K_RET, K_TRAP, CodeEntry,
                             DecodeContext, FunctionCode, Unsupported, check_unknown, types_of,
                             unsupported_entry)
from .errors import PtxSyntaxError
from .instructions import compile_instruction
from .parser import Instruction, Module, Param, VarDecl
from .values import WARP, storage_dtype, type_bytes

# ---------------------------------------------------------------------------------------------
# The decoded program
# ---------------------------------------------------------------------------------------------

def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Program:
    """One entry point of a PTX module, decoded (with the ``.func``s it may call)."""

    def __init__(self, module: Module, entry: str, *, source_name: str = "kernel.cu",
                 source_text: str = "", width: int = WARP):
        """``width``: lanes per register array, 32 for one warp; a multiple of 32 decodes the
        program to run that many lanes of many warps as one vector (:meth:`at_width`)."""
        if entry not in module.functions or not module.functions[entry].is_entry:
            raise KeyError(entry)
        self.module = module
        self.entry_name = entry
        self.source_name = source_name
        self.source_text = source_text
        self.function_names = set(module.functions)
        self.width = width
        self._widths: dict[int, Program] = {}
        entry_fn = module.functions[entry]
        # -- kernel parameters, packed as the driver packs them --
        self.params: list[tuple[Param, int]] = []
        off = 0
        for p in entry_fn.params:
            off = _align_up(off, max(p.align, 1))
            self.params.append((p, off))
            off += p.size
        self.param_size = off
        self.param_offsets = {p.name: o for p, o in self.params}
        # -- shared memory: static variables, then the dynamic (extern) array --
        self.shared_offsets: dict[str, int] = {}
        static = 0
        dyn_align = 16
        shared_vars = [v for v in module.variables if v.space == "shared"]
        for fn in module.functions.values():
            shared_vars += [v for v in fn.locals if v.space == "shared"]
        for v in shared_vars:
            if v.extern or v.count == 0:
                dyn_align = max(dyn_align, v.align)
                continue
            static = _align_up(static, max(v.align, 1))
            self.shared_offsets[v.name] = memory.SHARED_START + static
            static += v.size
        self.static_shared = static
        self.dynamic_shared_offset = _align_up(static, dyn_align)
        for v in shared_vars:
            if v.extern or v.count == 0:
                self.shared_offsets[v.name] = memory.SHARED_START + self.dynamic_shared_offset
        # -- module variables in global memory (allocated first in every launch) --
        self.global_vars: list[VarDecl] = [v for v in module.variables
                                           if v.space in ("global", "const")]
        self.global_addresses: dict[str, int] = {}
        probe = memory.GlobalMemory()
        for v in self.global_vars:
            if v.extern and not v.init:
                pass
            buf = probe.add(max(v.size, 1), f"variable {v.name}")
            self.global_addresses[v.name] = buf.base
        # -- functions --
        self.functions: dict[str, FunctionCode] = {}
        local_cursor = 0
        for fn in module.functions.values():
            if not fn.has_body or (fn.is_entry and fn.name != entry):
                continue
            fc = FunctionCode(fn.name, fn, width=width)
            for name, typ in fn.regs.items():
                fc.reg_ids[name] = len(fc.reg_dtypes)
                fc.reg_dtypes.append(storage_dtype(typ))
            fc.local_base = local_cursor
            for v in fn.locals:
                if v.space == "local":
                    local_cursor = _align_up(local_cursor, max(v.align, 1))
                    fc.local_offsets[v.name] = local_cursor
                    local_cursor += v.size
            fc.local_size = local_cursor - fc.local_base
            self.functions[fn.name] = fc
        self.local_size = _align_up(local_cursor, 16)
        for fc in self.functions.values():
            self._decode(fc)
        self.entry = self.functions[entry]

    def at_width(self, width: int) -> "Program":
        """The same kernel decoded for ``width`` lanes (kept: a launch of the same shape
        decodes once)."""
        if width == self.width:
            return self
        prog = self._widths.get(width)
        if prog is None:
            prog = self._widths[width] = Program(self.module, self.entry_name,
                                                 source_name=self.source_name,
                                                 source_text=self.source_text, width=width)
        return prog

    # ---------------------------------------------------------------------------------------
    def _decode(self, fc: FunctionCode) -> None:
        cx = DecodeContext(self, fc)
        fn = fc.fn
        fc.instrs = list(fn.body)
        for ins in fn.body:
            cx.ins = ins
            try:
                entry = compile_instruction(ins, cx)
            except Unsupported as exc:
                entry = unsupported_entry(ins, str(exc))
            if not isinstance(entry, CodeEntry):
                entry = CodeEntry(K_OP, entry)
            if ins.guard is not None and entry.kind == K_OP:
                g, neg = cx.reg(ins.guard.name), ins.guard.neg
                entry = CodeEntry(K_OP, _guarded(entry.fn, g, neg),
                                  wide=_guarded(entry.wide, g, neg) if entry.wide else None)
            elif ins.guard is not None and entry.kind in (K_BRA,):
                entry.guard = cx.reg(ins.guard.name)
                entry.neg = ins.guard.neg
            elif ins.guard is not None:
                entry.guard = cx.reg(ins.guard.name)
                entry.neg = ins.guard.neg
            fc.code.append(entry)
        # an implicit return at the end of the body
        fc.code.append(CodeEntry(K_EXIT if fn.is_entry else K_RET))
        fc.instrs.append(Instruction(fn.body[-1].line if fn.body else fn.line, "} (end of function)",
                                     "ret", (), ()))

    def label_index(self, fc: FunctionCode, label: str) -> int:
        try:
            return fc.fn.labels[label]
        except KeyError:
            raise PtxSyntaxError(f"unknown label {label}") from None

    # ---------------------------------------------------------------------------------------
    def source_location(self, ins: Instruction) -> tuple[str, str]:
        """("file:line (inlined at file:line)", text of the innermost line) from ``.loc``."""
        loc = ins.loc
        if loc is None:
            return "", ""
        files = self.module.files
        parts = [f"{self._file_name(files.get(loc.file, '?'))}:{loc.line}"]
        if loc.inlined_at:
            f, ln, _ = loc.inlined_at
            parts.append(f"called from {self._file_name(files.get(f, '?'))}:{ln}")
        text = self._line_text(files.get(loc.file, ""), loc.line)
        where = parts[0] + (f" ({parts[1]})" if len(parts) > 1 else "")
        return where, text

    def _file_name(self, path: str) -> str:
        return Path(path).name or path

    def _line_text(self, path: str, line: int) -> str:
        if not path:
            return ""
        if Path(path).name == self.source_name and self.source_text:
            lines = self.source_text.splitlines()
        else:
            try:
                lines = Path(path).read_text().splitlines()
            except OSError:
                return ""
        return lines[line - 1] if 0 < line <= len(lines) else ""


def _guarded(fn, g: int, neg: bool):
    def guarded(w, m):
        p = w.R[g]
        if neg:
            p = ~p
        if m is not None:
            p = p & m
        if p.all():
            return fn(w, None)
        if not p.any():
            return None
        return fn(w, p)
    return guarded


__all__ = ["Program", "CodeEntry", "DecodeContext", "FunctionCode", "K_OP", "K_BRA", "K_EXIT",
           "K_RET", "K_BAR", "K_COLL", "K_CALL", "K_TRAP", "Unsupported", "types_of",
           "check_unknown", "type_bytes"]
