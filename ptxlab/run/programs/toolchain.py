"""Building a whole CUDA program: nvcc found where the machine has it, for the GPU or the model.

nvcc comes from ``$PTXLAB_NVCC``, the NVIDIA wheels the README's setup installs
(``nvidia-cuda-nvcc``, ``nvidia-cuda-crt``, ``nvidia-nvvm``, ``nvidia-cuda-runtime``,
``nvidia-cuda-cccl``: one ``nvidia/cu13`` tree), ``$CUDA_HOME`` or the ``PATH``. nvcc needs a
host C++ compiler; a machine without one is told in one sentence how to get it.

For the GPU a program is built as nvcc builds it. For the CPU model it is built the way
GPGPU-Sim builds one: the same nvcc command with ``-cudart none``, linked against the lab's own
runtime (:file:`cudart_model.cpp`, compiled once per toolkit and cached), and with the PTX of
its kernels kept (``--keep``) for the model to run.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import sources
from . import hints

__all__ = ["ToolchainMissing", "ProgramCompileError", "Toolchain", "find_toolchain", "Build",
           "build_for_model", "build_for_gpu", "CPU_MODEL_ARCH"]

#: What the CPU model runs: sm_90a PTX (ptxas checks the inline PTX for the same target).
CPU_MODEL_ARCH = "sm_90a"
_NVCC_ENV = "PTXLAB_NVCC"
_COMPILE_TIMEOUT_S = 300
_HERE = Path(__file__).resolve().parent


class ToolchainMissing(RuntimeError):
    """The machine lacks something a whole program needs; the message says how to get it."""


class ProgramCompileError(RuntimeError):
    """nvcc refused the program: ``log`` is its own message, ``hints`` what the lab adds."""

    def __init__(self, log: str, hints_: list[str]):
        self.log = log.rstrip()
        self.hints = hints_
        text = self.log
        if hints_:
            text += "\n" + "\n".join(f"hint: {h}" for h in hints_)
        super().__init__(text)


@dataclass(frozen=True)
class Toolchain:
    """The nvcc a program is built with, and what it says its version is."""

    nvcc: str
    version: str

    def describe(self) -> str:
        return f"nvcc {self.version} ({self.nvcc})"


def _wheel_nvcc() -> list[str]:
    found = []
    for entry in sys.path:
        for pat in ("nvidia/cu*/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc"):
            found += sorted(glob.glob(os.path.join(entry or ".", pat)), reverse=True)
    return found


def _candidates() -> list[str]:
    out = [os.environ.get(_NVCC_ENV, "")]
    out.append(shutil.which("nvcc") or "")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            out.append(os.path.join(root, "bin", "nvcc"))
    out += _wheel_nvcc()
    return [c for c in out if c and os.path.isfile(c) and os.access(c, os.X_OK)]


@functools.lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    """The first nvcc that runs here, checked together with the host compiler it needs."""
    problems = []
    for nvcc in _candidates():
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{nvcc}: {exc}")
            continue
        m = re.search(r"release (\d+\.\d+)", out.stdout)
        if out.returncode == 0 and m:
            _check_host_compiler()
            return Toolchain(nvcc, m.group(1))
        problems.append(f"{nvcc}: {out.stderr.strip() or out.stdout.strip()}")
    detail = f" (tried: {'; '.join(problems)})" if problems else ""
    raise ToolchainMissing(
        "no nvcc here: run the README's setup (`./lab open`), which installs NVIDIA's nvcc "
        f"wheels, or `pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm "
        f"nvidia-cuda-runtime nvidia-cuda-cccl`{detail}")


def _check_host_compiler() -> None:
    if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        raise ToolchainMissing(
            "nvcc needs a host C++ compiler to build a whole program and this machine has "
            "none: install g++ (Debian/Ubuntu: `sudo apt install g++`; Fedora: `sudo dnf "
            "install gcc-c++`; conda: `conda install gxx`)")


def _cache_dir() -> Path:
    root = os.environ.get("PTXLAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ptxlab")
    return Path(root) / "cudart_model"


def model_runtime(tc: Toolchain) -> Path:
    """The lab's runtime for the CPU model, compiled by this toolchain (cached by its source)."""
    src = _HERE / "cudart_model.cpp"
    key = hashlib.sha256(src.read_bytes() + (_HERE / "cuda_errors.inc").read_bytes()
                         + tc.nvcc.encode() + tc.version.encode()).hexdigest()[:16]
    obj = _cache_dir() / f"cudart_model-{key}.o"
    if obj.is_file():
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_suffix(f".{os.getpid()}.o")
    cmd = [tc.nvcc, "-std=c++17", "-O2", "-Xcompiler", "-fPIC", "-c", str(src), "-o", str(tmp)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
    if run.returncode != 0:
        raise ToolchainMissing(f"the lab's CUDA runtime for the CPU model did not build with "
                               f"{tc.describe()}:\n{run.stderr.strip()}")
    os.replace(tmp, obj)
    return obj


@dataclass
class Build:
    """A built program: the executable and, for the model, the PTX of its kernels."""

    executable: Path
    ptx: str = ""
    notes: tuple[str, ...] = ()


def _nvcc(tc: Toolchain, args: list[str], source: Path) -> None:
    run = subprocess.run([tc.nvcc, *args], capture_output=True, text=True,
                         timeout=_COMPILE_TIMEOUT_S)
    if run.returncode != 0:
        log = (run.stdout + run.stderr).strip()
        text = source.read_text(errors="replace")
        unresolved = sorted(set(re.findall(r"undefined reference to `(cuda\w+)", log)))
        extra = []
        if unresolved and "-cudart" in args:
            extra.append(f"the CPU model's runtime does not provide {', '.join(unresolved)}: "
                         "run this program on a GPU (`ptxlab run --gpu`)")
        raise ProgramCompileError(log, extra + hints.compile_hints(text, log))


def _common(source: Path) -> list[str]:
    return ["-std=c++17", "-lineinfo", *sources.include_options(), str(source)]


def build_for_model(source: Path, workdir: Path) -> Build:
    """``source`` built for the CPU model: the program and the PTX of its kernels."""
    tc = find_toolchain()
    runtime = model_runtime(tc)
    keep = workdir / "keep"
    keep.mkdir(parents=True, exist_ok=True)
    exe = workdir / "program"
    _nvcc(tc, [f"-arch={CPU_MODEL_ARCH}", "-cudart", "none", "--keep", "--keep-dir", str(keep),
               *_common(source), str(runtime), "-o", str(exe)], source)
    ptx_files = sorted(keep.glob("*.ptx"))
    if not ptx_files:
        raise ProgramCompileError("nvcc kept no PTX for this program", [])
    return Build(exe, ptx_files[-1].read_text(), tuple(hints.source_notes(
        source.read_text(errors="replace"))))


def gpu_arch() -> str:
    """The ``-arch`` of the GPU here: ``sm_90a`` on a Hopper (the course's matrix forms),
    ``sm_XY`` elsewhere, ``native`` when CuPy cannot say."""
    try:
        import cupy

        cc = str(cupy.cuda.Device().compute_capability)
    except Exception:
        return "native"
    return f"sm_{cc}a" if cc == "90" else f"sm_{cc}"


def build_for_gpu(source: Path, workdir: Path) -> Build:
    """``source`` built as nvcc builds it, for the GPU of this machine."""
    tc = find_toolchain()
    exe = workdir / "program"
    _nvcc(tc, [f"-arch={gpu_arch()}", *_common(source), "-o", str(exe)], source)
    return Build(exe, "", tuple(hints.source_notes(source.read_text(errors="replace"))))


def scratch_dir() -> Path:
    """A private folder for one build."""
    return Path(tempfile.mkdtemp(prefix="ptxlab-run-"))
