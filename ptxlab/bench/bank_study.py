"""Bank-conflict study: predict, with :mod:`ptxlab.model.banks`, the shared-memory wavefronts
of the ``kernels/capstone/bank_study.cu`` tile loop for each layout, and measure them with
Nsight Compute.

The per-lane addresses come from :class:`~ptxlab.model.shared_tiles.SharedTileLayout` (its
``offset`` mirrors the kernel's ``bank::offset``), for every warp, repetition and 16x16 piece,
and are fed to the bank model. ``python -m ptxlab.bench.bank_study --target`` is the program ncu
profiles.
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys

import numpy as np

from ..model import banks
from ..model.shared_tiles import SharedTileLayout

LAYOUT_IDS = {"naive": 0, "padded": 1, "swizzled": 2}  # BANK_LAYOUT in bank_study.cu
THREADS = 128
BLOCKS = 2
REPS = 4
KERNEL_NAME = "bank_study"

#: ncu metrics: wavefronts and conflicts of shared loads (ldmatrix) and stores (the fill), and
#: the instruction counts the predictions are built from.
METRICS = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__inst_executed_op_ldsm.sum",
)
REQUIRED_METRICS = METRICS[:2]


def kernel_source(layout: SharedTileLayout) -> str:
    """The study kernel specialised for ``layout`` (its macros, then ``bank_study.cu``)."""
    defs = {"BANK_LAYOUT": LAYOUT_IDS[layout.kind], "BANK_ROWS": layout.rows,
            "BANK_COLS": layout.cols, "BANK_PAD": layout.pad, "BANK_REPS": REPS,
            "BANK_TRANS": int(layout.trans)}
    return "\n".join([f"#define {k} {v}" for k, v in defs.items()]
                     + ['#include "capstone/bank_study.cu"', ""])


def fill_addresses(layout: SharedTileLayout) -> tuple[np.ndarray, np.ndarray]:
    """``(instructions, 32)`` addresses and activity of the kernel's 16-byte st.shared fill."""
    total = layout.rows * layout.chunks
    addrs, active = [], []
    for w in range(THREADS // 32):
        for start in range(0, total, THREADS):
            q = start + 32 * w + np.arange(32)
            if q[0] >= total:
                continue
            ok = q < total
            qq = np.where(ok, q, 0)
            addrs.append(layout.offset(qq // layout.chunks, qq % layout.chunks))
            active.append(ok)
    return np.array(addrs), np.array(active)


STUDY = tuple(SharedTileLayout(kind, cols) for cols in (64, 32) for kind in LAYOUT_IDS) + (
    SharedTileLayout("naive", 64, trans=True), SharedTileLayout("swizzled", 64, trans=True))


def predict(layout: SharedTileLayout) -> dict:
    """Predicted ncu counters of one launch (BLOCKS blocks of THREADS threads)."""
    warps = BLOCKS * THREADS // 32
    per_pass = banks.ldmatrix_cost(layout.ldmatrix_addresses(), num=4)
    ld = per_pass * (REPS * warps)
    fa, fm = fill_addresses(layout)
    st = banks.access_cost(fa, width=16, active=fm) * BLOCKS
    return {"layout": layout.name, "ldsm_instructions": warps * REPS * len(layout.ldmatrix_addresses()),
            "ld_wavefronts": ld.wavefronts, "ld_conflicts": ld.conflicts,
            "st_wavefronts": st.wavefronts, "st_conflicts": st.conflicts,
            "ld_wavefronts_per_ldmatrix": per_pass.wavefronts / len(layout.ldmatrix_addresses())}


def predictions() -> list[dict]:
    return [predict(layout) for layout in STUDY]


# ---------------------------------------------------------------------------------------------
# The program ncu profiles, and the ncu driver
# ---------------------------------------------------------------------------------------------

def run_target() -> None:
    """Launch the study kernel once per layout, in STUDY order, and check it ran."""
    from .runs import compile_kernel, cupy_module

    cp = cupy_module()

    for layout in STUDY:
        kern = compile_kernel(kernel_source(layout), KERNEL_NAME)
        fill = cp.asarray(np.arange(layout.rows * layout.chunks * 4, dtype=np.uint32))
        out = cp.zeros(BLOCKS * THREADS, dtype=cp.uint32)
        kern((BLOCKS,), (THREADS,), (fill, out))
        cp.cuda.Device().synchronize()
        if not bool((out != 0).any()):
            raise RuntimeError(f"bank study kernel for {layout.name} wrote nothing")


def _ncu_command(metrics, python: str = sys.executable) -> list[str]:
    return ["ncu", "--clock-control", "none", "--kernel-name", KERNEL_NAME, "--metrics",
            ",".join(metrics), "--csv", "--print-units", "base",
            python, "-m", "ptxlab.bench.bank_study", "--target"]


def _parse_ncu_csv(text: str) -> list[dict[str, float]]:
    """One dict (metric -> value) per profiled launch, in launch order."""
    start = text.find('"ID"')
    if start < 0:
        raise RuntimeError("ncu printed no CSV table:\n" + text[-2000:])
    launches: dict[int, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        try:
            launch = int(row["ID"])
        except (KeyError, ValueError):
            continue
        value = row.get("Metric Value", "").replace(",", "")
        try:
            launches.setdefault(launch, {})[row["Metric Name"]] = float(value)
        except ValueError:
            continue
    return [launches[i] for i in sorted(launches)]


def measure(timeout_s: int = 300) -> dict:
    """Run ncu over :func:`run_target`; compare every layout's counters with the prediction."""
    if shutil.which("ncu") is None:
        return {"measured": False, "reason": "ncu (Nsight Compute) is not on PATH",
                "rows": [{"measured": None, "predicted": p} for p in predictions()]}
    used = METRICS
    proc = subprocess.run(_ncu_command(used), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        used = REQUIRED_METRICS
        proc = subprocess.run(_ncu_command(used), capture_output=True, text=True,
                              timeout=timeout_s)
    if proc.returncode != 0:
        return {"measured": False, "reason": f"ncu failed (exit {proc.returncode}): "
                + (proc.stderr or proc.stdout)[-1500:], "rows": []}
    launches = _parse_ncu_csv(proc.stdout)
    if len(launches) != len(STUDY):
        return {"measured": False, "reason": f"ncu profiled {len(launches)} launches, expected "
                f"{len(STUDY)}", "raw": proc.stdout[-3000:], "rows": []}
    key = {"ld_wavefronts": METRICS[0], "ld_conflicts": METRICS[1], "st_wavefronts": METRICS[2],
           "st_conflicts": METRICS[3], "ldsm_instructions": METRICS[4]}
    rows, all_agree = [], True
    for layout, got in zip(STUDY, launches):
        pred = predict(layout)
        meas = {k: int(got[m]) for k, m in key.items() if m in got}
        agree = {k: meas[k] == pred[k] for k in meas}
        all_agree &= all(agree.values())
        rows.append({"layout": layout.name, "predicted": pred, "measured": meas, "agree": agree})
    return {"measured": True, "command": " ".join(_ncu_command(used, python="python3")), "metrics": list(used),
            "all_agree": all_agree, "rows": rows, "ncu_csv": proc.stdout[proc.stdout.find('"ID"'):]}


if __name__ == "__main__":
    if "--target" in sys.argv:
        run_target()
    else:
        import json
        print(json.dumps(measure(), indent=1, default=str))
