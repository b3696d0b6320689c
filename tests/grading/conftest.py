"""Fixtures shared by the grading tests."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402


@pytest.fixture
def course_with_alice(tmp_path, monkeypatch):
    """A released ps1 and one collected submission (the release itself), graded without the
    sandbox so the test needs no bwrap."""
    pytest.importorskip("nbgrader")
    monkeypatch.setenv("PTXLAB_SANDBOX", "none")
    # Graded in this process: no spare kernel may outlive the test.
    monkeypatch.setenv("PTXLAB_PRESTART_KERNELS", "0")
    root = fixture_course.make_course(tmp_path / "course")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root,
                                  env=fixture_course.grading_env(PTXLAB_SANDBOX="none"))
    assert gen.returncode == 0, gen.stderr[-2000:]
    sub = root / "submitted" / "alice" / "ps1"
    sub.mkdir(parents=True)
    for f in (root / "release" / "ps1").iterdir():
        (sub / f.name).write_bytes(f.read_bytes())
    (sub / "timestamp.txt").write_text("2026-11-23 10:00:00")
    yield root
    from ptxlab.grading.execute import shutdown_spare_kernels
    shutdown_spare_kernels()
