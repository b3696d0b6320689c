"""Tile-configuration sweep for the capstone kernels (the measurements behind the chosen tiles).

``python -m ptxlab.bench.tune --out DIR`` checks and times several GEMM and transpose
configurations in one GPU run and writes ``DIR/tune.json``; notes/capstone_tuning.md records the
predictions and outcomes.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .kernels import GemmConfig, TransposeConfig

GEMM_CANDIDATES = (
    GemmConfig(),                                                     # 128x256x64 w2x4 s3
    GemmConfig(stages=4),
    GemmConfig(bm=256, bn=128, warps_m=4, warps_n=2),
    GemmConfig(bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=4, min_blocks=2),
    GemmConfig(frag_pipe=True),
)
TRANSPOSE_CANDIDATES = (
    TransposeConfig(),
    TransposeConfig(threads=128),
    TransposeConfig(tr=128, tc=64),
    TransposeConfig(tr=64, tc=128),
    TransposeConfig(tr=128, tc=128, threads=512),
    TransposeConfig(movmatrix=True),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gemm-sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--transpose-sizes", type=int, nargs="+", default=[8192, 16384])
    p.add_argument("--skip", nargs="*", default=[], choices=["gemm", "transpose", "peak", "ncu"])
    args = p.parse_args(argv)
    from . import bank_study, runs

    out: dict = {"device": runs.device_info()}
    print(out["device"], flush=True)
    lines = []
    if "peak" not in args.skip:
        out["mma_peak"] = runs.mma_peak_run()
        for t in out["mma_peak"]["trials"]:
            print(f"peak chains={t['chains']} threads={t['threads']} blocks={t['blocks']}: "
                  f"{t['tflops']:.1f}", flush=True)
        lines.append(f"mma.sync peak {out['mma_peak']['tflops']:.1f} TFLOP/s")
    if "gemm" not in args.skip:
        out["cublas"] = [runs.cublas_run(n, n, n) for n in args.gemm_sizes]
        lines += [f"cublas {r['m']}: {r['tflops']:.1f} TFLOP/s" for r in out["cublas"]]
        out["gemm"] = []
        # correctness of every operand/output variant of the default tile first
        for extra in ({"b_col": True}, {"out_f32": True}, {"b_col": True, "out_f32": True}):
            cfg = GemmConfig(**{**GemmConfig().as_dict(), **extra})
            rec = runs.gemm_run(cfg, 4096, 4096, 4096)
            out["gemm"].append(rec)
            lines.append(f"gemm {cfg.label} [{cfg.variant}] 4096: {rec['tflops']:.1f} "
                         f"err {rec['rel_error_vs_fp32']:.2e} ok={rec['correct']}")
            print(lines[-1], flush=True)
        for cfg in GEMM_CANDIDATES:
            for n in args.gemm_sizes:
                try:
                    rec = runs.gemm_run(cfg, n, n, n)
                except Exception as exc:  # keep sweeping; record why
                    rec = {"config": cfg.label, "m": n, "error": f"{type(exc).__name__}: {exc}"}
                    lines.append(f"gemm {cfg.label} {n}: FAILED {rec['error'][:200]}")
                else:
                    lines.append(f"gemm {cfg.label} [{cfg.variant}] {n}: {rec['tflops']:.1f} "
                                 f"spread {rec['spread']:.3f} err {rec['rel_error_vs_fp32']:.2e} "
                                 f"ok={rec['correct']}")
                out["gemm"].append(rec)
                print(lines[-1], flush=True)
    if "transpose" not in args.skip:
        out["copy"] = [runs.copy_run(n * n * 2) for n in args.transpose_sizes]
        out["cupy_transpose"] = [runs.cupy_transpose_run(n, n) for n in args.transpose_sizes]
        lines += [f"copy {n}: {r['tbps']:.3f} TB/s" for n, r in zip(args.transpose_sizes, out["copy"])]
        lines += [f"cupy a.T {n}: {r['tbps']:.3f} TB/s"
                  for n, r in zip(args.transpose_sizes, out["cupy_transpose"])]
        out["transpose"] = []
        for cfg in TRANSPOSE_CANDIDATES:
            for n in args.transpose_sizes:
                try:
                    rec = runs.transpose_run(cfg, n, n)
                except Exception as exc:
                    rec = {"config": cfg.label, "rows": n, "error": f"{type(exc).__name__}: {exc}"}
                    lines.append(f"transpose {cfg.label} {n}: FAILED {rec['error'][:200]}")
                else:
                    lines.append(f"transpose {cfg.label} {n}: {rec['tbps']:.3f} TB/s "
                                 f"mismatches {rec['mismatches']}")
                out["transpose"].append(rec)
                print(lines[-1], flush=True)
    if "ncu" not in args.skip:
        bs = bank_study.measure()
        out["bank_study"] = bs
        if bs.get("measured"):
            for row in bs["rows"]:
                lines.append(f"banks {row['layout']}: pred {row['predicted']['ld_wavefronts']}/"
                             f"{row['predicted']['ld_conflicts']} st {row['predicted']['st_wavefronts']}"
                             f" ncu {row['measured']} agree {row['agree']}")
        else:
            lines.append(f"banks: not measured: {bs.get('reason')}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune.json").write_text(json.dumps(out, indent=1, default=str))
    print("\n".join(["==== summary ===="] + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
