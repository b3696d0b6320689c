"""``ptxlab bench``: run the capstone kernels and their ceilings on a GPU and write the report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench import collect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=collect.DEFAULT_OUT,
                        help=f"folder for REPORT.md, report.json and plots (default {collect.DEFAULT_OUT})")
    parser.add_argument("--gemm-sizes", type=int, nargs="+", default=list(collect.GEMM_SIZES),
                        metavar="N", help="square GEMM sizes M=N=K")
    parser.add_argument("--transpose-sizes", type=int, nargs="+", default=list(collect.TRANSPOSE_SIZES),
                        metavar="N", help="square transpose sizes")
    parser.add_argument("--no-ncu", action="store_true",
                        help="skip Nsight Compute (the GEMM profiles and the bank-conflict study)")
    parser.add_argument("--no-peer", action="store_true",
                        help="skip CUTLASS's GEMM (built with nvcc from the CUTLASS headers)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of ours, CUTLASS and cuBLAS per size (default 5)")
    parser.add_argument("--order", choices=collect.ROUND_ORDERS, default="balanced",
                        help="order of the jobs in each round: balanced (every kernel follows "
                             "every other equally often; the default) or rotate (cyclic)")
    parser.add_argument("--warmup-ms", type=float, default=collect.GEMM_WARMUP_MS,
                        help="milliseconds each GEMM runs before it is timed "
                             f"(default {collect.GEMM_WARMUP_MS:.0f})")
    parser.add_argument("--notes", default="", help="free text added to the report")


def run(args: argparse.Namespace) -> int:
    problem = collect.gpu_problem()
    if problem:
        print(f"ptxlab bench needs a CUDA GPU (sm_90) with CuPy: {problem}", file=sys.stderr)
        return 2
    from ..bench import report

    res = collect.collect(args)
    for line in report.table_lines(res):
        print(line)
    written = report.write(res, args.out)
    print("wrote " + ", ".join(str(p) for p in written))
    failed = [r for r in report.summary_rows(res) if r.get("correct") is False]
    return 1 if failed else 0
