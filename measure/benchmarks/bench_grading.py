"""Grading throughput: ``ptxlab grade`` against stock sequential ``nbgrader autograde``.

Usage: python measure/benchmarks/bench_grading.py [--n 100] [--sizes 25,50,100] [--workers K]
                                          [--out reports/grading] [--keep DIR]

Builds one class of ``--n`` submissions of the grading fixture assignment ``ps1`` (a mix of
correct answers and the usual wrong ones: wrong formulas, floats, exceptions, renamed functions,
syntax errors, kernels that compute the wrong thing, do not compile or fault -- nothing that
hangs, so stock nbgrader finishes), copies it into separate course roots, and in one run grades

* the whole class with stock ``nbgrader autograde ps1`` (one process, one notebook after the
  other, nbgrader's own Execute: no sandbox, no isolation), and
* the whole class, and the first 25/50/... students of it, with ``ptxlab grade ps1`` (parallel
  workers, sandboxed kernels, every kernel launch isolated).

Then the same for a class of ``--course-n`` submissions of the course's own ``02_ldmatrix``
(solutions, blanks and the usual wrong answers), where ``ptxlab grade`` computes every verdict
in the grader from the answers the notebooks hand back (``ps1``'s tests are plain code, which
the notebook still judges).

It prints both times, their ratio and the cost per submission at each class size, checks that
both graders gave every student the same score, and writes ``BENCH.md`` and ``bench.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "grading"))
sys.path.insert(0, str(REPO / "tests" / "submissions"))
import attacks  # noqa: E402
import cases as corpus  # noqa: E402
import course as fixture_course  # noqa: E402

ASSIGNMENT = "ps1"
#: The class, cycled: (case name, how many in every 16 students). Mostly correct answers, then
#: the wrong answers graders see every week.
MIX = [("good_a", 4), ("good_b", 2), ("good_c", 1), ("bad_wrong_formula", 1),
       ("bad_returns_float", 1), ("bad_raises", 1), ("bad_renamed_function", 1),
       ("bad_syntax_error", 1), ("bad_kernel_wrong_address", 1),
       ("bad_kernel_compile_error", 1), ("bad_kernel_misaligned", 1),
       ("bad_deleted_test_cell", 1)]


def class_roster(n: int) -> list[tuple[str, corpus.Case]]:
    by_name = {c.name: c for c in corpus.CASES}
    cycle = [by_name[name] for name, weight in MIX for _ in range(weight)]
    # Spread the kinds through the class rather than in blocks.
    order = sorted(range(len(cycle)), key=lambda i: (i * 7) % len(cycle))
    cycle = [cycle[i] for i in order]
    return [(f"s{i:03d}", cycle[i % len(cycle)]) for i in range(n)]


def clean_env() -> dict[str, str]:
    """This checkout on PYTHONPATH, no grading settings inherited from the caller."""
    env = {k: v for k, v in fixture_course.grading_env().items() if not k.startswith("PTXLAB_") or k == "PTXLAB_BWRAP"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def make_template(base: Path, env: dict[str, str]) -> Path:
    """A stock nbgrader course with ps1 generated (its gradebook knows the assignment)."""
    root = base / "template"
    root.mkdir(parents=True)
    shutil.copytree(fixture_course.HERE / "source", root / "source")
    write_config(root)
    r = fixture_course.nbgrader(["generate_assignment", ASSIGNMENT], root, env)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{r.stderr[-3000:]}")
    return root


def write_config(root: Path) -> None:
    """A plain course config: stock nbgrader reads it as it is; ``ptxlab grade`` adds its own
    grading settings (autograder/nbgrader_config.py) underneath."""
    (root / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(root.resolve())!r}\n"
        f"c.CourseDirectory.course_id = {fixture_course.COURSE_ID!r}\n")


def course_copy(template: Path, dest: Path, roster: list[tuple[str, corpus.Case]]) -> Path:
    shutil.copytree(template, dest)
    write_config(dest)
    for student, case in roster:
        corpus.write_submission(dest, student, case, ASSIGNMENT)
    return dest


def scores(root: Path, assignment: str = ASSIGNMENT) -> dict[str, float]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", fixture_course.COURSE_ID) as gb:
        return {s.student.id: float(s.score or 0.0)
                for s in gb.find_assignment(assignment).submissions}


def time_run(cmd: list[str], cwd: Path, env: dict[str, str], label: str) -> float:
    print(f"  {label} ...", end="", flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"\n{label} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    print(f" {wall:.1f} s", flush=True)
    return wall


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run(n: int, sizes: list[int], workers: int, base: Path, course_n: int = 0) -> dict:
    env = clean_env()
    roster = class_roster(n)
    print(f"class of {n}: " + ", ".join(
        f"{sum(c.name == name for _, c in roster)} {name}" for name, _ in MIX))
    template = make_template(base, env)
    load_before = load_average()
    results: dict = {"stock": {}, "ptxlab": {}}

    stock_root = course_copy(template, base / f"stock_{n}", roster)
    results["stock"][n] = time_run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT],
                                   stock_root, env, f"stock nbgrader autograde, {n} submissions")
    for size in sizes:
        root = course_copy(template, base / f"ptxlab_{size}", roster[:size])
        results["ptxlab"][size] = time_run(
            [sys.executable, "-m", "ptxlab.cli", "grade", ASSIGNMENT, "--quiet",
             "--workers", str(workers)], root, env,
            f"ptxlab grade --workers {workers}, {size} submissions")
    course = run_course_class(course_n, workers, base, env) if course_n else None
    load_after = load_average()

    stock_scores = scores(stock_root)
    ours = scores(base / f"ptxlab_{n}")
    differ = {s: (stock_scores.get(s), ours.get(s)) for s in sorted(set(stock_scores) | set(ours))
              if stock_scores.get(s) != ours.get(s)}
    stock_s, ptx_s = results["stock"][n], results["ptxlab"][n]
    from nbgrader import __version__ as nbgrader_version
    return {
        "date": date.today().isoformat(),
        "machine": {"cores": os.cpu_count(), "cores_available": len(os.sched_getaffinity(0)),
                    "cpu": cpu_model(), "python": platform.python_version(),
                    "nbgrader": nbgrader_version, "platform": platform.platform(),
                    "load_average_before": load_before, "load_average_after": load_after,
                    "sandbox": _sandbox_in_use()},
        "submissions": n,
        "workers": workers,
        "mix": {name: sum(c.name == name for _, c in roster) for name, _ in MIX},
        "stock_s": round(stock_s, 2),
        "ptxlab_s": round(ptx_s, 2),
        "ratio": round(stock_s / ptx_s, 2),
        "per_submission_s": {
            "stock": {str(k): round(v / k, 3) for k, v in results["stock"].items()},
            "ptxlab": {str(k): round(v / k, 3) for k, v in results["ptxlab"].items()},
        },
        "ptxlab_by_size_s": {str(k): round(v, 2) for k, v in results["ptxlab"].items()},
        "scores_agree": not differ,
        "score_differences": differ,
        "mean_score": round(statistics.mean(ours.values()), 2) if ours else None,
        "course_class": course,
    }


#: The course-assignment class, cycled: (kind, how many in every 10 students).
COURSE_MIX = [("solution", 7), ("blank", 1), ("wrong_receive", 1), ("wrong_kernel", 1)]


def _course_notebook(kind: str, released: dict, solved: dict) -> dict:
    nb = json.loads(json.dumps(released if kind == "blank" else solved))
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if kind == "wrong_receive" and gid == "receive":
            cell["source"] = src.replace("2 * (lane % 4) + half", "2 * (lane % 4)")
        if kind == "wrong_kernel" and gid == "a_operand_kernel":
            cell["source"] = src.replace("(lane / 16) * 16", "(lane / 16) * 8")
    return nb


def run_course_class(n: int, workers: int, base: Path, env: dict[str, str]) -> dict:
    """Stock nbgrader and ``ptxlab grade`` on ``n`` submissions of ``02_ldmatrix``."""
    assignment = attacks.ASSIGNMENT
    template = base / "course-template"
    (template / "source").mkdir(parents=True)
    shutil.copytree(REPO / "course" / "source" / assignment, template / "source" / assignment)
    write_config(template)
    r = fixture_course.nbgrader(["generate_assignment", assignment], template, env)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{r.stderr[-3000:]}")
    released, solved = attacks.notebooks(template)
    cycle = [kind for kind, weight in COURSE_MIX for _ in range(weight)]
    roster = [(f"s{i:03d}", cycle[(i * 7) % len(cycle)]) for i in range(n)]
    times, roots = {}, {}
    for grader in ("stock", "ptxlab"):
        root = base / f"course-{grader}"
        shutil.copytree(template, root)
        write_config(root)
        for student, kind in roster:
            folder = root / "submitted" / student / assignment
            folder.mkdir(parents=True)
            (folder / attacks.NOTEBOOK).write_text(json.dumps(_course_notebook(kind, released, solved)))
            (folder / "timestamp.txt").write_text("2026-11-23 09:00:00.000000 UTC")
        cmd = ([sys.executable, "-m", "nbgrader", "autograde", assignment] if grader == "stock"
               else [sys.executable, "-m", "ptxlab.cli", "grade", assignment, "--quiet",
                     "--workers", str(workers)])
        times[grader] = time_run(cmd, root, env, f"{grader} on {n} submissions of {assignment}")
        roots[grader] = root
    got = {g: scores(roots[g], assignment) for g in roots}
    differ = {s: (got["stock"].get(s), got["ptxlab"].get(s))
              for s in sorted(set(got["stock"]) | set(got["ptxlab"]))
              if got["stock"].get(s) != got["ptxlab"].get(s)}
    return {"assignment": assignment, "submissions": n,
            "mix": {k: sum(kind == k for _, kind in roster) for k, _ in COURSE_MIX},
            "stock_s": round(times["stock"], 2), "ptxlab_s": round(times["ptxlab"], 2),
            "ratio": round(times["stock"] / times["ptxlab"], 2),
            "scores_agree": not differ, "score_differences": differ}


def _sandbox_in_use() -> str:
    from ptxlab.grading import sandbox
    try:
        return f"bubblewrap ({sandbox.bwrap_binary()})"
    except sandbox.SandboxUnavailable:
        return "none (bwrap missing)"


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    m = result["machine"]
    n = result["submissions"]
    per = result["per_submission_s"]
    lines = [
        "# Grading benchmark: `ptxlab grade` vs stock `nbgrader autograde`", "",
        f"{result['date']}, {m['cores_available']} cores ({m['cpu']}), Python {m['python']}, "
        f"nbgrader {m['nbgrader']}, sandbox: {m['sandbox']}.", "",
        f"The same {n} submissions of the fixture assignment `ps1` (two Python formula tests "
        "and one kernel test, run on the CPU backend here), graded in one run by",
        "",
        "* stock `nbgrader autograde ps1`: one process, notebook after notebook, nbgrader's own "
        "Execute (no sandbox, kernel launches in the notebook's process);",
        f"* `ptxlab grade ps1 --workers {result['workers']}`: parallel workers, every notebook "
        "kernel in the bubblewrap sandbox, every kernel launch in the worker's warm launch "
        "service (a sandboxed process whose executor is cleared between students), the grades "
        "CSV, summary and plot written at the end.",
        "",
        "| grader | submissions | wall time | per submission |",
        "| --- | ---: | ---: | ---: |",
        f"| stock nbgrader autograde | {n} | {result['stock_s']:.1f} s | {per['stock'][str(n)]:.3f} s |",
    ]
    by_size = sorted((int(k), v) for k, v in result["ptxlab_by_size_s"].items())
    for size, secs in by_size:
        lines.append(f"| ptxlab grade | {size} | {secs:.1f} s | {per['ptxlab'][str(size)]:.3f} s |")
    marginal = [f"{a}->{b}: {(tb - ta) / (b - a):.3f} s"
                for (a, ta), (b, tb) in zip(by_size, by_size[1:])]
    lines += [
        "",
        f"**{result['ratio']:.2f}x** faster than stock nbgrader on {n} submissions "
        f"({result['stock_s']:.1f} s vs {result['ptxlab_s']:.1f} s).",
        "",
        "Cost per submission as the class grows (ptxlab grade): " + ", ".join(
            f"{k}: {v:.3f} s" for k, v in sorted(per["ptxlab"].items(), key=lambda kv: int(kv[0])))
        + ". The fixed part (starting the workers and nbgrader, writing the report) is spread "
        "over more students; what each further student costs stays the same"
        + (f" (between class sizes: {', '.join(marginal)})." if marginal else "."),
        "",
        "## Where the time goes",
        "",
        "Two workers grade two notebooks at a time, which alone would halve the time on two "
        "cores. The rest comes from what a stock run waits for, found by profiling one worker:",
        "",
        "* a notebook kernel takes about half a second to start (half of it waiting rather "
        "than computing); the grader starts the next notebook's kernel, in a sandbox of its own, "
        "while the current notebook runs, so no notebook waits for one;",
        "* stock nbgrader shuts each kernel down gracefully and checks every 0.1 s whether it "
        "has gone; a graded kernel has nothing to save, so it is killed and reaped at once;",
        "* a kernel launch outside the notebook's process was a fresh interpreter importing "
        "the backends, then a fork of the notebook's kernel that still compiled the source "
        "(NVRTC) in every notebook; now each worker's launches go to its warm launch service, "
        "whose executor keeps the imports and the compiled PTX and is cleared between students "
        "(about 15% less CPU time for a class of the fixture than with the forks);",
        "* the grading kernel does not load the debugger, and the workers skip a grammar that "
        "nbformat's JSON-schema checker builds at import (about 1 s per process) but never "
        "uses on notebooks.",
        "",
        "Both graders gave every student the same score." if result["scores_agree"] else
        f"Scores differ for: {result['score_differences']}",
    ]
    course = result.get("course_class")
    if course:
        lines += [
            "", f"## A class of the course's own `{course['assignment']}`", "",
            f"{course['submissions']} submissions ({', '.join(f'{v} {k}' for k, v in course['mix'].items())}), "
            "graded in the same run. Here `ptxlab grade` computes every verdict in the grader: "
            "the notebook runs in the sandbox, hands back its answers as data (each function's "
            "values on inputs drawn for this run, each kernel's source), and the grader judges "
            "them and launches the kernels itself.", "",
            "| grader | submissions | wall time | per submission |",
            "| --- | ---: | ---: | ---: |",
            f"| stock nbgrader autograde | {course['submissions']} | {course['stock_s']:.1f} s | "
            f"{course['stock_s'] / course['submissions']:.3f} s |",
            f"| ptxlab grade | {course['submissions']} | {course['ptxlab_s']:.1f} s | "
            f"{course['ptxlab_s'] / course['submissions']:.3f} s |", "",
            f"**{course['ratio']:.2f}x** faster than stock nbgrader. "
            + ("Both graders gave every student the same score." if course["scores_agree"]
               else f"Scores differ for: {course['score_differences']}"),
        ]
    lines += [
        "",
        f"Class: {', '.join(f'{v} {k}' for k, v in result['mix'].items())}.",
        "",
        f"Load average before/after: {m['load_average_before']} / {m['load_average_after']} "
        "(other work on the machine slows both graders).",
        "",
        "Reproduce: `python measure/benchmarks/bench_grading.py` (options: `--n`, `--sizes`, "
        "`--workers`, `--course-n`).",
    ]
    path = out / "BENCH.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    from ptxlab.grading.options import default_workers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="submissions in the class (default 100)")
    parser.add_argument("--sizes", default="25,50",
                        help="smaller class sizes also graded by ptxlab grade (default 25,50)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="ptxlab grade workers (default: one more than the cores available)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "grading",
                        help="where BENCH.md and bench.json go")
    parser.add_argument("--course-n", type=int, default=40,
                        help="submissions of the course's 02_ldmatrix also graded (0: none)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the course roots in this folder and keep them")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip() and int(s) < args.n} | {args.n})
    sizes = [args.n] + [s for s in sizes if s != args.n]     # the full class first
    if args.keep:
        if args.keep.exists():
            shutil.rmtree(args.keep)
        args.keep.mkdir(parents=True)
        result = run(args.n, sizes, args.workers, args.keep, args.course_n)
    else:
        with tempfile.TemporaryDirectory(prefix="ptxlab-bench-grading-") as tmp:
            result = run(args.n, sizes, args.workers, Path(tmp), args.course_n)
    path = write_report(result, args.out)
    print(f"stock nbgrader autograde: {result['stock_s']:.1f} s, ptxlab grade: "
          f"{result['ptxlab_s']:.1f} s, ratio {result['ratio']:.2f}x")
    print("per submission (ptxlab grade): " + ", ".join(
        f"{k}: {v:.3f} s" for k, v in result["per_submission_s"]["ptxlab"].items()))
    course = result.get("course_class")
    if course:
        print(f"{course['assignment']}: stock {course['stock_s']:.1f} s, ptxlab grade "
              f"{course['ptxlab_s']:.1f} s, ratio {course['ratio']:.2f}x, scores agree: "
              f"{course['scores_agree']}")
    print(f"scores agree: {result['scores_agree']}; report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
