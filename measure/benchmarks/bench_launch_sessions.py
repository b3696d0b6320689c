"""What one student's launch executor costs: the launch service at class scale.

Usage: python measure/benchmarks/bench_launch_sessions.py [--services 16] [--sessions 12]
           [--launches 2] [--out reports/grading_gpu/sessions]

Grading runs every student's kernel launches in an executor process of that student's own
(:mod:`ptxlab.run.launch_server`): a fork of the service, which imports CuPy and creates a CUDA
context. This measures, on this machine, side by side in one run:

* what a fresh process pays, each part alone (median of 3): importing CuPy, creating the CUDA
  context, compiling the course's 06_mma tile kernel with NVRTC (nothing cached), and exiting
  with a context;
* how many CUDA contexts ``--services`` processes create per second when they all create them at
  once (what ``--services`` grading workers do);
* ``--services`` launch services side by side, each serving ``--sessions`` students of
  ``--launches`` launches of the tile kernel: once with a session per student, as grading does
  (what a new session costs is the service's policy: a fresh executor each, before 2026-11-26
  12:30 UTC; since then the warm one, cleared), and once with every student's launches in one
  session, the throughput of a warm executor that is never cleared.

Prints the figures and writes ``sessions.json`` and ``SESSIONS.md`` to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from ptxlab.run import gpu  # noqa: E402
from ptxlab.run import launch_client as ls  # noqa: E402

#: Each part of a fresh process, timed inside a child of its own.
_PARTS = r"""
import json, os, sys, time
t0 = time.perf_counter()
import cupy
t1 = time.perf_counter()
cupy.zeros(1, dtype=cupy.uint32).get()
t2 = time.perf_counter()
out = {"import_cupy_s": t1 - t0, "context_s": t2 - t1}
if len(sys.argv) > 1:
    from ptxlab.run import gpu
    src = open(sys.argv[1]).read()
    t3 = time.perf_counter()
    gpu.compile_module(src)
    out["nvrtc_tile_kernel_s"] = time.perf_counter() - t3
print(json.dumps(out), flush=True)
"""

#: Created at once by many processes: the context alone (CuPy imported before the clock starts).
_CONTEXT_AT_ONCE = r"""
import sys, time
import cupy
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.001)
t = time.perf_counter()
cupy.zeros(1, dtype=cupy.uint32).get()
print(time.perf_counter() - t, flush=True)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CUPY_CACHE_IN_MEMORY"] = "1"        # as in an executor: nothing compiled earlier
    return env


def tile_case():
    from ptxlab.authoring import course_cases

    cases = [c for c in course_cases.kernel_cases(np.random.default_rng(0))
             if c.name.startswith("06")]
    if not cases:
        raise SystemExit("no kernel case of 06_mma found in course/text")
    return cases[0]


def fresh_process_parts(source_file: Path, repeats: int = 3) -> dict:
    rows = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", _PARTS, str(source_file)], env=_env(),
                           capture_output=True, text=True, timeout=300)
        whole = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"the fresh-process probe failed:\n{r.stderr[-3000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["whole_process_s"] = whole
        rows.append(row)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def contexts_at_once(n: int) -> dict:
    start = time.time() + 3.0 + 0.2 * n       # every child has imported CuPy by then
    procs = [subprocess.Popen([sys.executable, "-c", _CONTEXT_AT_ONCE, f"{start:.3f}"],
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(n)]
    times = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"a context probe failed:\n{err[-2000:]}")
        times.append(float(out.strip().splitlines()[-1]))
    return {"processes": n, "median_s": statistics.median(times), "max_s": max(times),
            "contexts_per_s": n / max(times)}


def _serve_students(socket_path: str, case, students: int, launches: int, per_student: bool,
                    tag: str, latencies: list[float], errors: list[str],
                    backend: str = "gpu") -> None:
    for s in range(students):
        session = f"{tag}-student-{s}" if per_student else f"{tag}-one-session"
        t0 = time.perf_counter()
        for _ in range(launches):
            try:
                ls.launch(socket_path, source=case.source, kernel=case.kernel, grid=case.grid,
                          block=case.block, args=[a.copy() if isinstance(a, np.ndarray) else a
                                                  for a in case.args],
                          shared_mem=case.shared_mem, backend=backend, timeout_s=30,
                          memory_mb=4096, notes={}, session=session, options=case.options)
            except Exception as exc:  # noqa: BLE001 - counted and shown, the run goes on
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
        latencies.append(time.perf_counter() - t0)


def services_side_by_side(n_services: int, students: int, launches: int, case,
                          per_student: bool, backend: str = "gpu") -> dict:
    services = [ls.ServiceProcess(max_timeout_s=30, max_memory_mb=4096, env=_env())
                for _ in range(n_services)]
    try:
        for svc in services:
            svc.wait_ready(120)
        latencies: list[float] = []
        errors: list[str] = []
        threads = [threading.Thread(target=_serve_students,
                                    args=(svc.socket_path, case, students, launches,
                                          per_student, f"s{i}", latencies, errors, backend))
                   for i, svc in enumerate(services)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        for svc in services:
            svc.stop()
    total = n_services * students
    return {"services": n_services, "students": total, "launches_per_student": launches,
            "executor_per_student": per_student, "wall_s": round(wall, 2),
            "students_per_s": round(total / wall, 2),
            "median_student_s": round(statistics.median(latencies), 3),
            "max_student_s": round(max(latencies), 3), "errors": errors[:5],
            "error_count": len(errors)}


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sessions.json").write_text(json.dumps(result, indent=2) + "\n")
    p = result["fresh_process"]
    c = result["contexts_at_once"]
    lines = [
        "# A session per student: what it costs on this machine",
        "",
        f"{result['date']}, {result['device']}, {result['cpus']} CPUs, CuPy "
        f"{result['cupy']}. Command: `{result['command']}`.",
        "",
        "## A fresh process, part by part (median of 3)",
        "",
        "| part | seconds |",
        "| --- | ---: |",
        f"| import CuPy | {p['import_cupy_s']:.3f} |",
        f"| create the CUDA context (first `cupy.zeros(1).get()`) | {p['context_s']:.3f} |",
        f"| NVRTC compile of the 06_mma tile kernel, nothing cached | "
        f"{p['nvrtc_tile_kernel_s']:.3f} |",
        f"| the whole process, start to exit | {p['whole_process_s']:.3f} |",
        "",
        f"## {c['processes']} processes creating their CUDA context at once",
        "",
        f"median {c['median_s']:.3f} s, slowest {c['max_s']:.3f} s: "
        f"{c['contexts_per_s']:.1f} contexts per second in all.",
        "",
        f"## {result['per_student']['services']} launch services side by side",
        "",
        "| executors | students | launches each | wall | students / s | median per student "
        "| slowest | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, label in (("per_student", "a session per student (as grading does)"),
                       ("one_session", "one session per service, every student in it")):
        r = result[key]
        lines.append(f"| {label} | {r['students']} | {r['launches_per_student']} | "
                     f"{r['wall_s']} s | {r['students_per_s']} | {r['median_student_s']} s | "
                     f"{r['max_student_s']} s | {r['error_count']} |")
    ratio = result["per_student"]["wall_s"] / max(result["one_session"]["wall_s"], 1e-9)
    lines += ["", f"A session per student takes {ratio:.2f}x the time of one session per "
              "service for the same launches.", ""]
    for key in ("per_student", "one_session"):
        for e in result[key]["errors"]:
            lines.append(f"- error ({key}): {e}")
    path = out / "SESSIONS.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=16)
    parser.add_argument("--sessions", type=int, default=12, help="students per service")
    parser.add_argument("--launches", type=int, default=2, help="launches per student")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "grading_gpu" / "sessions")
    args = parser.parse_args(argv)
    st = gpu.status()
    if not st.available:
        print(f"no GPU here ({st.message}): nothing to measure")
        return 2
    import cupy

    case = tile_case()
    src = args.out / "tile_kernel.cu"
    args.out.mkdir(parents=True, exist_ok=True)
    src.write_text(case.source)
    result = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "device": st.device_label, "cpus": os.cpu_count(), "cupy": cupy.__version__,
              "command": "python measure/benchmarks/bench_launch_sessions.py " + " ".join(
                  sys.argv[1:] if argv is None else argv), "kernel_case": case.name}
    print("fresh process, part by part ...", flush=True)
    result["fresh_process"] = fresh_process_parts(src)
    print(json.dumps(result["fresh_process"]), flush=True)
    print(f"{args.services} contexts at once ...", flush=True)
    result["contexts_at_once"] = contexts_at_once(args.services)
    print(json.dumps(result["contexts_at_once"]), flush=True)
    for key, per_student in (("per_student", True), ("one_session", False)):
        print(f"{args.services} services, executor per student: {per_student} ...", flush=True)
        result[key] = services_side_by_side(args.services, args.sessions, args.launches, case,
                                            per_student)
        print(json.dumps(result[key]), flush=True)
    src.unlink()
    path = write_report(result, args.out)
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
