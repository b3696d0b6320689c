"""PTX Matrix Lab: the warp-level matrix instructions as data, a bit-exact model, and the tools
that teach and grade them.

The package is built in layers, each a subpackage that imports only the ones below it (the rule
is checked by import-linter, see ``docs/architecture.md``):

* ``ptxlab.model``   -- layouts, the emulator, the tensor-core arithmetic, the bank model
* ``ptxlab.run``     -- running kernels: GPU (CuPy) and CPU (the PTX interpreter), isolation
* ``ptxlab.teach``   -- checks, pictures, widgets, the course's exercises
* ``ptxlab.authoring`` -- the course's production and QA tools (notebooks, workspace, mutants)
* ``ptxlab.grading`` and ``ptxlab.bench`` -- the instructor's grader, the capstone benchmark
* ``ptxlab.cli``     -- the ``ptxlab`` command, one module per subcommand

This file is the learner's face of the package: the short names the notebooks use
(``from ptxlab import layouts, emulator, backends, widgets``, ``from ptxlab.exercises import
ldmatrix``) are the modules of the layers themselves, not copies, so patching or pickling through
either name is the same thing. Nothing is imported until it is used, so ``import ptxlab`` stays
fast and never touches CuPy or nbgrader.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

#: The learner's short name -> the module in its layer.
FACE: dict[str, str] = {
    "layouts": "ptxlab.model.layouts",
    "emulator": "ptxlab.model.emulator",
    "tensorcore": "ptxlab.model.tensorcore",
    "banks": "ptxlab.model.banks",
    "matrix_forms": "ptxlab.model.matrix_forms",
    "layout_fit": "ptxlab.model.layout_fit",
    "cute_atoms": "ptxlab.model.cute_atoms",
    "backends": "ptxlab.run.backends",
    "gpu": "ptxlab.run.gpu",
    "cpu": "ptxlab.run.cpu",
    "sources": "ptxlab.run.sources",
    "checks": "ptxlab.teach.checks",
    "render": "ptxlab.teach.render",
    "layout_table": "ptxlab.teach.layout_table",
    "widgets": "ptxlab.teach.widgets",
    "progress": "ptxlab.teach.progress",
    "traps": "ptxlab.teach.traps",
    "exercises": "ptxlab.teach.exercises",
}

__all__ = [*FACE, "__version__"]


def __getattr__(name: str):
    """``ptxlab.layouts`` and friends, imported on first use."""
    target = FACE.get(name)
    if target is None:
        raise AttributeError(f"module 'ptxlab' has no attribute {name!r}")
    module = importlib.import_module(target)
    globals()[name] = module
    return module


def __dir__() -> list[str]:
    return sorted({*globals(), *FACE})


class _FaceLoader(importlib.abc.Loader):
    """Hands back the layer's own module for a face name (``ptxlab.exercises.ldmatrix``)."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system stamps the face's spec on the module; give it back its own, so the
        # module keeps one identity (reload, pickling and ``python -m`` see the layer's name).
        module.__spec__ = self._own_spec


class _FaceFinder(importlib.abc.MetaPathFinder):
    """Resolves ``ptxlab.<face name>[.sub]`` to the same module object as its layer name."""

    def find_spec(self, fullname: str, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__ or parts[1] not in FACE:
            return None
        real = ".".join([FACE[parts[1]], *parts[2:]])
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _FaceLoader(real))


if not any(isinstance(f, _FaceFinder) for f in sys.meta_path):
    # First, so the path finder never loads a second copy of a module under its face name.
    sys.meta_path.insert(0, _FaceFinder())


def load_ipython_extension(ipython) -> None:
    """``%load_ext ptxlab``: the ``%%cuda`` cell magic (a whole CUDA program in a cell)."""
    from .run.programs import cell_magic

    cell_magic.register(ipython)
