"""The CPU model's two engines side by side, in one run on one machine: warp by warp (every warp
of a launch in turn, 32 lanes per numpy call) and the vector run (every warp of a batch of blocks
in one numpy call, ``ptxlab.run.ptx.wide``).

Usage: python measure/benchmarks/bench_cpu_engines.py [--reps 3] [--sizes 128 256 512]
           [--baseline TREE [--grading 02_ldmatrix:100 --grading 06_mma:40 --grading-rounds 6]]
           [--out reports/cpu_engines]

Measured, each the minimum of ``--reps`` runs (the machine may be shared; the minimum is the
better estimate of what the code costs) with the program already decoded, so the figures are
the launches themselves:

* the capstone's learner GEMM (``bench.learner_gemm.course_solution()``) at each size, and that
  the two engines give the same bits;
* every course kernel check (each exercise's visible and hidden launches), by exercise, and
  with ``--baseline`` the same launches with the baseline's model and with this one, timed
  alike in new processes that take turns;
* a learner's check of every course kernel exercise end to end: the import and first check
  of a new notebook, the same check again, an edited kernel, and the grader's judgement;
* every test program of ``ptxlab run`` on the CPU model, end to end (build included);
* with ``--grading ASSIGNMENT:N`` (and ``--baseline``), ``ptxlab grade`` of a class of N
  submissions on the CPU path by both codes, alternating (``bench_grading_versions``): the wall
  and CPU time, each grading step, the CPU model's share, and the same scores.

Writes ``BENCH.md`` and ``bench.json`` under ``--out``.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.run.cpu import program_for  # noqa: E402
from ptxlab.run.ptx.interpreter import Launch  # noqa: E402

ENGINES = ("warp", "vector")
#: The ``ptxlab`` command of this Python (a whole program runs as a learner runs it).
_PTXLAB = str(Path(sys.executable).with_name("ptxlab"))


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


_GEMM_CHILD = r"""
import json, sys, time
import numpy as np
from ptxlab.bench import learner_gemm
from ptxlab.run.cpu import program_for
from ptxlab.run.ptx.interpreter import Launch
n, reps = int(sys.argv[1]), int(sys.argv[2])
gemm = learner_gemm.course_solution()
prog = program_for(gemm.source(), gemm.kernel_name)
rng = np.random.default_rng(n)
a = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
b = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
best, out = float("inf"), None
for _ in range(reps):
    args = [a, b, np.zeros((n, n), np.uint16), np.int32(n), np.int32(n), np.int32(n)]
    t = time.perf_counter()
    with np.errstate(all="ignore"):
        out = Launch(prog, gemm.grid(n, n), (gemm.threads,), args,
                     shared_mem=gemm.smem_bytes).run()[2]
    best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best, "c": out.tobytes().hex()}))
"""


#: The same launches with another tree's model: each case's best time, the program decoded
#: beforehand (only ``program_for`` and ``Launch``, which every version of the model has).
_LAUNCH_CHILD = r"""
import json, pickle, sys, time
import numpy as np
from ptxlab.run.cpu import program_for
from ptxlab.run.ptx.interpreter import Launch
cases, reps = pickle.load(open(sys.argv[1], "rb")), int(sys.argv[2])
out = []
for source, kernel, options, grid, block, args, shared_mem in cases:
    prog = program_for(source, kernel, options)
    best = float("inf")
    for _ in range(reps):
        fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        t = time.perf_counter()
        with np.errstate(all="ignore"):
            Launch(prog, grid, block, fresh, shared_mem=shared_mem).run()
        best = min(best, time.perf_counter() - t)
    out.append(best)
print(json.dumps(out))
"""


def baseline_course(rows: list[dict], cases: list, baseline: Path, reps: int,
                    scratch: Path, rounds: int = 4) -> None:
    """Each course check's launches with the baseline's model (``baseline``) and with this
    one (``now_child``), both timed by the same child code in new processes, the two trees
    taking turns for ``rounds`` rounds (this machine's speed drifts by more than the
    difference between two runs); each case's minimum over the rounds."""
    import pickle
    table = scratch / "course_cases.pkl"
    table.write_bytes(pickle.dumps([(c.source, c.kernel, c.options, c.grid, c.block, c.args,
                                     c.shared_mem) for c in cases]))
    best: dict[str, list[float]] = {}
    trees = [("baseline", baseline), ("now_child", ROOT)]
    for r in range(rounds):
        for key, tree in (trees if r % 2 == 0 else trees[::-1]):
            done = subprocess.run([sys.executable, "-c", _LAUNCH_CHILD, str(table), str(reps)],
                                  capture_output=True, text=True, cwd=tree,
                                  env=dict(os.environ, PYTHONPATH=str(tree)))
            if done.returncode:
                raise SystemExit(f"child failed in {tree}: {done.stderr[-800:]}")
            seconds = json.loads(done.stdout.strip().splitlines()[-1])
            best[key] = [min(a, b) for a, b in zip(best.get(key, seconds), seconds)]
    by_name = {r["check"]: r for r in rows}
    for key, seconds in best.items():
        for row in rows:
            row[key] = 0.0
        for case, t in zip(cases, seconds):
            by_name[case.name.split(" (")[0]][key] += t
    for row in rows:
        print(f"check {row['check']:45s} before {row['baseline']:.4f} s, now "
              f"{row['now_child']:.4f} s", flush=True)


_COMPILED: set[Path] = set()


def _in_tree(tree: Path | None, code: str, *args: str) -> dict:
    """Run ``code`` in a child whose ``ptxlab`` is the one in ``tree`` (else this one), its
    bytecode compiled beforehand and written as a learner's Python writes it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree or ROOT)
    if (tree or ROOT) not in _COMPILED:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str((tree or ROOT) / "ptxlab")],
                       capture_output=True, env=env)
        _COMPILED.add(tree or ROOT)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=tree or ROOT)
    if done.returncode:
        raise SystemExit(f"child failed in {tree or ROOT}: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_gemm(rows: list[dict], baseline: Path, reps: int) -> None:
    """The same GEMMs with the code of ``baseline`` (the model as it was), same bits asked."""
    from ptxlab.bench import learner_gemm
    gemm = learner_gemm.course_solution()
    prog = program_for(gemm.source(), gemm.kernel_name)
    for row in rows:
        n = row["size"]
        got = _in_tree(baseline, _GEMM_CHILD, str(n), str(1 if n >= 512 else reps))
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
        b = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
        out, _ = _run(prog, gemm.grid(n, n), (gemm.threads,),
                      [a, b, np.zeros((n, n), np.uint16), np.int32(n), np.int32(n),
                       np.int32(n)], gemm.smem_bytes, "vector")
        row["baseline"] = got["seconds"]
        row["baseline_same_bits"] = got["c"] == out[2].tobytes().hex()
        print(f"GEMM {n}^3 baseline {got['seconds']:8.3f} s  same bits "
              f"{row['baseline_same_bits']}", flush=True)


def course_cases() -> list:
    """Every course kernel check's launches (visible and hidden), as the checks make them."""
    from ptxlab.authoring.course_cases import kernel_cases
    return list(kernel_cases(np.random.default_rng(0), small=False))


def course_rows(reps: int, cases: list) -> list[dict]:
    """Every course kernel check's launches, by exercise."""
    by_name: dict[str, dict] = {}
    for case in cases:
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


#: A learner's notebook, from its first cell: import the exercise's module, check a kernel.
_COLD_CHILD = r"""
import importlib, io, contextlib, json, sys, time
t = time.perf_counter()
exercise = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
src = open(sys.argv[3]).read()
imported = time.perf_counter() - t
with contextlib.redirect_stdout(io.StringIO()):
    t = time.perf_counter()
    exercise.check(src)
print(json.dumps({"import": imported, "cold": time.perf_counter() - t}))
"""

#: The same in a process whose launches are timed: the first check (imports done), the same
#: check again, the learner's edit (a source the PTX cache has not seen: NVRTC compiles it),
#: and the grader's judgement with the hidden runs. numpy.random is loaded first: one code
#: loads it in one step and the other in another (the hidden runs draw their values with it),
#: and a library's one-time load is the *cold* column's business, not a step's.
_CHECK_CHILD = r"""
import importlib, io, contextlib, json, sys, time
import numpy.random
from ptxlab.run.ptx import interpreter
model = {"s": 0.0}
run = interpreter.Launch.run
def timed(self):
    t = time.perf_counter()
    try:
        return run(self)
    finally:
        model["s"] += time.perf_counter() - t
interpreter.Launch.run = timed
exercise = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
src = open(sys.argv[3]).read()
edited = src + "\n// edited %d\n" % time.time_ns()
out = {}
with contextlib.redirect_stdout(io.StringIO()):
    for label, text, call in (("first", src, exercise.check), ("again", src, exercise.check),
                              ("edited", edited, exercise.check),
                              ("judged", src, lambda s: exercise.evaluate(s, hidden=True))):
        model["s"] = 0.0
        t = time.perf_counter()
        call(text)
        out[label] = time.perf_counter() - t
        out[label + "_model"] = model["s"]
print(json.dumps(out))
"""


def check_rows(baseline: Path | None, scratch: Path, reps: int) -> list[dict]:
    """A learner's check of every course kernel exercise, as a notebook runs it (the PTX cache
    on disk warm, bytecode compiled): the module's import and the first check in a new process;
    then, with the CPU model's part timed, the first check again in a new process, the same
    check again, an edited kernel (compiled afresh) and the grader's judgement. Each figure is
    the minimum of ``reps`` new processes, the two codes taking turns (a first check lasts a
    tenth of a second, and this machine's speed drifts by more than that between two runs). The
    code of ``baseline`` runs each first, so both find the PTX cache warm."""
    from ptxlab.authoring.course_cases import exercise_home, solution_kernels
    rows = []
    for notebook, exercise, src in solution_kernels():
        module, name = exercise_home(exercise)
        source = scratch / f"{exercise.key}.cu"
        source.write_text(src)
        args = (module, name, str(source))
        row = {"notebook": notebook, "check": exercise.key}
        trees = [(baseline, "baseline_")] if baseline else []
        trees.append((None, ""))
        for tree, _ in trees:
            _in_tree(tree, _COLD_CHILD, *args)                   # the PTX cache warm
        for rep in range(reps):           # the codes take turns going first, rep after rep
            for tree, prefix in (trees if rep % 2 == 0 else trees[::-1]):
                got = {**_in_tree(tree, _COLD_CHILD, *args), **_in_tree(tree, _CHECK_CHILD, *args)}
                for k, v in got.items():
                    row[prefix + k] = min(v, row.get(prefix + k, v))
        rows.append(row)
        print(f"check {exercise.key:36s} import {row['import']:.3f} s, cold {row['cold']:.3f} s, "
              f"first {row['first']:.3f} s (model {row['first_model']:.3f}), again "
              f"{row['again']:.3f} s, edited {row['edited']:.3f} s, judged {row['judged']:.3f} s"
              + (f"; before: cold {row['baseline_cold']:.3f} s, edited "
                 f"{row['baseline_edited']:.3f} s" if baseline else ""), flush=True)
    return rows


def _head(columns: list[tuple[str, str]], more: list[tuple[str, str]]) -> list[str]:
    """A markdown table's header and rule: each column's name and alignment."""
    cols = columns + more
    return ["| " + " | ".join(n for n, _ in cols) + " |",
            "| " + " | ".join(a for _, a in cols) + " |"]


def _check_lines(checks: list[dict]) -> list[str]:
    base = "baseline_cold" in checks[0]
    lines = ["", "## A learner's check, end to end, and the model's part of it", "",
             "Each course kernel exercise's `check` of its solution as a notebook runs it, the "
             "PTX cache on disk warm and bytecode compiled. *import*: the notebook's import of "
             "the exercise's module; *cold*: the first check after it, in a new process. Then, "
             "in another new process with the CPU model's launches timed (*model*): the first "
             "check, the same check *again*, an *edited* kernel (a source the PTX cache has not "
             "seen, so NVRTC compiles it), and the grader's judgement with the hidden runs "
             "(*judged*, what `ptxlab grade` does per submission); that process loads "
             "numpy.random before its first step, for both codes, since each loads it in a "
             "different step. Each figure is the minimum of the repetitions, each in new "
             "processes, the codes taking turns."
             + (" *before*: the same with the baseline's code, in the same run; a speed-up is "
                "before over now." if base else ""), ""]
    lines += _head([("check", "---"), ("import", "---:"), ("cold", "---:"), ("first", "---:"),
                    ("model", "---:"), ("again", "---:"), ("edited", "---:"),
                    ("judged", "---:"), ("model", "---:")],
                   [("cold before", "---:"), ("again before", "---:"),
                    ("edited before", "---:"), ("judged before", "---:"),
                    ("cold", "---:"), ("again", "---:"), ("edited", "---:"),
                    ("judged", "---:")] if base else [])
    for r in checks:
        line = (f"| {r['notebook']}:{r['check']} | {r['import']:.3f} s | {r['cold']:.3f} s | "
                f"{r['first']:.3f} s | {r['first_model']:.3f} s | {r['again']:.3f} s | "
                f"{r['edited']:.3f} s | {r['judged']:.3f} s | {r['judged_model']:.3f} s |")
        if base:
            line += "".join(f" {r['baseline_' + k]:.3f} s |"
                            for k in ("cold", "again", "edited", "judged"))
            line += "".join(f" {r['baseline_' + k] / r[k]:.1f}x |"
                            for k in ("cold", "again", "edited", "judged"))
        lines.append(line)
    return lines


def target_lines(gemm: list[dict], checks: list[dict], course: list[dict] = (),
                 grading: list[dict] = ()) -> list[str]:
    """The issue's targets as this run measured them."""
    lines = ["## Against the targets", ""]
    by_size = {r["size"]: r for r in gemm}
    if 256 in by_size and "baseline" in by_size[256]:
        r = by_size[256]
        x = r["baseline"] / r["vector"]
        lines.append(f"- The 256³ learner GEMM: {r['baseline']:.3f} s before, {r['vector']:.3f} s "
                     f"now, **{x:.1f}x** (target 20x: {'met' if x >= 20 else 'not met'}).")
    if 512 in by_size:
        t = by_size[512]["vector"]
        lines.append(f"- The 512³ learner GEMM: **{t:.2f} s** (target under 5 s: "
                     f"{'met' if t < 5 else 'not met'}).")
    warps = {r["check"]: r["warps"] for r in course}
    if course and "baseline" in course[0]:
        for label, rows in _by_warps(course, warps, lambda r: r["check"]):
            xs = [r["baseline"] / r["now_child"] for r in rows]
            lines.append(f"- {label}, the CPU model's launches (every visible and hidden launch "
                         f"of a check): {_spread(xs)}"
                         + (f" (target 3x: {'met' if min(xs) >= 3 else 'not met'})."
                            if label.startswith("One-warp") else "."))
    if checks and "baseline_cold" in checks[0]:
        for key, what in (("cold", "a notebook's first check"), ("edited", "an edited kernel"),
                          ("again", "the same check again"),
                          ("judged", "the grader's judgement")):
            for label, rows in _by_warps(checks, warps,
                                         lambda r: f"{r['notebook']}:{r['check']}"):
                xs = [r["baseline_" + key] / r[key] for r in rows]
                lines.append(f"- {label}, {what}, end to end: {_spread(xs)}.")
    for c in grading:
        said = _versions().share_lines(c["runs"])
        if said:
            lines.append(f"- Grading {c['submissions']} submissions of {c['assignment']} on the "
                         f"CPU path: {said[0][2].lower()}{said[0][3:]}")
    return lines + [""]


@functools.cache
def _versions():
    """``bench_grading_versions`` (beside this file): the grading of a class by two codes,
    imported when a report needs it (it loads the grading fixtures)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_grading_versions
    return bench_grading_versions


def grading_classes(specs: list[str], baseline: Path, rounds: int, workers: int) -> list[dict]:
    """Each ``ASSIGNMENT:N`` class graded ``rounds`` times by this code and the baseline's,
    alternating (the sandbox on where it starts, as an instructor grades)."""
    versions = _versions()
    classes = [(a, int(n)) for a, n in (spec.split(":") for spec in specs)]
    return versions.grade_classes(classes, baseline.resolve(), ROOT, rounds, workers,
                                  versions.clean_env())


def _by_warps(rows: list[dict], warps: dict, name) -> list[tuple[str, list[dict]]]:
    """The rows of one-warp checks and those of checks of several warps (the target is about
    the former: the vector run serves the latter), each where there are any."""
    one = [r for r in rows if warps.get(name(r), 1) == 1]
    more = [r for r in rows if warps.get(name(r), 1) != 1]
    return [(label, part) for label, part in (("One-warp checks", one),
                                              ("Checks of several warps", more)) if part]


def _spread(xs: list[float]) -> str:
    return (f"{min(xs):.1f}x to {max(xs):.1f}x faster (median {float(np.median(xs)):.1f}x)"
            if len(xs) > 1 else f"{xs[0]:.1f}x faster")


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
            done = subprocess.run([_PTXLAB, "run", "--cpu",
                                   str(ROOT / "tests/programs" / entry["file"]), "--",
                                   *entry["args"]], capture_output=True, text=True, env=env)
            row[engine] = time.perf_counter() - t
            row[f"{engine}_stdout"] = done.stdout
            row[f"{engine}_exit"] = done.returncode
            if done.returncode != entry["exit_status"]:
                raise SystemExit(f"{entry['file']} exited {done.returncode}, expected "
                                 f"{entry['exit_status']}: {done.stderr[-500:]}")
        row["same_output"] = row["warp_stdout"] == row["vector_stdout"]
        del row["warp_stdout"], row["vector_stdout"]
        rows.append(row)
        print(f"program {entry['file']:30s} warp {row['warp']:.2f} s  vector "
              f"{row['vector']:.2f} s  same={row['same_output']}", flush=True)
    return rows


def markdown(gemm: list[dict], course: list[dict], programs: list[dict], meta: dict,
             checks: list[dict] = (), grading: list[dict] = ()) -> str:
    base = "baseline" in gemm[0]
    lines = [f"# The CPU model's engines, side by side ({meta['date']})", "",
             f"Machine: {meta['machine']}. Command: `{meta['command']}`. Each figure is the "
             "minimum of the repetitions (one for a 512³ GEMM warp by warp), program decoded "
             "beforehand."
             + (f" Baseline: the code of {meta['baseline']}, run in the same run." if base else ""),
             ""] + target_lines(gemm, list(checks), course, list(grading)) + [
                 "## The capstone's learner GEMM", ""]
    lines += _head([("size", "---:"), ("mma.sync", "---:"), ("warp by warp", "---:"),
                    ("vector", "---:"), ("speed-up", "---:"), ("same bits", ":---:"),
                    ("vector ran as", "---")],
                   [("before", "---:"), ("speed-up on before", "---:"),
                    ("same bits as before", ":---:")] if base else [])
    for r in gemm:
        line = (f"| {r['size']}³ | {r['mma_sync']:,} | {r['warp']:.3f} s | {r['vector']:.3f} s "
                f"| {r['warp'] / r['vector']:.1f}x | {'yes' if r['same_bits'] else 'NO'} | "
                f"{r['vector_ran_as'][0]} |")
        if base:
            line += (f" {r['baseline']:.3f} s | {r['baseline'] / r['vector']:.1f}x | "
                     f"{'yes' if r['baseline_same_bits'] else 'NO'} |")
        lines.append(line)
    before = bool(course) and "baseline" in course[0]
    lines += ["", "## Every course kernel check's launches (visible and hidden)", ""]
    lines += _head([("check", "---"), ("launches", "---:"), ("warps", "---:"),
                    ("warp by warp", "---:"), ("vector", "---:"), ("speed-up", "---:"),
                    ("vector engine", "---")],
                   [("now, by the same child", "---:"), ("before", "---:"),
                    ("speed-up on before", "---:")] if before else [])
    for r in course:
        line = (f"| {r['check']} | {r['launches']} | {r['warps']} | {r['warp'] * 1e3:.2f} ms | "
                f"{r['vector'] * 1e3:.2f} ms | {r['warp'] / r['vector']:.2f}x | "
                f"{', '.join(r['ran_as'])} |")
        if before:
            line += (f" {r['now_child'] * 1e3:.2f} ms | {r['baseline'] * 1e3:.2f} ms | "
                     f"{r['baseline'] / r['now_child']:.2f}x |")
        lines.append(line)
    lines += _check_lines(list(checks)) if checks else []
    lines += ["", "## Test programs of `ptxlab run --cpu`, end to end (build included)", "",
              "| program | args | warp by warp | vector | same output |",
              "| --- | --- | ---: | ---: | :---: |"]
    for r in programs:
        lines.append(f"| {r['program']} | {' '.join(r['args'])} | {r['warp']:.2f} s | "
                     f"{r['vector']:.2f} s | {'yes' if r['same_output'] else 'NO'} |")
    if grading:
        lines += ["", "## Grading on the CPU path, the code now and before", "",
                  f"`ptxlab grade` with {meta.get('grading_workers', 2)} workers, each class "
                  "graded the same number of times by each code, the two alternating. *CPU* is "
                  "the user and system time of the grading's processes (the grader, its workers, "
                  "the sandboxed notebook kernels, the launch services).", ""]
        for c in grading:
            lines += ["#" + line if line.startswith("## ") else line
                      for line in _versions().class_lines(c, c["rounds"])]
    return "\n".join(lines) + "\n"


def _describe_tree(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %cs"],
                          capture_output=True, text=True)
    return f"{tree} ({done.stdout.strip() or 'not a git checkout'})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--out", type=Path, default=ROOT / "reports/cpu_engines")
    ap.add_argument("--no-programs", action="store_true")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout of the code before (e.g. a git worktree of an older "
                         "commit): its GEMM and checks are measured in the same run")
    ap.add_argument("--grading", action="append", default=[], metavar="ASSIGNMENT:N",
                    help="with --baseline: also grade a class of N submissions on the CPU "
                         "path by both codes (e.g. 02_ldmatrix:100, 06_mma:40)")
    ap.add_argument("--grading-rounds", type=int, default=6,
                    help="gradings of each class by each code (even: each goes first as often)")
    ap.add_argument("--workers", type=int, default=max(1, len(os.sched_getaffinity(0))),
                    help="grading workers")
    ns = ap.parse_args()
    if ns.grading and not ns.baseline:
        ap.error("--grading compares two codes: name the one before with --baseline")
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.node()}, {os.cpu_count()} cores, "
                       f"{platform.processor() or platform.machine()}",
            "command": "python measure/benchmarks/bench_cpu_engines.py " + " ".join(sys.argv[1:])}
    with np.errstate(all="ignore"):
        gemm = gemm_rows(ns.sizes, ns.reps)
        if ns.baseline:
            baseline_gemm(gemm, ns.baseline, ns.reps)
            meta["baseline"] = _describe_tree(ns.baseline)
        cases = course_cases()
        course = course_rows(ns.reps, cases)
    with tempfile.TemporaryDirectory(prefix="ptxlab-bench-") as scratch:
        if ns.baseline:
            baseline_course(course, cases, ns.baseline, ns.reps, Path(scratch))
        checks = check_rows(ns.baseline, Path(scratch), ns.reps)
    programs = [] if ns.no_programs else program_rows()
    grading = (grading_classes(ns.grading, ns.baseline, ns.grading_rounds, ns.workers)
               if ns.grading else [])
    meta["grading_workers"] = ns.workers
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "bench.json").write_text(json.dumps({"meta": meta, "gemm": gemm, "course": course,
                                                    "checks": checks, "programs": programs,
                                                    "grading": grading}, indent=1) + "\n")
    (ns.out / "BENCH.md").write_text(markdown(gemm, course, programs, meta, checks, grading))
    print(f"wrote {ns.out / 'BENCH.md'}")


if __name__ == "__main__":
    main()
