"""The ``ptxlab`` a graded notebook gets: the client only, mounted over the real package.

A graded notebook runs in the sandbox, and in a grading run it must hold no answer. So every
folder the real package could be imported or read from -- the package the grader runs, the
folders an editable install maps ``ptxlab`` to, a ``ptxlab`` on ``sys.path`` -- is covered, in
the sandbox, by a read-only tree holding only:

* ``ptxlab/__init__.py``: :mod:`ptxlab.grading.sandbox_client` (exercises that only say the
  grader checks, pictures and runs switched off, the reply to the judge's questions);
* ``ptxlab/grading/kernel_boot.py`` and ``sandbox.py``: what starts the kernel in the sandbox
  (its limits), which holds no answer;

and the CUDA folder (reference kernels included) is covered with an empty one. Nothing else of
the course -- layouts, emulator, tensor-core model, exercises and their cases, reference
kernels -- is on the notebook's path or in its file system.
"""
from __future__ import annotations

import atexit
import compileall
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import sandbox
from . import sandbox_client

__all__ = ["client_tree", "real_package_dirs", "reference_dirs", "overlays"]

_GRADING_DIR = Path(__file__).resolve().parent
#: Files of ptxlab/grading/ the kernel needs to start inside the sandbox (they hold no answer).
_BOOT_FILES = ("kernel_boot.py", "sandbox.py")
_TREE: Path | None = None


def client_tree() -> Path:
    """A folder holding the client ``ptxlab/`` (built once per process, removed at exit)."""
    global _TREE
    if _TREE is not None and (_TREE / "ptxlab" / "__init__.py").is_file():
        return _TREE
    root = Path(tempfile.mkdtemp(prefix="ptxlab-client-"))
    package = root / "ptxlab"
    (package / "grading").mkdir(parents=True)
    shutil.copyfile(sandbox_client.__file__, package / "__init__.py")
    (package / "grading" / "__init__.py").write_text('"""Kernel start-up in the sandbox."""\n')
    for name in _BOOT_FILES:
        shutil.copyfile(_GRADING_DIR / name, package / "grading" / name)
    # Compiled once here: the sandbox is read-only, so every kernel would compile them again.
    compileall.compile_dir(str(package), quiet=2)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    _TREE = root
    atexit.register(shutil.rmtree, root, True)
    return root


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def _candidates() -> list[Path]:
    from ..run import sources

    found = [sources.PACKAGE_DIR]
    try:
        found.append(Path(sources.kernels_dir()))
    except Exception:       # no kernels folder in this installation
        pass
    site = [Path(e) for e in sys.path if e and os.path.isdir(e)]
    found += sandbox.editable_targets(site)
    found += [Path(e) / "ptxlab" for e in sys.path
              if e and os.path.isdir(os.path.join(e, "ptxlab"))]
    out: list[Path] = []
    for path in found:
        path = path.resolve()
        if path.is_dir() and path not in out and path != client_tree().resolve() / "ptxlab":
            out.append(path)
    return out


def real_package_dirs() -> list[Path]:
    """Every folder the real ``ptxlab`` package could be imported from here."""
    return [p for p in _candidates() if _is_package(p)]


def reference_dirs() -> list[Path]:
    """The folders of the course's CUDA sources (reference kernels included)."""
    return [p for p in _candidates() if not _is_package(p)]


def overlays() -> tuple[list[tuple[Path, Path]], list[Path]]:
    """``([(client package, real package folder), ...], folders to cover with an empty one)``:
    what the sandbox of a graded notebook mounts so that it holds no answer."""
    client = client_tree() / "ptxlab"
    return [(client, real) for real in real_package_dirs()], reference_dirs()
