"""Which files a kernel source really includes, decided from its preprocessed text.

A textual scan of ``#include`` lines misses the spellings the preprocessor accepts: the digraph
``%:include``, a line splice (``#\\`` and a newline before ``include``), a macro that expands to
the file's name, ``__has_include`` probes. The only reliable answer is the preprocessor's own:
:func:`included_files` runs the C preprocessor over the source, with the include path and the
predefined macros NVRTC compiles it with, and reads the files back from the line markers of its
output. :func:`check_includes` refuses a source that includes anything but the course's public
headers, the CUDA toolkit's, and ptxlab's stand-ins for the standard headers NVRTC lacks
(``ptxlab/run/nvrtc_headers``: ``<cstdint>``, ``<cstdio>``, ``<iostream>``...; the same folder,
last on the path, as every NVRTC compile has). Any other file -- a reference kernel, a path
outside the include folders, a standard header ptxlab does not stand in for -- is still refused.

It runs where the compile runs: in a grading run, inside the launch service's sandbox, whose
file system holds no reference kernel -- so a probe (``__has_include``) learns nothing about
files outside the include path, and an include of one fails in the preprocessor and in the
compiler alike.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import sources
from .errors import RequestRefused

__all__ = ["CHECK_ENV", "included_files", "check_includes", "preprocessor", "NVRTC_BUILTIN_HEADERS",
           "standin_headers"]

#: ``1``: every launch of this process checks its source's includes first (the grading launch
#: service sets it).
CHECK_ENV = "PTXLAB_CHECK_INCLUDES"
#: Empty stand-ins for the preprocessor, after the toolkit's folder: the toolkit headers a kernel
#: may include whatever this machine has (where it has no CUDA include folder they let the
#: preprocessor through, and the compile says what is missing), and NVRTC's own internal
#: headers ``target`` and ``nvrtc_device_runtime.h``, which the toolkit's ``cuda_runtime.h``
#: includes under NVRTC and NVRTC supplies itself (no file of those names is on any include
#: path, and a learner's source cannot open them) -- without them the preprocessor refused
#: every ``#include <cuda_runtime.h>``. NVRTC 12.x and 13.0 have no ``cuda_fp16.h`` of their
#: own; the standard headers (``<cstdint>``...) are ptxlab's stand-ins, checked as the files
#: they are.
NVRTC_BUILTIN_HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp",
                         "cuda_fp8.h", "cuda_fp8.hpp", "cuda_runtime.h", "target",
                         "nvrtc_device_runtime.h")
#: The macros NVRTC predefines that a source could test to include one file or another.
_NVRTC_MACROS = ("__CUDACC__", "__CUDACC_RTC__", "__CUDA_ARCH__=900", "__CUDACC_VER_MAJOR__=12",
                 "__CUDACC_VER_MINOR__=9", "__NVCC_DIAG_PRAGMA_SUPPORT__", "__EDG__",
                 "__LP64__", "__x86_64__", "__linux__", "__CHAR_BIT__=8")
_MARKER = re.compile(rb'^# \d+ "((?:[^"\\]|\\.)*)"', re.M)
_TIMEOUT_S = 30.0
_checked: dict[str, None] = {}


@functools.lru_cache(maxsize=1)
def preprocessor() -> str | None:
    """The C preprocessor used (``cpp``), or ``None`` where there is none."""
    return shutil.which("cpp")


_stub_dir: str | None = None


def _builtin_stub_dir() -> str:
    """A folder of empty stand-ins for NVRTC's built-in headers, made again when it is gone: a
    warm launch executor empties its temporary folder between students, and a stale path would
    make the next student's ``#include <cstdint>`` an include that cannot be found."""
    global _stub_dir
    if _stub_dir is None or not all(os.path.isfile(os.path.join(_stub_dir, name))
                                    for name in NVRTC_BUILTIN_HEADERS):
        folder = Path(tempfile.mkdtemp(prefix="ptxlab-nvrtc-builtins-"))
        for name in NVRTC_BUILTIN_HEADERS:
            (folder / name).write_text("")
        _stub_dir = str(folder)
    return _stub_dir


def _toolkit_dirs() -> list[str]:
    """Every CUDA include folder here, the compiles' own first: a GPU compile of a source that
    includes ``<mma.h>`` may take ``crt/mma.h`` from a toolkit other than the first (see
    ``gpu.compile_options``). Toolkit folders hold no course code, so all of them may be read."""
    from .ptx import nvrtc

    return nvrtc.cuda_include_dir_candidates()


def _standin_options() -> tuple[str, ...]:
    """``-I`` of ptxlab's stand-ins for the standard headers, last, as NVRTC compiles have it."""
    return sources.nvrtc_include_options()


def _option_macros(options: Sequence[str]) -> list[str]:
    """The learner's ``-D``/``-U`` options, as the preprocessor takes them."""
    out = []
    for opt in options:
        if opt.startswith(("-D", "-U")):
            out.append(opt)
        elif opt.startswith("--define-macro="):
            out.append("-D" + opt.split("=", 1)[1])
        elif opt.startswith("--undefine-macro="):
            out.append("-U" + opt.split("=", 1)[1])
    return out


def included_files(source: str, options: Sequence[str] = ()) -> list[str]:
    """Every file the preprocessed ``source`` names in its line markers, in order, the source
    itself as ``kernel.cu``. Raises :class:`RequestRefused` when the preprocessor stops (a file
    it cannot find) or is missing."""
    cpp = preprocessor()
    if cpp is None:
        raise RequestRefused("the kernel's includes cannot be checked: no C preprocessor (cpp) "
                             "here")
    with tempfile.TemporaryDirectory(prefix="ptxlab-includes-") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(source)
        argv = [cpp, "-x", "c++", "-std=c++17", "-undef", "-nostdinc", "-w",
                *(f"-D{m}" for m in _NVRTC_MACROS), *_option_macros(options),
                f"-I{sources.kernels_dir()}", *(f"-I{d}" for d in _toolkit_dirs()),
                f"-I{_builtin_stub_dir()}", *_standin_options(), "kernel.cu", "-o", "-"]
        try:
            proc = subprocess.run(argv, cwd=tmp, capture_output=True, timeout=_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RequestRefused(f"preprocessing the kernel took more than {_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        first = next((l for l in why if "error" in l), why[0] if why else "it failed")
        raise RequestRefused(f"the kernel's includes could not be resolved: {first[:300]}")
    names = []
    for m in _MARKER.finditer(proc.stdout):
        name = m.group(1).decode("utf-8", "replace")
        if name not in names:
            names.append(name)
    return names


def _allowed(name: str) -> bool:
    if name in ("kernel.cu", "<built-in>", "<command-line>", "<stdin>"):
        return True
    path = Path(os.path.normpath(name))
    if not path.is_absolute():
        path = Path(os.path.normpath(sources.kernels_dir() / path)) if not str(path).startswith(
            "kernels") else Path(os.path.abspath(path))
    public = {p.resolve() for p in sources.public_headers()}
    try:
        resolved = path.resolve()
    except OSError:
        return False
    if resolved in public:
        return True
    standins = sources.nvrtc_headers_dir().resolve()
    if resolved.parent == standins:
        return resolved.name in standin_headers()
    for folder in [*_toolkit_dirs(), _builtin_stub_dir()]:
        try:
            resolved.relative_to(Path(folder).resolve())
            return True
        except ValueError:
            continue
    return False


def standin_headers() -> list[str]:
    """The standard headers ptxlab stands in for (the files of ``ptxlab/run/nvrtc_headers``)."""
    folder = sources.nvrtc_headers_dir()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix != ".md")


def check_includes(source: str, options: Sequence[str] = ()) -> None:
    """Refuse (:class:`RequestRefused`) a source whose preprocessed text includes anything but
    the course's public headers, the toolkit's and ptxlab's stand-in standard headers; each
    source is checked once per process.

    Where there is no preprocessor nothing is checked here: the sandbox's file system, which
    holds no reference kernel, is then what keeps reference code out (the preflight says so).
    """
    key = hashlib.sha256("\0".join([source, *options]).encode()).hexdigest()
    if key in _checked or preprocessor() is None:
        return
    outside = [n for n in included_files(source, options) if not _allowed(n)]
    if outside:
        names = ", ".join(outside[:3])
        raise RequestRefused(
            f"the kernel includes {names}: only the course's instruction headers "
            f"({', '.join(sources.PUBLIC_HEADERS)}), the CUDA toolkit's and the standard "
            f"headers ptxlab stands in for ({', '.join(standin_headers())}) may be included")
    _checked[key] = None
