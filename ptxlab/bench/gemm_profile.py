"""What limits the capstone GEMM: Nsight Compute counters of one launch of the benchmarked tile.

Runs ``ncu`` over :mod:`ptxlab.bench.profile_target` and keeps the counters that say where the
time goes: the SM clock during the kernel, how busy the tensor pipe is, the shared-memory and L2
load, issue activity and the stall reasons of the warps.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

from .bank_study import _parse_ncu_csv
from .kernels import GemmConfig

METRICS = (
    "sm__cycles_elapsed.avg.per_second",
    "gpu__time_duration.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed_pipe_tensor.sum",
    "smsp__inst_executed.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.per_cycle_active",
    "launch__registers_per_thread",
)
#: Counters already read on the H100 with this ncu: the fallback if the full list is refused.
SAFE_METRICS = (
    "sm__cycles_elapsed.avg.per_second",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed_pipe_tensor.sum",
    "smsp__inst_executed.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
)
STALL_REGEX = "regex:smsp__warp_issue_stalled_.*_per_warp_active.pct"


def command(cfg: GemmConfig, size: int, python: str = sys.executable,
            metrics=METRICS) -> list[str]:
    params = [f"{k}={int(v)}" for k, v in cfg.as_dict().items()]
    return ["ncu", "--clock-control", "none", "--kernel-name", cfg.kernel_name, "--launch-count",
            "1", "--metrics", ",".join(metrics) + "," + STALL_REGEX, "--csv", "--print-units",
            "base", python, "-m", "ptxlab.bench.profile_target", str(size), *params]


def measure(cfg: GemmConfig, size: int, timeout_s: int = 300) -> dict:
    """Counters of one ``size``^3 launch of ``cfg`` (``measured: False`` and why, if ncu fails)."""
    if shutil.which("ncu") is None:
        return {"measured": False, "reason": "ncu (Nsight Compute) is not on PATH"}
    used = METRICS
    proc = subprocess.run(command(cfg, size), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        used = SAFE_METRICS
        proc = subprocess.run(command(cfg, size, metrics=used), capture_output=True, text=True,
                              timeout=timeout_s)
    if proc.returncode != 0:
        return {"measured": False, "reason": f"ncu failed (exit {proc.returncode}): "
                + (proc.stderr or proc.stdout)[-1500:]}
    launches = _parse_ncu_csv(proc.stdout)
    if not launches:
        return {"measured": False, "reason": "ncu profiled no GEMM launch"}
    got = launches[0]
    stalls = {k.replace("smsp__warp_issue_stalled_", "").replace("_per_warp_active.pct", ""): v
              for k, v in got.items() if k.startswith("smsp__warp_issue_stalled_")}
    counters = {k: v for k, v in got.items() if not k.startswith("smsp__warp_issue_stalled_")}
    flops = 2.0 * size ** 3
    dur = counters.get("gpu__time_duration.sum")
    out = {"measured": True, "config": cfg.label, "size": size,
           "command": " ".join(command(cfg, size, python="python3", metrics=used)),
           "counters": counters, "stalls_pct": dict(sorted(stalls.items(), key=lambda kv: -kv[1]))}
    if dur:
        out["tflops_under_ncu"] = flops / (dur * 1e-9) / 1e12
    return out


def summary_lines(prof: dict) -> list[str]:
    """Markdown lines: the few counters that explain the gap."""
    if not prof.get("measured"):
        return [f"Not measured: {prof.get('reason', 'skipped')}"]
    c = prof["counters"]

    def get(name, scale=1.0, fmt="{:.1f}"):
        v = c.get(name)
        return "-" if v is None else fmt.format(v * scale)

    top = list(prof["stalls_pct"].items())[:6]
    lines = [
        f"ncu command: `{prof['command']}`",
        "",
        "| counter | value |",
        "| --- | ---: |",
        f"| SM clock during the kernel | {get('sm__cycles_elapsed.avg.per_second', 1e-9, '{:.2f}')} GHz |",
        f"| rate under the profiler | {prof.get('tflops_under_ncu', 0):.0f} TFLOP/s |",
        f"| tensor pipe (HMMA) active, % of peak | {get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active')} |",
        f"| issue slots active, % | {get('smsp__issue_active.avg.pct_of_peak_sustained_active')} |",
        f"| instructions per HMMA | "
        f"{c['smsp__inst_executed.sum'] / c['smsp__inst_executed_pipe_tensor.sum']:.2f} |"
        if c.get("smsp__inst_executed_pipe_tensor.sum") else "| instructions per HMMA | - |",
        f"| shared-memory wavefronts, % of peak | {get('l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed')} |",
        f"| shared-memory bank conflicts (whole kernel) | {get('l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum', 1, '{:.0f}')} |",
        f"| L2 sectors, % of peak | {get('lts__t_sectors.avg.pct_of_peak_sustained_elapsed')} |",
        f"| DRAM throughput, % of peak | {get('dram__throughput.avg.pct_of_peak_sustained_elapsed')} |",
        f"| warps resident per SM | {get('sm__warps_active.avg.per_cycle_active')} |",
        f"| registers per thread | {get('launch__registers_per_thread', 1, '{:.0f}')} |",
        "",
        "Top stall reasons (% of warp cycles): "
        + ", ".join(f"{name} {v:.1f}" for name, v in top),
    ]
    return lines
