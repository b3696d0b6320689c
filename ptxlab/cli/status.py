"""``ptxlab status``: which backend runs kernels here, and which instructions this GPU has."""
from __future__ import annotations

import argparse
import json

from ..run import backends, gpu
from ..run.programs import toolchain


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the status as JSON")


def support_table(st: gpu.GpuStatus, cpu_ok: bool) -> list[tuple[str, str, str]]:
    """Rows ``(instruction, oldest GPU, where it runs here)`` for every instruction covered."""
    fallback = "CPU model" if cpu_ok else "nowhere"
    rows = []
    for name, sm in gpu.INSTRUCTION_MIN_SM.items():
        here = "GPU" if st.available and st.supported.get(name) else fallback
        rows.append((name, f"sm_{sm}", here))
    return rows


def whole_programs() -> tuple[bool, str]:
    """``(ok, line)``: whether ``ptxlab run`` / ``%%cuda`` can build programs here, and with what
    (or the one sentence on what to install)."""
    try:
        return True, f"whole programs (ptxlab run, %%cuda): built with {toolchain.find_toolchain().describe()}"
    except toolchain.ToolchainMissing as exc:
        return False, f"whole programs (ptxlab run, %%cuda): unavailable: {exc}"


def run(args: argparse.Namespace) -> int:
    st = gpu.status()
    line = backends.describe()
    programs_ok, programs_line = whole_programs()
    if getattr(args, "json", False):
        print(json.dumps({
            "summary": line, "gpu_available": st.available, "gpu_message": st.message,
            "device": st.name, "compute_capability": st.compute_capability,
            "cupy": st.cupy_version, "driver_cuda": st.driver_version,
            "instructions": {name: {"min_sm": sm, "on_gpu": bool(st.supported.get(name))}
                             for name, sm in gpu.INSTRUCTION_MIN_SM.items()},
            "whole_programs": {"available": programs_ok, "summary": programs_line},
        }, indent=2))
        return 0
    print(f"{line}; {programs_line}")
    cpu_ok, _ = backends.cpu_available()
    rows = [("instruction", "needs", "runs on")] + support_table(st, cpu_ok)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0
