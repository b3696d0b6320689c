"""One call that runs a warp-level CUDA kernel on the GPU (CuPy) or on the CPU model.

``launch`` takes numpy inputs and returns numpy outputs whichever backend runs, so notebooks,
checks and the grader never branch on the machine they are on. ``backend="auto"`` picks the GPU
when one is usable and supports every matrix instruction the kernel uses, else the CPU model
(``ptxlab.run.cpu``, a PTX interpreter). The choice is reported with the result, never hidden.

The error classes live here so that both backends raise the same ones.
"""
from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = [
    "BackendError", "BackendUnavailable", "CompileError", "KernelFault", "LaunchError",
    "LaunchResult", "KernelCase", "launch", "describe", "choose_backend", "cpu_available",
    "CPU_DEVICE",
]

BACKENDS = ("auto", "gpu", "cpu")
#: How the CPU backend names itself in results and reports.
CPU_DEVICE = "CPU model (PTX interpreter)"
_ISOLATE_ENV = "PTXLAB_ISOLATE"


# ---------------------------------------------------------------------------------------------
# Errors shared by both backends
# ---------------------------------------------------------------------------------------------

class BackendError(RuntimeError):
    """Base class: something stopped a kernel from running."""


class BackendUnavailable(BackendError):
    """The requested backend cannot run here (no GPU, no CuPy, GPU too old, no CPU model)."""


class LaunchError(BackendError):
    """The launch itself is wrong: unknown kernel name, bad grid/block, a Python scalar argument."""


class CompileError(BackendError):
    """The CUDA source did not compile. ``log`` is the compiler's full message.

    ``line`` and ``file`` locate the first error (``None`` when the log names no line), and
    ``first_error`` is that error's text, so a learner sees one precise line first.
    """

    def __init__(self, log: str, *, backend: str = "", source_name: str = "kernel.cu"):
        self.log = log
        self.file, self.line, self.first_error = first_compile_error(log)
        where = ""
        if self.line is not None:
            shown = self.file if self.file and self.file != source_name else "line"
            where = f"{shown} {self.line}: " if shown == "line" else f"{shown} line {self.line}: "
        head = f"{where}{self.first_error}" if self.first_error else "compilation failed"
        prefix = f"{backend} compile error: " if backend else "compile error: "
        super().__init__(prefix + head)


class KernelFault(BackendError):
    """The kernel started but faulted (illegal address, misaligned access, trap, timeout), or
    the CPU model's sanitizer found a race (``sanitizer == "racecheck"``) or a barrier only
    part of the block reached (``"synccheck"``); ``advice`` is then its sentence on the fix."""

    sanitizer: str = ""
    advice: str = ""


class KernelDiagnostic(UserWarning):
    """Something the CPU model noticed about a kernel that ran (see ``LaunchResult.diagnostics``)."""


def first_compile_error(log: str) -> tuple[str | None, int | None, str]:
    """``(file, line, message)`` of the first error in an NVRTC/nvcc/ptxas log.

    NVRTC and nvcc write ``path/kern.cu(12): error: ...``; ptxas writes ``ptxas ... line 45;
    error : ...``. The file is reduced to its base name (NVRTC compiles from a temporary path).
    """
    import re

    for raw in log.splitlines():
        line = raw.strip()
        m = re.match(r"(?P<file>.*?)\((?P<line>\d+)\): (?:catastrophic )?error\b:?\s*(?P<msg>.*)", line)
        if m:
            return os.path.basename(m["file"]) or None, int(m["line"]), m["msg"].strip()
        m = re.search(r"line (?P<line>\d+); error\s*:\s*(?P<msg>.*)", line)
        if m:
            return "PTX", int(m["line"]), m["msg"].strip()
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return None, None, line
    stripped = [x.strip() for x in log.splitlines() if x.strip()]
    return None, None, stripped[0] if stripped else ""


# ---------------------------------------------------------------------------------------------
# Results and test cases
# ---------------------------------------------------------------------------------------------

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


@dataclass
class KernelCase:
    """One kernel launch with fixed inputs, for comparing backends (CPU model vs GPU).

    ``compare`` lists the indices of ``args`` whose outputs must agree bit for bit.
    """

    name: str
    source: str
    kernel: str
    grid: tuple
    block: tuple
    args: list
    shared_mem: int = 0
    compare: tuple[int, ...] = ()
    options: tuple[str, ...] = ()

    def launch(self, backend: str = "auto", **kwargs: Any) -> LaunchResult:
        """Run this case on ``backend`` (copies of the inputs; the case itself is unchanged)."""
        return launch(self.source, self.kernel, grid=self.grid, block=self.block,
                      args=[a.copy() if isinstance(a, np.ndarray) else a for a in self.args],
                      shared_mem=self.shared_mem, backend=backend, options=self.options, **kwargs)


# ---------------------------------------------------------------------------------------------
# Choosing and calling a backend
# ---------------------------------------------------------------------------------------------

def _cpu_module():
    """``ptxlab.run.cpu`` if it is installed, else ``None`` (imported lazily: it is large)."""
    try:
        return importlib.import_module("ptxlab.run.cpu")
    except ImportError:
        return None


def cpu_available() -> tuple[bool, str]:
    """``(ok, why)``: whether the CPU model can run kernels here."""
    cpu = _cpu_module()
    if cpu is None:
        return False, "the CPU model (ptxlab.run.cpu) is not installed"
    try:
        ok, why = cpu.available()
    except Exception as exc:  # a broken install must not take the GPU path down with it
        return False, f"the CPU model failed its self-check: {exc}"
    return bool(ok), str(why)


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
    st = gpu.status()
    need, uses = gpu.required_compute_capability(source)
    gpu_ok = st.available and st.compute_capability is not None and st.cc_number >= need
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


def _normalise_dims(value, what: str) -> tuple[int, ...]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return tuple(int(d) for d in dims)


def _check_args(args: Sequence) -> list:
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


def _isolated_launch(**kwargs: Any):
    """Run the launch in a child process (``ptxlab.run.isolation``), or ``None`` if absent."""
    try:
        isolation = importlib.import_module("ptxlab.run.isolation")
        runner = isolation.run_launch_isolated
    except (ImportError, AttributeError) as exc:
        warnings.warn(f"isolate=True but process isolation is not available ({exc}); "
                      "running the kernel in this process", RuntimeWarning, stacklevel=3)
        return None
    return runner(**kwargs)


def launch(source: str, kernel: str, grid=(1,), block=(32,), args: Sequence = (),
           shared_mem: int = 0, backend: str = "auto", options: Sequence[str] = (),
           isolate: bool | None = None) -> LaunchResult:
    """Compile ``source`` (cached), run ``kernel`` and return every argument after the run.

    Every numpy array is passed as a pointer to a device copy and copied back; numpy scalars
    are passed by value and returned unchanged. ``kernels/`` is on the include path.
    ``isolate=True`` (or ``PTXLAB_ISOLATE=1``) runs the launch in a separate process, so a
    fault or a hang cannot take the caller down (used when grading).
    """
    grid_t = _normalise_dims(grid, "grid")
    block_t = _normalise_dims(block, "block")
    checked = _check_args(args)
    if int(shared_mem) < 0:
        raise LaunchError(f"shared_mem must be >= 0 bytes, got {shared_mem}")
    if isolate is None:
        isolate = os.environ.get(_ISOLATE_ENV, "") == "1"
    if isolate:
        result = _isolated_launch(source=source, kernel=kernel, grid=grid_t, block=block_t,
                                  args=checked, shared_mem=int(shared_mem), backend=backend,
                                  options=tuple(options))
        if result is not None:
            return result
    chosen, reason = choose_backend(source, backend)
    if chosen == "gpu":
        from . import gpu

        outputs = gpu.run_kernel(source, kernel, grid_t, block_t, checked,
                                 shared_mem=int(shared_mem), options=tuple(options))
        return LaunchResult(outputs, "gpu", gpu.status().device_label, reason)
    cpu = _cpu_module()
    try:
        with warnings.catch_warnings(record=True) as noticed:
            warnings.simplefilter("always")
            outputs = cpu.run_kernel(source, kernel, grid_t, block_t, checked,
                                     shared_mem=int(shared_mem), options=tuple(options))
    except BackendError:
        raise
    except Exception as exc:
        mapped = _as_backend_error(exc)
        if mapped is None:
            raise
        raise mapped from exc
    diagnostics: dict[str, None] = {}          # the model's own, each once, in order
    for w in noticed:
        if w.category.__module__.startswith("ptxlab."):
            diagnostics[str(w.message)] = None
        else:   # not the model's own: passed on as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for text in diagnostics:
        warnings.warn(text, KernelDiagnostic, stacklevel=2)
    return LaunchResult(list(outputs), "cpu", CPU_DEVICE, reason, diagnostics=list(diagnostics))


#: Where-it-happened attributes carried over from the CPU model's own fault class.
_FAULT_ATTRIBUTES = ("block", "warp", "lane", "lanes", "ptx_line", "source_line", "address",
                     "sanitizer", "advice")


def _as_backend_error(exc: Exception) -> BackendError | None:
    """The CPU model's CompileError/KernelFault/LaunchError as this module's classes (so callers
    catch one set of errors whichever backend ran), keeping its message and location."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    if "CompileError" in names:
        return CompileError(str(getattr(exc, "log", "") or exc), backend="CPU model")
    if "KernelFault" in names:
        fault = KernelFault(str(exc))
        #: the model lacks an instruction the kernel uses: not the kernel's fault
        fault.unsupported = "UnsupportedInstruction" in names
        #: what went wrong, for a report: a hang (endless loop, a barrier never reached), a
        #: race between warps, or a fault of one access (the default)
        fault.kind = ("hang" if "Deadlock" in names else
                      "race" if "SharedMemoryRace" in names else "fault")
        for attr in _FAULT_ATTRIBUTES:
            if hasattr(exc, attr):
                setattr(fault, attr, getattr(exc, attr))
        return fault
    if "LaunchError" in names:
        return LaunchError(str(exc))
    return None


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
