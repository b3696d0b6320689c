"""Decode a parsed PTX kernel once into a list of Python closures, ready to run many times.

Each instruction becomes a :class:`CodeEntry`: its kind (plain operation, branch, barrier,
warp-collective, call, exit) and a closure ``fn(w, m)`` that executes it for the active lanes
``m`` of warp ``w`` (``m is None`` when all 32 lanes are active). Register names, symbol
addresses, operand types and immediates are resolved here, so running does no parsing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import floats, memory
from .errors import PtxSyntaxError
from .parser import (Addr, FImm, Function, Imm, Instruction, Module, Param, Reg, Sink, Special,
                     Sym, VarDecl)
from .values import (SIGNED_TYPES, TYPE_NAMES, VIEW_DTYPE, constant, convert_bits, storage_dtype,
                     type_bytes)

# kinds of code entries
K_OP, K_BRA, K_EXIT, K_RET, K_BAR, K_COLL, K_CALL, K_TRAP = range(8)


class CodeEntry:
    """One decoded instruction."""

    __slots__ = ("kind", "fn", "target", "guard", "neg", "member", "aligned", "extra")

    def __init__(self, kind: int, fn=None, *, target: int = -1, guard: int = -1,
                 neg: bool = False, member=None, aligned: bool = False, extra=None):
        self.kind, self.fn, self.target, self.guard, self.neg = kind, fn, target, guard, neg
        self.member, self.aligned, self.extra = member, aligned, extra


@dataclass
class FunctionCode:
    name: str
    fn: Function
    code: list = field(default_factory=list)
    instrs: list = field(default_factory=list)
    reg_ids: dict = field(default_factory=dict)
    reg_dtypes: list = field(default_factory=list)
    local_base: int = 0
    local_size: int = 0
    local_offsets: dict = field(default_factory=dict)

    def initial_registers(self) -> list:
        return [_ZEROS[np.dtype(d)] for d in self.reg_dtypes]


_ZEROS = {np.dtype(d): constant(0, d) for d in (np.bool_, np.uint8, np.uint16, np.uint32,
                                                  np.uint64)}


class Unsupported(Exception):
    """Raised while decoding an instruction the CPU model cannot execute."""


def unsupported_entry(ins: Instruction, reason: str) -> CodeEntry:
    """An entry that fails only if reached, so unused code paths do not stop a launch."""
    def fn(w, m):
        raise memory.LaneFault(reason, (), kind="unsupported")
    return CodeEntry(K_OP, fn)


# ---------------------------------------------------------------------------------------------
# Decode context: operand access for one function
# ---------------------------------------------------------------------------------------------

class DecodeContext:
    """Resolves the operands of one function's instructions into fast getters and setters."""

    def __init__(self, program: "Program", fcode: FunctionCode):
        self.program = program
        self.fcode = fcode
        self.fn = fcode.fn
        self.ins: Instruction | None = None

    # ---- errors ----
    def error(self, message: str) -> PtxSyntaxError:
        ins = self.ins
        return PtxSyntaxError(message, ins.line if ins else None, ins.text if ins else "")

    # ---- registers ----
    def reg(self, name: str) -> int:
        try:
            return self.fcode.reg_ids[name]
        except KeyError:
            raise self.error(f"register {name} is not declared") from None

    def reg_dtype(self, name: str):
        return self.fcode.reg_dtypes[self.reg(name)]

    # ---- symbols ----
    def symbol(self, name: str) -> tuple[str, int]:
        """(space, address in that space) of a variable or parameter name."""
        prog = self.program
        if name in self.fcode.local_offsets:
            return "local", self.fcode.local_offsets[name]
        if name in prog.shared_offsets:
            return "shared", prog.shared_offsets[name]
        if name in prog.global_addresses:
            return "global", prog.global_addresses[name]
        if self.fn.is_entry and name in prog.param_offsets:
            return "param", prog.param_offsets[name]
        if name in self._call_params():
            return "callparam", 0
        raise self.error(f"unknown symbol {name}")

    def _call_params(self) -> set:
        names = {p.name for p in self.fn.params} | {p.name for p in self.fn.returns}
        names |= {d.name for d in self.fn.locals if d.space == "param"}
        return names

    def symbol_generic(self, name: str, offset: int = 0) -> int:
        space, addr = self.symbol(name)
        base = {"shared": memory.SHARED_WINDOW, "local": memory.LOCAL_WINDOW,
                "param": memory.PARAM_WINDOW, "global": 0}.get(space)
        if base is None:
            raise self.error(f"cannot take the generic address of {name}")
        return base + addr + offset

    # ---- sources ----
    def src(self, op, t: str):
        """A getter ``g(w) -> (32,) array`` of operand ``op`` read as PTX type ``t``."""
        vd = VIEW_DTYPE.get(t)
        if vd is None:
            raise self.error(f"type .{t} cannot be an operand here")
        vd = np.dtype(vd)
        if isinstance(op, Reg):
            i = self.reg(op.name)
            sd = np.dtype(self.fcode.reg_dtypes[i])
            if op.neg:
                if sd != np.bool_:
                    raise self.error(f"!{op.name} needs a predicate register")
                return lambda w: ~w.R[i]
            if sd == vd:
                return lambda w: w.R[i]
            if sd.itemsize == vd.itemsize and vd != np.bool_ and sd != np.bool_:
                return lambda w: w.R[i].view(vd)
            signed = t in SIGNED_TYPES
            return lambda w: convert_bits(w.R[i], vd, signed)
        if isinstance(op, (Imm, FImm)):
            return self._const_getter(self.immediate(op, t))
        if isinstance(op, Special):
            name = op.name
            if name in ("%clock", "%clock64", "%globaltimer", "%globaltimer_lo",
                        "%globaltimer_hi"):
                return lambda w: convert_bits(w.clock_value(name), vd, False)
            return lambda w: convert_bits(w.special[name], vd, False)
        if isinstance(op, Sym):
            if op.name in self.program.function_names:
                raise self.error(f"function pointers ({op.name}) are not supported")
            space, addr = self.symbol(op.name)
            if space == "callparam":
                raise self.error(f"the address of call parameter {op.name} cannot be taken")
            value = addr + op.offset
            return self._const_getter(constant(value & ((1 << (8 * vd.itemsize)) - 1),
                                               _unsigned(vd)).view(vd))
        raise self.error(f"operand {op!r} cannot be read as .{t}")

    @staticmethod
    def _const_getter(arr: np.ndarray):
        return lambda w: arr

    def immediate(self, op, t: str) -> np.ndarray:
        vd = np.dtype(VIEW_DTYPE[t])
        if t == "pred":
            return constant(bool(getattr(op, "value", 0)), np.bool_)
        if isinstance(op, Imm):
            v = op.value
            if t in ("f32", "f64"):
                return constant(float(v), vd)
            if t in ("f16", "bf16"):
                fmt = floats.F16 if t == "f16" else floats.BF16
                bits = floats.encode(floats.round_to_format(np.array([float(v)]), fmt), fmt)
                return constant(int(bits[0]), np.uint16)
            return constant(v & ((1 << (8 * vd.itemsize)) - 1), _unsigned(vd)).view(vd)
        assert isinstance(op, FImm)
        import struct
        if op.bits == 32:
            value = struct.unpack("<f", struct.pack("<I", op.raw))[0]
        else:
            value = struct.unpack("<d", struct.pack("<Q", op.raw))[0]
        if t in ("f32", "f64", "f16", "bf16") or vd.kind == "f":
            if t == "f32" and op.bits == 32:
                return constant(op.raw, np.uint32).view(np.float32)
            if t == "f64" and op.bits == 64:
                return constant(op.raw, np.uint64).view(np.float64)
            if t in ("f32", "f64"):
                return constant(value, vd)
            fmt = floats.F16 if t == "f16" else floats.BF16
            bits = floats.encode(floats.round_to_format(np.array([value]), fmt), fmt)
            return constant(int(bits[0]), np.uint16)
        # bit/int types take the raw bits of the float literal
        if op.bits == 8 * vd.itemsize:
            return constant(op.raw, _unsigned(vd)).view(vd)
        if op.bits == 64 and vd.itemsize == 4:
            return constant(struct.unpack("<I", struct.pack("<f", value))[0], np.uint32).view(vd)
        raise self.error(f"float literal of {op.bits} bits does not fit .{t}")

    # ---- destinations ----
    def dst(self, op, t: str):
        """A setter ``s(w, value, m)`` writing a (32,) value of PTX type ``t`` to ``op``."""
        if isinstance(op, Sink):
            return lambda w, v, m: None
        if not isinstance(op, Reg) or op.neg:
            raise self.error(f"cannot write to {op!r}")
        i = self.reg(op.name)
        sd = np.dtype(self.fcode.reg_dtypes[i])
        vd = np.dtype(VIEW_DTYPE[t])
        if sd == vd or (sd.itemsize == vd.itemsize and sd != np.bool_ and vd != np.bool_):
            same = sd == vd

            def set_same(w, v, m, i=i, sd=sd):
                if not same:
                    v = v.view(sd)
                R = w.R
                R[i] = v if m is None else np.where(m, v, R[i])
            return set_same
        signed = t in SIGNED_TYPES

        def set_conv(w, v, m, i=i, sd=sd):
            v = convert_bits(np.asarray(v), sd, signed)
            R = w.R
            R[i] = v if m is None else np.where(m, v, R[i])
        return set_conv

    # ---- helpers for instruction families ----
    def address(self, op: Addr, space: str):
        """``[base+off]`` -> (space, getter of a (32,) uint64 address array)."""
        if not isinstance(op, Addr):
            raise self.error(f"expected an address [..], got {op!r}")
        off = op.offset
        if op.base is None:
            arr = constant(off & 0xFFFFFFFFFFFFFFFF, np.uint64)
            return space, (lambda w: arr)
        if isinstance(op.base, Sym):
            sspace, addr = self.symbol(op.base.name)
            if sspace == "callparam":
                return "callparam", op.base.name
            if space == "generic":
                value = self.symbol_generic(op.base.name, off)
                arr = constant(value, np.uint64)
                return "generic", (lambda w: arr)
            if space != sspace and not (space == "const" and sspace == "global"):
                raise self.error(f"{op.base.name} is in .{sspace}, not .{space}")
            arr = constant(addr + off, np.uint64)
            return space, (lambda w: arr)
        i = self.reg(op.base.name)
        sd = np.dtype(self.fcode.reg_dtypes[i])
        o = np.uint64(off & 0xFFFFFFFFFFFFFFFF)
        if sd == np.uint64:
            if off == 0:
                return space, (lambda w: w.R[i])
            return space, (lambda w: w.R[i] + o)
        if off == 0:
            return space, (lambda w: w.R[i].astype(np.uint64))
        if sd == np.uint32 and off < 0 and space in ("shared", "local"):
            o32 = np.uint32(off & 0xFFFFFFFF)
            return space, (lambda w: (w.R[i] + o32).astype(np.uint64))
        return space, (lambda w: w.R[i].astype(np.uint64) + o)


def _unsigned(dt) -> np.dtype:
    dt = np.dtype(dt)
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])


# ---------------------------------------------------------------------------------------------
# The decoded program
# ---------------------------------------------------------------------------------------------

def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Program:
    """One entry point of a PTX module, decoded (with the ``.func``s it may call)."""

    def __init__(self, module: Module, entry: str, *, source_name: str = "kernel.cu",
                 source_text: str = ""):
        if entry not in module.functions or not module.functions[entry].is_entry:
            raise KeyError(entry)
        self.module = module
        self.entry_name = entry
        self.source_name = source_name
        self.source_text = source_text
        self.function_names = set(module.functions)
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
            fc = FunctionCode(fn.name, fn)
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

    # ---------------------------------------------------------------------------------------
    def _decode(self, fc: FunctionCode) -> None:
        from .instructions import compile_instruction
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
                entry = CodeEntry(K_OP, _guarded(entry.fn, cx.reg(ins.guard.name), ins.guard.neg))
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


def types_of(mods: tuple[str, ...]) -> list[str]:
    """The PTX type modifiers of an instruction, in order (``cvt.rn.f16.f32`` -> f16, f32)."""
    return [m for m in mods if m in TYPE_NAMES]


def check_unknown(ins: Instruction, known: set, cx: DecodeContext) -> None:
    """Refuse modifiers we do not model instead of silently ignoring them."""
    for m in ins.mods:
        if m not in known and m not in TYPE_NAMES:
            raise Unsupported(f"{ins.full_opcode}: the modifier .{m} is not modelled")


__all__ = ["Program", "CodeEntry", "DecodeContext", "FunctionCode", "K_OP", "K_BRA", "K_EXIT",
           "K_RET", "K_BAR", "K_COLL", "K_CALL", "K_TRAP", "Unsupported", "types_of",
           "check_unknown", "type_bytes"]
