"""CUTLASS's own mma.sync GEMM as the capstone GEMM's peer: find nvcc and the headers, build.

The peer is ``kernels/cutlass_peer/gemm_sm80.cu``: ``cutlass::gemm::device::Gemm`` with the
SM80 tensor-op kernel (``mma.sync``, like ours), fp16 in, fp32 accumulate, fp16 out, built with
nvcc for sm_90 into one shared library per tile configuration and called through ctypes on CuPy's
pointers and stream, so it is timed and checked exactly like our kernel (:mod:`.runs`).

The headers come from, in this order: ``$PTXLAB_CUTLASS_INCLUDE``; the installed
``nvidia-cutlass`` package (``cutlass_library/source/include``); an ``nvidia_cutlass-*.whl`` in
the checkout's ``.whl/`` (unpacked once into the build cache), which is how a machine without a
network gets them. Where nvcc or the headers are missing, :func:`problem` says which.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib import util as _importlib_util
from pathlib import Path

from ..run import sources

SOURCE = "cutlass_peer/gemm_sm80.cu"
_INCLUDE_ENV = "PTXLAB_CUTLASS_INCLUDE"
_CACHE_ENV = "PTXLAB_PEER_CACHE"
_PROBE = Path("cutlass") / "gemm" / "device" / "gemm.h"
NVCC_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
              "-gencode=arch=compute_90,code=sm_90", "-Xcompiler", "-fPIC", "-shared")


@dataclass(frozen=True)
class PeerConfig:
    """One CUTLASS tile configuration: threadblock tile, warp tile, pipeline stages."""

    tb_m: int = 128
    tb_n: int = 256
    tb_k: int = 64
    warp_m: int = 64
    warp_n: int = 64
    stages: int = 3
    b_col: bool = False
    swizzle: int = 8          # GemmIdentityThreadblockSwizzle<N>

    @property
    def label(self) -> str:
        return (f"{self.tb_m}x{self.tb_n}x{self.tb_k} warp {self.warp_m}x{self.warp_n} "
                f"s{self.stages}")

    @property
    def variant(self) -> str:
        return f"B {'col' if self.b_col else 'row'}-major, f16 out"

    def defines(self) -> dict[str, int]:
        return {"PEER_TB_M": self.tb_m, "PEER_TB_N": self.tb_n, "PEER_TB_K": self.tb_k,
                "PEER_WARP_M": self.warp_m, "PEER_WARP_N": self.warp_n,
                "PEER_STAGES": self.stages, "PEER_B_COL": int(self.b_col),
                "PEER_SWIZZLE": self.swizzle}

    def check_shape(self, m: int, n: int, k: int) -> None:
        # CUTLASS predicates partial tiles itself; it needs 8-element (16-byte) alignment.
        if m % 8 or n % 8 or k % 8:
            raise ValueError(f"CUTLASS peer {self.label}: M, N, K must be multiples of 8")

    def as_dict(self) -> dict:
        return asdict(self)


def _tiles(b_col: bool) -> tuple[PeerConfig, ...]:
    shapes = ((128, 256, 64, 3), (128, 256, 64, 4), (256, 128, 64, 3), (256, 128, 64, 4),
              (128, 128, 64, 4), (128, 256, 32, 5))
    return tuple(PeerConfig(tb_m=m, tb_n=n, tb_k=k, stages=s, b_col=b_col)
                 for m, n, k, s in shapes)


#: The sweep measured beside our GEMM: CUTLASS's usual SM80 fp16 tiles (warp tiles 64x64), for
#: B row-major and column-major.
PEER_SWEEP = _tiles(False) + _tiles(True)


# ---------------------------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------------------------

def find_nvcc() -> Path | None:
    """nvcc on PATH, under ``$CUDA_HOME`` or in /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").exists():
            return Path(root) / "bin" / "nvcc"
    return None


def cache_dir() -> Path:
    """Where built libraries and unpacked headers go (``$PTXLAB_PEER_CACHE`` overrides)."""
    env = os.environ.get(_CACHE_ENV)
    base = Path(env) if env else Path.home() / ".cache" / "ptxlab" / "cutlass_peer"
    base.mkdir(parents=True, exist_ok=True)
    return base


def _wheels() -> list[Path]:
    return sorted((sources.PROJECT_ROOT / ".whl").glob("nvidia_cutlass-*.whl"))


def _unpack_wheel(wheel: Path) -> Path:
    """The include folder of an nvidia-cutlass wheel, unpacked once into the cache."""
    dest = cache_dir() / f"include-{wheel.stem}"
    marker = dest / ".complete"
    if not marker.exists():
        prefix = "cutlass_library/source/include/"
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith(prefix) and not name.endswith("/"):
                    target = dest / name[len(prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
        marker.write_text(wheel.name)
    return dest


def find_headers() -> tuple[Path | None, str]:
    """(include folder, where it came from), or (None, why none was found)."""
    env = os.environ.get(_INCLUDE_ENV)
    if env:
        if (Path(env) / _PROBE).exists():
            return Path(env), f"${_INCLUDE_ENV}"
        return None, f"${_INCLUDE_ENV}={env} has no {_PROBE}"
    spec = _importlib_util.find_spec("cutlass_library")
    if spec is not None and spec.origin:
        inc = Path(spec.origin).parent / "source" / "include"
        if (inc / _PROBE).exists():
            return inc, "the installed nvidia-cutlass package"
    wheels = _wheels()
    if wheels:
        try:
            inc = _unpack_wheel(wheels[-1])
        except (OSError, zipfile.BadZipFile) as exc:
            return None, f"{wheels[-1].name} could not be unpacked ({exc})"
        if (inc / _PROBE).exists():
            return inc, f"{wheels[-1].name} (unpacked)"
        return None, f"{wheels[-1].name} holds no {_PROBE}"
    return None, ("no CUTLASS headers: set $PTXLAB_CUTLASS_INCLUDE, pip install nvidia-cutlass, "
                  "or put its wheel in .whl/ (pip download nvidia-cutlass --no-deps -d .whl/)")


def cutlass_version(include: Path) -> str:
    text = (include / "cutlass" / "version.h").read_text(errors="replace")
    parts = [re.search(rf"#define CUTLASS_{p} (\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) or "unknown"


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([\d.]+)", out)
    return m.group(1) if m else "unknown"


def problem() -> str | None:
    """None if the peer can be built here, else why not (one line)."""
    if find_nvcc() is None:
        return "nvcc is not installed (not on PATH, $CUDA_HOME or /usr/local/cuda)"
    include, why = find_headers()
    return None if include is not None else why


# ---------------------------------------------------------------------------------------------
# Building and loading
# ---------------------------------------------------------------------------------------------

def nvcc_command(cfg: PeerConfig, nvcc: Path, include: Path, out: Path) -> list[str]:
    src = sources.kernels_dir() / SOURCE
    defs = [f"-D{k}={v}" for k, v in cfg.defines().items()]
    return [str(nvcc), *NVCC_FLAGS, *defs, f"-I{include}", str(src), "-o", str(out)]


def _library_path(cfg: PeerConfig, nvcc: Path, include: Path) -> Path:
    key = "\n".join([sources.read_kernel(SOURCE), repr(sorted(cfg.defines().items())),
                     str(nvcc), nvcc_version(nvcc), str(include), cutlass_version(include),
                     " ".join(NVCC_FLAGS)])
    return cache_dir() / f"peer-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def build(configs, jobs: int | None = None, timeout_s: int = 900) -> dict[PeerConfig, Path | str]:
    """Each configuration's shared library (built in parallel, or reused from the cache), or
    the reason it could not be built."""
    why = problem()
    if why:
        return {cfg: why for cfg in configs}
    nvcc = find_nvcc()
    include, _ = find_headers()

    def one(cfg: PeerConfig) -> Path | str:
        lib = _library_path(cfg, nvcc, include)
        if lib.exists():
            return lib
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        try:
            proc = subprocess.run(nvcc_command(cfg, nvcc, include, tmp), capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"nvcc took longer than {timeout_s} s"
        if proc.returncode != 0:
            return f"nvcc failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-800:]}"
        tmp.replace(lib)
        return lib

    workers = jobs or max(1, min(len(configs), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(configs, pool.map(one, configs)))


class PeerKernel:
    """One built configuration: ``kernel(a_ptr, b_ptr, c_ptr, m, n, k, stream_ptr)``."""

    def __init__(self, cfg: PeerConfig, library: Path):
        self.cfg = cfg
        self.library = library
        lib = ctypes.CDLL(str(library), mode=getattr(os, "RTLD_LOCAL", 0))
        self._gemm = lib.ptxlab_peer_gemm
        self._gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
        self._gemm.restype = ctypes.c_int
        self.smem_bytes = int(lib.ptxlab_peer_smem_bytes())
        self.threads = int(lib.ptxlab_peer_threads())

    def __call__(self, a: int, b: int, c: int, m: int, n: int, k: int, stream: int) -> None:
        status = self._gemm(a, b, c, m, n, k, stream)
        if status:
            kind = ("cutlass::Status" if status < 2000 else "cudaError")
            raise RuntimeError(f"CUTLASS peer {self.cfg.label}: {kind} "
                               f"{status - (1000 if status < 2000 else 2000)}")


def describe() -> dict:
    """What the peer is built from: CUTLASS and nvcc versions, where the headers came from."""
    nvcc = find_nvcc()
    include, how = find_headers()
    return {"nvcc": str(nvcc) if nvcc else None,
            "nvcc_version": nvcc_version(nvcc) if nvcc else None,
            "cutlass_include": str(include) if include else None, "headers_from": how,
            "cutlass_version": cutlass_version(include) if include else None,
            "flags": " ".join(NVCC_FLAGS), "source": f"kernels/{SOURCE}"}
