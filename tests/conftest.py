"""Shared test set-up: the ``gpu`` marker skips, with the reason, where no usable GPU is present;
``fresh_python`` runs code in a new process."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _gpu_reason() -> str | None:
    try:
        from ptxlab import gpu
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"ptxlab.gpu unavailable: {exc}"
    st = gpu.status()
    return None if st.available else st.message


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_python():
    """``run(code) -> printed lines`` of ``code`` run by a new Python process: what a module
    costs to load is seen only in a process that has not loaded it yet. A failure shows the
    child's traceback."""
    def run(code: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.splitlines()
    return run
