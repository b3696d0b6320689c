"""What limits the capstone GEMM: Nsight Compute counters of one launch of a configuration.

Runs ``ncu`` over :mod:`ptxlab.bench.profile_target` and keeps the counters that say where the
time goes: the SM clock during the kernel, how busy the tensor pipe is, the instruction mix per
mma.sync (all instructions, ldmatrix), the shared-memory and L2 load, issue activity, registers
and the stall reasons of the warps. The same counters of CUTLASS's GEMM (:mod:`.cutlass_peer`)
put ours beside a peer built on the same instruction.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

from .bank_study import _parse_ncu_csv
from .kernels import GemmConfig

#: ncu's name filter for each kernel family (demangled names): ours, and CUTLASS's device kernel.
KERNEL_FILTERS = {"ours": GemmConfig.kernel_name, "cutlass": "regex:cutlass"}

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
    "dram__bytes_read.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.per_cycle_active",
    "launch__registers_per_thread",
    "smsp__inst_executed_op_ldsm.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "launch__grid_size",
    "launch__block_size",
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


def command(target: list[str], kernel_filter: str, python: str = sys.executable,
            metrics=METRICS) -> list[str]:
    """ncu over ``python -m ptxlab.bench.profile_target TARGET...``, one launch of the kernel."""
    return ["ncu", "--clock-control", "none", "--kernel-name-base", "demangled",
            "--kernel-name", kernel_filter, "--launch-count", "1",
            "--metrics", ",".join(metrics) + "," + STALL_REGEX, "--csv", "--print-units", "base",
            python, "-m", "ptxlab.bench.profile_target", *target]


def target_args(cfg, size: int) -> tuple[list[str], str]:
    """profile_target's arguments and ncu's kernel filter for our ``GemmConfig`` or a
    ``PeerConfig`` of CUTLASS."""
    params = [f"{k}={int(v)}" for k, v in cfg.as_dict().items()]
    if isinstance(cfg, GemmConfig):
        return [str(size), *params], KERNEL_FILTERS["ours"]
    return ["--peer", str(size), *params], KERNEL_FILTERS["cutlass"]


def measure(cfg, size: int, timeout_s: int = 300) -> dict:
    """Counters of one ``size``^3 launch of ``cfg`` (ours or CUTLASS's), or ``measured: False``
    and why, if ncu is missing or fails."""
    if shutil.which("ncu") is None:
        return {"measured": False, "reason": "ncu (Nsight Compute) is not on PATH"}
    target, kfilter = target_args(cfg, size)
    used = METRICS
    proc = subprocess.run(command(target, kfilter), capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        used = SAFE_METRICS
        proc = subprocess.run(command(target, kfilter, metrics=used), capture_output=True,
                              text=True, timeout=timeout_s)
    if proc.returncode != 0:
        return {"measured": False, "reason": f"ncu failed (exit {proc.returncode}): "
                + (proc.stderr or proc.stdout)[-1500:]}
    launches = _parse_ncu_csv(proc.stdout)
    if not launches:
        return {"measured": False, "reason": "ncu profiled no GEMM launch: "
                + (proc.stderr or proc.stdout)[-600:]}
    got = launches[0]
    stalls = {k.replace("smsp__warp_issue_stalled_", "").replace("_per_warp_active.pct", ""): v
              for k, v in got.items() if k.startswith("smsp__warp_issue_stalled_")}
    counters = {k: v for k, v in got.items() if not k.startswith("smsp__warp_issue_stalled_")}
    flops = 2.0 * size ** 3
    dur = counters.get("gpu__time_duration.sum")
    out = {"measured": True, "kernel": "ours" if isinstance(cfg, GemmConfig) else "cutlass",
           "config": cfg.label, "variant": cfg.variant, "size": size,
           "command": " ".join(command(target, kfilter, python="python3", metrics=used)),
           "counters": counters, "stalls_pct": dict(sorted(stalls.items(), key=lambda kv: -kv[1]))}
    if dur:
        out["tflops_under_ncu"] = flops / (dur * 1e-9) / 1e12
    out.update(per_hmma(counters))
    return out


def per_hmma(c: dict) -> dict:
    """Instructions, ldmatrix and shared-memory wavefronts per mma.sync (HMMA)."""
    hmma = c.get("smsp__inst_executed_pipe_tensor.sum")
    if not hmma:
        return {}
    out = {}
    for key, name in (("smsp__inst_executed.sum", "instructions_per_hmma"),
                      ("smsp__inst_executed_op_ldsm.sum", "ldmatrix_per_hmma"),
                      ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
                       "shared_wavefronts_per_hmma")):
        if c.get(key) is not None:
            out[name] = c[key] / hmma
    return out


def _cell(prof: dict, name: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    v = prof.get("counters", {}).get(name)
    return "-" if v is None else fmt.format(v * scale)


#: Rows of the comparison table: (label, counter or per-HMMA key, scale, format).
ROWS = (
    ("SM clock during the kernel, GHz", "sm__cycles_elapsed.avg.per_second", 1e-9, "{:.2f}"),
    ("rate under the profiler, TFLOP/s", "tflops_under_ncu", 1, "{:.0f}"),
    ("tensor pipe (HMMA) active, % of peak",
     "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
    ("issue slots active, %", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
    ("instructions per HMMA", "instructions_per_hmma", 1, "{:.2f}"),
    ("ldmatrix per HMMA", "ldmatrix_per_hmma", 1, "{:.3f}"),
    ("shared-memory wavefronts per HMMA", "shared_wavefronts_per_hmma", 1, "{:.2f}"),
    ("shared-memory wavefronts, % of peak",
     "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
    ("shared-memory bank conflicts (whole kernel)",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1, "{:.0f}"),
    ("L2 sectors, % of peak", "lts__t_sectors.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
    ("DRAM throughput, % of peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1,
     "{:.1f}"),
    ("DRAM bytes read, MB", "dram__bytes_read.sum", 1e-6, "{:.0f}"),
    ("L2 hit rate, %", "lts__t_sector_hit_rate.pct", 1, "{:.1f}"),
    ("warps resident per SM", "sm__warps_active.avg.per_cycle_active", 1, "{:.1f}"),
    ("registers per thread", "launch__registers_per_thread", 1, "{:.0f}"),
    ("blocks x threads", None, 1, ""),
)


def _value(prof: dict, key: str | None, scale: float, fmt: str) -> str:
    if not prof.get("measured"):
        return "-"
    if key is None:
        c = prof["counters"]
        grid, block = c.get("launch__grid_size"), c.get("launch__block_size")
        return f"{grid:.0f} x {block:.0f}" if grid and block else "-"
    if key in prof and not isinstance(prof[key], dict):
        return fmt.format(prof[key] * scale)
    return _cell(prof, key, scale, fmt)


def summary_lines(prof: dict | list) -> list[str]:
    """Markdown lines: the counters that explain the gap, one column per profiled kernel."""
    profs = prof if isinstance(prof, list) else [prof]
    measured = [p for p in profs if p.get("measured")]
    if not measured:
        return [f"Not measured: {profs[0].get('reason', 'skipped') if profs else 'skipped'}"]
    lines = []
    for p in measured:
        lines.append(f"ncu command ({p.get('kernel', 'ours')}, {p['config']}): `{p['command']}`")
        lines.append("")
    heads = [f"{'CUTLASS' if p.get('kernel') == 'cutlass' else 'ours'} {p['config']} "
             f"({p.get('variant', '')}, {p['size']}^3)" for p in measured]
    lines += ["| counter | " + " | ".join(heads) + " |",
              "| --- |" + " ---: |" * len(measured)]
    for label, key, scale, fmt in ROWS:
        lines.append(f"| {label} | " + " | ".join(_value(p, key, scale, fmt) for p in measured)
                     + " |")
    lines.append("")
    for p, head in zip(measured, heads):
        top = list(p["stalls_pct"].items())[:6]
        lines.append(f"Top stall reasons of {head} (% of warp cycles): "
                     + ", ".join(f"{name} {v:.1f}" for name, v in top))
        lines.append("")
    for p in profs:
        if not p.get("measured"):
            lines.append(f"Not measured: {p.get('config', '')} {p.get('reason', '')}")
    return lines
