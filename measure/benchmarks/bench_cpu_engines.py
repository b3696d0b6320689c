"""The CPU model's two engines side by side, in one run on one machine: warp by warp (every warp
of a launch in turn, 32 lanes per numpy call) and the vector run (every warp of a batch of blocks
in one numpy call, ``ptxlab.run.ptx.wide``).

Usage: python measure/benchmarks/bench_cpu_engines.py [--reps 3] [--sizes 128 256 512]
                                                      [--out reports/cpu_engines]

Measured, each the minimum of ``--reps`` runs (the machine may be shared; the minimum is the
better estimate of what the code costs) with the program already decoded, so the figures are
the launches themselves:

* the capstone's learner GEMM (``bench.learner_gemm.course_solution()``) at each size, and that
  the two engines give the same bits;
* every course kernel check (each exercise's visible and hidden launches), by exercise;
* every test program of ``ptxlab run`` on the CPU model, end to end (build included).

Writes ``BENCH.md`` and ``bench.json`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.run.cpu import program_for  # noqa: E402
from ptxlab.run.ptx.interpreter import Launch  # noqa: E402

ENGINES = ("warp", "vector")


def _best(fn, reps: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _run(prog, grid, block, args, shared_mem, engine):
    launch = Launch(prog, grid, block, [a.copy() if isinstance(a, np.ndarray) else a
                                        for a in args], shared_mem=shared_mem, engine=engine)
    out = launch.run()
    return out, launch.ran_as


def gemm_rows(sizes: list[int], reps: int) -> list[dict]:
    """The learner GEMM at each size on both engines."""
    from ptxlab.bench import learner_gemm
    gemm = learner_gemm.course_solution()
    prog = program_for(gemm.source(), gemm.kernel_name)
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
        b = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
        args = [a, b, np.zeros((n, n), np.uint16), np.int32(n), np.int32(n), np.int32(n)]
        row = {"size": n, "mma_sync": (n // 16) * (n // 8) * (n // 16)}
        outs = {}
        for engine in ENGINES:
            r = 1 if engine == "warp" and n >= 512 else reps
            t, (out, ran_as) = _best(lambda: _run(prog, gemm.grid(n, n), (gemm.threads,), args,
                                                  gemm.smem_bytes, engine), r)
            row[engine] = t
            row[f"{engine}_ran_as"] = list(ran_as)
            outs[engine] = out[2].tobytes()
            print(f"GEMM {n}^3 {engine:6s} {t:8.3f} s  ({ran_as[0]})", flush=True)
        row["same_bits"] = outs["warp"] == outs["vector"]
        rows.append(row)
    return rows


def course_rows(reps: int) -> list[dict]:
    """Every course kernel check's launches, by exercise."""
    from ptxlab.authoring.course_cases import kernel_cases
    by_name: dict[str, dict] = {}
    for case in kernel_cases(np.random.default_rng(0), small=False):
        name = case.name.split(" (")[0]
        prog = program_for(case.source, case.kernel, case.options)
        row = by_name.setdefault(name, {"check": name, "launches": 0, "warps": 0,
                                        "warp": 0.0, "vector": 0.0, "ran_as": set()})
        row["launches"] += 1
        nb = int(np.prod(case.grid))
        row["warps"] = max(row["warps"], nb * -(-int(np.prod(case.block)) // 32))
        for engine in ENGINES:
            try:
                t, (_, ran_as) = _best(lambda: _run(prog, case.grid, case.block, case.args,
                                                    case.shared_mem, engine), reps)
            except Exception as exc:  # a solution that faults is a finding, not a crash
                t, ran_as = float("nan"), ("error", type(exc).__name__)
            row[engine] += t
            if engine == "vector":
                row["ran_as"].add(ran_as[0] if ran_as[0] == "vector" else ran_as[1] or "warp")
    rows = []
    for row in by_name.values():
        row["ran_as"] = sorted(row["ran_as"])
        rows.append(row)
        print(f"check {row['check']:45s} warp {row['warp']:.3f} s  vector {row['vector']:.3f} s"
              f"  {row['ran_as']}", flush=True)
    return rows


def program_rows() -> list[dict]:
    """Every test program of ``ptxlab run`` that runs on the CPU model, end to end."""
    manifest = json.loads((ROOT / "tests/programs/manifest.json").read_text())
    rows = []
    for entry in manifest:
        if entry["expect"] not in ("runs", "fault"):
            continue
        row = {"program": entry["file"], "args": entry["args"]}
        for engine in ENGINES:
            env = dict(os.environ, PTXLAB_CPU_ENGINE=engine)
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "ptxlab", "run", "--cpu",
                                   str(ROOT / "tests/programs" / entry["file"]), "--",
                                   *entry["args"]], capture_output=True, text=True, env=env)
            row[engine] = time.perf_counter() - t
            row[f"{engine}_stdout"] = done.stdout
        row["same_output"] = row["warp_stdout"] == row["vector_stdout"]
        del row["warp_stdout"], row["vector_stdout"]
        rows.append(row)
        print(f"program {entry['file']:30s} warp {row['warp']:.2f} s  vector "
              f"{row['vector']:.2f} s  same={row['same_output']}", flush=True)
    return rows


def markdown(gemm: list[dict], course: list[dict], programs: list[dict], meta: dict) -> str:
    lines = [f"# The CPU model's engines, side by side ({meta['date']})", "",
             f"Machine: {meta['machine']}. Command: `{meta['command']}`. Each figure is the "
             "minimum of the repetitions (one for the warp-by-warp 512³ GEMM), program decoded "
             "beforehand.", "",
             "## The capstone's learner GEMM", "",
             "| size | mma.sync | warp by warp | vector | speed-up | same bits | vector ran as |",
             "| ---: | ---: | ---: | ---: | ---: | :---: | --- |"]
    for r in gemm:
        lines.append(f"| {r['size']}³ | {r['mma_sync']:,} | {r['warp']:.3f} s | "
                     f"{r['vector']:.3f} s | {r['warp'] / r['vector']:.1f}x | "
                     f"{'yes' if r['same_bits'] else 'NO'} | {r['vector_ran_as'][0]} |")
    lines += ["", "## Every course kernel check (visible and hidden launches)", "",
              "| check | launches | warps | warp by warp | vector | speed-up | vector engine |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in course:
        lines.append(f"| {r['check']} | {r['launches']} | {r['warps']} | {r['warp']:.3f} s | "
                     f"{r['vector']:.3f} s | {r['warp'] / r['vector']:.2f}x | "
                     f"{', '.join(r['ran_as'])} |")
    lines += ["", "## Test programs of `ptxlab run --cpu`, end to end (build included)", "",
              "| program | args | warp by warp | vector | same output |",
              "| --- | --- | ---: | ---: | :---: |"]
    for r in programs:
        lines.append(f"| {r['program']} | {' '.join(r['args'])} | {r['warp']:.2f} s | "
                     f"{r['vector']:.2f} s | {'yes' if r['same_output'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--out", type=Path, default=ROOT / "reports/cpu_engines")
    ap.add_argument("--no-programs", action="store_true")
    ns = ap.parse_args()
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.node()}, {os.cpu_count()} cores, "
                       f"{platform.processor() or platform.machine()}",
            "command": "python measure/benchmarks/bench_cpu_engines.py " + " ".join(sys.argv[1:])}
    with np.errstate(all="ignore"):
        gemm = gemm_rows(ns.sizes, ns.reps)
        course = course_rows(ns.reps)
    programs = [] if ns.no_programs else program_rows()
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "bench.json").write_text(json.dumps({"meta": meta, "gemm": gemm, "course": course,
                                                    "programs": programs}, indent=1) + "\n")
    (ns.out / "BENCH.md").write_text(markdown(gemm, course, programs, meta))
    print(f"wrote {ns.out / 'BENCH.md'}")


if __name__ == "__main__":
    main()
