"""What a launch request may ask for, checked before anything compiles, wherever it runs.

A learner chooses the source and the compiler options of every launch. Neither may reach
outside the launch: a source is compiled only up to :data:`MAX_SOURCE_BYTES` (a larger one is
refused with the limit in the message, never handed to another compiler), and the options are
those of :data:`ALLOWED_OPTIONS` only -- macros, the language level, floating-point and
register settings. An option that names a file or a folder (``-I``, ``--time=``, ``-MF``,
``--pch-dir=``, ``-include``...) could read outside the include path or write into a compile
cache that another student's launch reads, so none is accepted.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from .errors import RequestRefused

__all__ = ["MAX_SOURCE_BYTES", "ALLOWED_OPTIONS", "check_source", "check_options"]

#: Largest CUDA source a launch compiles (the course's largest kernel is 25 kB).
MAX_SOURCE_BYTES = 1 << 20
#: Options a launch may pass to the compiler, as full-match patterns.
ALLOWED_OPTIONS: tuple[str, ...] = (
    r"-D[A-Za-z_]\w*(=[^\s]{0,200})?", r"--define-macro=[A-Za-z_]\w*(=[^\s]{0,200})?",
    r"-U[A-Za-z_]\w*", r"--undefine-macro=[A-Za-z_]\w*",
    r"--?std=c\+\+(11|14|17|20)",
    r"-lineinfo", r"--generate-line-info", r"-G", r"--device-debug",
    r"--?use_fast_math", r"--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
    r"--?maxrregcount=\d{1,3}", r"-w", r"--disable-warnings", r"--?restrict",
    r"--?extra-device-vectorization", r"-default-device",
    # the target the PTX is made for (notebook 9's sm_100a-class forms): names no file
    r"(--gpu-architecture|-arch)=(compute|sm)_\d{2,3}[af]?",
)
_ALLOWED = [re.compile(p) for p in ALLOWED_OPTIONS]


def check_source(source: str) -> None:
    """Refuse a source over :data:`MAX_SOURCE_BYTES` (counted in UTF-8 bytes)."""
    if not isinstance(source, str):
        raise RequestRefused(f"the kernel source must be a str, got {type(source).__name__}")
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise RequestRefused(
            f"the kernel source is {size / 2**20:.1f} MiB; sources over "
            f"{MAX_SOURCE_BYTES / 2**20:g} MiB are not compiled (is a table or a file pasted "
            "into it?)")


def check_options(options: Sequence[str]) -> tuple[str, ...]:
    """The options as a tuple, each one allowed; refuse the first that is not, by name."""
    out = []
    for opt in options:
        if not isinstance(opt, str):
            raise RequestRefused(f"compiler options must be strings, got {type(opt).__name__}")
        if not any(p.fullmatch(opt) for p in _ALLOWED):
            raise RequestRefused(
                f"the compiler option {opt[:80]!r} is not allowed: a launch may pass macros "
                "(-DNAME=VALUE, -UNAME), -std=c++17, -lineinfo, -G, --use_fast_math, "
                "-ftz/-prec-div/-prec-sqrt/-fmad=true|false, -maxrregcount=N and "
                "--gpu-architecture=compute_NN, never an "
                "option that names a file or a folder")
        out.append(opt)
    return tuple(out)
