"""The GPU backend: compile CUDA source with CuPy (NVRTC), cache the modules, launch on numpy data.

CuPy is imported lazily and never by wheel name, so ``cupy-cuda12x`` (learners' GPUs) and
``cupy-cuda13x`` work alike, and ``import ptxlab.run.gpu`` succeeds on a machine without either.
:func:`status` answers "can kernels run on a GPU here?" in one line and never raises.

A kernel is looked up by its own name first (an ``extern "C"`` kernel: one compile, as always);
a C++ kernel or a template instance (``ldmatrix_x4``, ``kernel<float, 4>``) is then compiled
again with that name as an NVRTC name expression (``RawModule(name_expressions=...)``, in
CuPy for CUDA 12 and 13 alike) and found through its lowered name. The standard headers NVRTC
lacks (``<cstdint>``...) come from ``ptxlab/run/nvrtc_headers``, as on the CPU model.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..model import layouts
from . import sources
from .errors import (BackendUnavailable, CompileError, GpuMemoryExhausted, KernelFault,
                     LaunchError)
from .failure import Failure, FailureKind
from .ptx import nvrtc

#: CUDA's errors about an address (illegal, misaligned, wrong space): a fault of one access.
_ADDRESS_ERRORS = (700, 716, 717)

__all__ = [
    "GpuStatus", "status", "run_kernel", "compile_module", "compile_count", "clear_cache",
    "required_compute_capability", "INSTRUCTION_MIN_SM", "COMPILE_OPTIONS", "warm_up",
    "compile_options",
]

#: Set to 1 to ignore any GPU (e.g. to exercise the CPU path on a GPU machine).
DISABLE_ENV = "PTXLAB_NO_GPU"
#: Options every compile gets (CuPy adds the -arch of the current device itself).
COMPILE_OPTIONS: tuple[str, ...] = ("-std=c++17",)
#: Dynamic shared memory a kernel may use without opting in.
DEFAULT_DYNAMIC_SMEM = 48 * 1024


def _mma_min_sm(shape: str, atype: str) -> int:
    """mma.m16n8k8 with f16 inputs came with Turing (sm_75); the others need Ampere (sm_80)."""
    return 75 if (shape, atype) == ("m16n8k8", "f16") else 80


#: Oldest compute capability (as 75, 80, 90) that has each instruction the course teaches.
INSTRUCTION_MIN_SM: dict[str, int] = {
    "ldmatrix": 75,
    "movmatrix": 75,
    **{f"mma.{s}.{d}.{a}.{b}.{c}": _mma_min_sm(s, a) for s, a, b, c, d in layouts.MMA_VARIANTS},
    "stmatrix": 90,
}


@dataclass(frozen=True)
class GpuStatus:
    """Whether kernels can run on a GPU here, and what that GPU supports."""

    available: bool
    message: str                                  # one line, for people
    name: str | None = None
    compute_capability: tuple[int, int] | None = None
    supported: dict[str, bool] = field(default_factory=dict)
    cupy_version: str | None = None
    driver_version: str | None = None
    runtime_version: str | None = None

    @property
    def cc_number(self) -> int:
        """Compute capability as one number (9.0 -> 90); 0 when there is no GPU."""
        if self.compute_capability is None:
            return 0
        major, minor = self.compute_capability
        return 10 * major + minor

    @property
    def device_label(self) -> str:
        """E.g. ``NVIDIA H100 80GB HBM3 (sm_90)``."""
        if self.name is None:
            return "no GPU"
        return f"{self.name} (sm_{self.cc_number})"

    def supports(self, instruction: str) -> bool:
        """Whether this GPU has ``instruction`` (a key of :data:`INSTRUCTION_MIN_SM`)."""
        if instruction not in INSTRUCTION_MIN_SM:
            raise KeyError(f"unknown instruction {instruction!r}; known: {list(INSTRUCTION_MIN_SM)}")
        return self.available and self.cc_number >= INSTRUCTION_MIN_SM[instruction]


def _cuda_version(v: int) -> str:
    """CUDA's integer versions (12080) as text (12.8)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _import_cupy():
    import cupy  # noqa: F401  (whichever wheel provides it)

    return cupy


def _probe() -> GpuStatus:
    """Look for CuPy, a driver, a GPU and NVRTC; every failure becomes a one-line message."""
    if os.environ.get(DISABLE_ENV, "") == "1":
        return GpuStatus(False, f"GPU disabled by {DISABLE_ENV}=1")
    try:
        cupy = _import_cupy()
    except ImportError:
        if not _driver_present():
            return GpuStatus(False, "no NVIDIA GPU driver on this machine")
        return GpuStatus(False, "an NVIDIA driver is here but CuPy is not installed "
                                "(pip install cupy-cuda12x for a CUDA 12 driver, cupy-cuda13x "
                                "for CUDA 13; ./lab setup picks the right one)")
    except Exception as exc:  # a half-installed CuPy raises all sorts of things
        return GpuStatus(False, f"CuPy failed to import: {type(exc).__name__}: {_one_line(exc)}")
    version = getattr(cupy, "__version__", "?")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return GpuStatus(False, _no_device_message(exc), cupy_version=version)
    if count < 1:
        return GpuStatus(False, "no CUDA GPU found", cupy_version=version)
    try:
        dev_id = cupy.cuda.runtime.getDevice()
        props = cupy.cuda.runtime.getDeviceProperties(dev_id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        cc = (int(props["major"]), int(props["minor"]))
        driver = _cuda_version(int(cupy.cuda.runtime.driverGetVersion()))
        runtime = _cuda_version(int(cupy.cuda.runtime.runtimeGetVersion()))
    except Exception as exc:
        return GpuStatus(False, f"the GPU could not be queried ({_one_line(exc)})",
                         cupy_version=version)
    cc_num = 10 * cc[0] + cc[1]
    supported = {k: cc_num >= v for k, v in INSTRUCTION_MIN_SM.items()}
    base = dict(name=name, compute_capability=cc, supported=supported, cupy_version=version,
                driver_version=driver, runtime_version=runtime)
    label = f"{name} (sm_{cc_num})"
    if cc_num < min(INSTRUCTION_MIN_SM.values()):
        return GpuStatus(False, f"{label} is too old: ldmatrix and mma need sm_75 or newer", **base)
    try:
        cupy.cuda.nvrtc.getVersion()
    except Exception as exc:
        return GpuStatus(False, f"{label} found, but CuPy cannot load NVRTC ({_one_line(exc)})",
                         **base)
    missing = [k for k, ok in supported.items() if not ok]
    note = f"; lacks {', '.join(missing)}" if missing else "; every instruction of the course"
    return GpuStatus(True, f"GPU {label}, CuPy {version}, driver CUDA {driver}{note}", **base)


def _driver_present() -> bool:
    """Whether this machine has an NVIDIA driver at all (its CUDA library loads)."""
    import ctypes
    import sys

    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.dylib")
    for name in names:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def _no_device_message(exc: BaseException) -> str:
    """Tell "no driver at all" from "driver older than this CuPy" from anything else."""
    import ctypes
    import sys

    text = _one_line(exc)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            return "no NVIDIA driver on this machine (libcuda not found), so no GPU"
    if "InsufficientDriver" in text:
        return (f"the NVIDIA driver is older than this CuPy's CUDA ({text}); install the CuPy "
                "wheel that matches the driver, e.g. cupy-cuda12x for a CUDA 12 driver")
    return f"no usable CUDA GPU ({text})"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else type(exc).__name__


_status_lock = threading.Lock()
_status_cache: GpuStatus | None = None


#: Set when a kernel faulted: CUDA leaves the process's context unusable, so the GPU is not
#: usable here any more (``status`` says so and ``auto`` launches go to the CPU model).
_broken_by: str | None = None


def status(refresh: bool = False) -> GpuStatus:
    """Whether a usable GPU is here (cached; ``refresh=True`` probes again and forgets an
    earlier fault, for a fresh CUDA context). Never raises."""
    global _status_cache, _broken_by
    with _status_lock:
        if refresh:
            _broken_by = None
        if _broken_by is not None:
            if _status_cache is None or _status_cache.available:
                _status_cache = GpuStatus(
                    False, f"the GPU cannot run kernels in this process any more: kernel "
                    f"{_broken_by} faulted, and a CUDA fault leaves the process's GPU context "
                    "unusable; restart the process (in Jupyter: restart the kernel) to use the "
                    "GPU again")
            return _status_cache
        if _status_cache is None or refresh:
            try:
                _status_cache = _probe()
            except Exception as exc:  # belt and braces: status must not raise
                _status_cache = GpuStatus(False, f"GPU probe failed: {_one_line(exc)}")
        return _status_cache


# ---------------------------------------------------------------------------------------------
# What a source needs
# ---------------------------------------------------------------------------------------------

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_INCLUDES = re.compile(r"^\s*#\s*include[^\n]*", re.MULTILINE)


@dataclass(frozen=True)
class GpuFit:
    """Whether this machine's GPU can run a source: the GPU's status, the oldest GPU the
    source's matrix instructions need (``sm``) and those instructions. One answer for a kernel
    launch and for a whole program, so both say the same about the same GPU."""

    ok: bool
    status: "GpuStatus"
    need: int
    uses: list


def fit_for(source: str) -> GpuFit:
    """The :class:`GpuFit` of ``source`` on this machine's GPU."""
    st = status()
    need, uses = required_compute_capability(source)
    ok = st.available and st.compute_capability is not None and st.cc_number >= need
    return GpuFit(ok, st, need, uses)


def required_compute_capability(source: str) -> tuple[int, list[str]]:
    """``(sm, uses)``: the oldest GPU that has every matrix instruction ``source`` names.

    A textual scan of the code (comments and ``#include`` lines removed) for the instruction
    names, which also catches the wrappers of ``kernels/*.cuh`` (``ptxlab::stmatrix_x4``...).
    Including a header without calling it does not count. Remembered per source: every launch
    asks it, and a check launches the same source several times.
    """
    need, uses = _required(source)
    return need, list(uses)


@functools.lru_cache(maxsize=64)
def _required(source: str) -> tuple[int, tuple[str, ...]]:
    code = _INCLUDES.sub("", _COMMENTS.sub("", source))
    uses: list[tuple[str, int]] = []
    if re.search(r"(ldmatrix|stmatrix)[\w.:]*?[._](m16n16|m8n16|m16n8)(?![0-9k])|\.b8x16\b", code):
        # the 8-bit and packed forms: sm_100a/sm_110a/sm_120a-class GPUs only
        uses.append(("ldmatrix/stmatrix .m16n16/.m8n16/.m16n8", 100))
    if re.search(r"stmatrix", code):
        uses.append(("stmatrix", 90))
    if re.search(r"ldmatrix", code):
        uses.append(("ldmatrix", 75))
    if re.search(r"movmatrix", code):
        uses.append(("movmatrix", 75))
    if re.search(r"mma", code):
        if re.search(r"m16n8k16|m16n8k32|tf32|bf16", code):
            uses.append(("mma.m16n8k16/k32/tf32/bf16", 80))
        elif re.search(r"m16n8k8", code):
            uses.append(("mma.m16n8k8", 75))
    if not uses:
        return 0, ()
    need = max(sm for _, sm in uses)
    return need, tuple(name for name, sm in uses if sm == need)


# ---------------------------------------------------------------------------------------------
# Compiling (cached) and launching
# ---------------------------------------------------------------------------------------------

_modules: dict[tuple, object] = {}
_modules_lock = threading.Lock()
_compiles = 0


def compile_count() -> int:
    """How many times this process has actually compiled (cache misses), for tests and reports."""
    return _compiles


def clear_cache() -> None:
    """Forget compiled modules (the next launch of each source compiles again)."""
    with _modules_lock:
        _modules.clear()


def unload_modules() -> None:
    """Unload every module this process loaded, so the next launch of a source loads a fresh
    one: no ``__device__`` variable, constant or texture a kernel changed carries over. CuPy
    keeps the modules it compiled in memos of its own; those are cleared too."""
    import gc

    clear_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.clear_memo()
    gc.collect()                 # the modules' last references go: CuPy unloads them


def _zero(device_arrays: Sequence) -> None:
    """Overwrite what a launch's device buffers hold before they go back to the pool, so no
    later allocation of this process starts with it (``fill(0)`` of a contiguous CuPy array is
    a memset: no kernel to compile)."""
    for d in device_arrays:
        d.fill(0)
    _import_cupy().cuda.runtime.deviceSynchronize()


def warm_up() -> str:
    """Create this process's CUDA context now, not in the middle of a launch; the device's
    label. Raises :class:`BackendUnavailable` without a usable GPU."""
    st = _require_gpu()
    cupy = _import_cupy()
    cupy.zeros(1, dtype=cupy.uint32).get()
    return st.device_label


def _require_gpu() -> GpuStatus:
    st = status()
    if not st.available:
        raise BackendUnavailable(f"GPU backend unavailable: {st.message}")
    return st


def compile_options(source: str, options: Sequence[str] = ()) -> tuple[str, ...]:
    """Every option of a GPU compile: ``-std=c++17``, ``-I kernels/``, the caller's, then the
    stand-in standard headers (``ptxlab/run/nvrtc_headers``, for NVRTC only) and, for a source
    that includes ``<mma.h>``, a toolkit include folder that has the ``crt/mma.h`` CuPy's own
    headers may lack. CuPy appends its own include folders and ``-arch=sm_XX`` after these."""
    opts = COMPILE_OPTIONS + tuple(sources.include_options()) + tuple(options)
    opts += tuple(sources.nvrtc_include_options())
    return opts + _mma_include_options(source)


_MMA_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]mma\.h[>"]', re.MULTILINE)


def _mma_include_options(source: str) -> tuple[str, ...]:
    """``-I`` of a CUDA toolkit's include folder whose ``crt/mma.h`` the WMMA header
    ``<mma.h>`` needs, where CuPy's own CUDA headers (the ``nvidia-cuda-runtime`` wheel's) lack
    it; only for a source that includes ``<mma.h>``, and only a toolkit of CuPy's CUDA major
    version, so no other source sees other headers than CuPy's."""
    if not _MMA_INCLUDE.search(source):
        return ()
    try:
        cupy = _import_cupy()
        major = int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
        cuda_path = cupy.cuda.get_cuda_path() if hasattr(cupy.cuda, "get_cuda_path") else None
    except Exception:  # noqa: BLE001 - no CuPy: nothing to add
        return ()
    if cuda_path and os.path.isfile(os.path.join(cuda_path, "include", "crt", "mma.h")):
        return ()
    for folder in nvrtc.cuda_include_dir_candidates():
        if (os.path.isfile(os.path.join(folder, "crt", "mma.h"))
                and _toolkit_major(folder) == major):
            return (f"-I{folder}",)
    return ()


def _toolkit_major(include_dir: str) -> int | None:
    """The CUDA major version of an include folder, read from its ``cuda.h``."""
    try:
        with open(os.path.join(include_dir, "cuda.h"), encoding="utf-8", errors="replace") as fh:
            head = fh.read(200_000)
    except OSError:
        return None
    m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", head)
    return int(m.group(1)) // 1000 if m else None


def compile_module(source: str, options: Sequence[str] = (),
                   name_expressions: Sequence[str] = ()):
    """The ``cupy.RawModule`` for ``source``, compiled once per (source, options, GPU arch).

    Options: :func:`compile_options`; CuPy adds ``-arch=sm_XX`` of the current device.
    ``name_expressions`` (C++ kernel names such as ``"kernel<float, 4>"``) are instantiated and
    lowered by NVRTC, so ``get_function`` takes them; without them the module and its cache key
    are what they always were. Raises :class:`~ptxlab.run.backends.CompileError` carrying the
    NVRTC log.
    """
    global _compiles
    st = _require_gpu()
    cupy = _import_cupy()
    opts = compile_options(source, options)
    names = tuple(name_expressions)
    key = (source, opts, f"sm_{st.cc_number}") + ((names,) if names else ())
    with _modules_lock:
        module = _modules.get(key)
        if module is not None:
            return module
        if names:
            module = cupy.RawModule(code=source, options=opts, backend="nvrtc",
                                    name_expressions=list(names))
        else:
            module = cupy.RawModule(code=source, options=opts, backend="nvrtc")
        compile_exception = getattr(cupy.cuda.compiler, "CompileException", ())
        try:
            module.compile()
        except compile_exception as exc:
            raise CompileError(str(exc), backend="NVRTC") from None
        _compiles += 1
        _modules[key] = module
        return module


def _dims3(value) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    return tuple(list(dims) + [1] * (3 - len(dims)))  # type: ignore[return-value]


#: Seconds waited before each new try of a launch that found the GPU's memory full (a shared
#: GPU: another process may free it); then :class:`GpuMemoryExhausted`.
OUT_OF_MEMORY_WAITS_S: tuple[float, ...] = (0.5, 2.0, 5.0)


def _out_of_memory(exc: BaseException) -> bool:
    """CuPy's pool, the runtime or the driver had no device memory (status 2 in both APIs)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    if type(exc).__name__ in ("CUDARuntimeError", "CUDADriverError"):
        return getattr(exc, "status", None) == 2
    return False


def run_kernel(source: str, kernel: str, grid, block, args: Sequence, shared_mem: int = 0,
               options: Sequence[str] = ()) -> list:
    """Launch ``kernel`` once and return every argument afterwards (arrays copied back).

    Arrays travel as device copies; numpy scalars by value (and come back unchanged). A CUDA
    error during the run raises :class:`~ptxlab.run.backends.KernelFault`; after one, the CUDA
    context of this process is unusable (restart it, or launch with ``isolate=True``). A GPU
    whose memory is full is waited for and tried again (:data:`OUT_OF_MEMORY_WAITS_S`), then
    :class:`~ptxlab.run.errors.GpuMemoryExhausted`: the machine's fault, not the kernel's.
    """
    for wait_s in (*OUT_OF_MEMORY_WAITS_S, None):
        try:
            return _run_kernel_once(source, kernel, grid, block, args, shared_mem, options)
        except Exception as exc:
            if not _out_of_memory(exc):
                raise
            _free_pool()
            if wait_s is None:
                raise GpuMemoryExhausted(
                    f"the GPU had no memory left for kernel {kernel!r} after "
                    f"{len(OUT_OF_MEMORY_WAITS_S)} more tries over "
                    f"{sum(OUT_OF_MEMORY_WAITS_S):g} s ({_one_line(exc)}): another process holds "
                    "it") from None
            time.sleep(wait_s)
    raise AssertionError("unreachable")


def _cxx_function(source: str, kernel: str, options: Sequence[str]):
    """The function of a C++ kernel asked for by its C++ name (``ldmatrix_x4``,
    ``kernel<float, 4>``), from a module compiled with that name as a name expression;
    :class:`LaunchError` listing the source's kernels where it names none of them."""
    base = nvrtc.base_name(kernel) if nvrtc.is_name_expression(kernel) else None
    if (base is None or not _mentions(source, base)
            or ("<" not in kernel and base in nvrtc.template_kernels(source))):
        entries = _entries_for_message(source, options)
        raise LaunchError(nvrtc.name_problem(kernel, entries, source)
                          or nvrtc.unknown_kernel_message(kernel, entries, source))
    module = compile_module(source, options, name_expressions=(kernel,))
    try:
        return module.get_function(kernel)
    except Exception as exc:
        if _out_of_memory(exc):
            raise
        entries = _entries_for_message(source, options)
        raise LaunchError(nvrtc.unknown_kernel_message(kernel, entries, source)) from None


_COMMENTS_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _mentions(source: str, name: str) -> bool:
    """Whether ``name`` is called or instantiated anywhere in ``source`` (comments aside): a
    name it never mentions is no kernel of it, and needs no second compile to say so."""
    code = _COMMENTS_RE.sub(" ", source)
    return re.search(rf"\b{re.escape(name)}\s*[(<]", code) is not None


_GLOBAL_FN = re.compile(r"__global__[^;{}()]*?\b([A-Za-z_]\w*)\s*\(")


def _entries_for_message(source: str, options: Sequence[str]) -> list[str]:
    """The kernels of ``source`` for an error message: its PTX entries from this machine's own
    NVRTC (mangled, demangled by the message), else the ``__global__`` functions a textual
    scan finds."""
    try:
        ptx = nvrtc.compile_to_ptx(source, COMPILE_OPTIONS + tuple(sources.include_options())
                                   + tuple(options),
                                   fallback_includes=sources.nvrtc_include_options())
        return nvrtc.entry_names(ptx)
    except Exception:  # noqa: BLE001 - no compiler here, or it disagrees: scan the text
        code = _COMMENTS_RE.sub(" ", source)
        templates = set(nvrtc.template_kernels(source))
        return [n for n in dict.fromkeys(_GLOBAL_FN.findall(code)) if n not in templates]


def _free_pool() -> None:
    try:
        _import_cupy().get_default_memory_pool().free_all_blocks()
    except Exception:  # noqa: BLE001 - nothing to free is fine
        pass


def _run_kernel_once(source: str, kernel: str, grid, block, args: Sequence, shared_mem: int,
                     options: Sequence[str]) -> list:
    st = _require_gpu()
    cupy = _import_cupy()
    module = compile_module(source, options)
    try:
        fn = module.get_function(kernel)
    except Exception as exc:
        if _out_of_memory(exc):
            raise
        fn = _cxx_function(source, kernel, options)
    if shared_mem > DEFAULT_DYNAMIC_SMEM:
        try:
            fn.max_dynamic_shared_size_bytes = int(shared_mem)
        except Exception as exc:
            raise LaunchError(f"{st.device_label} cannot give {shared_mem} bytes of dynamic "
                              f"shared memory: {_one_line(exc)}") from None
    dev_args, shapes = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            dev_args.append(cupy.asarray(np.ascontiguousarray(a)))
            shapes.append(a.shape)
        elif isinstance(a, np.generic):
            dev_args.append(a)
            shapes.append(None)
        else:
            raise LaunchError(f"argument of type {type(a).__name__}: pass numpy arrays or numpy "
                              "scalars (np.int32(5), np.uint32(...))")
    try:
        fn(_dims3(grid), _dims3(block), tuple(dev_args), shared_mem=int(shared_mem))
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as exc:
        if _out_of_memory(exc):      # not sticky: the context still works
            raise
        global _broken_by
        _broken_by = repr(kernel)
        message = (f"kernel {kernel!r} failed on {st.device_label}: {_one_line(exc)}. A CUDA "
                   "error leaves this process's GPU context unusable: restart it (in Jupyter: "
                   "restart the kernel), or launch with isolate=True")
        fault = KernelFault(message)
        fault.failure = Failure(FailureKind.FAULT, message,
                                bad_access=getattr(exc, "status", None) in _ADDRESS_ERRORS)
        raise fault from None
    outputs: list = []
    for a, d, shape in zip(args, dev_args, shapes):
        outputs.append(cupy.asnumpy(d).reshape(shape) if shape is not None else a)
    _zero([d for d, shape in zip(dev_args, shapes) if shape is not None])
    return outputs
