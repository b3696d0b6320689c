"""A class graded beside hogs: does any honest student lose a point, or much time, to them?

Usage: python measure/benchmarks/bench_grading_hogs.py [--assignment 06_mma] [--solutions 120]
           [--workers 16] [--hog-s 30] [--out reports/grading_gpu/hogs]

Builds the course's own assignment (``06_mma``) for ``--solutions`` submissions holding the
course's solutions, then grades it twice with ``ptxlab grade`` on fresh copies: alone (the
clean run), and with hostile submissions spread through the class, each holding the solutions
plus a last cell that takes something shared:

* ``h_gpu_memory``: allocates 78 GB of GPU memory through CuPy and holds it;
* ``h_gpu_busy``: keeps every SM busy with a kernel of its own;
* ``h_cpu_sessions``: 300 busy processes, each in a session of its own (``setsid``);
* ``h_dev_tmpfs``: files in the sandbox's own ``/dev`` past the memory limit;
* ``h_sysv_shm``: detached System V shared memory past the memory limit.

Each hog holds what it took for ``--hog-s`` seconds (within the cell limit). The report gives
the batch's wall time in each run, every honest student's score and time (median and slowest)
beside the clean run's, and each hog's row: what the grader said it did.

Writes ``hogs.json`` and ``HOGS.md`` to ``--out``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO, REPO / "measure" / "benchmarks", REPO / "measure" / "gpu", REPO / "tests" / "fixtures" / "grading"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import bench_grading_scale as scale  # noqa: E402
import course as fixture_course  # noqa: E402
import gpu_grading_check as check  # noqa: E402

#: The batch beside the hogs may take at most this multiple of the clean run.
WITHIN = 2.0


def hog_cells(hold_s: int) -> dict[str, str]:
    """The last cell of each hostile submission."""
    hold = f"import time\ntime.sleep({hold_s})\n"
    return {
        "h_gpu_memory": "import cupy\nheld = cupy.empty(78 * 2**30, dtype=cupy.uint8)\n" + hold,
        "h_gpu_busy": (
            "import cupy\n"
            "spin = cupy.RawKernel(r'''extern \"C\" __global__ void spin(long long n) {\n"
            "  long long t0 = clock64(); while (clock64() - t0 < n) { } }''', 'spin')\n"
            f"for _ in range({hold_s}):\n"
            "    spin((132 * 8,), (1024,), (cupy.int64(2_000_000_000),))\n"
            "    cupy.cuda.runtime.deviceSynchronize()\n"),
        "h_cpu_sessions": (
            "import subprocess\n"
            "for _ in range(300):\n"
            "    subprocess.Popen(['sh', '-c', 'while :; do :; done'], start_new_session=True)\n"
            + hold),
        "h_dev_tmpfs": (
            "chunk = b'x' * (16 << 20)\n"
            "for n in range(64):                 # 8 GiB in files of 128 MiB\n"
            "    with open(f'/dev/hog{n}.bin', 'wb') as f:\n"
            "        for _ in range(8):\n"
            "            f.write(chunk)\n" + hold),
        "h_sysv_shm": (
            "import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.shmat.restype = ctypes.c_void_p\n"
            "libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\n"
            "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
            "for _ in range(32):                 # 8 GiB, detached: no process maps it\n"
            "    shmid = libc.shmget(0, 256 << 20, 0o1600)\n"
            "    addr = libc.shmat(shmid, None, 0)\n"
            "    ctypes.memset(addr, 1, 256 << 20)\n"
            "    libc.shmdt(ctypes.c_void_p(addr))\n" + hold),
    }


def write_class(root: Path, assignment: str, honest: list[str], hogs: dict[str, str]) -> None:
    nb_name = f"{assignment}.ipynb"
    released = json.loads((root / "release" / assignment / nb_name).read_text())
    source = json.loads((root / "source" / assignment / nb_name).read_text())
    solved = fixture_course.answered(released, source)
    for student in honest + list(hogs):
        nb = json.loads(json.dumps(solved))
        if student in hogs:
            nb["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {},
                                "outputs": [], "source": hogs[student]})
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / nb_name).write_text(json.dumps(nb))
        (folder / "timestamp.txt").write_text("2026-11-27 09:00:00.000000 UTC")


def _rows(root: Path, assignment: str, students: list[str]) -> dict:
    got = scale.outcomes(root, assignment)
    return {s: {"status": got[s].status, "score": got[s].score, "max_score": got[s].max_score,
                "duration_s": got[s].duration_s, "reason": got[s].reason[:400]}
            if s in got else {"status": "missing"} for s in students}


def _summary(rows: dict, honest: list[str]) -> dict:
    full = [s for s in honest if rows[s].get("max_score") and rows[s]["score"] == rows[s]["max_score"]]
    times = sorted(rows[s]["duration_s"] for s in honest if rows[s].get("duration_s"))
    return {"honest": len(honest), "honest_full_marks": len(full),
            "honest_lost": {s: rows[s] for s in honest if s not in full},
            "median_honest_s": times[len(times) // 2] if times else None,
            "p90_honest_s": times[(9 * len(times)) // 10] if times else None,
            "slowest_honest_s": times[-1] if times else None}


def _within(beside: dict, clean: dict, key: str) -> bool:
    return bool(beside[key] and clean[key]) and beside[key] <= WITHIN * clean[key]


def run(args: argparse.Namespace, base: Path) -> dict:
    facts = check.device_facts()
    mode, why = check.sandbox_mode(args.sandbox)
    env = {k: v for k, v in fixture_course.grading_env().items()
           if not k.startswith("PTXLAB_") or k == "PTXLAB_BWRAP"}
    env.update({"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                "PTXLAB_SANDBOX": mode, "PTXLAB_GRADING_CONFIG": str(fixture_course.GRADING_CONFIG)})
    hogs = hog_cells(args.hog_s)
    honest = [f"s{i:03d}" for i in range(args.solutions)]
    print(f"building: {args.assignment} for {len(honest)} honest students and {len(hogs)} hogs",
          flush=True)
    template = scale.course_template(base, args.assignment, env)
    clean_root = scale.fresh_copy(template, base / "clean")
    write_class(clean_root, args.assignment, honest, {})
    hog_root = scale.fresh_copy(template, base / "hogs")
    write_class(hog_root, args.assignment, honest, hogs)
    clean_s, clean_log = scale.ptxlab_grade(clean_root, args.assignment, args.workers, env)
    clean = _summary(_rows(clean_root, args.assignment, honest), honest)
    print(f"clean: {clean_s:.1f} s, {clean['honest_full_marks']}/{clean['honest']} full marks",
          flush=True)
    hog_s, hog_log = scale.ptxlab_grade(hog_root, args.assignment, args.workers, env)
    rows = _rows(hog_root, args.assignment, honest + list(hogs))
    beside = _summary(rows, honest)
    print(f"beside the hogs: {hog_s:.1f} s, {beside['honest_full_marks']}/{beside['honest']} "
          "full marks", flush=True)
    for name in hogs:
        print(f"  {name}: {rows[name]}", flush=True)
    # the batch's wall time holds the hogs' own cells (a notebook starved by its own 300
    # processes runs to its cell limit); what the hogs must not cost is the honest students'
    met = (beside["honest_full_marks"] == beside["honest"] == clean["honest_full_marks"]
           and _within(beside, clean, "median_honest_s") and _within(beside, clean, "p90_honest_s"))
    return {"date": _dt.datetime.now().isoformat(timespec="seconds"),
            "device": facts["gpu"] or f"no GPU ({facts['gpu_status']})", "device_facts": facts,
            "assignment": args.assignment, "workers": args.workers, "sandbox": mode,
            "sandbox_detail": why, "hog_hold_s": args.hog_s,
            "command": "python measure/benchmarks/bench_grading_hogs.py " + " ".join(sys.argv[1:]),
            "clean_s": round(clean_s, 2), "beside_hogs_s": round(hog_s, 2),
            "ratio": round(hog_s / clean_s, 2) if clean_s else None, "within": WITHIN,
            "target_met": met, "clean": clean, "beside_hogs": beside,
            "hogs": {name: rows[name] for name in hogs},
            "preflight": [ln for ln in hog_log.splitlines() if ln.startswith("preflight")]}


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "hogs.json").write_text(json.dumps(result, indent=2) + "\n")
    c, b = result["clean"], result["beside_hogs"]
    lines = [
        f"# A class graded beside hogs: {result['assignment']}", "",
        f"{result['date']}, {result['device']}, {result['device_facts']['cpus']} CPUs, "
        f"{result['workers']} workers, sandbox: {result['sandbox']}. Command: "
        f"`{result['command']}`. Each hog holds what it took for {result['hog_hold_s']} s.", "",
        "What the grader said before grading:", "", "```", *result["preflight"], "```", "",
        f"**Target** (every honest student full marks in both runs; the median and the 90th "
        f"percentile of an honest student's grading time beside the hogs within "
        f"{result['within']:g}x the clean run's; the batch's wall time holds the hogs' own "
        f"cells, up to their cell limit): "
        f"**{'met' if result['target_met'] else 'NOT met'}**.", "",
        "| run | wall time | honest students full marks | median per honest student | "
        "90th percentile | slowest |", "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| clean | {result['clean_s']:.1f} s | {c['honest_full_marks']}/{c['honest']} | "
        f"{c['median_honest_s']} s | {c['p90_honest_s']} s | {c['slowest_honest_s']} s |",
        f"| beside the hogs | {result['beside_hogs_s']:.1f} s ({result['ratio']}x) | "
        f"{b['honest_full_marks']}/{b['honest']} | {b['median_honest_s']} s | "
        f"{b['p90_honest_s']} s | {b['slowest_honest_s']} s |", "",
        "| hog | status | score | time | the row's reason |", "| --- | --- | ---: | ---: | --- |",
    ]
    for name, row in result["hogs"].items():
        reason = str(row.get("reason", "")).replace("|", "/").replace("\n", " ")
        lines.append(f"| `{name}` | {row.get('status')} | {row.get('score')}/{row.get('max_score')} "
                     f"| {row.get('duration_s')} s | {reason} |")
    for s, row in list(b["honest_lost"].items())[:10]:
        lines.append(f"\nHonest student {s} beside the hogs: {row}")
    path = out / "HOGS.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="06_mma")
    parser.add_argument("--solutions", type=int, default=120)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hog-s", type=int, default=30,
                        help="how long each hog holds what it took, seconds")
    parser.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "grading_gpu" / "hogs")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="ptxlab-hogs-"))
    try:
        result = run(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(write_report(result, args.out).read_text())
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
