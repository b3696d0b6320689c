"""Calls to functions the CUDA runtime provides rather than the module: ``vprintf`` (device
``printf``), so a learner's debugging output works on the CPU model as it does on a GPU, and
``__assertfail`` (a failed device ``assert``), which stops the kernel with the GPU's words.

``lookup(name)`` returns a factory ``(ins, cx, ret_names, arg_names) -> fn(w, m, caller)`` for
the call entry, or ``None`` for an ordinary function.
"""
from __future__ import annotations

import re
import sys

import numpy as np

from ..lanes import lanes_of
from ..memory import LaneFault
from ..values import WARP

#: printf conversions: flags, width, precision, length, conversion.
_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?([diouxXcsfFeEgGaApn%])")
_MAX_STRING = 4096


def lookup(name: str):
    return {"vprintf": _vprintf, "__assertfail": _assertfail}.get(name)


def _pointer(caller, name: str) -> np.ndarray:
    raw = caller.pvars.get(name)
    if raw is None:
        return np.zeros(WARP, dtype=np.uint64)
    return np.ascontiguousarray(raw[:, :8]).view(np.uint64)[:, 0]


def _read_string(w, addr: int, lane: int) -> str:
    out = bytearray()
    a = addr
    while len(out) < _MAX_STRING:
        chunk = w.spaces.load("generic", np.array([a], dtype=np.uint64), np.array([lane]),
                              np.uint8, 1, "printf string")[0, 0]
        if chunk == 0:
            break
        out.append(int(chunk))
        a += 1
    return out.decode("utf-8", errors="replace")


def _read_arg(w, addr: int, lane: int, size: int) -> bytes:
    vals = w.spaces.load("generic", np.array([addr], dtype=np.uint64), np.array([lane]),
                         np.uint8, size, "printf argument")
    return bytes(vals[0].tolist())


def format_printf(w, fmt: str, args_addr: int, lane: int) -> str:
    """C ``printf`` formatting with the argument buffer the compiler builds (each argument
    aligned to its size; floats promoted to double)."""
    pieces, pos, off = [], 0, 0
    for mt in _SPEC.finditer(fmt):
        pieces.append(fmt[pos:mt.start()])
        pos = mt.end()
        flags, width, prec, length, conv = mt.groups()
        if conv == "%":
            pieces.append("%")
            continue
        if conv in "fFeEgGaA" or conv in "sp" or length in ("l", "ll", "z", "j", "t", "L"):
            size = 8
        else:
            size = 4
        off = (off + size - 1) // size * size
        raw = _read_arg(w, args_addr + off, lane, size) if args_addr else bytes(size)
        off += size
        spec = "%" + flags + (width or "") + (("." + prec) if prec is not None else "")
        if conv in "fFeEgGaA":
            value = float(np.frombuffer(raw, dtype=np.float64)[0])
            pieces.append((spec + ("e" if conv in "aA" else conv)) % value)
        elif conv == "s":
            ptr = int(np.frombuffer(raw, dtype=np.uint64)[0])
            pieces.append((spec + "s") % (_read_string(w, ptr, lane) if ptr else "(null)"))
        elif conv == "p":
            pieces.append("0x%x" % int(np.frombuffer(raw, dtype=np.uint64)[0]))
        elif conv == "c":
            pieces.append((spec + "c") % chr(raw[0]))
        elif conv == "n":
            continue
        else:
            signed = conv in "di"
            dt = {4: np.int32 if signed else np.uint32, 8: np.int64 if signed else np.uint64}[size]
            value = int(np.frombuffer(raw, dtype=dt)[0])
            if length == "h":
                value = int(np.int16(value)) if signed else value & 0xFFFF
            elif length == "hh":
                value = int(np.int8(value)) if signed else value & 0xFF
            pieces.append((spec + ("d" if conv in "diu" else conv)) % value)
    pieces.append(fmt[pos:])
    return "".join(pieces)


def _vprintf(ins, cx, ret_names, arg_names):
    if len(arg_names) < 1:
        raise cx.error("vprintf needs a format argument")
    ret_name = ret_names[0] if ret_names else None

    def fn(w, m, caller):
        fmts = _pointer(caller, arg_names[0])
        args = _pointer(caller, arg_names[1]) if len(arg_names) > 1 else np.zeros(WARP, np.uint64)
        sink = w.launch.printf or sys.stdout.write
        for lane in lanes_of(m):
            fmt = _read_string(w, int(fmts[lane]), lane)
            try:
                text = format_printf(w, fmt, int(args[lane]), lane)
            except (TypeError, ValueError) as exc:
                text = f"[printf could not format this line: {exc}]\n"
            sink(text)
        if ret_name is not None:       # vprintf returns an int; the model reports 0
            buf = caller.pvars.setdefault(ret_name, np.zeros((WARP, 4), np.uint8))
            buf[:, :4] = 0
        return m
    return fn


def _scalar(caller, name: str, lane: int) -> int:
    raw = caller.pvars.get(name)
    return 0 if raw is None else int.from_bytes(bytes(raw[lane, :4].tolist()), "little")


def _assertfail(ins, cx, ret_names, arg_names):
    """``__assertfail(message, file, line, function, char_size)``: the kernel stops, with the
    line a GPU prints for the first lane whose assertion failed."""
    if len(arg_names) < 4:
        raise cx.error("__assertfail needs message, file, line and function arguments")

    def fn(w, m, caller):
        lanes = lanes_of(m)
        lane = lanes[0]
        text = [_read_string(w, int(_pointer(caller, arg_names[i])[lane]), lane) for i in (0, 1, 3)]
        line = _scalar(caller, arg_names[2], lane)
        bx, by, _ = w.launch.block
        t = w.index * WARP + lane
        thread = (t % bx, (t // bx) % by, t // (bx * by))
        block = tuple(int(b) for b in w.block.index)
        raise LaneFault(f"{text[1]}:{line}: {text[2]}: block: [{block[0]},{block[1]},{block[2]}], "
                        f"thread: [{thread[0]},{thread[1]},{thread[2]}] Assertion `{text[0]}` "
                        "failed.", lanes, kind="assert")
    return fn
