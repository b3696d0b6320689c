"""Tile-configuration sweep for the capstone GEMM: the measurements behind ``GEMM_BEST``.

``python -m ptxlab.bench.tune --out DIR`` checks and times, in one GPU run, every configuration
of ``GEMM_CANDIDATES`` (and the operand/output variants the benchmark reports), CUTLASS's GEMM
over its tile sweep (built in the background meanwhile), cuBLAS and the mma.sync ceilings, in
``--rounds`` interleaved rounds (the median per kernel is kept), then profiles the fastest of
ours, the first candidate and the fastest CUTLASS configuration with Nsight Compute. It writes
``DIR/tune.json`` and prints a table; notes/capstone_tuning.md records the predictions and
outcomes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STEPS = ("peak", "cublas", "ours", "peer", "ncu")


def _line(rec: dict) -> str:
    if "error" in rec:
        return f"{rec.get('config', '?'):<44} {rec.get('m', 0):>5}: FAILED {rec['error'][:160]}"
    clock = (f" {rec['nvml_sm_clock_mhz']:.0f} MHz {rec['nvml_power_w']:.0f} W"
             f" cap {rec['nvml_power_capped']:.0%}" if rec.get("nvml_sm_clock_mhz") else "")
    rounds = (" [" + " ".join(f"{t:.0f}" for t in rec["tflops_rounds"]) + "]"
              if len(rec.get("tflops_rounds", [])) > 1 else "")
    err = (f" err {rec['rel_error_vs_fp32']:.1e} ok={rec['correct']}"
           if "rel_error_vs_fp32" in rec else "")
    return (f"{rec.get('kernel', '?'):8} {rec.get('config', ''):<38} "
            f"[{rec.get('variant', '')}] {rec['m']:>5}: {rec['tflops']:6.1f} TFLOP/s{rounds}"
            f"{err}{clock}")


def _peak_line(name: str, peak: dict) -> str:
    b = peak["best"]
    return (f"{name} {peak['tflops']:.1f} TFLOP/s ({b['chains']} chains, {b['threads']} threads x "
            f"{b['blocks']}, kernel clock {b.get('sm_clock_mhz') or 0:.0f} MHz, NVML "
            f"{b.get('nvml_sm_clock_mhz') or 0:.0f} MHz {b.get('nvml_power_w') or 0:.0f} W, "
            f"power-capped {b.get('nvml_power_capped') or 0:.0%})")


def _head_config(text: str):
    """A GemmConfig class whose kernel is ``text`` (another version of gemm.cu) instead of
    kernels/capstone/gemm.cu; its label ends in "head"."""
    from .kernels import GemmConfig

    class HeadConfig(GemmConfig):
        def source(self) -> str:
            return super().source().replace('#include "capstone/gemm.cu"', text)

        @property
        def label(self) -> str:
            return super().label + " head"

    return HeadConfig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--ncu-size", type=int, default=8192)
    p.add_argument("--skip", nargs="*", default=[], choices=STEPS)
    p.add_argument("--only", nargs="*", default=None,
                   help="labels of our configurations to measure (default: all candidates)")
    p.add_argument("--peer-only", nargs="*", default=None,
                   help="labels of CUTLASS configurations to measure (default: the sweep)")
    p.add_argument("--head", type=Path, default=None,
                   help="another version of gemm.cu (e.g. the last committed one), measured in "
                        "the same rounds with the first candidate's tile")
    args = p.parse_args(argv)
    from . import cutlass_peer, gemm_profile, runs
    from .cases import candidate_configs
    from .kernels import GemmConfig

    out: dict = {"device": runs.device_info(), "sizes": args.sizes, "rounds": args.rounds,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    print(out["device"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (args.out / "tune.json").write_text(json.dumps(out, indent=1, default=str))

    peer_configs = [c for c in cutlass_peer.PEER_SWEEP
                    if not args.peer_only or c.label in args.peer_only]
    # CUTLASS builds on the CPUs while the ceilings run on the GPU.
    pool = ThreadPoolExecutor(max_workers=1)
    peer_build = (pool.submit(runs.peer_kernels, peer_configs, lambda s: print(s, flush=True))
                  if "peer" not in args.skip else None)
    lines = []
    if "peak" not in args.skip:
        out["mma_peak"] = runs.mma_peak_run()
        out["mma_peak_vary"] = runs.mma_peak_run(chains_options=(8, 12), threads_options=(128,),
                                                 blocks_per_sm_options=(4, 8), vary=True)
        lines += [_peak_line("mma.sync ceiling", out["mma_peak"]),
                  _peak_line("mma.sync ceiling, changing random operands", out["mma_peak_vary"])]
        print("\n".join(lines), flush=True)
        save()

    jobs = []
    for n in args.sizes:
        if "cublas" not in args.skip:
            jobs.append(("cublas", n, lambda n=n: runs.cublas_run(n, n, n)))
        if "ours" not in args.skip:
            for cfg in candidate_configs():
                if not args.only or cfg.label in args.only:
                    jobs.append((cfg.label, n, lambda cfg=cfg, n=n: runs.gemm_run(cfg, n, n, n)))
    if args.head is not None:
        head = _head_config(args.head.read_text())(**candidate_configs()[0].as_dict())
        for n in args.sizes:
            jobs.append((head.label, n, lambda n=n: runs.gemm_run(head, n, n, n)))
    if peer_build is not None:
        kernels, out["peer"] = peer_build.result()
        for n in args.sizes:
            for kern in kernels:
                jobs.append((kern.cfg.label, n, lambda kern=kern, n=n: runs.peer_run(kern, n, n, n)))
    records = runs.in_rounds(jobs, args.rounds, log=lambda r: print(_line(r), flush=True))
    out["records"] = records
    merged = runs.merge_rounds(records)
    out["gemm"] = [r for r in merged if r.get("kernel") == "gemm"]
    out["cublas"] = [r for r in merged if r.get("kernel") == "cublas"]
    out["cutlass"] = [r for r in merged if r.get("kernel") == "cutlass"]
    lines += [_line(r) for r in sorted(merged, key=lambda r: (r["m"], r.get("kernel", ""),
                                                               -r["tflops"]))]
    lines += [_line(r) for r in records if "error" in r]
    save()

    if "ncu" not in args.skip:
        picks = []
        best_ours = [r for r in runs.best_by([g for g in out["gemm"]
                                              if not g["config"].endswith("head")], "gemm")
                     if r["m"] == args.ncu_size and r["variant"] == "B row-major, f16 out"]
        if best_ours:
            picks.append(GemmConfig(**best_ours[0]["params"]))
        if candidate_configs()[0] not in picks:
            picks.append(candidate_configs()[0])
        best_peer = [r for r in runs.best_by(out["cutlass"], "cutlass")
                     if r["m"] == args.ncu_size and r["variant"] == "B row-major, f16 out"]
        if best_peer:
            picks.append(cutlass_peer.PeerConfig(**best_peer[0]["params"]))
        out["ncu"] = [gemm_profile.measure(cfg, args.ncu_size) for cfg in picks]
        for prof in out["ncu"]:
            if prof.get("measured"):
                c = prof["counters"]
                lines.append(
                    f"ncu {prof['kernel']} {prof['config']}: {prof.get('tflops_under_ncu', 0):.0f} "
                    f"TFLOP/s at {c.get('sm__cycles_elapsed.avg.per_second', 0) / 1e9:.2f} GHz, "
                    "tensor "
                    f"{c.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 0):.1f}%, "
                    f"inst/HMMA {prof.get('instructions_per_hmma', 0):.2f}, "
                    f"ldsm/HMMA {prof.get('ldmatrix_per_hmma', 0):.3f}, "
                    f"regs {c.get('launch__registers_per_thread', 0):.0f}, stalls "
                    + ", ".join(f"{k} {v:.1f}" for k, v in list(prof["stalls_pct"].items())[:6]))
            else:
                lines.append(f"ncu: not measured: {prof.get('reason', '')[:300]}")
        save()
    print("\n".join(["==== summary ===="] + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
