"""``ptxlab bench``: run the capstone kernels and their ceilings on a GPU and write the report."""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

DEFAULT_OUT = Path("reports/capstone")
GEMM_SIZES = (1024, 2048, 4096, 8192)
TRANSPOSE_SIZES = (2048, 4096, 8192, 16384)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"folder for REPORT.md, report.json and plots (default {DEFAULT_OUT})")
    parser.add_argument("--gemm-sizes", type=int, nargs="+", default=list(GEMM_SIZES),
                        metavar="N", help="square GEMM sizes M=N=K")
    parser.add_argument("--transpose-sizes", type=int, nargs="+", default=list(TRANSPOSE_SIZES),
                        metavar="N", help="square transpose sizes")
    parser.add_argument("--no-ncu", action="store_true", help="skip the ncu bank-conflict study")
    parser.add_argument("--notes", default="", help="free text added to the report")


def gpu_problem() -> str | None:
    """None if CuPy sees a GPU this benchmark can use, else why not (one line)."""
    try:
        import cupy as cp
    except Exception as exc:  # no CuPy, or a broken install
        return f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device visible ({type(exc).__name__})"
    if count < 1:
        return "no CUDA device visible"
    major = cp.cuda.Device(0).compute_capability
    if int(major) < 90:
        return f"stmatrix needs sm_90; this GPU is sm_{major}"
    return None


def collect(args: argparse.Namespace, log=print) -> dict:
    """Every measurement of the report, in one run (ceilings included)."""
    from . import bank_study, runs
    from .kernels import GEMM_BEST, TRANSPOSE_BEST

    argv = sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]
    res: dict = {"command": " ".join(["ptxlab", "bench", *argv]),
                 "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                 "device": runs.device_info(), "notes": args.notes}
    log(f"device: {res['device']['name']}  CuPy {res['device']['cupy']}")
    res["mma_peak"] = runs.mma_peak_run()
    log(f"mma.sync ceiling: {res['mma_peak']['tflops']:.1f} TFLOP/s")
    variants = [GEMM_BEST,
                GEMM_BEST.__class__(**{**GEMM_BEST.as_dict(), "b_col": True}),
                GEMM_BEST.__class__(**{**GEMM_BEST.as_dict(), "out_f32": True})]
    res["gemm"], res["cublas"] = [], []
    for n in args.gemm_sizes:
        res["cublas"].append(runs.cublas_run(n, n, n))
        for cfg in variants:
            rec = runs.gemm_run(cfg, n, n, n)
            res["gemm"].append(rec)
            log(f"GEMM {n}^3 {cfg.variant}: {rec['tflops']:.1f} TFLOP/s, rel. error "
                f"{rec['rel_error_vs_fp32']:.2e} (cuBLAS {res['cublas'][-1]['tflops']:.1f})")
    res["transpose"], res["copy"], res["cupy_transpose"] = [], [], []
    for n in args.transpose_sizes:
        res["copy"].append(runs.copy_run(n * n * 2))
        res["cupy_transpose"].append(runs.cupy_transpose_run(n, n))
        rec = runs.transpose_run(TRANSPOSE_BEST, n, n)
        res["transpose"].append(rec)
        log(f"transpose {n}^2: {rec['tbps']:.3f} TB/s (copy {res['copy'][-1]['tbps']:.3f}, "
            f"cupy {res['cupy_transpose'][-1]['tbps']:.3f}), mismatches {rec['mismatches']}")
    if args.no_ncu:
        res["gemm_profile"] = {"measured": False, "reason": "--no-ncu given"}
        res["bank_study"] = {"measured": False, "reason": "--no-ncu given",
                             "rows": [{"predicted": p} for p in bank_study.predictions()]}
    else:
        from . import gemm_profile
        res["gemm_profile"] = gemm_profile.measure(GEMM_BEST, max(args.gemm_sizes))
        res["bank_study"] = bank_study.measure()
    return res


def run(args: argparse.Namespace) -> int:
    problem = gpu_problem()
    if problem:
        print(f"ptxlab bench needs a CUDA GPU (sm_90) with CuPy: {problem}", file=sys.stderr)
        return 2
    from . import report

    res = collect(args)
    for line in report.table_lines(res):
        print(line)
    written = report.write(res, args.out)
    print("wrote " + ", ".join(str(p) for p in written))
    failed = [r for r in report.summary_rows(res) if r.get("correct") is False]
    return 1 if failed else 0
