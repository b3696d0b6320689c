#!/usr/bin/env python3
"""Check that ``ptxlab grade`` grades learner kernels on this machine's GPU, faults included.

Builds a small nbgrader course (the grading fixture assignment ``ps1``: two formula tests and
one kernel test) with a class of correct kernels and broken ones -- a wrong result, a
misaligned ldmatrix address, a store to an illegal address (which breaks a CUDA context), a
``trap``, a kernel that never finishes, one that does not compile -- with correct students
graded after each fault. Grades it with ``ptxlab grade`` (the sandbox, the isolated launches,
the GPU) and writes ``REPORT.md`` and ``report.json`` to ``--out``: the device, the backend
each check ran on, every student's scores and reasons, the time, and whether each expectation
held.

    python3 measure/gpu/gpu_grading_check.py --out /tmp/gpu-check          # on the GPU server
    python3 measure/gpu/gpu_grading_check.py --out /tmp/cpu-check --allow-cpu   # anywhere

Needs ptxlab, nbgrader and (for the GPU) CuPy installed; no network. Exit status 0 when every
expectation held, 1 when one did not, 2 when there is no GPU and ``--allow-cpu`` was not given.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests" / "fixtures" / "grading", ROOT / "tests" / "submissions"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import cases as corpus  # noqa: E402
import course as fixture_course  # noqa: E402

ASSIGNMENT = "ps1"
#: (student, case) in grading order: every fault is followed by a correct student, who must
#: still get full marks.
CLASS = [
    ("a01_good", "good_a"),
    ("a02_kernel_wrong_result", "bad_kernel_wrong_address"),
    ("a03_good", "good_b"),
    ("a04_kernel_illegal_address", "bad_kernel_illegal_address"),
    ("a05_good_after_illegal_address", "good_c"),
    ("a06_kernel_misaligned", "bad_kernel_misaligned"),
    ("a07_kernel_trap", "bad_kernel_trap"),
    ("a08_good_after_trap", "good_a"),
    ("a09_kernel_hang", "bad_kernel_hang"),
    ("a10_good_after_hang", "good_b"),
    ("a11_kernel_compile_error", "bad_kernel_compile_error"),
    ("a12_formula_wrong", "bad_wrong_formula"),
]


def device_facts() -> dict:
    """What this machine offers for kernels, in the words of ptxlab itself."""
    from ptxlab.run import backends, gpu

    st = gpu.status()
    return {"gpu_available": bool(st.available), "gpu": st.device_label if st.available else "",
            "gpu_status": st.message, "cupy": st.cupy_version or "",
            "driver_cuda": getattr(st, "driver_version", "") or "",
            "describe": backends.describe(), "host": platform.node(),
            "python": platform.python_version(), "cpus": os.cpu_count()}


def sandbox_mode(requested: str) -> tuple[str, str]:
    """``(mode, why)``: the bubblewrap sandbox where it can start here, else limits only."""
    if requested != "auto":
        return requested, "requested"
    from ptxlab.grading import sandbox
    try:
        bwrap = sandbox.bwrap_binary()
    except sandbox.SandboxUnavailable as exc:
        return "none", str(exc)
    probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid",
                            "--unshare-net", "--proc", "/proc", "--dev", "/dev",
                            "--die-with-parent", "--", "/bin/true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "none", f"bwrap cannot start a sandbox here: {probe.stderr.strip()[:200]}"
    return "bwrap", bwrap


def build_course(base: Path, env: dict[str, str]) -> Path:
    root = fixture_course.make_course(base / "course")
    r = fixture_course.nbgrader(["generate_assignment", ASSIGNMENT], root, env)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{r.stderr[-3000:]}")
    by_name = {c.name: c for c in corpus.CASES}
    for student, case in CLASS:
        corpus.write_submission(root, student, by_name[case], ASSIGNMENT)
    return root


#: Where a GPU may answer differently from the CPU backend: the PTX ISA leaves a misaligned
#: ldmatrix address undefined, so hardware may fault or load from the rounded-down address.
GPU_REASONS = {"bad_kernel_misaligned": r"KernelFault|misaligned|illegal|crash|lane \d+ register \d+"}


def expectations(case: corpus.Case, outcome, kernels_on: str) -> list[str]:
    """What went wrong for one student (empty: as expected)."""
    problems = []
    if kernels_on == "gpu" and case.name in GPU_REASONS:
        case = corpus.Case(**{**case.__dict__, "reasons": {"test_kernel": GPU_REASONS[case.name]}})
    checks = {c.grade_id: c for c in outcome.checks}
    if outcome.status != case.status:
        problems.append(f"status {outcome.status}, expected {case.status}")
    for gid, points in corpus.TESTS.items():
        check = checks.get(gid)
        if check is None:
            problems.append(f"{gid} missing")
            continue
        if gid in case.passes and check.score != points:
            problems.append(f"{gid} lost points: {check.reason}")
        if gid not in case.passes:
            if check.score >= points:
                problems.append(f"{gid} passed but should not")
            pattern = case.reasons.get(gid)
            if pattern and not corpus.reason_matches(pattern, check.reason):
                problems.append(f"{gid}: reason {check.reason!r} does not match {pattern!r}")
        if gid == "test_kernel" and case.backend_named and check.backend != kernels_on:
            problems.append(f"{gid} ran on {check.backend or 'no backend'}, expected {kernels_on}")
    return problems


def run(args: argparse.Namespace) -> dict:
    facts = device_facts()
    kernels_on = "gpu" if facts["gpu_available"] else "cpu"
    mode, why = sandbox_mode(args.sandbox)
    env = {k: v for k, v in fixture_course.grading_env().items() if not k.startswith("PTXLAB_") or k == "PTXLAB_BWRAP"}
    env.update({
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "PTXLAB_SANDBOX": mode,
        "PTXLAB_GRADING_GPU": "1",
        "PTXLAB_CELL_TIMEOUT_S": str(int(2 * args.launch_timeout + 30)),
        "PTXLAB_LAUNCH_TIMEOUT_S": str(args.launch_timeout),
        "PTXLAB_LAUNCH_GPU_MEMORY_MB": "1024",
    })
    base = Path(tempfile.mkdtemp(prefix="ptxlab-gpu-check-"))
    try:
        t0 = time.monotonic()
        root = build_course(base, env)
        built_s = time.monotonic() - t0
        t0 = time.monotonic()
        grade = fixture_course.ptxlab_grade([ASSIGNMENT, "--workers", str(args.workers)], root, env,
                                            timeout=1800)
        grade_s = time.monotonic() - t0
        from ptxlab.grading.batch import Ledger
        outcomes = Ledger(root / "grading" / ASSIGNMENT / "ledger.jsonl").load()
        by_name = {c.name: c for c in corpus.CASES}
        students = []
        for student, case_name in CLASS:
            o = outcomes.get(student)
            if o is None:
                students.append({"student": student, "case": case_name, "graded": False,
                                 "problems": ["not graded"]})
                continue
            note = _grading_note(root / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
            students.append({
                "student": student, "case": case_name, "graded": True, "status": o.status,
                "score": o.score, "max_score": o.max_score, "seconds": o.duration_s,
                "checks": [{"check": c.grade_id, "score": c.score, "max": c.max_score,
                            "backend": c.backend, "reason": c.reason} for c in o.checks],
                "feedback_note": note,
                "problems": expectations(by_name[case_name], o, kernels_on),
            })
        if args.keep:
            shutil.copytree(root, args.out / "course", dirs_exist_ok=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    ok = grade.returncode == 0 and all(not s["problems"] for s in students)
    return {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "ok": ok,
        "kernels_expected_on": kernels_on,
        "device": facts,
        "sandbox": {"mode": mode, "detail": why},
        "workers": args.workers,
        "launch_timeout_s": args.launch_timeout,
        "course_build_s": round(built_s, 2),
        "grading_s": round(grade_s, 2),
        "ptxlab_grade": {"returncode": grade.returncode, "stdout": grade.stdout[-2000:],
                         "stderr_tail": grade.stderr[-3000:]},
        "students": students,
    }


def _grading_note(path: Path) -> str:
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    for cell in nb.get("cells", []):
        if "ptxlab-grading-note" in cell.get("metadata", {}).get("tags", []):
            text = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            return re.sub(r"\*\*", "", text)
    return ""


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    d = result["device"]
    lines = [
        "# GPU grading check", "",
        f"{result['date']} on {d['host']}: **{'PASS' if result['ok'] else 'FAIL'}**", "",
        f"* device: {d['gpu'] or 'no GPU'} ({d['gpu_status']})",
        f"* kernels: {d['describe']}",
        f"* CuPy {d['cupy'] or '-'}, driver CUDA {d['driver_cuda'] or '-'}, Python {d['python']}, "
        f"{d['cpus']} CPUs",
        f"* sandbox: {result['sandbox']['mode']} ({result['sandbox']['detail']})",
        f"* `ptxlab grade --workers {result['workers']}`: {len(result['students'])} students in "
        f"{result['grading_s']:.1f} s (course built in {result['course_build_s']:.1f} s); "
        f"launch limit {result['launch_timeout_s']:g} s; exit status "
        f"{result['ptxlab_grade']['returncode']}",
        f"* expected every kernel check on: **{result['kernels_expected_on']}**", "",
        "| student | score | test_kernel ran on | test_kernel | time | as expected |",
        "| --- | ---: | --- | --- | ---: | --- |",
    ]
    for s in result["students"]:
        if not s["graded"]:
            lines.append(f"| {s['student']} | - | - | not graded | - | no |")
            continue
        kernel = next((c for c in s["checks"] if c["check"] == "test_kernel"), {})
        reason = (kernel.get("reason") or "passed").replace("|", "\\|")
        reason = reason if len(reason) <= 140 else reason[:137] + "..."
        verdict = "yes" if not s["problems"] else "no: " + "; ".join(s["problems"]).replace("|", "\\|")
        lines.append(f"| {s['student']} | {s['score']:g}/{s['max_score']:g} | "
                     f"{kernel.get('backend') or '-'} | {reason} | {s['seconds']:.1f} s | {verdict} |")
    notes = [s["feedback_note"] for s in result["students"] if s.get("feedback_note")]
    if notes:
        lines += ["", "What the feedback tells a student (the note at the top of the graded "
                  "notebook):", "", f"> {notes[0]}"]
    if result["ptxlab_grade"]["returncode"] != 0:
        lines += ["", "`ptxlab grade` output:", "", "```",
                  result["ptxlab_grade"]["stderr_tail"], "```"]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where REPORT.md and report.json go")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="without a GPU, check the CPU backend instead of stopping")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--launch-timeout", type=float, default=20.0,
                        help="wall-clock limit of one kernel launch, s (the hanging kernel "
                             "costs this much)")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                        help="auto: bubblewrap where it can start, else limits only")
    parser.add_argument("--keep", action="store_true", help="copy the graded course to --out/course")
    args = parser.parse_args(argv)
    facts = device_facts()
    if not facts["gpu_available"] and not args.allow_cpu:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"ok": False, "device": facts, "error": "no usable GPU: " + facts["gpu_status"]}
        (args.out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "REPORT.md").write_text(
            f"# GPU grading check\n\n**NOT RUN**: no usable GPU here ({facts['gpu_status']}).\n"
            "Run with --allow-cpu to check the CPU backend instead.\n")
        print(f"no usable GPU: {facts['gpu_status']} (--allow-cpu checks the CPU backend)",
              file=sys.stderr)
        return 2
    print(f"kernels here: {facts['describe']}", flush=True)
    result = run(args)
    path = write_report(result, args.out)
    print(path.read_text())
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
