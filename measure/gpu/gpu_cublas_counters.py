#!/usr/bin/env python3
"""Why cuBLAS goes past the mma.sync ceiling on Hopper: which tensor instructions its kernel runs.

Nsight Compute profiles one call of cuBLAS's fp16 GEMM (``cupy.matmul``, the kernel cuBLAS
picks for the size) and reads the kernel's name and its tensor-pipe counters: the warp-level
``mma.sync`` path (HMMA) and the warpgroup ``wgmma`` path (GMMA, operands from shared memory),
how busy each pipe was and how many instructions each issued. The capstone notebook cites it.

    python3 measure/gpu/gpu_cublas_counters.py --out reports/capstone      # on the GPU machine

Writes ``CUBLAS_NCU.md`` and ``cublas_ncu.json``. Exit status 0 when a launch was profiled,
1 when ncu failed, 2 without a GPU or ncu.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Counter sets to try, most informative first (ncu refuses a whole list over one unknown name).
METRIC_SETS = (
    ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
     "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
     "sm__inst_executed_pipe_tensor_op_gmma.sum", "sm__inst_executed_pipe_tensor_op_hmma.sum",
     "launch__registers_per_thread", "launch__block_size", "launch__grid_size"),
    ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
     "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
     "launch__registers_per_thread", "launch__block_size", "launch__grid_size"),
    ("gpu__time_duration.sum",
     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
)


def _command(size: int, metrics) -> list[str]:
    return ["ncu", "--clock-control", "none", "--kernel-name-base", "demangled",
            "--kernel-name", "regex:gemm|xmma|gmma|cutlass|nvjet|sm90", "--launch-skip", "1",
            "--launch-count", "1", "--metrics", ",".join(metrics), "--csv",
            "--print-units", "base", sys.executable, "-m", "ptxlab.bench.profile_target",
            "--cublas", str(size)]


def _parse(text: str) -> tuple[str, dict[str, float]]:
    """The profiled kernel's name and its counters (ncu's CSV, read as the bench reads it)."""
    from ptxlab.bench.bank_study import _parse_ncu_csv

    start = text.find('"ID"')
    if start < 0:
        return "", {}
    launches = _parse_ncu_csv(text)
    name = next(csv.DictReader(io.StringIO(text[start:])), {}).get("Kernel Name", "")
    return name, launches[0] if launches else {}


def profile(size: int) -> dict:
    """The kernel cuBLAS ran for ``size``^3 and its counters, or why there are none."""
    if shutil.which("ncu") is None:
        return {"measured": False, "reason": "ncu (Nsight Compute) is not on PATH"}
    last = ""
    for metrics in METRIC_SETS:
        proc = subprocess.run(_command(size, metrics), capture_output=True, text=True,
                              timeout=600, cwd=ROOT)
        name, values = _parse(proc.stdout)
        if proc.returncode == 0 and values:
            out = {"measured": True, "size": size, "kernel": name, "counters": values,
                   "command": " ".join(_command(size, metrics)).replace(sys.executable,
                                                                         "python3")}
            dur = values.get("gpu__time_duration.sum")
            if dur:
                out["tflops_under_ncu"] = 2.0 * size ** 3 / (dur * 1e-9) / 1e12
            return out
        last = (proc.stderr or proc.stdout)[-1200:]
    return {"measured": False, "reason": f"ncu refused every counter set: {last}"}


def _report(res: dict, device: str) -> str:
    lines = ["# cuBLAS's GEMM under Nsight Compute: which tensor instructions it runs", "",
             f"{_dt.datetime.now().isoformat(timespec='seconds')}, {device}. Command: "
             "`python3 measure/gpu/gpu_cublas_counters.py`.", ""]
    if not res.get("measured"):
        return "\n".join(lines + [f"Not measured: {res.get('reason')}", ""])
    c = res["counters"]
    lines += [f"One call of `cupy.matmul` on fp16 {res['size']}^3 (the second; the first picks "
              f"the kernel). Kernel: `{res['kernel']}`.", "",
              "| counter | value |", "| --- | ---: |"]
    for k, v in c.items():
        lines.append(f"| `{k}` | {v:,.2f} |")
    if "tflops_under_ncu" in res:
        lines.append(f"| rate under the profiler, TFLOP/s | {res['tflops_under_ncu']:.0f} |")
    lines += ["", f"ncu command: `{res['command']}`", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "capstone")
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    from ptxlab.run import gpu

    st = gpu.status()
    if not st.available or shutil.which("ncu") is None:
        print(f"cannot profile here: {st.message if not st.available else 'no ncu on PATH'}")
        return 2
    res = profile(args.size)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cublas_ncu.json").write_text(json.dumps(res, indent=1))
    (args.out / "CUBLAS_NCU.md").write_text(_report(res, st.device_label))
    print(_report(res, st.device_label))
    return 0 if res.get("measured") else 1


if __name__ == "__main__":
    sys.exit(main())
