"""Tile-configuration sweep for the capstone GEMM: the measurements behind ``GEMM_BEST``.

``python -m ptxlab.bench.tune --out DIR`` checks and times, in one GPU run, every configuration
of ``GEMM_CANDIDATES`` (and the operand/output variants the benchmark reports), CUTLASS's GEMM
over its tile sweep (built in the background meanwhile), cuBLAS and the mma.sync ceiling, then
profiles the fastest of ours, the first candidate and the fastest CUTLASS configuration with
Nsight Compute. It writes ``DIR/tune.json`` and prints a table; notes/capstone_tuning.md records
the predictions and outcomes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

STEPS = ("peak", "cublas", "ours", "peer", "ncu", "transpose")


def _line(rec: dict) -> str:
    if "error" in rec:
        return f"{rec.get('kernel', '?'):8} {rec['config']:<40} {rec['m']:>5}: FAILED {rec['error'][:160]}"
    clock = (f" {rec['nvml_sm_clock_mhz']:.0f} MHz {rec['nvml_power_w']:.0f} W"
             f" cap {rec['nvml_power_capped']:.0%}" if rec.get("nvml_sm_clock_mhz") else "")
    return (f"{rec.get('kernel', '?'):8} {rec['config']:<40} [{rec['variant']}] {rec['m']:>5}: "
            f"{rec['tflops']:6.1f} TFLOP/s spread {rec['spread']:.3f} "
            f"err {rec['rel_error_vs_fp32']:.1e} ok={rec['correct']}{clock}")


def _fastest(records: list[dict], variant: str) -> str | None:
    """The configuration with the best mean rate over the sizes, among correct records."""
    by: dict[str, list[float]] = {}
    for r in records:
        if r.get("variant") == variant and r.get("correct"):
            by.setdefault(r["config"], []).append(r["tflops"])
    if not by:
        return None
    n = max(len(v) for v in by.values())
    return max((c for c, v in by.items() if len(v) == n), key=lambda c: statistics.mean(by[c]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--ncu-size", type=int, default=8192)
    p.add_argument("--skip", nargs="*", default=["transpose"], choices=STEPS)
    p.add_argument("--only", nargs="*", default=None,
                   help="labels of GEMM_CANDIDATES to measure (default: all)")
    args = p.parse_args(argv)
    from . import cutlass_peer, gemm_profile, runs
    from .cases import candidate_configs
    from .kernels import TRANSPOSE_BEST

    out: dict = {"device": runs.device_info(), "sizes": args.sizes,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    print(out["device"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (args.out / "tune.json").write_text(json.dumps(out, indent=1, default=str))

    # CUTLASS builds on the CPUs while our kernels run on the GPU.
    pool = ThreadPoolExecutor(max_workers=1)
    peer_build = (pool.submit(cutlass_peer.build, list(cutlass_peer.PEER_SWEEP))
                  if "peer" not in args.skip and cutlass_peer.problem() is None else None)
    lines = []
    if "peak" not in args.skip:
        out["mma_peak"] = runs.mma_peak_run()
        best = out["mma_peak"]["best"]
        lines.append(f"mma.sync ceiling {out['mma_peak']['tflops']:.1f} TFLOP/s "
                     f"({best['chains']} chains, {best['threads']} threads x {best['blocks']}, "
                     f"kernel clock {best.get('sm_clock_mhz') or 0:.0f} MHz, NVML "
                     f"{best.get('nvml_sm_clock_mhz') or 0:.0f} MHz "
                     f"{best.get('nvml_power_w') or 0:.0f} W)")
        print(lines[-1], flush=True)
    if "cublas" not in args.skip:
        out["cublas"] = [runs.cublas_run(n, n, n) for n in args.sizes]
        for r in out["cublas"]:
            lines.append(f"cublas {r['m']}: {r['tflops']:.1f} TFLOP/s"
                         + (f" {r['nvml_sm_clock_mhz']:.0f} MHz {r['nvml_power_w']:.0f} W"
                            if r.get("nvml_sm_clock_mhz") else ""))
            print(lines[-1], flush=True)
        save()
    if "ours" not in args.skip:
        out["gemm"] = []
        configs = [c for c in candidate_configs() if not args.only or c.label in args.only]
        for cfg in configs:
            for n in args.sizes:
                try:
                    rec = runs.gemm_run(cfg, n, n, n)
                except Exception as exc:  # keep sweeping; record why
                    rec = {"kernel": "gemm", "config": cfg.label, "variant": cfg.variant, "m": n,
                           "params": cfg.as_dict(), "error": f"{type(exc).__name__}: {exc}"}
                out["gemm"].append(rec)
                lines.append(_line(rec))
                print(lines[-1], flush=True)
            save()
        # The first configuration once more: the drift over the run (clock, temperature).
        out["gemm_repeat"] = [runs.gemm_run(configs[0], n, n, n) for n in args.sizes]
        lines += ["repeat: " + _line(r) for r in out["gemm_repeat"]]
        print("\n".join(lines[-len(args.sizes):]), flush=True)
    if peer_build is not None:
        built = peer_build.result()
        print(f"CUTLASS built: {sum(not isinstance(v, str) for v in built.values())} of "
              f"{len(built)}", flush=True)
        out["peer"] = runs.peer_sweep(args.sizes, log=lambda s: print(s, flush=True))
        lines += [_line(r) for r in out["peer"].get("runs", [])]
        save()
    elif "peer" not in args.skip:
        out["peer"] = {"measured": False, "reason": cutlass_peer.problem()}
        lines.append(f"CUTLASS: not measured: {out['peer']['reason']}")
    if "ncu" not in args.skip:
        from .kernels import GemmConfig

        profs = []
        ours = out.get("gemm", [])
        fastest = _fastest(ours, "B row-major, f16 out")
        picks = [r["params"] for r in ours if r.get("config") == fastest][:1]
        first = candidate_configs()[0]
        if not picks or GemmConfig(**picks[0]) != first:
            picks.append(first.as_dict())
        for params in picks:
            profs.append(gemm_profile.measure(GemmConfig(**params), args.ncu_size))
        peer_best = [r for r in out.get("peer", {}).get("best", [])
                     if r["m"] == args.ncu_size and r["variant"] == "B row-major, f16 out"]
        if peer_best:
            profs.append(gemm_profile.measure(
                cutlass_peer.PeerConfig(**peer_best[0]["params"]), args.ncu_size))
        out["ncu"] = profs
        for prof in profs:
            if prof.get("measured"):
                c = prof["counters"]
                lines.append(
                    f"ncu {prof['kernel']} {prof['config']}: {prof.get('tflops_under_ncu', 0):.0f} "
                    f"TFLOP/s at {c.get('sm__cycles_elapsed.avg.per_second', 0) / 1e9:.2f} GHz, "
                    f"tensor {c.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 0):.1f}%, "
                    f"inst/HMMA {prof.get('instructions_per_hmma', 0):.2f}, "
                    f"ldsm/HMMA {prof.get('ldmatrix_per_hmma', 0):.3f}, "
                    f"regs {c.get('launch__registers_per_thread', 0):.0f}, stalls "
                    + ", ".join(f"{k} {v:.1f}" for k, v in list(prof["stalls_pct"].items())[:5]))
            else:
                lines.append(f"ncu: not measured: {prof.get('reason', '')[:300]}")
            print(lines[-1], flush=True)
        save()
    if "transpose" not in args.skip:
        out["transpose"] = [runs.transpose_run(TRANSPOSE_BEST, 8192, 8192)]
    save()
    print("\n".join(["==== summary ===="] + lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
