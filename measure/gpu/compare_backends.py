#!/usr/bin/env python3
"""Run every kernel of the project on the CPU model and on the GPU, and compare the outputs.

The kernels: the reference kernels of ``kernels/reference/`` (every ldmatrix/stmatrix/movmatrix/
mma form, random inputs), the capstone kernels of ``kernels/capstone/`` (GEMM variants,
transposes, the bank-conflict study and the mma ceiling loop, at sizes the interpreter runs in
seconds) and every kernel solution of the course (each run of each kernel exercise, hidden runs
included). Every case runs ``--rounds`` times with fresh random inputs. Outputs must agree bit
for bit; where they do not, the report gives the distance (ulps for floating-point outputs).

    python3 measure/gpu/compare_backends.py --out-dir reports/cpu_backend     # on a GPU machine
    python3 measure/gpu/compare_backends.py --backend-a cpu --backend-b cpu    # harness self-test
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ptxlab.run import gpu, reference_cases as rc  # noqa: E402
from ptxlab.run.backends import KernelCase  # noqa: E402
from ptxlab.authoring import course_cases  # noqa: E402
from ptxlab.bench import cases as capstone_cases  # noqa: E402
from ptxlab.bench.bank_study import REPS, STUDY, kernel_source  # noqa: E402
from ptxlab.bench.kernels import mma_peak_source  # noqa: E402


def extra_capstone_cases(rng: np.random.Generator) -> list[KernelCase]:
    """The two benchmark kernels that ``ptxlab.bench.cases`` leaves out, at small sizes."""
    cases = []
    for layout in (STUDY[0], STUDY[2], STUDY[-1]):
        fill = rng.integers(0, 2**32, size=layout.rows * layout.chunks * 4, dtype=np.uint32)
        out = np.zeros(128, dtype=np.uint32)
        one_rep = kernel_source(layout).replace(f"BANK_REPS {REPS}", "BANK_REPS 1")
        cases.append(KernelCase(name=f"capstone bank study ({layout.name}, 1 rep)", source=one_rep,
                                kernel="bank_study", grid=(1,),
                                block=(128,), args=[fill, out], compare=(1,)))
    seed = (rng.integers(-3, 4, size=192).astype(np.float16).view(np.uint16).astype(np.uint32)
            * 0x10001).astype(np.uint32)
    cases.append(KernelCase(name="capstone mma ceiling loop (2 chains, 3 iterations)",
                            source=mma_peak_source(2), kernel="mma_peak", grid=(1,), block=(64,),
                            args=[seed, np.zeros(64, np.float32), np.int32(3),
                                  np.zeros(4, np.uint64)], compare=(1,)))
    return cases


def all_cases(rng: np.random.Generator, include_course: bool = True) -> list[tuple[str, KernelCase]]:
    """``(group, case)`` for every kernel the comparison covers."""
    out = [("reference", c) for c in rc.kernel_cases(rng, small=False)]
    out += [("reference (real-valued mma)", c) for c in real_mma_cases(rng)]
    out += [("capstone", c) for c in capstone_cases.kernel_cases(rng, small=True)]
    out += [("capstone", c) for c in extra_capstone_cases(rng)]
    if include_course:
        out += [("course", c) for c in course_cases.kernel_cases(rng, small=False)]
    return out


def real_mma_cases(rng: np.random.Generator, cases: int = 32) -> list[KernelCase]:
    """The reference mma kernels on random real inputs (the rounding of the accumulation)."""
    out = []
    for f in rc.FORMS:
        if f.family != "mma" or "real" not in f.kinds:
            continue
        args = rc.make_inputs(f, rng, cases, rc.SMEM_BYTES, "real")
        out.append(KernelCase(name=f"reference {f.name}[real]", source=f.source(), kernel=f.kernel,
                              grid=(cases,), block=(32,), args=args,
                              compare=(rc.output_index(f),)))
    return out


@dataclass
class CaseResult:
    group: str
    name: str
    runs: int = 0
    identical_runs: int = 0
    elements: int = 0
    mismatched_elements: int = 0
    max_ulp: int | None = None
    seconds_a: float = 0.0
    seconds_b: float = 0.0
    errors: list = field(default_factory=list)


def run_case(group: str, case: KernelCase, a: str, b: str) -> tuple[CaseResult, list]:
    res = CaseResult(group, case.name)
    try:
        t = time.perf_counter()
        ra = case.launch(backend=a)
        res.seconds_a = time.perf_counter() - t
        t = time.perf_counter()
        rb = case.launch(backend=b)
        res.seconds_b = time.perf_counter() - t
    except Exception as exc:
        res.errors.append(f"{type(exc).__name__}: {str(exc)[:500]}")
        return res, []
    res.runs = 1
    same = True
    for i in case.compare:
        oa, ob = np.asarray(ra.outputs[i]), np.asarray(rb.outputs[i])
        ua = oa.reshape(-1).view(f"u{oa.dtype.itemsize}")
        ub = ob.reshape(-1).view(f"u{ob.dtype.itemsize}")
        res.elements += ua.size
        diff = ua != ub
        if diff.any():
            same = False
            res.mismatched_elements += int(diff.sum())
            if oa.dtype.kind == "f" or group != "reference":
                width = 8 * ua.dtype.itemsize
                ulp = int(rc.ulp_distance(ua, ub, width).max()) if width in (16, 32) else -1
                res.max_ulp = max(res.max_ulp or 0, ulp)
    res.identical_runs = int(same)
    return res, [ra.device, rb.device]


def merge(into: CaseResult, r: CaseResult) -> None:
    into.runs += r.runs
    into.identical_runs += r.identical_runs
    into.elements += r.elements
    into.mismatched_elements += r.mismatched_elements
    if r.max_ulp is not None:
        into.max_ulp = max(into.max_ulp or 0, r.max_ulp)
    into.seconds_a += r.seconds_a
    into.seconds_b += r.seconds_b
    into.errors += r.errors


def write_report(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_compare.json").write_text(json.dumps(report, indent=2) + "\n")
    env = report["environment"]
    lines = [
        "# The CPU model against the GPU, kernel by kernel",
        "",
        f"Kernels run on both backends with the same random inputs, {report['rounds']} rounds "
        f"of fresh inputs per case, outputs compared bit for bit. Groups in this run: "
        f"{', '.join(sorted(report['summary']['groups']))}"
        + (" (the course's kernel solutions were left out: `--no-course`)"
           if "--no-course" in report["command"] else "")
        + f". Produced by `{report['command']}`.",
        "",
        "| | |", "| --- | --- |",
        f"| date | {env['date']} |",
        f"| backend A | {env['device_a']} |",
        f"| backend B | {env['device_b']} |",
        f"| CuPy | {env.get('cupy', '-')} |",
        f"| Python / numpy | {env['python']} / {env['numpy']} |",
        f"| wall time | {report['seconds']:.0f} s |",
        "",
        "| group | kernel case | runs | identical runs | mismatched elements | max ulp | CPU s/run | GPU s/run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["cases"]:
        n = max(r["runs"], 1)
        lines.append(f"| {r['group']} | {r['name']} | {r['runs']} | {r['identical_runs']} | "
                     f"{r['mismatched_elements']} | {r['max_ulp'] if r['max_ulp'] is not None else '-'} | "
                     f"{r['seconds_a'] / n:.2f} | {r['seconds_b'] / n:.3f} |")
    s = report["summary"]
    lines += ["", "## Summary", "",
              f"- {s['cases']} kernel cases, {s['runs']} runs: **{s['identical_runs']} identical**, "
              f"{s['differing_runs']} differing, {s['errors']} errors."]
    for g, v in s["groups"].items():
        lines.append(f"- {g}: {v['runs']} runs, {v['identical_runs']} identical.")
    errs = [r for r in report["cases"] if r["errors"]]
    if errs:
        lines += ["", "## Errors", ""]
        lines += [f"- {r['name']}: {r['errors'][0]}" for r in errs]
    (out_dir / "GPU_COMPARE.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend-a", default="cpu")
    ap.add_argument("--backend-b", default="gpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2026_11_23)
    ap.add_argument("--no-course", action="store_true", help="leave out the course's kernels")
    ap.add_argument("--only", help="only cases whose name contains this text")
    ap.add_argument("--out-dir", type=Path, default=None)
    a = ap.parse_args(argv)
    if "gpu" in (a.backend_a, a.backend_b) and not gpu.status().available:
        print(f"no usable GPU: {gpu.status().message}", file=sys.stderr)
        return 2
    t0 = time.time()
    merged: dict[str, CaseResult] = {}
    devices = ["", ""]
    skipped: dict[str, int] = {}
    for rnd in range(a.rounds):
        rng = np.random.default_rng(a.seed + rnd)
        for group, case in all_cases(rng, include_course=not a.no_course):
            if a.only and a.only not in case.name:
                continue
            need = gpu.required_compute_capability(case.source)[0]
            if "gpu" in (a.backend_a, a.backend_b) and need > gpu.status().cc_number:
                skipped[case.name] = need      # e.g. the sm_100a-class forms on an H100
                continue
            try:
                r, devs = run_case(group, case, a.backend_a, a.backend_b)
            except Exception:
                r, devs = CaseResult(group, case.name, errors=[traceback.format_exc(limit=3)]), []
            if devs:
                devices = devs
            key = f"{group}|{case.name}"
            if key not in merged:
                merged[key] = CaseResult(group, case.name)
            merge(merged[key], r)
            flag = "error" if r.errors else ("identical" if r.identical_runs else
                                            f"DIFFERS ({r.mismatched_elements} elements, max ulp {r.max_ulp})")
            print(f"[round {rnd + 1}] {group:28s} {case.name[:70]:70s} {flag}", flush=True)
    rows = [vars(r) for r in merged.values()]
    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(r["group"], {"runs": 0, "identical_runs": 0})
        g["runs"] += r["runs"]
        g["identical_runs"] += r["identical_runs"]
    st = gpu.status()
    report = {
        "command": "python3 measure/gpu/compare_backends.py " + " ".join(argv or sys.argv[1:]),
        "rounds": a.rounds, "seed": a.seed, "seconds": time.time() - t0,
        "environment": {
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device_a": devices[0], "device_b": devices[1], "cupy": st.cupy_version,
            "python": platform.python_version(), "numpy": np.__version__},
        "cases": rows,
        "skipped": {name: f"needs sm_{need}; this GPU is older" for name, need in skipped.items()},
        "summary": {"cases": len(rows), "runs": sum(r["runs"] for r in rows),
                    "identical_runs": sum(r["identical_runs"] for r in rows),
                    "differing_runs": sum(r["runs"] - r["identical_runs"] for r in rows),
                    "errors": sum(len(r["errors"]) for r in rows), "groups": groups},
    }
    if a.out_dir:
        write_report(a.out_dir, report)
    s = report["summary"]
    print(f"\n{s['cases']} cases, {s['runs']} runs: {s['identical_runs']} identical, "
          f"{s['differing_runs']} differing, {s['errors']} errors")
    for name, why in report["skipped"].items():
        print(f"skipped (the GPU cannot run it): {name}: {why}")
    return 0 if s["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
