"""The CPU backend: run a CUDA kernel with no GPU, by compiling it to PTX and interpreting it.

This module is the thin face of :mod:`ptxlab.run.ptx` that :func:`ptxlab.run.backends.launch` calls:
:func:`available` says whether a CUDA-to-PTX compiler is present, :func:`run_kernel` compiles
(cached), decodes (cached) and runs one launch. Errors are the ``ptxlab.run.ptx.errors`` classes;
``backends`` maps them onto its own, so callers see one set whichever backend ran.

Kernels are found by the name they have in the PTX: an ``extern "C"`` kernel's own name (the
fast path, one compile, as always), else a C++ kernel's name or a template instance
(``ldmatrix_x4``, ``kernel<float, 4>``), which NVRTC lowers to the mangled entry name in a
second, cached compile. The standard headers NVRTC lacks (``<cstdint>``...) are stood in for by
``ptxlab/run/nvrtc_headers``, last on the include path.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np

from . import sources
from .ptx import nvrtc
from .ptx.errors import CompileError, LaunchError, PtxSyntaxError
from .ptx.interpreter import Launch
from .ptx.parser import parse_module
from .ptx.program import Program

__all__ = ["compile_ptx", "compile_ptx_for_names", "program_for", "run_kernel",
           "decode_count"]

#: Options every CPU compile gets, the same language level the GPU backend uses.
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
#: Decoded programs kept per process (a notebook reuses a handful of kernels).
_MAX_PROGRAMS = 64
_programs: "OrderedDict[tuple, Program]" = OrderedDict()
_lock = threading.Lock()
_decodes = 0


def decode_count() -> int:
    """How many (source, kernel) pairs this process has parsed and decoded: cache misses."""
    return _decodes


def compile_ptx(source: str, options: Sequence[str] = ()) -> str:
    """PTX for ``source`` (``kernels/`` on the include path, and the stand-in standard headers
    last), from the on-disk cache if seen."""
    opts = COMPILE_OPTIONS + tuple(sources.include_options()) + tuple(options)
    return nvrtc.compile_to_ptx(source, opts, name="kernel.cu",
                                fallback_includes=sources.nvrtc_include_options())


def compile_ptx_for_names(source: str, options: Sequence[str],
                          names: Sequence[str]) -> tuple[str, dict[str, str]]:
    """``(ptx, lowered)``: :func:`compile_ptx` with C++ kernel names (``"kernel<float, 4>"``)
    instantiated and lowered by NVRTC, so a C++ kernel can be launched by the name its source
    gives it."""
    opts = COMPILE_OPTIONS + tuple(sources.include_options()) + tuple(options)
    return nvrtc.compile_with_lowered_names(source, opts, tuple(names), name="kernel.cu",
                                            fallback_includes=sources.nvrtc_include_options())


def _parse(ptx: str):
    try:
        return parse_module(ptx)
    except PtxSyntaxError as exc:
        raise CompileError(f"the CPU model could not read the PTX the compiler produced: {exc}")


def _entries(module) -> list[str]:
    return [name for name, fn in module.functions.items() if fn.is_entry]


def _cxx_entry(source: str, kernel: str, options: Sequence[str], entries: list[str]):
    """``(entry name, module)`` of a C++ kernel asked for by its C++ name, compiled again with
    that name as an NVRTC name expression; :class:`LaunchError` listing the kernels when the
    source defines none of that name."""
    problem = nvrtc.name_problem(kernel, entries, source)
    if problem:
        raise LaunchError(problem)
    try:
        ptx, lowered = compile_ptx_for_names(source, options, [kernel])
    except CompileError:
        if nvrtc.base_name(kernel) in nvrtc.defined_kernel_names(entries, source):
            raise            # the kernel exists: its instance does not compile, say why
        raise LaunchError(nvrtc.unknown_kernel_message(kernel, entries, source)) from None
    module = _parse(ptx)
    found = _entries(module)
    entry = lowered.get(kernel)
    if entry is None:                     # nvcc lowers no names: match the demangled ones
        matches = nvrtc.demangled_matches(kernel, found)
        entry = matches[0] if len(matches) == 1 else None
    if entry is None or entry not in found:
        raise LaunchError(nvrtc.unknown_kernel_message(kernel, entries, source))
    return entry, module


def program_for(source: str, kernel: str, options: Sequence[str] = ()) -> Program:
    """The decoded :class:`Program` of ``kernel`` in ``source``, decoded once per process.

    ``kernel`` is an entry's own name (an ``extern "C"`` kernel, or a mangled one), else a C++
    kernel's name or a template instance (``"kernel<float, 4>"``), lowered by NVRTC.
    """
    global _decodes
    key = (source, kernel, tuple(options))
    with _lock:
        prog = _programs.get(key)
        if prog is not None:
            _programs.move_to_end(key)
            return prog
    module = _parse(compile_ptx(source, options))
    entries = _entries(module)
    entry = kernel
    if kernel not in entries:
        entry, module = _cxx_entry(source, kernel, options, entries)
    try:
        prog = Program(module, entry, source_name="kernel.cu", source_text=source)
    except PtxSyntaxError as exc:
        raise CompileError("the PTX of this kernel is invalid", _located_log(module, exc)) from None
    with _lock:
        _decodes += 1
        _programs[key] = prog
        while len(_programs) > _MAX_PROGRAMS:
            _programs.popitem(last=False)
    return prog


def _located_log(module, exc: PtxSyntaxError) -> str:
    """A compiler-style log line (``kernel.cu(LINE): error: ...``) for an invalid PTX statement,
    pointing at the CUDA line whose inline asm produced it when the line info says so."""
    line = getattr(exc, "line", None)
    message = str(exc).split("\n")[0]
    if line is not None:
        for fn in module.functions.values():
            for ins in fn.body:
                if ins.line == line and ins.loc is not None:
                    name = module.files.get(ins.loc.file, "kernel.cu").rsplit("/", 1)[-1]
                    return f"{name}({ins.loc.line}): error: {message}"
    return f"ptxas: error: {message}"


def run_kernel(source: str, kernel: str, grid, block, args: Sequence, shared_mem: int = 0,
               options: Sequence[str] = (), racecheck: str | None = None) -> list:
    """Launch ``kernel`` once on the CPU model and return every argument afterwards.

    Arrays come back as new arrays holding what the kernel left in them; scalars unchanged.
    Shared-memory races between warps raise ``SharedMemoryRace`` (``racecheck='warn'``: a
    warning; ``'off'``: not watched; default ``$PTXLAB_RACECHECK`` or ``'error'``).
    """
    prog = program_for(source, kernel, options)
    run = Launch(prog, grid, block, list(args), shared_mem=int(shared_mem), racecheck=racecheck)
    outputs = run.run()
    return [out if out is not None else arg for out, arg in zip(outputs, args)]


def _self_test() -> None:  # pragma: no cover - a manual smoke test: python -m ptxlab.run.cpu
    src = r'''extern "C" __global__ void inc(int* a) { a[threadIdx.x] += 1; }'''
    out = run_kernel(src, "inc", (1,), (32,), [np.arange(32, dtype=np.int32)])
    print(available()[1], "->", "ok" if np.array_equal(out[0], np.arange(1, 33)) else "WRONG")


if __name__ == "__main__":  # pragma: no cover
    _self_test()
