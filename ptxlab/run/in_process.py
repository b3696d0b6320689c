"""A kernel launch run in this very process, on the GPU (CuPy) or on the CPU model.

The bottom of the launch stack: it knows nothing of children, sandboxes or services. The public
:func:`ptxlab.run.backends.launch` calls :func:`run_here` itself, or has a child process or the
warm launch service call it. Every request is checked first (:mod:`ptxlab.run.launch_request`):
a source over the size limit or a compiler option that names a file never reaches a compiler,
and where ``$PTXLAB_CHECK_INCLUDES=1`` (the grading launch service) a source whose preprocessed
text includes anything but the public headers is refused (:mod:`ptxlab.run.includes`).

A compile error of a source pasted whole from an article says what a learner can do about it:
a source that also holds host code (``main``, ``cudaMalloc``, ``<<<...>>>``) is told that a
launch compiles device code only and where whole programs run; an include NVRTC cannot open
names what is available (:func:`explain_compile_error`).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .errors import (BackendError, BackendUnavailable, CompileError, KernelDiagnostic,
                     KernelFault, LaunchError)
from .failure import Failure, FailureKind
from .includes import CHECK_ENV, check_includes
from .launch_request import check_options, check_source

__all__ = ["BACKENDS", "CPU_DEVICE", "LaunchResult", "cpu_module", "cpu_available",
           "choose_backend", "run_here", "where_text", "where_it_runs", "describe",
           "normalise_dims", "explain_compile_error"]

BACKENDS = ("auto", "gpu", "cpu")
#: How the CPU backend names itself in results and reports.
CPU_DEVICE = "CPU model (PTX interpreter)"


@dataclass
class LaunchResult:
    """What a launch returns: one output per argument, and who produced them."""

    outputs: list
    backend: str            # "gpu" or "cpu"
    device: str             # e.g. "NVIDIA H100 80GB HBM3 (sm_90)" or CPU_DEVICE
    reason: str = ""        # why this backend ran (for "auto")
    #: What the CPU model noticed that the hardware hides (a read of shared memory nobody
    #: wrote, a generic pointer used as a shared address, a race in 'warn' mode), in words.
    diagnostics: list = field(default_factory=list)


def cpu_module():
    """``ptxlab.run.cpu`` if it is installed, else ``None`` (imported lazily: it is large)."""
    return _import_cpu_module()[0]


def _import_cpu_module():
    """``(ptxlab.run.cpu or None, why it cannot be imported)``; a failed import runs again,
    and fails again the same way, when asked again."""
    try:
        from . import cpu
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return cpu, ""


@functools.lru_cache(maxsize=1)
def _cpu_model_installed() -> bool:
    return importlib.util.find_spec(f"{__package__}.cpu") is not None


def cpu_available() -> tuple[bool, str]:
    """``(ok, why)``: whether the CPU model can run kernels here. The model needs only a
    CUDA-to-PTX compiler (the NVRTC wheel or nvcc), so the compiler is asked and the model is
    not loaded: a process whose launches run elsewhere (a graded notebook's kernel, whose
    launches go to the launch service) never pays for loading it."""
    if not _cpu_model_installed():
        return False, "the CPU model (ptxlab.run.cpu) is not installed"
    from .ptx import nvrtc

    try:
        ok, why = nvrtc.compiler_status()
    except Exception as exc:  # a broken install must not take the GPU path down with it
        return False, f"the CPU model failed its self-check: {exc}"
    if not ok:
        return False, str(why)
    return True, f"PTX interpreter, compiling with {why}"


def choose_backend(source: str, backend: str = "auto") -> tuple[str, str]:
    """``(backend, reason)``: which backend runs ``source`` here, and why, in one sentence."""
    from . import gpu

    if backend not in BACKENDS:
        raise LaunchError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cpu":
        ok, why = cpu_available()
        if not ok:
            raise BackendUnavailable(f"CPU backend unavailable: {why}")
        return "cpu", "requested"
    fit = gpu.fit_for(source)
    st, need, uses, gpu_ok = fit.status, fit.need, fit.uses, fit.ok
    if backend == "gpu":
        if not st.available:
            raise BackendUnavailable(f"GPU backend unavailable: {st.message}")
        if not gpu_ok:
            raise BackendUnavailable(
                f"{st.device_label} cannot run this kernel: it uses {', '.join(uses)}, which "
                f"needs sm_{need} or newer")
        return "gpu", "requested"
    if gpu_ok:
        return "gpu", f"auto: {st.device_label}"
    if st.available:
        why_not = f"{st.device_label} lacks {', '.join(uses)} (needs sm_{need})"
    else:
        why_not = st.message
    ok, cpu_why = cpu_available()
    if not ok:
        raise BackendUnavailable(f"no backend can run this kernel: GPU: {why_not}; CPU: {cpu_why}")
    return "cpu", f"auto: {why_not}; using the CPU model"


def where_text(backend: str, device: str) -> str:
    """``"the GPU (NVIDIA H100 ...)"`` or ``"the CPU model (PTX interpreter)"``."""
    if backend == "gpu":
        return f"the GPU ({device})" if device else "the GPU"
    if backend == "cpu":
        return f"the {device}" if device.startswith("CPU model") else f"the CPU model ({device})"
    return device


def where_it_runs(source: str, backend: str) -> dict:
    """``{backend, device, reason, where}`` of a launch about to run here (``{}`` when no
    backend can run it: the launch raises that error in its own words)."""
    try:
        chosen, reason = choose_backend(source, backend)
    except Exception:
        return {}
    if chosen == "gpu":
        from . import gpu
        device = gpu.status().device_label
    else:
        device = CPU_DEVICE
    return {"backend": chosen, "device": device, "reason": reason,
            "where": where_text(chosen, device)}


def normalise_dims(value, what: str) -> tuple[int, ...]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return tuple(int(d) for d in dims)


def check_args(args: Sequence) -> list:
    checked = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            if a.dtype == object:
                raise LaunchError(f"argument {i}: object arrays cannot be passed to a kernel")
            checked.append(a)
        elif isinstance(a, np.generic):
            checked.append(a)
        else:
            raise LaunchError(
                f"argument {i} is a Python {type(a).__name__}; pass arrays as numpy arrays and "
                f"scalars as numpy scalars with the kernel's type, e.g. np.int32({a!r})")
    return checked


def run_here(source: str, kernel: str, grid=(1,), block=(32,), args: Sequence = (),
             shared_mem: int = 0, backend: str = "auto",
             options: Sequence[str] = ()) -> LaunchResult:
    """Compile ``source`` (cached), run ``kernel`` in this process and return every argument
    after the run (see :func:`ptxlab.run.backends.launch`)."""
    check_source(source)
    options = check_options(options)
    if os.environ.get(CHECK_ENV) == "1":
        check_includes(source, options)
    grid_t = normalise_dims(grid, "grid")
    block_t = normalise_dims(block, "block")
    checked = check_args(args)
    if int(shared_mem) < 0:
        raise LaunchError(f"shared_mem must be >= 0 bytes, got {shared_mem}")
    chosen, reason = choose_backend(source, backend)
    if chosen == "gpu":
        from . import gpu

        try:
            outputs = gpu.run_kernel(source, kernel, grid_t, block_t, checked,
                                     shared_mem=int(shared_mem), options=options)
        except CompileError as exc:
            raise explain_compile_error(exc, source) from None
        return LaunchResult(outputs, "gpu", gpu.status().device_label, reason)
    cpu = cpu_module()
    if cpu is None:     # asked for by name, or found by find_spec but not importable
        why = _import_cpu_module()[1]
        raise BackendUnavailable("CPU backend unavailable: the CPU model (ptxlab.run.cpu) "
                                 "cannot be loaded" + (f" ({why})" if why else ""))
    try:
        with warnings.catch_warnings(record=True) as noticed:
            warnings.simplefilter("always")
            outputs = cpu.run_kernel(source, kernel, grid_t, block_t, checked,
                                     shared_mem=int(shared_mem), options=options)
    except CompileError as exc:
        raise explain_compile_error(exc, source)
    except BackendError:
        raise
    except Exception as exc:
        mapped = _as_backend_error(exc)
        if mapped is None:
            raise
        if isinstance(mapped, CompileError):
            mapped = explain_compile_error(mapped, source)
        raise mapped from exc
    diagnostics: dict[str, None] = {}          # the model's own, each once, in order
    for w in noticed:
        if w.category.__module__.startswith("ptxlab."):
            diagnostics[str(w.message)] = None
        else:   # not the model's own: passed on as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for text in diagnostics:
        warnings.warn(text, KernelDiagnostic, stacklevel=3)
    return LaunchResult(list(outputs), "cpu", CPU_DEVICE, reason, diagnostics=list(diagnostics))


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
#: Host code a whole program pasted into a launch brings along: ``main``, a ``<<<...>>>``
#: launch, the runtime's host API, host streams.
_HOST_CODE = re.compile(r"\bint\s+main\s*\(|<<<|\bcuda(?:Malloc|Memcpy|Memset|Free|"
                        r"DeviceSynchronize|DeviceReset|GetLastError|EventCreate|StreamCreate|"
                        r"LaunchKernel)\w*\s*\(|\bstd::(?:cout|cerr|vector)\b")
_MISSING_HEADER = re.compile(r'(?:cannot|could not) open source file "([^"]+)"')
#: Headers of the CUDA toolkit a kernel may include: on NVRTC's path only where this machine
#: has a CUDA include folder (a toolkit, or the ``nvidia-cuda-runtime`` wheel).
_TOOLKIT_HEADER = re.compile(r"^(?:cuda_\w+|mma|cooperative_groups|vector_types|"
                             r"device_launch_parameters|sm_\d+_intrinsics|math_constants)"
                             r"\.h(?:pp)?$")
#: CUDA's C++ libraries (CCCL) and the toolkit's sub-folders.
_LIBRARY_HEADER = re.compile(r"^(?:cuda|nv|cub|thrust|cooperative_groups)/")
HOST_CODE_ADVICE = ("this source also holds host code (main, cudaMalloc, <<<...>>> launches): "
                    "launch and check compile device code only, so give them just the "
                    "__global__ kernel and the __device__ functions it calls -- `ptxlab run "
                    "FILE.cu` or a `%%cuda` cell runs a whole program")


def explain_compile_error(exc: CompileError, source: str) -> CompileError:
    """``exc`` with one sentence more where the source is a whole program pasted into a launch
    (host code) or includes a header NVRTC cannot open: what the learner can do about it. The
    sentence travels with the error (its message is what a child process sends back)."""
    advice = []
    log = str(getattr(exc, "log", "") or "")
    code = _COMMENTS.sub(" ", source)
    if _HOST_CODE.search(code):
        advice.append(HOST_CODE_ADVICE)
    missing = _MISSING_HEADER.search(log)
    if missing:
        advice.append(_missing_header_advice(missing.group(1)))
    text = str(exc)
    advice = [a for a in advice if a and a not in text]
    if advice:
        exc.args = (text + " -- " + "; ".join(advice),)
    return exc


def _missing_header_advice(name: str) -> str:
    """What to do about ``#include <name>`` that NVRTC could not open."""
    from . import includes

    if _TOOLKIT_HEADER.search(name):
        return (f"<{name}> is a CUDA toolkit header, and no CUDA include folder on NVRTC's path "
                "here holds it: `pip install nvidia-cuda-runtime-cu12` (or set CUDA_HOME to a "
                "CUDA toolkit)")
    if _LIBRARY_HEADER.search(name):
        return (f"<{name}> belongs to CUDA's C++ libraries, which are not on this compile's "
                "include path (launch and check compile one kernel with NVRTC); `ptxlab run "
                "FILE.cu` or a `%%cuda` cell builds a whole program with the full toolkit")
    standins = includes.standin_headers()
    return (f"NVRTC compiles device code and has no C/C++ standard library, so <{name}> is not "
            f"available; ptxlab stands in for <{'>, <'.join(standins)}> "
            "(device printf, assert and math need no header)")


#: Where-it-happened attributes carried over from the CPU model's own fault class.
_FAULT_ATTRIBUTES = ("block", "warp", "lane", "lanes", "ptx_line", "source_line", "address",
                     "sanitizer", "advice")
#: What a report calls each kind of failure a launch can end in, for ``KernelFault.kind``.
_REPORT_KIND = {FailureKind.HANG: "hang", FailureKind.RACE: "race"}


def _as_backend_error(exc: Exception) -> BackendError | None:
    """The CPU model's errors as this package's classes (so callers catch one set whichever
    backend ran), decided from the typed record the model made where it failed, and carrying it
    on; ``None`` for anything that is not one of them."""
    failure = getattr(exc, "failure", None)
    if not isinstance(failure, Failure):
        return None
    if failure.kind is FailureKind.COMPILE:
        return CompileError(str(getattr(exc, "log", "") or exc), backend="CPU model")
    if failure.kind is FailureKind.LAUNCH:
        return LaunchError(str(exc))
    fault = KernelFault(str(exc))
    fault.failure = failure
    #: the model lacks an instruction the kernel uses: not the kernel's fault
    fault.unsupported = failure.kind is FailureKind.UNSUPPORTED
    #: what went wrong, for a report: a hang (endless loop, a barrier never reached), a race
    #: between warps, or a fault of one access (the default)
    fault.kind = _REPORT_KIND.get(failure.kind, "fault")
    for attr in _FAULT_ATTRIBUTES:
        if hasattr(exc, attr):
            setattr(fault, attr, getattr(exc, attr))
    return fault


def describe() -> str:
    """One line: which backend runs kernels here, and why."""
    from . import gpu

    st = gpu.status()
    ok, cpu_why = cpu_available()
    if st.available:
        line = f"kernels run on the GPU: {st.device_label}, CuPy {st.cupy_version}"
        missing = [name for name, yes in st.supported.items() if not yes]
        if missing:
            fallback = "the CPU model" if ok else "nothing (CPU model not installed)"
            line += f"; {', '.join(missing)} need a newer GPU and fall back to {fallback}"
        return line
    if ok:
        return f"kernels run on the {CPU_DEVICE}: {st.message}"
    return f"no backend can run kernels here: GPU: {st.message}; CPU: {cpu_why}"
