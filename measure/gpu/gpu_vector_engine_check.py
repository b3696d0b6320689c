#!/usr/bin/env python3
"""The CPU model's vector run against the silicon: the capstone's learner GEMM on the GPU and on
the CPU model (the vector run and warp by warp), bit for bit, at several sizes and seeds.

    python3 measure/gpu/gpu_vector_engine_check.py --out reports/cpu_engines    # on a GPU machine

Writes ``GPU_COMPARE.md`` and ``gpu_compare.json`` under ``--out``: per size and seed, whether
the GPU's C equals each engine's bit for bit, how each engine ran, and the times.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.bench import learner_gemm  # noqa: E402
from ptxlab.run.backends import launch  # noqa: E402
from ptxlab.run.cpu import program_for  # noqa: E402
from ptxlab.run.ptx.interpreter import Launch  # noqa: E402


def _cpu(gemm, prog, n, args, engine):
    t = time.perf_counter()
    run = Launch(prog, gemm.grid(n, n), (gemm.threads,), [a.copy() if isinstance(a, np.ndarray)
                                                           else a for a in args],
                 shared_mem=gemm.smem_bytes, engine=engine)
    with np.errstate(all="ignore"):
        out = run.run()[2]
    return out, time.perf_counter() - t, run.ran_as


def check(sizes: list[int], seeds: list[int], warp_up_to: int) -> list[dict]:
    gemm = learner_gemm.course_solution()
    prog = program_for(gemm.source(), gemm.kernel_name)
    rows = []
    for n in sizes:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            a = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
            b = rng.standard_normal((n, n)).astype(np.float16).view(np.uint16)
            args = [a, b, np.full((n, n), 0x7E00, np.uint16), np.int32(n), np.int32(n),
                    np.int32(n)]
            t = time.perf_counter()
            gpu = launch(gemm.source(), gemm.kernel_name, grid=gemm.grid(n, n),
                         block=(gemm.threads,), args=[x.copy() if isinstance(x, np.ndarray)
                                                      else x for x in args],
                         shared_mem=gemm.smem_bytes, backend="gpu")
            row = {"size": n, "seed": seed, "gpu_device": gpu.device,
                   "gpu_s": time.perf_counter() - t}
            gpu_c = gpu.outputs[2]
            for engine in ("vector", "warp"):
                if engine == "warp" and n > warp_up_to:
                    continue
                out, secs, ran_as = _cpu(gemm, prog, n, args, engine)
                row[engine] = {"identical": bool(out.tobytes() == gpu_c.tobytes()),
                               "differing_elements": int((out != gpu_c).sum()),
                               "seconds": secs, "ran_as": list(ran_as)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# The CPU model's vector run against the GPU ({meta['date']})", "",
             f"GPU: {meta['gpu']}. Host: {meta['host']}. Command: `{meta['command']}`.", "",
             "The capstone's learner GEMM (`ptxlab.bench.learner_gemm.course_solution()`), fp16 "
             "inputs from a normal distribution, C poisoned with NaN before the launch; the GPU's "
             "C against the CPU model's, bit for bit.", "",
             "| size | seed | vector run = GPU | vector ran as | vector s | warp by warp = GPU "
             "| warp s |", "| ---: | ---: | :---: | --- | ---: | :---: | ---: |"]
    for r in rows:
        v, w = r["vector"], r.get("warp")
        lines.append(
            f"| {r['size']}³ | {r['seed']} | {'yes' if v['identical'] else 'NO (' + str(v['differing_elements']) + ')'} "
            f"| {v['ran_as'][0]} | {v['seconds']:.2f} | "
            + (f"{'yes' if w['identical'] else 'NO'} | {w['seconds']:.2f} |" if w else "- | - |"))
    ok = all(r["vector"]["identical"] and (r.get("warp") or {"identical": True})["identical"]
             for r in rows)
    lines += ["", f"**{'Every' if ok else 'NOT every'} run identical to the GPU** "
              f"({len(rows)} launches)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--warp-up-to", type=int, default=256,
                    help="run the warp-by-warp engine up to this size")
    ap.add_argument("--out", type=Path, default=ROOT / "reports/cpu_engines")
    ns = ap.parse_args()
    try:
        import cupy
        gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as exc:  # noqa: BLE001 - the report says why there is no GPU
        print(f"no GPU: {exc}")
        return 2
    meta = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "gpu": gpu,
            "host": f"{platform.node()}, {platform.processor() or platform.machine()}",
            "command": "python3 measure/gpu/gpu_vector_engine_check.py " + " ".join(sys.argv[1:])}
    rows = check(ns.sizes, ns.seeds, ns.warp_up_to)
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "gpu_compare.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (ns.out / "GPU_COMPARE.md").write_text(markdown(rows, meta))
    ok = all(r["vector"]["identical"] for r in rows)
    print("identical" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
