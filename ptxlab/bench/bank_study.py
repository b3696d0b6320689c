"""Bank-conflict study: predict, with :mod:`ptxlab.banks`, the shared-memory wavefronts of the
``kernels/capstone/bank_study.cu`` tile loop for each layout, and measure them with Nsight Compute.

The per-lane addresses are computed here with the same formulas the kernel uses (``offset`` of
:class:`StudyLayout` mirrors ``bank::offset``), for every warp, repetition and 16x16 piece, and fed
to the bank model. ``python -m ptxlab.bench.bank_study --target`` is the program ncu profiles.
"""
from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from .. import banks

LAYOUT_IDS = {"naive": 0, "padded": 1, "swizzled": 2}
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


@dataclass(frozen=True)
class StudyLayout:
    """One shared layout of a ``rows x cols`` 16-bit tile (see bank_study.cu)."""

    kind: str          # naive | padded | swizzled
    cols: int          # 16-bit elements per row: 64 -> 128-byte rows, 32 -> 64-byte rows
    rows: int = 64
    pad: int = 16
    trans: bool = False

    @property
    def name(self) -> str:
        return f"{self.kind} {2 * self.cols}B rows{' .trans' if self.trans else ''}"

    @property
    def pitch(self) -> int:
        return 2 * self.cols + (self.pad if self.kind == "padded" else 0)

    @property
    def chunks(self) -> int:
        return self.cols // 8

    def offset(self, row, chunk) -> np.ndarray:
        """Byte offset of 16-byte chunk ``chunk`` of row ``row`` (numpy mirror of the kernel)."""
        row, chunk = np.asarray(row), np.asarray(chunk)
        if self.kind == "swizzled":
            c = self.chunks
            if c >= 8:
                chunk = chunk ^ (row & 7)
            elif c == 4:
                chunk = chunk ^ ((row >> 1) & 3)
            elif c == 2:
                chunk = chunk ^ ((row >> 2) & 1)
        return row * self.pitch + chunk * 16

    def source(self) -> str:
        defs = {"BANK_LAYOUT": LAYOUT_IDS[self.kind], "BANK_ROWS": self.rows,
                "BANK_COLS": self.cols, "BANK_PAD": self.pad, "BANK_REPS": REPS,
                "BANK_TRANS": int(self.trans)}
        return "\n".join([f"#define {k} {v}" for k, v in defs.items()]
                         + ['#include "capstone/bank_study.cu"', ""])

    def ldmatrix_addresses(self) -> np.ndarray:
        """``(pieces, 32)``: the address each lane gives ldmatrix.x4 for each 16x16 piece."""
        lane = np.arange(32)
        out = []
        for p in range((self.rows // 16) * (self.cols // 16)):
            rb, cb = (p // (self.cols // 16)) * 16, (p % (self.cols // 16)) * 16
            out.append(self.offset(rb + (lane & 15), cb // 8 + (lane >> 4)))
        return np.array(out)

    def fill_addresses(self) -> tuple[np.ndarray, np.ndarray]:
        """``(instructions, 32)`` addresses and activity of the 16-byte st.shared fill loop."""
        total = self.rows * self.chunks
        addrs, active = [], []
        for w in range(THREADS // 32):
            for start in range(0, total, THREADS):
                q = start + 32 * w + np.arange(32)
                if q[0] >= total:
                    continue
                ok = q < total
                qq = np.where(ok, q, 0)
                addrs.append(self.offset(qq // self.chunks, qq % self.chunks))
                active.append(ok)
        return np.array(addrs), np.array(active)


STUDY = tuple(StudyLayout(kind, cols) for cols in (64, 32) for kind in LAYOUT_IDS) + (
    StudyLayout("naive", 64, trans=True), StudyLayout("swizzled", 64, trans=True))


def predict(layout: StudyLayout) -> dict:
    """Predicted ncu counters of one launch (BLOCKS blocks of THREADS threads)."""
    warps = BLOCKS * THREADS // 32
    per_pass = banks.ldmatrix_cost(layout.ldmatrix_addresses(), num=4)
    ld = per_pass * (REPS * warps)
    fa, fm = layout.fill_addresses()
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
    import cupy as cp

    from .runs import compile_kernel

    for layout in STUDY:
        kern = compile_kernel(layout.source(), KERNEL_NAME)
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
