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

NVRTC (12.x, 13.0) has no C or C++ standard header; the caller's ``fallback_includes`` (ptxlab's
stand-ins, ``ptxlab/run/nvrtc_headers``) come last on its include path. A kernel that is a C++
function (not ``extern "C"``) has a mangled name in the PTX (``_Z11ldmatrix_x4Pt``), and a
template kernel exists only once instantiated: both are asked for by their C++ name
(``ldmatrix_x4``, ``kernel<float, 4>``), which NVRTC itself lowers (``nvrtcAddNameExpression`` /
``nvrtcGetLoweredName``: :func:`compile_with_lowered_names`).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

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
    import ctypes.util      # only where a library is looked for: a cached PTX never pays 4 ms

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
    # C++ kernel names (every NVRTC since 8.0 has them)
    lib.nvrtcAddNameExpression.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcGetLoweredName.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_char_p)]
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


def _candidates():
    """The NVRTC libraries to try, best first, each group looked for only when the ones before
    it failed (asking ``cuda.pathfinder`` costs an import and a search)."""
    if os.environ.get(_LIB_ENV):
        yield Path(os.environ[_LIB_ENV])
    for group in (_wheel_library_candidates, _pathfinder_candidate, _system_library_candidates):
        yield from group()


#: NVRTC libraries that loaded here before: path -> (size, mtime_ns, version), in the cache.
_LOADED_FILE = "nvrtc_loaded.json"


def _library_stamp(path: Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _loaded_note() -> dict:
    """The cache's note of the NVRTC libraries that loaded (empty if missing or unreadable)."""
    try:
        known = json.loads((cache_dir() / _LOADED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _remember_loaded(compiler: Compiler) -> None:
    """Note that ``compiler``'s library loaded, so a later process can name it unloaded."""
    known = _loaded_note()
    stamp = _library_stamp(Path(compiler.path))
    if stamp is not None and known.get(compiler.path) != [*stamp, compiler.version]:
        known[compiler.path] = [*stamp, compiler.version]
        _write_cache(cache_dir() / _LOADED_FILE, json.dumps(known))


#: The compiler :func:`named_compiler` named from the note, once per process.
_NAMED: Compiler | None = None


def named_compiler() -> Compiler:
    """The compiler :func:`find_compiler` would load, named without loading it where that is
    known: the first NVRTC library on the search, when this cache saw it load before with the
    same size and time (its version as it then reported). A cached PTX needs only the name;
    loading NVRTC is most of what a first check in a new process spends before its kernel
    runs. Otherwise (and whenever a compile is needed) :func:`find_compiler`. The note is read
    once per process, as the library is loaded once per process."""
    global _NAMED
    if _COMPILER is not None:
        return _COMPILER
    if _NAMED is not None:
        return _NAMED
    first = next(iter(_candidates()), None)
    if first is not None:
        entry = _loaded_note().get(str(first))
        stamp = _library_stamp(first)
        if (isinstance(entry, list) and len(entry) == 3 and stamp is not None
                and entry[:2] == stamp and isinstance(entry[2], str)):
            _NAMED = Compiler("nvrtc", str(first), entry[2])
            return _NAMED
    return find_compiler()


def find_compiler() -> Compiler:
    """The compiler this machine will use (cached); raises :class:`CompilerNotFound`."""
    global _COMPILER
    with _LOCK:
        if _COMPILER is not None:
            return _COMPILER
        problems: list[str] = []
        seen = set()
        for cand in _candidates():
            if str(cand) in seen:
                continue
            seen.add(str(cand))
            try:
                _COMPILER = _load_nvrtc(cand)
                _remember_loaded(_COMPILER)
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
    """(usable, one line saying which compiler or why none): a library this cache saw load
    counts as usable without loading it again (see :func:`named_compiler`)."""
    try:
        return True, named_compiler().describe()
    except CompilerNotFound as exc:
        return False, str(exc)


# ---------------------------------------------------------------------------------------------
# Header folders shipped in wheels (cuda_fp16.h, cuda_bf16.h)
# ---------------------------------------------------------------------------------------------

def cuda_include_dirs() -> list[str]:
    """Folders holding ``cuda_fp16.h`` & co. (the ``nvidia-cuda-runtime-cu12`` wheel, a toolkit):
    the first of :func:`cuda_include_dir_candidates`, the one every compile puts on its path."""
    return cuda_include_dir_candidates()[:1]


def cuda_include_dir_candidates() -> list[str]:
    """Every CUDA include folder found here, in order of preference: the NVIDIA wheels', then
    ``$CUDA_PATH``, ``$CUDA_HOME`` and ``/usr/local/cuda``. A wheel's folder may lack what a
    toolkit's has (``crt/mma.h``, which ``<mma.h>`` needs, in CUDA 13's wheels)."""
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
        if d not in out and os.path.realpath(d) not in {os.path.realpath(o) for o in out}:
            out.append(d)
    return out


# ---------------------------------------------------------------------------------------------
# Compiling
# ---------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """``$PTXLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxlab``, else ``~/.cache/ptxlab``."""
    if os.environ.get(_CACHE_ENV):
        return Path(os.environ[_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ptxlab"


_HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".cu", ".inc")


def _folder_signature(folder: Path) -> str:
    """Size and mtime of every header under ``folder`` (the first 2000), walked with
    ``os.scandir`` (a toolkit's two thousand headers are most of a first compile's cost)."""
    h = hashlib.sha256()
    count = 0
    for path in sorted(_header_paths(str(folder))):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
        count += 1
        if count > 2000:
            break
    return h.hexdigest()


def _header_paths(top: str):
    """Every header name below ``top`` (the caller keeps the regular files, links followed)."""
    for root, _, files in os.walk(top):
        for name in files:
            if name.endswith(_HEADER_SUFFIXES):
                yield os.path.join(root, name)


@functools.lru_cache(maxsize=None)
def _toolkit_signature(folder: str) -> str:
    """A CUDA toolkit's header folder changes only when a toolkit or wheel is installed,
    upgraded or removed, and that adds, removes or replaces files, which changes the
    modification time of the folders holding them: so its signature is every folder's path,
    modification time and inode (a hundred or so folders, where the headers are two thousand
    files to stat), taken once per process. A file's name adds nothing its folder's time does
    not already say, so names are not signed."""
    h = hashlib.sha256()
    for root, dirs, _ in os.walk(folder):
        dirs.sort()
        try:
            st = os.stat(root)
        except OSError:
            continue
        h.update(f"{root}:{st.st_mtime_ns}:{st.st_ino};".encode())
    return h.hexdigest()


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


def _full_options(options: tuple[str, ...], line_info: bool,
                  fallback_includes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The compiler's options: ``compute_90`` unless the caller names an architecture (e.g.
    ``--gpu-architecture=compute_100a`` for the sm_100a-class ldmatrix/stmatrix forms); the
    toolkit's headers, then ``fallback_includes`` (``-I`` options), last on the path so that
    no header of theirs shadows a real one."""
    named = any(o.startswith(("--gpu-architecture", "-arch")) for o in options)
    opts = [] if named else [f"--gpu-architecture={TARGET_ARCH}"]
    if line_info:
        opts.append("-lineinfo")
    opts += list(options)
    for inc in cuda_include_dirs():
        opts.append(f"-I{inc}")
    opts += list(fallback_includes)
    return tuple(opts)


def _fallback_signature(fallback_includes: tuple[str, ...]) -> str:
    """Size and mtime of every file (names without a suffix too: ``cstdint``) under the
    fallback include folders, so an edit of a stand-in header compiles again."""
    h = hashlib.sha256()
    for opt in fallback_includes:
        folder = Path(opt[2:])
        if folder.is_dir():
            for path in sorted(folder.iterdir()):
                if path.is_file():
                    st = path.stat()
                    h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def reaches_headers(source: str, options: tuple[str, ...], compiler: Compiler) -> bool:
    """Whether a compile can read a header file: NVRTC reads one only where the source, its
    lines joined as the preprocessor joins them, says ``include`` (``#include``,
    ``__has_include``) or an option pre-includes one; nvcc includes the runtime's headers in
    every compile. A source that reaches none keys without signing the header folders."""
    if compiler.kind != "nvrtc":
        return True
    joined = re.sub(r"(\\|\?\?/)\r?\n", "", source)
    return "include" in joined or any("include" in o for o in options
                                      if not o.startswith("-I"))


def cache_key(source: str, options: tuple[str, ...], name: str, compiler: Compiler,
              name_expressions: tuple[str, ...] = (),
              fallback_includes: tuple[str, ...] = ()) -> str:
    """The cache entry's name: compiler, source, options and the headers they can reach (and
    the C++ names asked for, when any: a source compiled without them keys as it always has)."""
    h = hashlib.sha256()
    parts = [compiler.kind, compiler.version, name, source, "\0".join(options)]
    if reaches_headers(source, options, compiler):
        parts.append(_include_signature(options))
        if fallback_includes:
            parts.append(_fallback_signature(fallback_includes))
    if name_expressions:
        parts += ["name expressions", "\0".join(name_expressions)]
    for part in parts:
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
                   line_info: bool = True, use_cache: bool = True,
                   fallback_includes: Sequence[str] = ()) -> str:
    """PTX text of ``source`` for ``compute_90`` (or the architecture ``options`` name); raises
    :class:`CompileError` with the log.

    ``fallback_includes`` (``-I`` options) come last on NVRTC's include path, after the
    toolkit's headers: the stand-ins for the standard headers NVRTC lacks. nvcc, which has the
    real headers, is not given them.
    """
    return _compile_cached(source, tuple(options), name, line_info, use_cache, (),
                           tuple(fallback_includes))


def compile_with_lowered_names(source: str, options: tuple[str, ...] = (),
                               name_expressions: Sequence[str] = (), *,
                               name: str = "kernel.cu", line_info: bool = True,
                               use_cache: bool = True, fallback_includes: Sequence[str] = (),
                               ) -> tuple[str, dict[str, str]]:
    """``(ptx, lowered)``: PTX of ``source`` with each C++ name expression (``"ldmatrix_x4"``,
    ``"kernel<float, 4>"``) instantiated, and ``lowered[expression]``, the mangled name of its
    ``.entry`` as NVRTC gives it (``nvrtcGetLoweredName``). An expression that names nothing
    the source defines fails the compile (:class:`CompileError`). nvcc lowers no names:
    ``lowered`` is then empty and the caller matches demangled entry names instead.

    The names travel with the PTX in the cache entry (comment lines after the PTX, covered by
    the entry's digest), so a cache hit knows them without a compiler.
    """
    exprs = tuple(name_expressions)
    for expr in exprs:
        if not is_name_expression(expr):
            raise CompileError(f"{expr[:80]!r} is not a C++ kernel name")
    ptx = _compile_cached(source, tuple(options), name, line_info, use_cache, exprs,
                          tuple(fallback_includes))
    return ptx, lowered_names(ptx)


def _compile_cached(source: str, options: tuple[str, ...], name: str, line_info: bool,
                    use_cache: bool, name_expressions: tuple[str, ...],
                    fallback_includes: tuple[str, ...]) -> str:
    def keyed(compiler: Compiler):
        fallback = fallback_includes if compiler.kind == "nvrtc" else ()
        opts = _full_options(options, line_info, fallback)
        return opts, cache_key(source, opts, name, compiler, name_expressions, fallback)

    def cached(key: str) -> str | None:
        if key in _MEMORY_CACHE:
            return _MEMORY_CACHE[key]
        text = _read_cache(cache_dir() / "ptx" / f"{key}.ptx", key)
        if text is not None:
            _MEMORY_CACHE[key] = text
        return text

    compiler = named_compiler() if use_cache else find_compiler()
    opts, key = keyed(compiler)
    if use_cache and (text := cached(key)) is not None:
        return text
    if compiler.lib is None and compiler.kind == "nvrtc":          # named, not loaded
        loaded = find_compiler()
        if (loaded.kind, loaded.path, loaded.version) != (compiler.kind, compiler.path,
                                                          compiler.version):
            opts, key = keyed(loaded)
            if (text := cached(key)) is not None:
                return text
        compiler = loaded
    if compiler.kind == "nvrtc":
        ptx, lowered = _compile_nvrtc(compiler, source, opts, name, name_expressions)
        ptx += _lowered_trailer(lowered)
    else:
        ptx = _compile_nvcc(compiler, source, opts, name)
    if use_cache:
        _MEMORY_CACHE[key] = ptx
        if len(ptx) <= MAX_CACHED_PTX_BYTES:
            _write_cache(cache_dir() / "ptx" / f"{key}.ptx", _cache_entry(key, ptx))
    return ptx


# ---------------------------------------------------------------------------------------------
# C++ kernel names
# ---------------------------------------------------------------------------------------------

#: What a kernel name may be when it is handed to NVRTC as a name expression: a (qualified)
#: identifier, optionally ``&`` before it and template arguments after it, on one line, with
#: no quote, ``#``, ``;``, brace, slash or backslash -- so it can carry no directive, comment,
#: string or statement into the compile.
_NAME_EXPRESSION = re.compile(r"&?[ ]*(::)?[A-Za-z_][A-Za-z0-9_]*"
                              r"(::[A-Za-z_][A-Za-z0-9_]*)*[ ]*(<[A-Za-z0-9_:<>,.()+\-*& \[\]]*>)?[ ]*",
                              re.ASCII)
#: The longest kernel name handed to NVRTC.
MAX_NAME_EXPRESSION = 400
_TRAILER = "// ptxlab lowered name: "


def is_name_expression(text: str) -> bool:
    """Whether ``text`` may be handed to NVRTC as a kernel's C++ name (see _NAME_EXPRESSION)."""
    return (isinstance(text, str) and 0 < len(text) <= MAX_NAME_EXPRESSION
            and _NAME_EXPRESSION.fullmatch(text) is not None)


def base_name(expression: str) -> str:
    """The function's own name in a name expression: ``ns::k<float, 4>`` -> ``k``."""
    head = expression.strip().lstrip("&").split("<", 1)[0].strip()
    return head.rsplit("::", 1)[-1].strip()


def demangled_base(text: str) -> str:
    """The function's own name in a demangled signature: ``void ns::k<float, 4>(float*)`` ->
    ``k``, ``ldmatrix_x4(unsigned short*)`` -> ``ldmatrix_x4``."""
    head = text.split("(", 1)[0].split("<", 1)[0].strip()
    last = head.split()[-1] if head.split() else head
    return last.rsplit("::", 1)[-1]


def unknown_kernel_message(kernel: str, entries: Sequence[str], source: str) -> str:
    """Why ``kernel`` was not found, with the kernels ``source`` defines by their C++ names
    (demangled; the mangled ones where there is no ``c++filt``) and its template kernels,
    which are asked for with their template arguments."""
    shown = demangle(list(entries))
    hint = (f"kernels in this source: {', '.join(shown)}" if shown
            else "the source defines no kernel")
    templates = template_kernels(source)
    if templates:
        hint += (f"; template kernels, named with their arguments (e.g. "
                 f"'{templates[0]}<float, 4>'): {', '.join(templates)}")
    return (f"no kernel named {kernel!r} in the compiled source (an extern \"C\" kernel by its "
            f"name, a C++ one by its C++ name, a template one as 'name<args>'); {hint}")


_TEMPLATE_KERNEL = re.compile(r"\btemplate\s*<([^{};]*?)>\s*([^;{}()]*?)\b([A-Za-z_]\w*)\s*\(")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def template_kernels(source: str) -> list[str]:
    """The names of the ``__global__`` function templates ``source`` defines (a textual scan):
    they are in no PTX until a launch names an instance."""
    code = _LAUNCH_BOUNDS.sub(" ", _COMMENTS.sub(" ", source))
    return list(dict.fromkeys(m.group(3) for m in _TEMPLATE_KERNEL.finditer(code)
                              if "__global__" in m.group(2)))


def defined_kernel_names(entries: Sequence[str], source: str) -> set[str]:
    """The functions' own names of the kernels ``source`` defines: its PTX entries (demangled)
    and its ``__global__`` templates. A name expression whose function is among them and still
    fails to compile is the kernel's own compile error, not an unknown name."""
    return {demangled_base(text) for text in demangle(list(entries))} | set(template_kernels(source))


def name_problem(kernel: str, entries: Sequence[str], source: str) -> str | None:
    """Why ``kernel`` cannot be a C++ name to look up in ``source`` (whose compiled entries are
    ``entries``), before anything compiles again: not a name at all, or a template kernel named
    without its arguments; ``None`` when it may be."""
    if not is_name_expression(kernel):
        return unknown_kernel_message(kernel, entries, source)
    if "<" not in kernel and base_name(kernel) in template_kernels(source):
        return (f"{kernel!r} is a template kernel: name the instance to launch with its "
                f"template arguments, e.g. '{base_name(kernel)}<float, 4>' (the kernels in this "
                f"source: {', '.join(demangle(list(entries))) or 'none instantiated'})")
    return None


def _lowered_trailer(lowered: dict[str, str]) -> str:
    return "".join(f"\n{_TRAILER}{mangled} {expr}" for expr, mangled in lowered.items())


def lowered_names(ptx: str) -> dict[str, str]:
    """``{expression: mangled name}`` recorded after the PTX by :func:`compile_with_lowered_names`."""
    out: dict[str, str] = {}
    for line in ptx.splitlines():
        if line.startswith(_TRAILER):
            mangled, _, expr = line[len(_TRAILER):].partition(" ")
            out[expr] = mangled
    return out


_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)*\.entry\s+([A-Za-z_$%][\w$]*)", re.M)


def entry_names(ptx: str) -> list[str]:
    """The ``.entry`` (kernel) names of ``ptx``, in order: mangled for C++ kernels."""
    return list(dict.fromkeys(_ENTRY.findall(ptx)))


def demangle(names: Sequence[str]) -> list[str]:
    """C++ names for mangled ones (``_Z11ldmatrix_x4Pt`` -> ``ldmatrix_x4(unsigned short*)``),
    by ``c++filt``; names that are not mangled, and all of them where there is no ``c++filt``,
    come back unchanged."""
    names = list(names)
    mangled = [n for n in names if n.startswith("_Z")]
    exe = shutil.which("c++filt") if mangled else None
    if not exe:
        return names
    try:
        out = subprocess.run([exe], input="\n".join(mangled) + "\n", capture_output=True,
                             text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return names
    if len(out) != len(mangled):
        return names
    table = dict(zip(mangled, out))
    return [table.get(n, n) for n in names]


def demangled_matches(expression: str, entries: Sequence[str]) -> list[str]:
    """The entries whose demangled name is ``expression`` called (``k`` matches
    ``k(float*)``; ``k<float, 4>`` matches ``void k<float, 4>(float*)``): the lookup where the
    compiler lowered no names (nvcc)."""
    want = "".join(expression.lstrip("&").split())
    found = []
    for entry, text in zip(entries, demangle(entries)):
        head = "".join(text.split("(", 1)[0].split())
        if head == want or head.endswith(f"void{want}") or head.endswith(f"::{want}"):
            found.append(entry)
    return found


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


def _compile_nvrtc(compiler: Compiler, source: str, options: tuple[str, ...], name: str,
                   name_expressions: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """``(ptx, {expression: lowered name})`` of one NVRTC compile."""
    lib = compiler.lib
    assert lib is not None
    prog = ctypes.c_void_p()
    err = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if err != 0:
        raise CompileError(f"NVRTC could not create a program: {lib.nvrtcGetErrorString(err).decode()}")
    try:
        for expr in name_expressions:
            err = lib.nvrtcAddNameExpression(prog, expr.encode())
            if err != 0:
                raise CompileError(f"NVRTC refused the kernel name {expr!r}: "
                                   f"{lib.nvrtcGetErrorString(err).decode()}")
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
        lowered: dict[str, str] = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            if lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)) == 0 and out.value:
                lowered[expr] = out.value.decode()
        return buf.value.decode(), lowered
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
