"""Where the CUDA sources in ``kernels/`` live, so every backend compiles the same files."""
from __future__ import annotations

import os
from pathlib import Path

_ENV = "PTXLAB_KERNELS_DIR"
#: The ``ptxlab`` package folder.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The folder that holds the package: the repository in a checkout (``course/``, ``kernels/``,
#: ``tests/``, ``reports/``, ``autograder/`` beside it), site-packages in an installed wheel.
#: Child processes put it first on ``PYTHONPATH`` so they import this very copy of ``ptxlab``.
PROJECT_ROOT = PACKAGE_DIR.parent


def kernels_dir() -> Path:
    """The ``kernels/`` folder: ``$PTXLAB_KERNELS_DIR``, else the one beside the package."""
    override = os.environ.get(_ENV)
    if override:
        return Path(override)
    for candidate in (PROJECT_ROOT / "kernels", PACKAGE_DIR / "_kernels"):
        if (candidate / "ldmatrix.cuh").exists() or candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"cannot find the kernels/ folder next to {PACKAGE_DIR}; set {_ENV} to its path"
    )


def read_kernel(relative: str) -> str:
    """Text of a file under ``kernels/`` (e.g. ``"reference/ldmatrix_ref.cu"``)."""
    path = kernels_dir() / relative
    if not path.exists():
        raise FileNotFoundError(f"no kernel source {relative!r} under {kernels_dir()}")
    return path.read_text()


#: The course's public headers: what a learner's kernel may include from ``kernels/``. The rest
#: of the folder (the reference kernels, the capstone's sources) is the course's own.
PUBLIC_HEADERS = ("ldmatrix.cuh", "stmatrix.cuh", "movmatrix.cuh", "mma.cuh",
                  "capstone/capstone_ptx.cuh")


def public_headers() -> list[Path]:
    """The public headers that exist under ``kernels/``."""
    base = kernels_dir()
    return [base / name for name in PUBLIC_HEADERS if (base / name).is_file()]


def private_kernel_paths() -> list[Path]:
    """Everything under ``kernels/`` that is not a public header nor a folder holding one: what
    a sandbox that compiles learner code must not show."""
    base = kernels_dir()
    keep = {base / name for name in PUBLIC_HEADERS}
    keep_dirs = {p for k in keep for p in k.parents}
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath)
        for name in list(dirnames):
            if here / name not in keep_dirs:
                found.append(here / name)
                dirnames.remove(name)
        found += [here / f for f in filenames if here / f not in keep]
    return sorted(found)


def include_options() -> tuple[str, ...]:
    """Compiler options that make ``#include "ldmatrix.cuh"`` resolve to ``kernels/``."""
    return (f"-I{kernels_dir()}",)


#: ptxlab's stand-ins for the standard headers NVRTC lacks (``<cstdint>``, ``<cstdio>``,
#: ``<iostream>``...): NVRTC 12.x and 13.0 have none, so a kernel pasted from an article stopped
#: at its first ``#include``. See the README.md in the folder.
NVRTC_HEADERS_DIR = PACKAGE_DIR / "run" / "nvrtc_headers"


def nvrtc_headers_dir() -> Path:
    """The folder of stand-in standard headers for NVRTC compiles (:data:`NVRTC_HEADERS_DIR`)."""
    return NVRTC_HEADERS_DIR


def nvrtc_include_options() -> tuple[str, ...]:
    """``-I`` of the stand-in standard headers, for NVRTC compiles only, and last on the path:
    nvcc and host compilers have the real headers, which these must never shadow (so this is
    not part of :func:`include_options`, which ``ptxlab run`` hands to nvcc)."""
    folder = nvrtc_headers_dir()
    return (f"-I{folder}",) if folder.is_dir() else ()
