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


def include_options() -> tuple[str, ...]:
    """Compiler options that make ``#include "ldmatrix.cuh"`` resolve to ``kernels/``."""
    return (f"-I{kernels_dir()}",)
