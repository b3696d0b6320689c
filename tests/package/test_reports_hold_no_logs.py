"""reports/ holds reports (markdown, JSON, plots); logs stay out of the repository: the measure/
scripts write their logs to a scratch folder and the figures into the reports they produce."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode == 128:
        pytest.skip("not a git checkout")
    return proc


def test_no_log_file_is_tracked_under_reports():
    tracked = _git("ls-files", "reports").stdout.split()
    logs = [path for path in tracked if path.endswith(".log")]
    assert not logs, f"logs under reports/ (put their figures in a report beside them): {logs}"


@pytest.mark.parametrize("path", ["reports/x.log", "reports/capstone/sweep_x/sweep.log",
                                  "reports/grading_gpu/exploits/pytest.log"])
def test_a_log_written_under_reports_is_ignored(path):
    assert _git("check-ignore", "--no-index", "-q", path).returncode == 0, path


def test_no_measure_script_writes_its_log_into_reports():
    scripts = sorted((ROOT / "measure").glob("*/*.sh"))
    assert scripts
    for script in scripts:
        for number, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if ".log" in code and "reports/" in code:
                pytest.fail(f"{script.relative_to(ROOT)}:{number} writes a log into reports/: {line}")
