"""measure/gpu/gpu_grading_check.py, the check an instructor runs on the GPU server, run here on
whatever backend this machine has (--allow-cpu): it must build its class, grade it with
``ptxlab grade`` and write a report in which every expectation holds."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_gpu_grading_check_runs_and_reports(tmp_path):
    pytest.importorskip("nbgrader")
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, str(REPO / "measure" / "gpu" / "gpu_grading_check.py"),
                        "--out", str(out), "--allow-cpu", "--workers", "2",
                        "--launch-timeout", "3"],
                       capture_output=True, text=True, timeout=900)
    report = json.loads((out / "report.json").read_text())
    problems = {s["student"]: s["problems"] for s in report.get("students", []) if s["problems"]}
    assert r.returncode == 0 and report["ok"], (problems, r.stdout[-3000:], r.stderr[-3000:])
    text = (out / "REPORT.md").read_text()
    assert "**PASS**" in text and "a04_kernel_illegal_address" in text
    kinds = {c["backend"] for s in report["students"] for c in s["checks"]
             if c["check"] == "test_kernel" and s["case"] != "bad_wrong_formula"}
    assert kinds == {report["kernels_expected_on"]}
    # Every good student after a fault kept full marks.
    for s in report["students"]:
        if s["student"].startswith(("a05", "a08", "a10")):
            assert s["score"] == s["max_score"], s
    assert any(s["feedback_note"].startswith("Grading note.") and " ran on " in s["feedback_note"]
               for s in report["students"])
