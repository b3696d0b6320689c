"""The device a whole program sees on the CPU model: its memory across launches, its kernels.

A program built for the CPU model links :file:`cudart_model.cpp` instead of the CUDA runtime;
every call of it that needs the device is a request on a socket, answered here. Memory from
``cudaMalloc`` lives in one :class:`~ptxlab.run.ptx.memory.GlobalMemory` for the whole run (the
module's ``__device__``/``__constant__`` variables first, where the decoded code expects them),
and each launch runs on the PTX interpreter with that memory and the argument bytes exactly as
the host packed them. A fault answers with the CUDA error the GPU would give and the model's
located report (kernel, block, warp, lane, PTX line, CUDA line).
"""
from __future__ import annotations

import socket
import struct
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..failure import Failure, FailureKind
from ..ptx import errors as ptx_errors
from ..ptx import memory
from ..ptx.interpreter import Launch, module_memory
from ..ptx.parser import parse_module
from ..ptx.program import Program
from ..ptx.racecheck import RaceWarning

__all__ = ["DeviceModel", "LaunchRecord", "CUDA_ERRORS"]

_REQUEST = struct.Struct("<IIQQQQ")    # op, pad, a, b, c, payload length
_ANSWER = struct.Struct("<iIQQ")       # status, pad, value, payload length

OP_MALLOC, OP_FREE, OP_TO_DEVICE, OP_TO_HOST, OP_DEVICE_COPY = 1, 2, 3, 4, 5
OP_MEMSET, OP_PARAMS, OP_LAUNCH, OP_SYMBOL = 6, 7, 8, 9

#: The CUDA runtime's codes for what a launch or a copy can end in.
CUDA_ERRORS = {"invalid_value": 1, "memory_allocation": 2, "invalid_configuration": 9,
               "invalid_symbol": 13, "invalid_device_function": 98,
               "illegal_address": 700, "launch_timeout": 702, "assert": 710, "launch_failure": 719}


def _fault_code(failure: Failure) -> int:
    """The error a GPU gives for what the model found: a bad address is an illegal access, a
    kernel that never ends is a timed-out launch, a failed assert an assert, anything else an
    unspecified failure."""
    if failure.bad_access:
        return CUDA_ERRORS["illegal_address"]
    return {FailureKind.HANG: CUDA_ERRORS["launch_timeout"],
            FailureKind.ASSERT: CUDA_ERRORS["assert"]}.get(failure.kind,
                                                            CUDA_ERRORS["launch_failure"])


@dataclass
class LaunchRecord:
    """One launch of the run, for the summary line and the benchmark."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    seconds: float
    status: int = 0


@dataclass
class DeviceModel:
    """Answers one program's runtime requests until the program closes its end."""

    ptx: str
    source_name: str
    source_text: str
    time_limit_s: float | None = 60.0
    demangle: object = None                     # callable: mangled name -> C++ name
    launches: list[LaunchRecord] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.module = parse_module(self.ptx)
        self.programs: dict[str, Program] = {}
        self.kernels = [n for n, f in self.module.functions.items() if f.is_entry]
        self.memory = module_memory(self._program(self.kernels[0])) if self.kernels \
            else memory.GlobalMemory()
        self._allocations = 0

    # ---- the kernels ---------------------------------------------------------------------

    def _program(self, name: str) -> Program:
        prog = self.programs.get(name)
        if prog is None:
            prog = Program(self.module, name, source_name=self.source_name,
                           source_text=self.source_text)
            self.programs[name] = prog
        return prog

    def _pretty(self, name: str) -> str:
        return self.demangle(name) if callable(self.demangle) else name

    # ---- serving -------------------------------------------------------------------------

    def serve(self, sock: socket.socket) -> None:
        """Answer requests until the program exits (its end of the socket closes)."""
        reader = sock.makefile("rb", buffering=1 << 16)
        while True:
            head = reader.read(_REQUEST.size)
            if len(head) < _REQUEST.size:
                return
            op, _, a, b, c, n = _REQUEST.unpack(head)
            payload = reader.read(n) if n else b""
            status, value, reply = self.answer(op, a, b, c, payload)
            sock.sendall(_ANSWER.pack(status, 0, value, len(reply)) + reply)

    def answer(self, op: int, a: int, b: int, c: int, payload: bytes) -> tuple[int, int, bytes]:
        """``(status, value, bytes)`` for one request."""
        handler = {OP_MALLOC: self._malloc, OP_FREE: self._free, OP_TO_DEVICE: self._to_device,
                   OP_TO_HOST: self._to_host, OP_DEVICE_COPY: self._device_copy,
                   OP_MEMSET: self._memset, OP_PARAMS: self._params, OP_LAUNCH: self._launch,
                   OP_SYMBOL: self._symbol}.get(op)
        if handler is None:
            return CUDA_ERRORS["invalid_value"], 0, b""
        return handler(a, b, c, payload)

    # ---- memory --------------------------------------------------------------------------

    def _malloc(self, size, _b, _c, _p):
        self._allocations += 1
        if size > 4 << 30:
            return CUDA_ERRORS["memory_allocation"], 0, \
                f"[ptxlab] cudaMalloc of {size} bytes: the CPU model gives at most 4 GiB\n".encode()
        buf = self.memory.add(max(int(size), 1), f"the buffer of cudaMalloc #{self._allocations}")
        buf.size = int(size)
        return 0, buf.base, b""

    def _free(self, addr, _b, _c, _p):
        if self.memory.remove(int(addr)):
            return 0, 0, b""
        return CUDA_ERRORS["invalid_value"], 0, \
            f"[ptxlab] cudaFree(0x{addr:x}): not a pointer cudaMalloc returned\n".encode()

    def _range(self, call: str, addr: int, size: int):
        try:
            return self.memory.span(int(addr), int(size)), b""
        except ValueError as exc:
            return None, f"[ptxlab] {call}: device range of {size} bytes at 0x{addr:x}: {exc}\n" \
                .encode()

    def _to_device(self, dst, size, _c, payload):
        found, why = self._range("cudaMemcpy to the device", dst, size)
        if found is None:
            return CUDA_ERRORS["invalid_value"], 0, why
        buf, off = found
        buf.data[off:off + size] = np.frombuffer(payload, dtype=np.uint8)
        return 0, 0, b""

    def _to_host(self, src, size, _c, _p):
        found, why = self._range("cudaMemcpy to the host", src, size)
        if found is None:
            return CUDA_ERRORS["invalid_value"], 0, why
        buf, off = found
        return 0, 0, buf.data[off:off + size].tobytes()

    def _device_copy(self, dst, src, size, _p):
        got, why = self._range("cudaMemcpy on the device (source)", src, size)
        put, why2 = self._range("cudaMemcpy on the device (destination)", dst, size)
        if got is None or put is None:
            return CUDA_ERRORS["invalid_value"], 0, why + why2
        data = got[0].data[got[1]:got[1] + size].copy()
        put[0].data[put[1]:put[1] + size] = data
        return 0, 0, b""

    def _memset(self, dst, value, size, _p):
        found, why = self._range("cudaMemset", dst, size)
        if found is None:
            return CUDA_ERRORS["invalid_value"], 0, why
        buf, off = found
        buf.data[off:off + size] = value & 0xFF
        return 0, 0, b""

    def _symbol(self, _a, _b, _c, payload):
        name = payload.decode(errors="replace")
        if not self.kernels:
            return CUDA_ERRORS["invalid_symbol"], 0, b""
        prog = self._program(self.kernels[0])
        for v in prog.global_vars:
            if v.name == name:
                return 0, prog.global_addresses[v.name], struct.pack("<Q", max(v.size, 1))
        return CUDA_ERRORS["invalid_symbol"], 0, b""

    # ---- launches ------------------------------------------------------------------------

    def _params(self, _a, _b, _c, payload):
        name = payload.decode(errors="replace")
        if name not in self.kernels:
            return CUDA_ERRORS["invalid_device_function"], 0, \
                f"[ptxlab] no kernel {self._pretty(name)} in the program's PTX\n".encode()
        prog = self._program(name)
        return 0, 0, b"".join(struct.pack("<II", off, p.size) for p, off in prog.params)

    def _launch(self, _a, _b, _c, payload):
        end = payload.index(b"\0")
        name = payload[:end].decode()
        dims = struct.unpack_from("<6I", payload, end + 1)
        (shared,) = struct.unpack_from("<Q", payload, end + 25)
        raw = payload[end + 33:]
        grid, block = tuple(dims[:3]), tuple(dims[3:])
        out: list[str] = []
        report = ""
        status = 0
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", RaceWarning)
                run = Launch(self._program(name), grid, block, [], shared_mem=int(shared),
                             printf=out.append, racecheck="warn", device_memory=self.memory,
                             raw_params=raw, time_limit_s=self.time_limit_s)
                run.run()
            report = "".join(self._warning_report(name, grid, block, w.message) for w in seen
                             if isinstance(w.message, RaceWarning))
        except ptx_errors.LaunchError as exc:
            # a launch the GPU refuses (too many threads, too much shared memory): CUDA 13's
            # runtime answers "invalid argument" (measured on the H100), not a fault
            status = CUDA_ERRORS["invalid_value"]
            report = f"[ptxlab] launch of {self._pretty(name)}<<<{_d(grid)}, {_d(block)}>>> " \
                     f"refused: {exc}\n"
        except ptx_errors.KernelFault as exc:
            status = _fault_code(exc.failure)
            report = self._fault_report(name, grid, block, exc.failure)
            self.faults.append(report)
        except Exception as exc:  # the model could not run it: the program hears a failure
            status = CUDA_ERRORS["launch_failure"]
            report = (f"[ptxlab] kernel {self._pretty(name)} could not run on the CPU model: "
                      f"{type(exc).__name__}: {exc}\n")
            self.faults.append(report)
        self.launches.append(LaunchRecord(self._pretty(name), grid, block,
                                          time.perf_counter() - t0, status))
        printed = "".join(out).encode()
        return status, len(printed), printed + report.encode()

    def _fault_report(self, name, grid, block, failure: Failure) -> str:
        head = (f"[ptxlab] kernel {self._pretty(name)}<<<{_d(grid)}, {_d(block)}>>> "
                f"(launch {len(self.launches) + 1}) stopped on the CPU model:")
        advice = f"\n  {failure.advice}" if failure.advice else ""
        return f"{head}\n  {failure.render()}{advice}\n"

    def _warning_report(self, name, grid, block, warning) -> str:
        return (f"[ptxlab] racecheck, kernel {self._pretty(name)}<<<{_d(grid)}, {_d(block)}>>> "
                f"(launch {len(self.launches) + 1}): {warning}\n")


def _d(dims) -> str:
    """``dim3`` as a launch prints it: ``4`` or ``(4, 2, 1)``."""
    dims = tuple(int(x) for x in dims)
    return str(dims[0]) if dims[1:] == (1, 1) else "(" + ", ".join(map(str, dims)) + ")"
