"""CUDA C++ -> PTX on a machine without a GPU.

A learner's laptop has no ``nvcc``, but NVRTC ships as a pip wheel (``nvidia-cuda-nvrtc-cu12``),
so the compiler is looked for in this order, and the first that works is used:

1. the library named by ``$PTXLAB_NVRTC`` (a path to ``libnvrtc.so``/``nvrtc64_*.dll``);
2. the NVRTC of an installed NVIDIA wheel (``nvidia/cuda_nvrtc/lib``, ``nvidia/cu13/lib`` ...);
3. ``cuda.pathfinder``'s search (the library cuda-python itself would load);
4. a system library (``/usr/local/cuda/lib64``, the loader's path);
5. ``nvcc -ptx`` as a last resort.

PTX is cached on disk (keyed by compiler, source, options and the headers under every ``-I``
folder), so a second run of the same cell does not compile again. The cache is
content-addressed and verified on every read: an entry holds its own key and the SHA-256 of its
PTX, and one that does not match (written by something else, cut short, swapped for another
entry) is removed and compiled again. PTX larger than :data:`MAX_CACHED_PTX_BYTES` is not
written to disk at all.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import CompileError, CompilerNotFound

#: The architecture the PTX is generated for (stmatrix needs sm_90).
TARGET_ARCH = "compute_90"

_LIB_ENV = "PTXLAB_NVRTC"
_CACHE_ENV = "PTXLAB_CACHE_DIR"


# ---------------------------------------------------------------------------------------------
# Finding a compiler
# ---------------------------------------------------------------------------------------------

def _nvidia_package_dirs() -> list[Path]:
    """Every ``nvidia`` namespace folder on ``sys.path`` (where the NVIDIA wheels install)."""
    dirs = []
    for entry in sys.path:
        cand = Path(entry or ".") / "nvidia"
        if cand.is_dir():
            dirs.append(cand)
    return dirs


def _wheel_library_candidates() -> list[Path]:
    found = []
    patterns = ("libnvrtc.so*", "nvrtc64_*.dll")
    for base in _nvidia_package_dirs():
        for sub in ("cuda_nvrtc/lib", "cuda_nvrtc/bin", "cu13/lib", "cu12/lib", "cu13/bin"):
            for pat in patterns:
                for p in sorted(glob.glob(str(base / sub / pat)), reverse=True):
                    name = os.path.basename(p)
                    if "builtins" in name or ".alt." in name:
                        continue
                    found.append(Path(p))
    return found


def _system_library_candidates() -> list[Path]:
    found = []
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            found += [Path(p) for p in sorted(glob.glob(os.path.join(root, sub, "libnvrtc.so*")),
                                              reverse=True)
                      if "builtins" not in p and ".alt." not in p]
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(Path(name))
    return found


def _pathfinder_candidate() -> list[Path]:
    try:
        from cuda import pathfinder  # type: ignore
    except Exception:
        return []
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
        path = getattr(loaded, "abs_path", None)
        return [Path(path)] if path else []
    except Exception:
        return []


@dataclass
class Compiler:
    """One way of turning CUDA C++ into PTX, and its name for messages."""

    kind: str                 # "nvrtc" or "nvcc"
    path: str                 # the library or the executable
    version: str              # e.g. "12.9"
    lib: ctypes.CDLL | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.version} ({self.path})"


_COMPILER: Compiler | None = None
_COMPILER_PROBLEMS: list[str] = []
_LOCK = threading.Lock()


def _load_nvrtc(path: Path) -> Compiler:
    lib = ctypes.CDLL(str(path))
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        raise OSError("nvrtcVersion failed")
    c_char_pp = ctypes.POINTER(ctypes.c_char_p)
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                       ctypes.c_char_p, ctypes.c_int, c_char_pp, c_char_pp]
    lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, c_char_pp]
    lib.nvrtcGetProgramLogSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetProgramLog.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcGetPTXSize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.nvrtcGetPTX.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return Compiler("nvrtc", str(path), f"{major.value}.{minor.value}", lib)


def _find_nvcc() -> Compiler | None:
    exe = shutil.which("nvcc")
    if not exe:
        for root in filter(None, [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
            cand = os.path.join(root, "bin", "nvcc")
            if os.path.exists(cand):
                exe = cand
                break
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = "?"
    for token in out.replace(",", " ").split():
        if token.startswith("V") and token[1:2].isdigit():
            version = token[1:]
    return Compiler("nvcc", exe, version)


def find_compiler() -> Compiler:
    """The compiler this machine will use (cached); raises :class:`CompilerNotFound`."""
    global _COMPILER
    with _LOCK:
        if _COMPILER is not None:
            return _COMPILER
        problems: list[str] = []
        candidates: list[Path] = []
        if os.environ.get(_LIB_ENV):
            candidates.append(Path(os.environ[_LIB_ENV]))
        candidates += _wheel_library_candidates() + _pathfinder_candidate()
        candidates += _system_library_candidates()
        seen = set()
        for cand in candidates:
            if str(cand) in seen:
                continue
            seen.add(str(cand))
            try:
                _COMPILER = _load_nvrtc(cand)
                return _COMPILER
            except (OSError, AttributeError) as exc:
                problems.append(f"{cand}: {exc}")
        nvcc = _find_nvcc()
        if nvcc is not None:
            _COMPILER = nvcc
            return nvcc
        _COMPILER_PROBLEMS[:] = problems
        tried = ("; ".join(problems)) if problems else "no libnvrtc found"
        raise CompilerNotFound(
            "no CUDA compiler found: install NVRTC with `pip install nvidia-cuda-nvrtc-cu12` "
            f"(or set {_LIB_ENV} to a libnvrtc path, or put nvcc on PATH). Tried: {tried}")


def compiler_status() -> tuple[bool, str]:
    """(usable, one line saying which compiler or why none)."""
    try:
        return True, find_compiler().describe()
    except CompilerNotFound as exc:
        return False, str(exc)


# ---------------------------------------------------------------------------------------------
# Header folders shipped in wheels (cuda_fp16.h, cuda_bf16.h)
# ---------------------------------------------------------------------------------------------

def cuda_include_dirs() -> list[str]:
    """Folders holding ``cuda_fp16.h`` & co. (the ``nvidia-cuda-runtime-cu12`` wheel, a toolkit)."""
    dirs = []
    for base in _nvidia_package_dirs():
        for sub in ("cuda_runtime/include", "cu13/include", "cu12/include"):
            if (base / sub / "cuda_fp16.h").exists():
                dirs.append(str(base / sub))
    for root in filter(None, [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"),
                              "/usr/local/cuda"]):
        cand = os.path.join(root, "include")
        if os.path.exists(os.path.join(cand, "cuda_fp16.h")):
            dirs.append(cand)
    out: list[str] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out[:1]


# ---------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """``$PTXLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxlab``, else ``~/.cache/ptxlab``."""
    if os.environ.get(_CACHE_ENV):
        return Path(os.environ[_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptxlab"


def _folder_signature(folder: Path) -> str:
    """Size and mtime of every header under ``folder`` (the first 2000)."""
    h = hashlib.sha256()
    count = 0
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".cuh", ".h", ".hpp", ".cu", ".inc") and path.is_file():
            st = path.stat()
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
            count += 1
            if count > 2000:
                break
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _toolkit_signature(folder: str) -> str:
    """A CUDA toolkit's header folder does not change while a process runs: its signature (two
    thousand headers, most of a cache hit's cost) is taken once per process."""
    return _folder_signature(Path(folder))


def _include_signature(options: tuple[str, ...]) -> str:
    """Size and mtime of every header under the user's ``-I`` folders, so edits invalidate."""
    h = hashlib.sha256()
    toolkit = set(cuda_include_dirs())
    for opt in options:
        if not opt.startswith("-I") or len(opt) <= 2:
            continue
        folder = Path(opt[2:])
        if opt[2:] in toolkit:
            h.update(_toolkit_signature(opt[2:]).encode())
        elif folder.is_dir():
            h.update(_folder_signature(folder).encode())
    return h.hexdigest()


def _full_options(options: tuple[str, ...], line_info: bool) -> tuple[str, ...]:
    """The compiler's options: ``compute_90`` unless the caller names an architecture (e.g.
    ``--gpu-architecture=compute_100a`` for the sm_100a-class ldmatrix/stmatrix forms)."""
    named = any(o.startswith(("--gpu-architecture", "-arch")) for o in options)
    opts = [] if named else [f"--gpu-architecture={TARGET_ARCH}"]
    if line_info:
        opts.append("-lineinfo")
    opts += list(options)
    for inc in cuda_include_dirs():
        opts.append(f"-I{inc}")
    return tuple(opts)


def cache_key(source: str, options: tuple[str, ...], name: str, compiler: Compiler) -> str:
    h = hashlib.sha256()
    for part in (compiler.kind, compiler.version, name, source, "\0".join(options),
                 _include_signature(options)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


_MEMORY_CACHE: dict[str, str] = {}
#: Largest PTX written to the disk cache (a source that unrolls into gigabytes of PTX must not
#: fill the disk of the machine that compiles it).
MAX_CACHED_PTX_BYTES = 16 * 2**20
_CACHE_MAGIC = "// ptxlab-ptx-cache v1"


def _cache_entry(key: str, ptx: str) -> str:
    digest = hashlib.sha256(ptx.encode()).hexdigest()
    return f"{_CACHE_MAGIC} {key} {digest}\n{ptx}"


def _read_cache(path: Path, key: str) -> str | None:
    """The PTX of a verified cache entry; ``None`` (and the entry removed) when it is missing,
    not a regular file, too large, or does not hold exactly what its key names."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        if os.path.islink(path):
            _remove(path)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHED_PTX_BYTES + 256:
            _remove(path)
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read()
    finally:
        os.close(fd)
    head, _, body = raw.partition(b"\n")
    try:
        magic_key, digest = head.decode().rsplit(" ", 1)
        text = body.decode()
    except (UnicodeDecodeError, ValueError):
        _remove(path)
        return None
    if magic_key != f"{_CACHE_MAGIC} {key}" or hashlib.sha256(body).hexdigest() != digest:
        _remove(path)
        return None
    return text


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def compile_to_ptx(source: str, options: tuple[str, ...] = (), *, name: str = "kernel.cu",
                   line_info: bool = True, use_cache: bool = True) -> str:
    """PTX text of ``source`` for ``compute_90`` (or the architecture ``options`` name); raises
    :class:`CompileError` with the log."""
    compiler = find_compiler()
    opts = _full_options(tuple(options), line_info)
    key = cache_key(source, opts, name, compiler)
    if use_cache:
        if key in _MEMORY_CACHE:
            return _MEMORY_CACHE[key]
        text = _read_cache(cache_dir() / "ptx" / f"{key}.ptx", key)
        if text is not None:
            _MEMORY_CACHE[key] = text
            return text
    if compiler.kind == "nvrtc":
        ptx = _compile_nvrtc(compiler, source, opts, name)
    else:
        ptx = _compile_nvcc(compiler, source, opts, name)
    if use_cache:
        _MEMORY_CACHE[key] = ptx
        if len(ptx) <= MAX_CACHED_PTX_BYTES:
            _write_cache(cache_dir() / "ptx" / f"{key}.ptx", _cache_entry(key, ptx))
    return ptx


#: ``$PTXLAB_CACHE_MAX_MB``: the most the PTX cache folder may hold; past it nothing more is
#: written (the grading launch service sets it: its cache lives in memory, on a tmpfs).
_CACHE_MAX_ENV = "PTXLAB_CACHE_MAX_MB"


def _cache_full(folder: Path) -> bool:
    limit = os.environ.get(_CACHE_MAX_ENV)
    if not limit:
        return False
    total = 0
    try:
        with os.scandir(folder) as it:
            for entry in it:
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        return False
    return total > float(limit) * 2**20


def _write_cache(path: Path, text: str) -> None:
    """Write atomically; a read-only or full disk (or cache budget) only costs a recompile."""
    if _cache_full(path.parent):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


def _compile_nvrtc(compiler: Compiler, source: str, options: tuple[str, ...], name: str) -> str:
    lib = compiler.lib
    assert lib is not None
    prog = ctypes.c_void_p()
    err = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if err != 0:
        raise CompileError(f"NVRTC could not create a program: {lib.nvrtcGetErrorString(err).decode()}")
    try:
        arr = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        err = lib.nvrtcCompileProgram(prog, len(options), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if err != 0:
            raise CompileError(f"compiling {name} failed ({lib.nvrtcGetErrorString(err).decode()})",
                               log)
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        return buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _compile_nvcc(compiler: Compiler, source: str, options: tuple[str, ...], name: str) -> str:
    nvcc_opts = []
    for opt in options:
        if opt.startswith("--gpu-architecture="):
            nvcc_opts.append("-arch=" + opt.split("=", 1)[1])
        else:
            nvcc_opts.append(opt)
    with tempfile.TemporaryDirectory(prefix="ptxlab-nvcc-") as tmp:
        src = Path(tmp) / name
        src.write_text(source)
        out = Path(tmp) / "out.ptx"
        proc = subprocess.run([compiler.path, "-ptx", *nvcc_opts, str(src), "-o", str(out)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise CompileError(f"compiling {name} with nvcc failed", proc.stderr + proc.stdout)
        return out.read_text()
