"""``ptxlab grade`` starts one sandboxed kernel and one kernel launch before it grades anyone.

A sandbox that cannot start a kernel, or a kernel in which no launch can run, stops the batch
with the reason and the fix, and no student gets a row: before this check, every student of the
class got 0 with an opaque reason.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "grading"))
import course as fixture_course  # noqa: E402

from ptxlab.grading import preflight, sandbox  # noqa: E402


def _need_bwrap() -> None:
    try:
        sandbox.bwrap_binary()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def released_course(tmp_path):
    """A course with ps1 released and one collected submission."""
    pytest.importorskip("nbgrader")
    root = fixture_course.make_course(tmp_path / "course")
    gen = fixture_course.nbgrader(["generate_assignment", "ps1"], root)
    assert gen.returncode == 0, gen.stderr[-2000:]
    (root / "submitted" / "alice" / "ps1").mkdir(parents=True)
    for f in (root / "release" / "ps1").iterdir():
        (root / "submitted" / "alice" / "ps1" / f.name).write_bytes(f.read_bytes())
    (root / "submitted" / "alice" / "ps1" / "timestamp.txt").write_text("2026-11-23 10:00:00")
    return root


def test_preflight_starts_a_sandboxed_kernel_and_launches(released_course, monkeypatch):
    _need_bwrap()
    monkeypatch.setenv("PTXLAB_SANDBOX", "bwrap")
    before = set(Path(tempfile.gettempdir()).glob("ptxlab-preflight-*"))   # other runs' own
    result = preflight.run_preflight(released_course)
    assert result.ok, result.problem
    assert result.backend in ("gpu", "cpu") and result.device
    left = set(Path(tempfile.gettempdir()).glob("ptxlab-preflight-*")) - before
    assert not left, f"the probe's folder is left behind: {left}"


def _site_of(module: str) -> Path:
    mod = __import__(module)
    return Path(mod.__file__).resolve().parents[1]


def _no_rows(root: Path) -> None:
    assert not (root / "grading" / "ps1" / "grades.csv").exists()
    assert not (root / "autograded" / "alice").exists()


def test_a_sandbox_that_cannot_start_a_kernel_stops_the_batch(released_course):
    _need_bwrap()
    hidden = _site_of("zmq")   # the kernel's own packages: as if the sandbox failed to mount them
    env = fixture_course.grading_env(PTXLAB_SANDBOX="bwrap", PTXLAB_SANDBOX_HIDE=str(hidden))
    proc = fixture_course.ptxlab_grade(["ps1", "--workers", "1", "--quiet"], released_course,
                                       env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "nobody was graded" in proc.stderr
    assert "could not start in the grading sandbox" in proc.stderr, proc.stderr
    _no_rows(released_course)


def test_a_kernel_where_no_launch_runs_stops_the_batch(released_course):
    _need_bwrap()
    # Every isolated launch gets 1 MiB of memory: none can run, whatever the learner wrote.
    env = fixture_course.grading_env(PTXLAB_SANDBOX="bwrap", PTXLAB_LAUNCH_MEMORY_MB="1")
    proc = fixture_course.ptxlab_grade(["ps1", "--workers", "1", "--quiet"], released_course,
                                       env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "probe kernel launch failed" in proc.stderr, proc.stderr
    _no_rows(released_course)


def test_a_working_sandbox_says_where_kernels_run_and_grades(released_course):
    _need_bwrap()
    env = fixture_course.grading_env(PTXLAB_SANDBOX="bwrap")
    proc = fixture_course.ptxlab_grade(["ps1", "--workers", "1", "--quiet"], released_course,
                                       env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "preflight: a grading kernel started and ran a probe launch on" in proc.stderr
    assert (released_course / "grading" / "ps1" / "grades.csv").exists()


def test_preflight_goes_through_the_warm_launch_service_in_the_sandbox(released_course, monkeypatch):
    """The service runs in a sandbox of its own; the kernel reaches it through its socket alone."""
    _need_bwrap()
    monkeypatch.setenv("PTXLAB_SANDBOX", "bwrap")
    monkeypatch.setenv("PTXLAB_WARM_LAUNCHES", "on")
    result = preflight.run_preflight(released_course)
    assert result.ok, result.problem
    assert result.route == "service", result.warning
    assert not result.warning
    from ptxlab.grading import launch_service_pool as launch_services
    assert not launch_services._SERVICES, "the preflight's service must not idle in the head"


def test_modules_without_bytecode_are_named_with_the_folder_to_compile(tmp_path, monkeypatch):
    """A package installed with --no-compile is compiled again by every sandboxed kernel (the
    sandbox is read-only): the preflight names it and the command that compiles it once."""
    import compileall
    import sys

    from ptxlab.grading.preflight import modules_without_bytecode

    pkg = tmp_path / "site" / "kernel_dep_probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "kernel_dep_probe", raising=False)
    assert modules_without_bytecode(("kernel_dep_probe",)) == {
        "kernel_dep_probe": str(tmp_path / "site")}
    compileall.compile_dir(str(pkg), quiet=2)
    assert modules_without_bytecode(("kernel_dep_probe",)) == {}
