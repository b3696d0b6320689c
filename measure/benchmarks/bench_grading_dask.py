"""Grading on a Dask cluster: the same class on 1 and on 2 local Dask workers.

Usage: python measure/benchmarks/bench_grading_dask.py [--n 100] [--out reports/grading_dask]

Builds one class of ``--n`` submissions of the grading fixture assignment ``ps1`` (the mix of
``measure/benchmarks/bench_grading.py``), and in one run grades copies of it with

* ``ptxlab grade ps1 --scheduler ADDRESS`` on a local Dask cluster of 1 worker process, then of
  2 (one thread each: one submission at a time per worker, as on a GPU machine), and
* ``ptxlab grade ps1 --workers 1`` and ``--workers 2`` on this machine without Dask, the
  reference for what the cluster's transport costs.

Every run starts from the same ungraded class; the cluster's start is not timed (a course's
cluster outlives one assignment). It prints the times and the ratios, checks that every run
gave every student the same score, and writes ``BENCH.md`` and ``bench.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_grading as classroom  # noqa: E402


def grade_on_cluster(root: Path, env: dict[str, str], workers: int) -> float:
    from distributed import LocalCluster

    old = dict(os.environ)
    os.environ.update(env)          # the workers start from this process's environment
    try:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=40) as cluster:
            cmd = [sys.executable, "-m", "ptxlab.cli", "grade", classroom.ASSIGNMENT,
                   "--scheduler", cluster.scheduler_address, "--quiet"]
            return classroom.time_run(cmd, root, env, f"ptxlab grade --scheduler, {workers} Dask "
                                                      f"worker{'s' if workers > 1 else ''}")
    finally:
        os.environ.clear()
        os.environ.update(old)


def grade_here(root: Path, env: dict[str, str], workers: int) -> float:
    cmd = [sys.executable, "-m", "ptxlab.cli", "grade", classroom.ASSIGNMENT, "--workers",
           str(workers), "--quiet"]
    return classroom.time_run(cmd, root, env, f"ptxlab grade --workers {workers} (no Dask)")


def run(n: int, base: Path) -> dict:
    env = classroom.clean_env()
    roster = classroom.class_roster(n)
    template = classroom.make_template(base, env)
    runs = []
    reference = None
    for label, how, workers in [("dask", grade_on_cluster, 1), ("dask", grade_on_cluster, 2),
                                ("here", grade_here, 1), ("here", grade_here, 2)]:
        root = classroom.course_copy(template, base / f"{label}-{workers}", roster)
        wall = how(root, env, workers)
        got = classroom.scores(root)
        if len(got) != n:
            raise SystemExit(f"{label} with {workers} workers graded {len(got)} of {n}")
        if reference is None:
            reference = got
        elif got != reference:
            diff = sorted(s for s in got if got[s] != reference.get(s))
            raise SystemExit(f"{label} with {workers} workers gave other scores: {diff[:10]}")
        runs.append({"where": label, "workers": workers, "wall_s": round(wall, 1),
                     "per_submission_s": round(wall / n, 2)})
    by = {(r["where"], r["workers"]): r["wall_s"] for r in runs}
    return {
        "date": date.today().isoformat(), "n": n, "cores": os.cpu_count(),
        "cpu": classroom.cpu_model(), "load_average_after": classroom.load_average(),
        "sandbox": classroom._sandbox_in_use(), "runs": runs,
        "dask_speedup_2_over_1": round(by["dask", 1] / by["dask", 2], 2),
        "dask_over_here_1": round(by["dask", 1] / by["here", 1], 2),
        "dask_over_here_2": round(by["dask", 2] / by["here", 2], 2),
        "same_scores": True,
    }


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Grading on a Dask cluster: 1 and 2 workers",
        "",
        f"Measured {result['date']} by `measure/benchmarks/bench_grading_dask.py --n {result['n']}` on "
        f"{result['cores']} cores ({result['cpu']}), sandbox: {result['sandbox']}. One class of "
        f"{result['n']} submissions of the fixture assignment `ps1` (the mix of "
        "`measure/benchmarks/bench_grading.py`), each run from the same ungraded copy; every run gave "
        "every student the same score.",
        "",
        "| how | workers | wall time | per submission |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in result["runs"]:
        how = ("`ptxlab grade --scheduler` (local Dask cluster)" if r["where"] == "dask"
               else "`ptxlab grade --workers` (this machine, no Dask)")
        lines.append(f"| {how} | {r['workers']} | {r['wall_s']:.1f} s | {r['per_submission_s']:.2f} s |")
    lines += [
        "",
        f"* 2 Dask workers against 1: **{result['dask_speedup_2_over_1']:.2f}x** faster.",
        f"* Dask against worker processes on this machine: {result['dask_over_here_1']:.2f}x the "
        f"time with 1 worker, {result['dask_over_here_2']:.2f}x with 2: the course travels with "
        "every task (each worker unpacks it once), each submission and its graded folder travel "
        "as data, and the head writes each student's grades into its gradebook.",
        "",
        "Here the Dask workers, the head and the scheduler share this machine's cores; on a "
        "cluster each worker is a GPU machine of its own, so the time falls with the number of "
        "machines until the head's own work per student (packing the submission, writing its "
        "grades) is what is left.",
    ]
    path = out / "BENCH.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="submissions in the class")
    parser.add_argument("--out", type=Path, default=classroom.REPO / "reports" / "grading_dask")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ptxlab-bench-dask-") as tmp:
        result = run(args.n, Path(tmp))
    path = write_report(result, args.out)
    print(f"2 Dask workers: {result['dask_speedup_2_over_1']:.2f}x the speed of 1; "
          f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
