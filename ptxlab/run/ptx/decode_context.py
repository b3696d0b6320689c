"""The interface between the decoder and the instruction families: what one decoded instruction
is (:class:`CodeEntry` and its kinds ``K_*``), the decoded code of one function
(:class:`FunctionCode`), and the operand access one function's instructions are compiled with
(:class:`DecodeContext`).

``program`` decodes a kernel with it, the instruction families compile against it and the
interpreter runs what they produce; it imports none of them, so none of them imports another
back through it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from . import floats, memory
from .errors import PtxSyntaxError
from .parser import Addr, FImm, Function, Imm, Instruction, Reg, Sink, Special, Sym
from .values import SIGNED_TYPES, TYPE_NAMES, VIEW_DTYPE, WARP, constant, convert_bits

# kinds of code entries
K_OP, K_BRA, K_EXIT, K_RET, K_BAR, K_COLL, K_CALL, K_TRAP = range(8)


class CodeEntry:
    """One decoded instruction. ``wide``: how a warp-collective instruction (or one that must
    run for every lane at once) runs over many warps held as one vector, ``fn(w, m)`` with
    ``w`` a :class:`ptxlab.run.ptx.wide.WideWarp`; ``None`` where the family has no such form,
    and a program that reaches one runs warp by warp."""

    __slots__ = ("kind", "fn", "target", "guard", "neg", "member", "aligned", "extra", "wide")

    def __init__(self, kind: int, fn=None, *, target: int = -1, guard: int = -1,
                 neg: bool = False, member=None, aligned: bool = False, extra=None, wide=None):
        self.kind, self.fn, self.target, self.guard, self.neg = kind, fn, target, guard, neg
        self.member, self.aligned, self.extra, self.wide = member, aligned, extra, wide


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
    width: int = WARP                     # lanes per register array (32: one warp)
    _zero_registers: list = field(default_factory=list, init=False, repr=False, compare=False)

    def initial_registers(self) -> list:
        """A fresh register file, every register the shared read-only zero of its type (the
        list is new for each flow; the arrays are replaced, never written, as it runs)."""
        if len(self._zero_registers) != len(self.reg_dtypes):
            self._zero_registers = [_zeros(d, self.width) for d in self.reg_dtypes]
        return list(self._zero_registers)


_ZEROS: dict = {}


def _zeros(dtype, width: int) -> np.ndarray:
    """The read-only zero register of ``dtype`` and ``width`` lanes (shared: never written)."""
    key = (np.dtype(dtype), width)
    z = _ZEROS.get(key)
    if z is None:
        z = _ZEROS[key] = constant(0, dtype, width)
    return z


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

    def __init__(self, program, fcode: FunctionCode):
        """``program``: the :class:`~ptxlab.run.ptx.program.Program` being decoded (not imported
        here: ``program`` imports this module)."""
        self.program = program
        self.fcode = fcode
        self.fn = fcode.fn
        self.width = fcode.width            # lanes of every constant operand
        self.ins: Instruction | None = None

    def constant(self, value, dtype) -> np.ndarray:
        """A constant operand: one value in every lane of this decode's width."""
        return constant(value, dtype, self.width)

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
            return self._const_getter(self.constant(value & ((1 << (8 * vd.itemsize)) - 1),
                                               _unsigned(vd)).view(vd))
        raise self.error(f"operand {op!r} cannot be read as .{t}")

    @staticmethod
    def _const_getter(arr: np.ndarray):
        return lambda w: arr

    def immediate(self, op, t: str) -> np.ndarray:
        vd = np.dtype(VIEW_DTYPE[t])
        if t == "pred":
            return self.constant(bool(getattr(op, "value", 0)), np.bool_)
        if isinstance(op, Imm):
            v = op.value
            if t in ("f32", "f64"):
                return self.constant(float(v), vd)
            if t in ("f16", "bf16"):
                fmt = floats.F16 if t == "f16" else floats.BF16
                bits = floats.encode(floats.round_to_format(np.array([float(v)]), fmt), fmt)
                return self.constant(int(bits[0]), np.uint16)
            return self.constant(v & ((1 << (8 * vd.itemsize)) - 1), _unsigned(vd)).view(vd)
        assert isinstance(op, FImm)
        if op.bits == 32:
            value = struct.unpack("<f", struct.pack("<I", op.raw))[0]
        else:
            value = struct.unpack("<d", struct.pack("<Q", op.raw))[0]
        if t in ("f32", "f64", "f16", "bf16") or vd.kind == "f":
            if t == "f32" and op.bits == 32:
                return self.constant(op.raw, np.uint32).view(np.float32)
            if t == "f64" and op.bits == 64:
                return self.constant(op.raw, np.uint64).view(np.float64)
            if t in ("f32", "f64"):
                return self.constant(value, vd)
            fmt = floats.F16 if t == "f16" else floats.BF16
            bits = floats.encode(floats.round_to_format(np.array([value]), fmt), fmt)
            return self.constant(int(bits[0]), np.uint16)
        # bit/int types take the raw bits of the float literal
        if op.bits == 8 * vd.itemsize:
            return self.constant(op.raw, _unsigned(vd)).view(vd)
        if op.bits == 64 and vd.itemsize == 4:
            bits = struct.unpack("<I", struct.pack("<f", value))[0]
            return self.constant(bits, np.uint32).view(vd)
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
            arr = self.constant(off & 0xFFFFFFFFFFFFFFFF, np.uint64)
            return space, (lambda w: arr)
        if isinstance(op.base, Sym):
            sspace, addr = self.symbol(op.base.name)
            if sspace == "callparam":
                return "callparam", op.base.name
            if space == "generic":
                value = self.symbol_generic(op.base.name, off)
                arr = self.constant(value, np.uint64)
                return "generic", (lambda w: arr)
            if space != sspace and not (space == "const" and sspace == "global"):
                raise self.error(f"{op.base.name} is in .{sspace}, not .{space}")
            arr = self.constant(addr + off, np.uint64)
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


def types_of(mods: tuple[str, ...]) -> list[str]:
    """The PTX type modifiers of an instruction, in order (``cvt.rn.f16.f32`` -> f16, f32)."""
    return [m for m in mods if m in TYPE_NAMES]


def check_unknown(ins: Instruction, known: set, cx: DecodeContext) -> None:
    """Refuse modifiers we do not model instead of silently ignoring them."""
    for m in ins.mods:
        if m not in known and m not in TYPE_NAMES:
            raise Unsupported(f"{ins.full_opcode}: the modifier .{m} is not modelled")


__all__ = ["CodeEntry", "DecodeContext", "FunctionCode", "K_OP", "K_BRA", "K_EXIT", "K_RET",
           "K_BAR", "K_COLL", "K_CALL", "K_TRAP", "Unsupported", "unsupported_entry", "types_of",
           "check_unknown"]
