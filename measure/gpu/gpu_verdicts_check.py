#!/usr/bin/env python3
"""Every kernel answer of the course checked on a GPU machine and with the GPU hidden: the
verdicts must be the same.

The answers are each kernel exercise's solution and its mutants (``ptxlab.authoring.mutants``:
barriers dropped, ``.trans`` toggled, rows off by one, registers swapped, bytes for elements...),
that is, the mistakes a learner makes. Each is checked twice in the same process, hidden cases
included: once as a GPU machine checks it (the GPU and the sanitizing CPU model), once with the
GPU hidden (the CPU model alone, as on a learner's laptop). A verdict is the pass/fail, the
score, the status and the message with the machine's name taken out; advice the GPU adds (its
outputs differed from the model's) is counted apart, since it never changes a verdict.

    python3 measure/gpu/gpu_verdicts_check.py --out reports/hardware       # on the GPU machine

Writes ``VERDICTS.md`` and ``verdicts.json``. Exit status 0 when every verdict agrees, 1 when
one differs, 2 without a GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import json
import multiprocessing
import sys
import time
import warnings
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GPU_NOTES = ("on the GPU", "only the GPU checked", "this GPU (")


def _answers(per_exercise: int, seed: int) -> list[dict]:
    """``{notebook, exercise, label, source}`` for every kernel solution and its mutants."""
    import random

    from ptxlab.authoring import course_cases, mutants

    jobs = []
    for cell in course_cases.solution_cells():
        if mutants.kind_of(cell) != "kernel":
            continue
        made, _ = mutants.make_mutants(cell)
        if per_exercise and len(made) > per_exercise:
            made = random.Random(f"{seed}:{cell.exercise.key}").sample(made, per_exercise)
        jobs.append({"notebook": cell.notebook, "exercise": cell.exercise.key,
                     "label": "solution", "source": cell.kernel_source()})
        jobs += [{"notebook": cell.notebook, "exercise": cell.exercise.key,
                  "label": f"{m.operator} (line {m.line})", "source": m.answer} for m in made]
    return jobs


@contextlib.contextmanager
def _gpu_hidden():
    """The GPU is not there, as on a laptop (the status every launch asks is replaced)."""
    from ptxlab.run import gpu

    saved = gpu.status()
    gpu._status_cache = gpu.GpuStatus(False, "GPU hidden for the comparison")
    try:
        yield
    finally:
        gpu._status_cache = saved


def _verdict(result, where: tuple[str, ...]) -> dict:
    message = result.message
    for name in where:
        message = message.replace(name, "<machine>")
    return {"passed": bool(result.passed), "status": result.status,
            "score": round(float(result.score), 6), "message": message,
            "advice": [a for a in result.advice if not a.startswith(GPU_NOTES)],
            "gpu_notes": [a for a in result.advice if a.startswith(GPU_NOTES)]}


@functools.lru_cache(maxsize=None)
def _exercises() -> dict:
    """The course's exercises by key, read once per worker process (they do not pickle)."""
    from ptxlab.authoring import course_cases

    return {c.exercise.key: c.exercise for c in course_cases.solution_cells()}


def _judge(job: dict) -> dict:
    """Check one answer as a GPU machine and as a CPU-only machine (worker process)."""
    from ptxlab.run import backends, gpu

    exercise = _exercises()[job["exercise"]]
    device = gpu.status().device_label
    where = (f"{device} and the {backends.CPU_DEVICE}", device, backends.CPU_DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        on_gpu = exercise.evaluate(job["source"], hidden=True)
        t1 = time.perf_counter()
        with _gpu_hidden():
            on_cpu = exercise.evaluate(job["source"], hidden=True)
        t2 = time.perf_counter()
    g, c = _verdict(on_gpu, where), _verdict(on_cpu, where)
    same = all(g[k] == c[k] for k in ("passed", "status", "score", "message", "advice"))
    return {**{k: job[k] for k in ("notebook", "exercise", "label")}, "same": same,
            "gpu_machine": g, "cpu_machine": c, "seconds_gpu_machine": t1 - t0,
            "seconds_cpu_machine": t2 - t1,
            "backend": on_gpu.details.get("backend", "")}


def _report(rows: list[dict], device: str, seconds: float, per_exercise: int) -> str:
    by_ex: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_ex[(r["notebook"], r["exercise"])].append(r)
    diff = [r for r in rows if not r["same"]]
    noted = [r for r in rows if r["gpu_machine"]["gpu_notes"]]
    lines = [
        "# Kernel verdicts on a GPU machine and on a CPU-only machine",
        "",
        f"{_dt.datetime.now().isoformat(timespec='seconds')}, {device}. Command: "
        f"`python3 measure/gpu/gpu_verdicts_check.py{f' --per-exercise {per_exercise}' if per_exercise else ''}`"
        f", {seconds:.0f} s. **{'PASS' if not diff else 'FAIL'}**.",
        "",
        "Every kernel exercise's solution and its mutants (the mistakes `ptxlab.authoring.mutants` "
        "makes: barriers dropped, `.trans` toggled, rows off by one, registers swapped...), each "
        "checked with its hidden cases twice in one process: as a GPU machine checks it (the GPU "
        "and the sanitizing CPU model) and with the GPU hidden (the CPU model alone). Same = the "
        "same pass/fail, score, status, message and advice, the machine's name aside. GPU notes "
        "= answers where the GPU's outputs differed from the CPU model's or the GPU faulted "
        "where the model did not: said to the learner beside the verdict, never scored.",
        "",
        "| notebook | exercise | answers | passed | failed | same verdict | GPU notes | "
        "s per answer (both checks, compiles included) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (nb, key), rs in sorted(by_ex.items()):
        n = len(rs)
        passed = sum(r["cpu_machine"]["passed"] for r in rs)
        lines.append(
            f"| {nb} | `{key}` | {n} | {passed} | {n - passed} | {sum(r['same'] for r in rs)} | "
            f"{sum(bool(r['gpu_machine']['gpu_notes']) for r in rs)} | "
            f"{sum(r['seconds_gpu_machine'] + r['seconds_cpu_machine'] for r in rs) / n:.2f} |")
    statuses = Counter(r["cpu_machine"]["status"] for r in rows)
    lines += ["", f"{len(rows)} answers, {len(diff)} with different verdicts. Statuses (CPU "
              f"only): {', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}.", ""]
    if diff:
        lines += ["## Different verdicts", ""]
        for r in diff:
            lines += [f"* `{r['exercise']}` {r['label']}: GPU machine "
                      f"{r['gpu_machine']['passed']} `{r['gpu_machine']['message'][:200]}`; CPU "
                      f"only {r['cpu_machine']['passed']} `{r['cpu_machine']['message'][:200]}`"]
        lines.append("")
    if noted:
        lines += ["## What the GPU said beside the verdict", ""]
        for r in noted[:40]:
            lines.append(f"* `{r['exercise']}` {r['label']}: {r['gpu_machine']['gpu_notes'][0][:300]}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "hardware")
    ap.add_argument("--workers", type=int, default=max(1, (multiprocessing.cpu_count() or 2) - 2))
    ap.add_argument("--per-exercise", type=int, default=0,
                    help="check at most this many mutants of each kernel exercise (0: all)")
    ap.add_argument("--seed", type=int, default=20261124)
    args = ap.parse_args()

    from ptxlab.run import gpu

    st = gpu.status()
    if not st.available:
        print(f"no GPU: {st.message}")
        return 2
    ctx = multiprocessing.get_context("spawn")       # no CUDA state crosses a fork
    jobs = _answers(args.per_exercise, args.seed)
    print(f"{len(jobs)} kernel answers, {args.workers} workers", flush=True)
    t0 = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = [pool.submit(_judge, job) for job in jobs]
        for i, fut in enumerate(as_completed(futures), 1):
            rows.append(fut.result())
            if i % 25 == 0 or i == len(jobs):
                print(f"  {i}/{len(jobs)} checked, {sum(not r['same'] for r in rows)} differ, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    rows.sort(key=lambda r: (r["notebook"], r["exercise"], r["label"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verdicts.json").write_text(json.dumps(rows, indent=1))
    (args.out / "VERDICTS.md").write_text(
        _report(rows, st.device_label, time.perf_counter() - t0, args.per_exercise))
    bad = sum(not r["same"] for r in rows)
    print(f"{len(rows)} answers, {bad} with different verdicts; report in {args.out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
