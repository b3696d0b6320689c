"""The package's layers: import-linter's contracts hold, can fail, and the learner's names stay.

The contracts live in ``pyproject.toml`` ([tool.importlinter]); ``docs/architecture.md`` shows
the picture that ``tools/docs/layer_diagram.py`` draws from the same imports.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists() and shutil.which("lint-imports") is None,
                                reason="import-linter is not installed (./lab setup --dev)")


def _lint(package_parent: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the project's contracts, on the ``ptxlab`` in ``package_parent``."""
    tool = str(LINT) if LINT.exists() else shutil.which("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([tool, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, cwd=package_parent, env=env,
                          timeout=300)


def test_contracts_hold():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b\d+ kept, 0 broken", proc.stdout), proc.stdout
    for contract in ("ptxlab layers", "run/: one-way launch stack", "grading flows one way",
                     "the sandbox side of grading holds no answer"):
        assert contract in proc.stdout, proc.stdout


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "ptxlab", tmp_path / "ptxlab",
                    ignore=shutil.ignore_patterns("__pycache__", "_kernels"))
    return tmp_path


@pytest.mark.parametrize("module, line, named", [
    # the model reaching up into running: the layers contract names the import
    ("model/banks.py", "from ..run import gpu", "ptxlab.model.banks -> ptxlab.run.gpu"),
    # running reaching up into grading (the circle this layout cut)
    ("run/backends.py", "from ..grading import sandbox",
     "ptxlab.run.backends -> ptxlab.grading.sandbox"),
    # the lessons depending on the benchmark (the other tie this layout cut)
    ("teach/exercises/banks.py", "from ...bench import bank_study",
     "ptxlab.teach.exercises.banks -> ptxlab.bench.bank_study"),
    # grading and bench are independent of each other
    ("grading/report.py", "from ..bench import kernels",
     "ptxlab.grading.report -> ptxlab.bench.kernels"),
    # a model module going through the package face instead of its layer name
    ("model/emulator.py", "from ptxlab import backends", "ptxlab.model.emulator -> ptxlab"),
    # the progress store reaching back into the exercises (the circle the progress split cut)
    ("teach/progress_store.py", "from .exercises import base",
     "ptxlab.teach.progress_store -> ptxlab.teach.exercises.base"),
    # inside run/: a backend reaching up to the isolating wrapper, the errors reaching a backend
    ("run/in_process.py", "from . import isolation",
     "ptxlab.run.in_process -> ptxlab.run.isolation"),
    ("run/errors.py", "from . import gpu", "ptxlab.run.errors -> ptxlab.run.gpu"),
    ("run/launch_client.py", "from . import launch_server",
     "ptxlab.run.launch_client -> ptxlab.run.launch_server"),
    # inside grading: a pool reaching back up into the batch that drives it
    ("grading/dask_pool.py", "from . import batch",
     "ptxlab.grading.dask_pool -> ptxlab.grading.batch"),
    # the two pools are independent of each other
    ("grading/local_pool.py", "from . import dask_pool",
     "ptxlab.grading.local_pool -> ptxlab.grading.dask_pool"),
    # the sandbox side of grading reaching the model (an answer in the learner's process)
    ("grading/sandbox_client.py", "from ..model import layouts",
     "ptxlab.grading.sandbox_client -> ptxlab.model.layouts"),
])
def test_contracts_fail_on_a_tie_against_the_layers(tmp_path, module, line, named):
    parent = _copy_package(tmp_path)
    path = parent / "ptxlab" / module
    path.write_text(path.read_text() + f"\n{line}  # a tie against the layers\n")
    proc = _lint(parent)
    assert proc.returncode != 0, proc.stdout
    assert "BROKEN" in proc.stdout and named in proc.stdout, proc.stdout


def test_a_new_flat_module_must_join_a_layer(tmp_path):
    parent = _copy_package(tmp_path)
    (parent / "ptxlab" / "helpers.py").write_text('"""Somewhere outside every layer."""\n')
    proc = _lint(parent)
    assert proc.returncode != 0 and "helpers" in proc.stdout, proc.stdout


def test_layer_diagram_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "docs" / "layer_diagram.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------------------------
# The learner's face: short names are the layer modules themselves
# ---------------------------------------------------------------------------------------------

def test_face_names_are_the_layer_modules():
    import ptxlab
    from ptxlab import backends, banks, emulator, gpu, layouts, render, widgets
    from ptxlab.model import banks as m_banks, emulator as m_emulator, layouts as m_layouts
    from ptxlab.run import backends as r_backends, gpu as r_gpu
    from ptxlab.teach import render as t_render, widgets as t_widgets

    assert (layouts, emulator, banks) == (m_layouts, m_emulator, m_banks)
    assert (backends, gpu) == (r_backends, r_gpu)
    assert (render, widgets) == (t_render, t_widgets)
    assert set(ptxlab.__all__) >= {"layouts", "emulator", "backends", "widgets", "render", "gpu",
                                   "banks", "exercises"}


def test_face_submodules_keep_one_identity():
    import ptxlab.exercises.ldmatrix as face
    import ptxlab.teach.exercises.ldmatrix as real
    from ptxlab.backends import launch
    from ptxlab.run.backends import launch as real_launch

    assert face is real and launch is real_launch
    # the module keeps its own name, so reload, pickling and tracebacks say where it lives
    assert face.__spec__.name == face.__name__ == "ptxlab.teach.exercises.ldmatrix"
    assert sys.modules["ptxlab.exercises.ldmatrix"] is real


def test_patching_through_the_face_is_seen_by_the_layer(monkeypatch):
    from ptxlab import layouts
    from ptxlab.model import layouts as real

    monkeypatch.setattr(layouts, "ROW_BYTES", 99)
    assert real.ROW_BYTES == 99


def test_objects_pickle_under_their_layer_names():
    from ptxlab.backends import KernelCase

    case = KernelCase(name="x", source="", kernel="k", grid=(1,), block=(32,), args=[])
    assert type(pickle.loads(pickle.dumps(case))).__module__ == "ptxlab.run.backends"


def test_unknown_face_names_fail_plainly():
    import ptxlab

    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        ptxlab.nonsense  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        import ptxlab.exercises.nonsense  # noqa: F401


def test_import_ptxlab_loads_nothing_heavy():
    code = ("import sys, ptxlab; from ptxlab import layouts; "
            "print(sorted(m for m in sys.modules if m.startswith(('ptxlab', 'cupy', 'nbgrader'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert "cupy" not in out and "nbgrader" not in out and "ptxlab.run" not in out, out
