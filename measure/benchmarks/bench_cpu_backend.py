"""CPU backend speed: compile, decode and run times of the PTX interpreter, end to end.

Usage: python measure/benchmarks/bench_cpu_backend.py [--reps 3] [--out reports/cpu_backend]
       python measure/benchmarks/bench_cpu_backend.py --profile capstone_gemm_tile   # where time goes

Every case is launched through ``ptxlab.run.backends.launch(..., backend="cpu")``, the call the
notebooks make, in fresh child processes, three ways:

* **cold**: an empty PTX cache directory (``PTXLAB_CACHE_DIR``): the first launch compiles with
  NVRTC, parses and decodes the PTX, then runs;
* **cached**: a new process over the cache the cold run left: the first launch reads the PTX
  from disk (nothing in memory yet), parses, decodes and runs; this is what a learner's
  notebook pays for a kernel the second time it is opened;
* **warm**: further launches in that same process (the decoded program is kept in memory):
  only the run itself.

The first launch is split into compile (PTX from NVRTC or the disk cache), parse, decode, set-up
(argument copies, the launch's memory), run (the interpreter) and other (backend choice, the
compiler probe, copying results back). Each phase is repeated ``--reps`` times in new processes;
the report gives the median and the minimum (the machine may be shared, so the minimum is the
better estimate of what the code costs, the median of what a user sees).
Writes ``BENCH.md`` and ``bench.json`` under ``--out``.
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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: The requirement: the first launch of a process whose PTX is already cached on disk.
TARGETS_S = {"round_trip": 0.5, "capstone_gemm_tile": 10.0}

# One warp: A (16x16 f16) goes global -> shared -> one ldmatrix.x4 -> one mma.m16n8k16 with B
# handed over as ready fragments and C = 0 -> one stmatrix.x2 of D (16x8 f16) -> shared -> global.
ROUND_TRIP_SOURCE = r"""
#include "ldmatrix.cuh"
#include "mma.cuh"
#include "stmatrix.cuh"

extern "C" __global__ void round_trip(const unsigned short* a, const unsigned* b_frag,
                                      unsigned short* d)
{
    __shared__ __align__(16) unsigned short sa[16 * 16];
    __shared__ __align__(16) unsigned short sd[16 * 8];
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = lane; i < 16 * 16 / 8; i += 32)
        reinterpret_cast<uint4*>(sa)[i] = reinterpret_cast<const uint4*>(a)[i];
    __syncwarp();
    unsigned ra[4];   // lanes 0-15: rows 0-15 at column 0; lanes 16-31: the same rows at column 8
    ptxlab::ldmatrix_x4(ra, &sa[(lane % 16) * 16 + (lane / 16) * 8]);
    const unsigned rb[2] = {b_frag[lane * 2], b_frag[lane * 2 + 1]};
    const unsigned rc[2] = {0u, 0u};
    unsigned rd[2];
    ptxlab::mma_m16n8k16_f16_f16_f16_f16(rd, ra, rb, rc);
    ptxlab::stmatrix_x2(&sd[(lane % 16) * 8], rd);   // lanes 0-15 address rows 0-15 of D
    __syncwarp();
    for (unsigned i = lane; i < 16 * 8 / 8; i += 32)
        reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(sd)[i];
}
"""


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """A benchmarked launch: ``build()`` gives the KernelCase and a check of its outputs."""

    name: str
    group: str
    what: str
    build: Callable[[], tuple]


def _round_trip():
    from ptxlab.model import emulator, layouts
    from ptxlab.run.backends import KernelCase

    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (16, 8)).astype(np.float16)
    form = layouts.mma_form("m16n8k16", "f16", "f16", "f16", "f16")
    ra = emulator.matrices_to_fragment(a.view(np.uint16)[None], form.a)
    rb = emulator.matrices_to_fragment(b.view(np.uint16)[None], form.b).astype(np.uint32)
    rd = emulator.mma("m16n8k16", ra, rb, np.zeros((32, 2), np.uint32), atype="f16",
                      btype="f16", ctype="f16", dtype="f16")
    want = emulator.fragment_to_matrices(rd, form.d)[0]
    case = KernelCase(name="round trip", source=ROUND_TRIP_SOURCE, kernel="round_trip",
                      grid=(1,), block=(32,),
                      args=[a.view(np.uint16), rb, np.zeros((16, 8), np.uint16)])

    def check(outputs) -> str | None:
        got = outputs[2]
        if not np.array_equal(got, want):
            r, c = np.argwhere(got != want)[0]
            return f"D[{r},{c}] = 0x{int(got[r, c]):04x}, expected 0x{int(want[r, c]):04x}"
        return None
    return case, check


def _capstone(kind: str):
    def build():
        from ptxlab.bench import cases
        from ptxlab.bench.kernels import GEMM_BEST, GEMM_SMALL, TRANSPOSE_SMALL

        rng = np.random.default_rng(2)
        if kind == "gemm":
            case = cases.gemm_case(rng, GEMM_SMALL, 64, 64, 64)
        elif kind == "gemm_best":
            case = cases.gemm_case(rng, GEMM_BEST, 128, 256, 64)
        else:
            case = cases.transpose_case(rng, TRANSPOSE_SMALL, 32, 32)
        return case, lambda outputs: cases.check_output(case, outputs[case.compare[0]])
    return build


def _reference(form_name: str, kind: str):
    def build():
        from ptxlab.run import reference_cases as rc
        from ptxlab.run.backends import KernelCase

        f = rc.form(form_name)
        n_cases, smem = 2, 1024          # what the CPU-vs-GPU comparison uses (small=True)
        args = rc.make_inputs(f, rc.case_rng(0, f, kind), n_cases, smem, kind)
        shared = smem if f.family in ("ldmatrix", "stmatrix") else 0
        case = KernelCase(name=f"reference {f.name}", source=f.source(), kernel=f.kernel,
                          grid=(n_cases,), block=(32,), args=args, shared_mem=shared)
        want = rc.expected_outputs(f, args)

        def check(outputs) -> str | None:
            cmp = rc.compare(f, args, outputs[rc.output_index(f)], kind, want=want)
            return None if cmp.exact else "; ".join(cmp.examples[:2])
        return case, check
    return build


CASES = [
    Case("round_trip", "round trip", "1 warp: ldmatrix.x4 + mma.m16n8k16 + stmatrix.x2",
         _round_trip),
    Case("capstone_gemm_tile", "capstone",
         "GEMM 64x64x64, one block of 128 threads (GEMM_SMALL: 2 k-tiles, f16 out)",
         _capstone("gemm")),
    Case("capstone_transpose_tile", "capstone",
         "transpose 32x32, one block of 128 threads (TRANSPOSE_SMALL, ldmatrix.trans)",
         _capstone("transpose")),
    Case("capstone_gemm_h100_tile", "capstone",
         "GEMM 128x256x64, one block of 256 threads (GEMM_BEST, the H100 tile)",
         _capstone("gemm_best")),
    Case("ref_ldmatrix_x4_trans", "reference", "ldmatrix.x4.trans, 2 warps (1 KiB smem each)",
         _reference("ldmatrix.x4.trans", "random")),
    Case("ref_stmatrix_x4", "reference", "stmatrix.x4, 2 warps (1 KiB smem each)",
         _reference("stmatrix.x4", "random")),
    Case("ref_movmatrix", "reference", "movmatrix.trans, 2 warps",
         _reference("movmatrix.trans", "random")),
    Case("ref_mma_f32_f16", "reference", "mma.m16n8k16.f32.f16.f16.f32, 2 warps",
         _reference("mma.m16n8k16.f32.f16.f16.f32", "exact")),
]
CASE_BY_NAME = {c.name: c for c in CASES}


# ---------------------------------------------------------------------------------------------
# Child process: one case, one phase
# ---------------------------------------------------------------------------------------------

def _instrument(acc: dict) -> None:
    """Wrap the CPU backend's steps with timers (module attributes, looked up at call time)."""
    from ptxlab.run import backends, cpu

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    cpu.compile_ptx = timed("compile", cpu.compile_ptx)
    cpu.parse_module = timed("parse", cpu.parse_module)
    cpu.Program = timed("decode", cpu.Program)
    backends.cpu_available = timed("probe", backends.cpu_available)
    base = cpu.Launch

    class TimedLaunch(base):
        def __init__(self, *a, **k):
            t0 = time.perf_counter()
            super().__init__(*a, **k)
            acc["setup"] = acc.get("setup", 0.0) + time.perf_counter() - t0

        def run(self):
            t0 = time.perf_counter()
            try:
                return super().run()
            finally:
                acc["run"] = acc.get("run", 0.0) + time.perf_counter() - t0
    cpu.Launch = TimedLaunch


def _count_instructions(case) -> dict:
    """Warp-level instructions one launch executes (each group of lanes issuing one counts
    once), on a separately decoded copy of the program wrapped with counters."""
    from ptxlab.run import cpu
    from ptxlab.run.ptx.interpreter import Launch
    from ptxlab.run.ptx.parser import parse_module
    from ptxlab.run.ptx.program import K_BRA, K_EXIT, K_RET, Program

    prog = Program(parse_module(cpu.compile_ptx(case.source, case.options)), case.kernel)
    count = [0]

    def counting(fn):
        def wrapper(*a):
            count[0] += 1
            return fn(*a)
        return wrapper
    for fc in prog.functions.values():
        for e in fc.code:
            if e.fn is not None and e.kind not in (K_BRA, K_EXIT, K_RET):
                e.fn = counting(e.fn)
    run = Launch(prog, case.grid, case.block,
                 [a.copy() if isinstance(a, np.ndarray) else a for a in case.args],
                 shared_mem=case.shared_mem)
    run.run()
    warps = int(np.prod(run.grid)) * run.nwarps
    return {"warp_instructions": count[0] + run.branches, "branches": run.branches,
            "warps": warps}


def child(name: str, warm_min_s: float, warm_max_reps: int, count: bool) -> dict:
    t0 = time.perf_counter()
    from ptxlab.run import backends  # noqa: F401 - the import a notebook pays
    import_s = time.perf_counter() - t0
    acc: dict = {}
    _instrument(acc)
    case, check = CASE_BY_NAME[name].build()
    t0 = time.perf_counter()
    res = case.launch("cpu")
    first = time.perf_counter() - t0
    spawned = float(os.environ.get("PTXLAB_BENCH_SPAWNED", "nan"))
    to_first_result = time.time() - spawned      # Python start + imports + inputs + launch
    assert res.backend == "cpu", res.backend
    problem = check(res.outputs)
    parts = {k: acc.get(k, 0.0) for k in ("probe", "compile", "parse", "decode", "setup", "run")}
    parts["other"] = first - sum(parts.values())
    warm, warm_run = [], []
    deadline = time.perf_counter() + warm_min_s
    while len(warm) < 3 or (time.perf_counter() < deadline and len(warm) < warm_max_reps):
        acc.clear()
        t0 = time.perf_counter()
        res = case.launch("cpu")
        warm.append(time.perf_counter() - t0)
        warm_run.append(acc.get("run", 0.0))
        problem = problem or check(res.outputs)
    out = {"case": name, "import_s": import_s, "first_s": first, "first_parts_s": parts,
           "process_to_first_result_s": to_first_result,
           "warm_s": warm, "warm_run_s": warm_run, "problem": problem}
    if count:
        out.update(_count_instructions(case))
    return out


# ---------------------------------------------------------------------------------------------
# Parent: phases in fresh processes, aggregation, report
# ---------------------------------------------------------------------------------------------

def _run_child(name: str, cache: Path, count: bool, warm_min_s: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name,
           "--warm-min-s", str(warm_min_s)] + (["--count"] if count else [])
    env = dict(os.environ, PTXLAB_CACHE_DIR=str(cache), PTXLAB_ISOLATE="0",
               PTXLAB_BENCH_SPAWNED=repr(time.time()))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: the child failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "n": len(values)}


def measure(names: list[str], reps: int, warm_min_s: float, scratch: Path) -> list[dict]:
    results = []
    for name in names:
        case = CASE_BY_NAME[name]
        cold, cached = [], []
        for i in range(reps):
            cache = scratch / f"{name}-{i}"
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(_run_child(name, cache, count=False, warm_min_s=0.0))
            cached.append(_run_child(name, cache, count=(i == 0), warm_min_s=warm_min_s))
        problems = sorted({r["problem"] for r in cold + cached if r["problem"]})
        warm = [t for r in cached for t in r["warm_s"]]
        warm_run = [t for r in cached for t in r["warm_run_s"]]

        def phase(runs):
            keys = runs[0]["first_parts_s"]
            return {"first_s": _stats([r["first_s"] for r in runs]),
                    "parts_s": {k: _stats([r["first_parts_s"][k] for r in runs]) for k in keys},
                    "import_s": _stats([r["import_s"] for r in runs]),
                    "process_to_first_result_s": _stats([r["process_to_first_result_s"]
                                                         for r in runs])}
        row = {"case": name, "group": case.group, "what": case.what,
               "cold": phase(cold), "cached": phase(cached),
               "warm_s": _stats(warm), "warm_run_s": _stats(warm_run),
               "warp_instructions": cached[0].get("warp_instructions"),
               "warps": cached[0].get("warps"), "correct": not problems,
               "problems": problems}
        if row["warp_instructions"]:
            row["warp_instructions_per_s"] = row["warp_instructions"] / row["warm_run_s"]["min"]
        target = TARGETS_S.get(name)
        if target is not None:
            got = row["cached"]["first_s"]["median"]
            row["target"] = {"limit_s": target, "measured_s": got, "met": got < target,
                             "metric": "first launch in a new process, PTX cached on disk "
                                       "(median)"}
        results.append(row)
        _print_row(row)
    return results


def _fmt(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _print_row(r: dict) -> None:
    print(f"{r['case']:<26} cold {_fmt(r['cold']['first_s']['median']):>9}  "
          f"cached {_fmt(r['cached']['first_s']['median']):>9}  "
          f"warm {_fmt(r['warm_s']['median']):>9}  "
          f"{'ok' if r['correct'] else 'WRONG: ' + r['problems'][0]}", flush=True)


def machine() -> dict:
    import numpy
    from ptxlab.run.ptx import nvrtc

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:
            return ""
    return {"cpu": model, "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "memory": mem, "platform": platform.platform(),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "compiler": nvrtc.find_compiler().describe(),
            "commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--", "ptxlab"))}


def write_report(out: Path, results: list[dict], info: dict, args) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({**info, "results": results}, indent=1) + "\n")
    m = info["machine"]
    lines = [
        f"# CPU backend (PTX interpreter) benchmark, {info['date'][:10]}", "",
        f"Machine: {m['cpu']}, {m['cores_usable']} usable cores, {m['memory']}; "
        f"{m['platform']}; Python {m['python']}, numpy {m['numpy']}; {m['compiler']}.  ",
        f"Code: commit {m['commit']}{' + uncommitted changes in ptxlab/' if m['uncommitted_changes'] else ''}. "
        f"Load average before / after: {info['loadavg_before']} / {info['loadavg_after']}.  ",
        f"Command: `{info['command']}` ({args.reps} processes per phase and case).", "",
        "## Targets", "",
        "| requirement | limit | measured (median / min) | |", "| --- | ---: | ---: | --- |",
    ]
    for r in results:
        if "target" in r:
            t = r["target"]
            c = r["cached"]["first_s"]
            lines.append(f"| {r['what']}: first launch, PTX cached | {_fmt(t['limit_s'])} | "
                         f"{_fmt(c['median'])} / {_fmt(c['min'])} | "
                         f"{'met' if t['met'] else '**missed**'} |")
    lines += [
        "", "## End to end, per launch", "",
        "cold: empty PTX cache; cached: a new process, PTX on disk; warm: the same process "
        "again. Median of the processes (min in brackets).", "",
        "| case | what | cold first launch | cached first launch | warm launch | "
        "warp-instr. | warp-instr./s | correct |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        ips = r.get("warp_instructions_per_s")
        lines.append(
            f"| {r['case']} | {r['what']} | {_fmt(r['cold']['first_s']['median'])} "
            f"({_fmt(r['cold']['first_s']['min'])}) | {_fmt(r['cached']['first_s']['median'])} "
            f"({_fmt(r['cached']['first_s']['min'])}) | {_fmt(r['warm_s']['median'])} "
            f"({_fmt(r['warm_s']['min'])}) | {r['warp_instructions'] or ''} | "
            f"{f'{ips:,.0f}' if ips else ''} | {'yes' if r['correct'] else 'NO'} |")
    lines += [
        "", "## Where the first launch goes (median, ms)", "",
        "probe: finding and loading NVRTC; compile: NVRTC (cold) or reading the cached PTX; "
        "parse + decode: PTX text to closures; setup: argument copies; run: the interpreter; "
        "other: the rest of `launch` (backend choice, copying results back). The last column is "
        "the whole process up to the first result: Python start, `import ptxlab.run.backends`, "
        "building the case's inputs (and their expected outputs), the launch.", "",
        "| case | phase | probe | compile | parse | decode | setup | run | other | "
        "first launch | `import ptxlab.run.backends` | process to first result |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        for ph in ("cold", "cached"):
            p = r[ph]["parts_s"]
            cells = " | ".join(f"{p[k]['median'] * 1000:.1f}" for k in
                               ("probe", "compile", "parse", "decode", "setup", "run", "other"))
            lines.append(f"| {r['case']} | {ph} | {cells} | "
                         f"{r[ph]['first_s']['median'] * 1000:.1f} | "
                         f"{r[ph]['import_s']['median'] * 1000:.1f} | "
                         f"{r[ph]['process_to_first_result_s']['median'] * 1000:.0f} |")
    for prof in info["profiles"]:
        lines += ["", f"## Where a warm launch of {prof['case']} goes (cProfile)", "",
                  f"{prof['seconds_per_launch'] * 1000:.1f} ms per launch under the profiler; "
                  "the functions with the most time of their own.", "",
                  "| own | cumulative | calls per launch | function |",
                  "| ---: | ---: | ---: | --- |"]
        lines += [f"| {r['own_share']:.1%} | {r['cumulative_share']:.1%} | {r['calls']} | "
                  f"`{r['function']}` |" for r in prof["top"]]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in info["notes"]] + [""]
    (out / "BENCH.md").write_text("\n".join(lines))


#: Cases whose warm launch is profiled for the report.
PROFILED = ("capstone_gemm_tile", "round_trip")

NOTES = [
    "The capstone target is measured on `capstone_gemm_tile`: one block of the capstone GEMM "
    "(`kernels/capstone/gemm.cu`) in its 128-thread configuration (`GEMM_SMALL`: 64x64 tile, "
    "2x2 warps, BK=32, 2 stages) over K=64, exactly the case `tests/bench/test_capstone.py` runs. "
    "Its cost grows linearly with K (one k-tile of 32 per main-loop trip). The H100 "
    "configuration's block (256 threads, 128x256x64) is listed for scale.",
    "The round trip kernel is in this script (`ROUND_TRIP_SOURCE`); its output is checked "
    "against `ptxlab.model.emulator`. Capstone outputs are checked with `ptxlab.bench.cases`, "
    "reference kernels with `ptxlab.run.reference_cases.compare` (bit-exact).",
    "warp-instr.: instructions executed per launch counted once per issuing group of lanes, "
    "branches included; warp-instr./s divides by the fastest warm run of the interpreter.",
    "Timings on a shared 2-core machine vary with its load (see the load averages); the "
    "minimum is the better estimate of the code's own cost.",
]


def profile(name: str, top: int) -> dict:
    """cProfile of warm launches of one case (after a first launch that fills the caches): the
    functions with the most time of their own, as shares of the profiled total."""
    import cProfile
    import pstats

    case, _ = CASE_BY_NAME[name].build()
    case.launch("cpu")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        case.launch("cpu")
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = []
    for (file, line, func), (_, calls, own, cum, _) in sorted(
            stats.stats.items(), key=lambda kv: -kv[1][2])[:top]:
        if file == "~":                     # a builtin: only its name is known
            label = func
        else:
            where = (str(Path(file).resolve().relative_to(ROOT)) if file.startswith(str(ROOT))
                     else Path(file).name)
            label = f"{where}:{line}({func})"
        rows.append({"function": label, "calls": calls // 3,
                     "own_share": own / total, "cumulative_share": cum / total})
    return {"case": name, "launches": 3, "seconds_per_launch": total / 3, "top": rows}


def _profile_in_child(name: str, top: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--profile", name, "--top", str(top),
           "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PTXLAB_ISOLATE="0"))
    if proc.returncode != 0:
        raise RuntimeError(f"profile of {name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="processes per phase and case")
    ap.add_argument("--cases", default=",".join(c.name for c in CASES),
                    help="comma-separated case names")
    ap.add_argument("--out", default=str(ROOT / "reports" / "cpu_backend"))
    ap.add_argument("--warm-min-s", type=float, default=1.0,
                    help="keep repeating warm launches for at least this long")
    ap.add_argument("--profile", metavar="CASE", help="print a cProfile of warm launches")
    ap.add_argument("--top", type=int, default=12, help="functions listed by --profile")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.warm_min_s, 200, args.count)))
        return 0
    if args.profile:
        prof = profile(args.profile, args.top)
        if args.json:
            print(json.dumps(prof))
            return 0
        print(f"{args.profile}: {prof['seconds_per_launch'] * 1000:.1f} ms per warm launch "
              "(under the profiler)")
        for r in prof["top"]:
            print(f"{r['own_share']:6.1%} own {r['cumulative_share']:6.1%} cum "
                  f"{r['calls']:>7} calls  {r['function']}")
        return 0
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASE_BY_NAME]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {list(CASE_BY_NAME)}")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ptxlab-bench-") as scratch:
        results = measure(names, args.reps, args.warm_min_s, Path(scratch))
    profiled = [_profile_in_child(n, args.top) for n in PROFILED if n in names]
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python measure/benchmarks/bench_cpu_backend.py " + " ".join(
                a for a in (argv if argv is not None else sys.argv[1:])),
            "machine": machine(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "targets_s": TARGETS_S, "notes": NOTES, "profiles": profiled}
    write_report(Path(args.out), results, info, args)
    missed = [r["case"] for r in results if "target" in r and not r["target"]["met"]]
    wrong = [r["case"] for r in results if not r["correct"]]
    print(f"report: {Path(args.out) / 'BENCH.md'}"
          + (f"; targets missed: {missed}" if missed else "; every target met")
          + (f"; WRONG outputs: {wrong}" if wrong else ""))
    return 1 if missed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
