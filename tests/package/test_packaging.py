"""The wheel: built without setuptools' warnings, with every file of kernels/ inside."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_builds_quietly_and_ships_every_kernel_file(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w",
                           str(tmp_path), str(ROOT)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    if proc.returncode and ("Could not find a version" in log or "NewConnectionError" in log):
        pytest.skip("pip could not fetch setuptools for the build (no package index here)")
    assert proc.returncode == 0, log[-3000:]
    warnings = [line for line in log.splitlines()
                if "Warning" in line and "byte-compiling" not in line]
    assert not warnings, "\n".join(warnings[:10])
    wheel = next(tmp_path.glob("ptxlab-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "kernels"], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout.split()
    missing = [f for f in tracked if "ptxlab/_kernels/" + f.split("/", 1)[1] not in names]
    assert tracked and not missing, f"not in the wheel: {missing}"
