"""Tile-configuration sweep for the capstone GEMM: the measurements behind ``GEMM_BEST``.

``python -m ptxlab.bench.tune --out DIR`` checks and times, in one GPU run, every configuration
of ``GEMM_CANDIDATES`` (and the operand/output variants the benchmark reports), CUTLASS's GEMM
over its tile sweep (built in the background meanwhile), cuBLAS and the mma.sync ceilings, in
``--rounds`` interleaved rounds (the median per kernel is kept), then profiles the fastest of
ours, the first candidate and the fastest CUTLASS configuration with Nsight Compute. It writes
``DIR/tune.json`` and prints a table; measure/sweeps/capstone_tuning.md records the predictions and
outcomes.

``--by-size`` measures instead, at each size, the configurations ``GEMM_SWEEP`` lists for it
(the sweep behind ``GEMM_BY_SIZE``), and every tile of ``TRANSPOSE_SWEEP`` beside the
device-to-device copy at ``--transpose-sizes`` (the sweep behind ``TRANSPOSE_BY_SIZE``);
``--precompile N`` first compiles every kernel in N processes (CuPy's and ptxlab's compile
caches on disk then serve the measuring process).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .timing import GEMM_WARMUP_MS, ROUND_ORDERS

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
    spread = (f" spread {rec['spread']:.1%}{' NOISY' if rec.get('noisy') else ''}"
              f" x{rec.get('batch', 1)}" if rec.get("spread") is not None else "")
    if "no CUDA graph" in rec.get("timing", ""):
        spread += f" ({rec['timing']})"
    return (f"{rec.get('kernel', '?'):8} {rec.get('config', ''):<38} "
            f"[{rec.get('variant', '')}] {rec['m']:>5}: {rec['tflops']:6.1f} TFLOP/s{rounds}"
            f"{spread}{err}{clock}")


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


def _compile_one(item: tuple[str, str]) -> str:
    from . import runs
    runs.compile_kernel(*item)
    return item[1]


def precompile(sources: list[tuple[str, str]], workers: int) -> float:
    """Compile ``(source, kernel name)`` pairs in ``workers`` fresh processes; seconds taken."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile_one, sorted(set(sources))))
    return time.perf_counter() - t0


def _transpose_lines(recs: list[dict]) -> list[str]:
    out = []
    for r in recs:
        what = r.get("config", r.get("kernel"))
        size = r.get("rows") or int((r.get("bytes", 0) // 2) ** 0.5)
        if "error" in r:
            out.append(f"transpose {what} {size}: FAILED {r['error'][:160]}")
            continue
        ok = f" ok={r['correct']}" if "correct" in r else ""
        out.append(f"transpose {what:<32} {size:>6}^2: {r['tbps']:.3f} TB/s min "
                   f"{r['min_ms'] * 1e3:.1f} us median {r['median_ms'] * 1e3:.1f} us spread "
                   f"{r['spread']:.1%} x{r.get('batch', 1)} sets {r.get('sets', '-')}{ok}"
                   + (f" ({r['timing']})" if "no CUDA graph" in r.get("timing", "") else ""))
    return out


def fastest_by_size(out: dict) -> dict[int, dict[bool, dict]]:
    """Per size and B layout (``b_col``), the fastest of our f16-output GEMM records of a sweep
    (``tune.json``'s ``gemm``, merged over rounds) that is correct and not noisy: what
    ``GEMM_BY_SIZE`` is read from."""
    best: dict[int, dict[bool, dict]] = {}
    for r in out.get("gemm", []):
        if not r.get("correct") or r.get("noisy") or r["params"].get("out_f32"):
            continue
        slot = best.setdefault(r["m"], {})
        b_col = bool(r["params"]["b_col"])
        if r["tflops"] > slot.get(b_col, {}).get("tflops", 0):
            slot[b_col] = r
    return best


def fastest_transpose_by_size(out: dict) -> dict[int, dict]:
    """Per size, the fastest correct, not noisy transpose record of a ``--by-size`` sweep: what
    ``TRANSPOSE_BY_SIZE`` is read from."""
    best: dict[int, dict] = {}
    for r in out.get("transpose", []):
        if r.get("kernel") != "transpose" or not r.get("correct") or r.get("noisy"):
            continue
        if r["tbps"] > best.get(r["rows"], {}).get("tbps", 0):
            best[r["rows"]] = r
    return best


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m ptxlab.bench.tune``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--order", choices=ROUND_ORDERS, default="balanced",
                   help="order of the jobs in each round (runs.in_rounds)")
    p.add_argument("--warmup-ms", type=float, default=GEMM_WARMUP_MS,
                   help="milliseconds each GEMM runs before it is timed")
    p.add_argument("--ncu-size", type=int, default=8192)
    p.add_argument("--skip", nargs="*", default=[], choices=STEPS)
    p.add_argument("--only", nargs="*", default=None,
                   help="labels of our configurations to measure (default: all candidates)")
    p.add_argument("--peer-only", nargs="*", default=None,
                   help="labels of CUTLASS configurations to measure (default: the sweep)")
    p.add_argument("--by-size", action="store_true",
                   help="measure each size's GEMM_SWEEP and the TRANSPOSE_SWEEP tiles")
    p.add_argument("--transpose-sizes", type=int, nargs="*", default=[2048, 4096, 8192, 16384])
    p.add_argument("--precompile", type=int, default=0, metavar="N",
                   help="compile every kernel first in N processes")
    p.add_argument("--head", type=Path, default=None,
                   help="another version of gemm.cu (e.g. the last committed one), measured in "
                        "the same rounds with the first candidate's tile")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the sweep (see the module's docstring), saving ``tune.json`` after every step so
    that a run cut short keeps what it measured."""
    args = _parser().parse_args(argv)
    from . import runs

    out: dict = {"command": shlex.join(["python", "-m", "ptxlab.bench.tune",
                                        *(sys.argv[1:] if argv is None else argv)]),
                 "device": runs.device_info(), "sizes": args.sizes, "rounds": args.rounds,
                 "order": args.order, "warmup_ms": args.warmup_ms,
                 "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    print(out["device"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (args.out / "tune.json").write_text(json.dumps(out, indent=1, default=str))

    peer_build = _start_peer_build(args)
    lines = []
    if args.precompile:
        _precompile_all(args, out)
    if args.by_size and args.transpose_sizes:
        lines += _transpose_sweep(args, out)
        save()
    if "peak" not in args.skip:
        lines += _ceilings(out)
        print("\n".join(lines), flush=True)
        save()
    jobs = _gemm_jobs(args)
    if peer_build is not None:
        kernels, out["peer"] = peer_build.result()
        jobs += _peer_jobs(args, kernels)
    lines += _measure_rounds(args, jobs, out)
    save()
    if "ncu" not in args.skip:
        lines += _ncu_lines(args, out)
        save()
    print("\n".join(["==== summary ===="] + lines))
    return 0


def _ours_at(args: argparse.Namespace, n: int) -> list:
    """Our configurations to measure at size ``n``: the size's sweep (``--by-size``) or every
    candidate, narrowed to ``--only``."""
    from .cases import candidate_configs
    from .kernels import GEMM_SWEEP

    configs = GEMM_SWEEP.get(n, ()) if args.by_size else candidate_configs()
    return [c for c in configs if not args.only or c.label in args.only]


def _start_peer_build(args: argparse.Namespace):
    """CUTLASS's kernels, built on the CPUs in the background while the ceilings run on the
    GPU (a future of ``(kernels, info)``), or None when ``peer`` is skipped."""
    from . import cutlass_peer, runs

    peer_configs = [c for c in cutlass_peer.PEER_SWEEP
                    if not args.peer_only or c.label in args.peer_only]
    pool = ThreadPoolExecutor(max_workers=1)
    return (pool.submit(runs.peer_kernels, peer_configs, lambda s: print(s, flush=True))
            if "peer" not in args.skip else None)


def _precompile_all(args: argparse.Namespace, out: dict) -> None:
    """Compile every kernel the sweep will run, in ``--precompile`` processes."""
    from .kernels import TRANSPOSE_SWEEP

    todo = [(c.source(), c.kernel_name) for n in args.sizes for c in _ours_at(args, n)]
    if args.by_size:
        todo += [(t.source(), t.kernel_name) for t in TRANSPOSE_SWEEP]
    out["precompile_s"] = precompile(todo, args.precompile)
    print(f"compiled {len(set(todo))} kernels in {out['precompile_s']:.0f} s", flush=True)


def _transpose_sweep(args: argparse.Namespace, out: dict) -> list[str]:
    """The copy and every ``TRANSPOSE_SWEEP`` tile at each ``--transpose-sizes``; their lines."""
    from . import runs
    from .kernels import TRANSPOSE_SWEEP

    out["transpose"] = []
    lines = []
    for n in args.transpose_sizes:
        recs = [runs.record_of("copy", n, lambda n=n: runs.copy_run(n * n * 2))]
        recs += [runs.record_of(t.label, n, lambda t=t, n=n: runs.transpose_run(t, n, n))
                 for t in TRANSPOSE_SWEEP]
        out["transpose"] += recs
        lines += _transpose_lines(recs)
        print("\n".join(_transpose_lines(recs)), flush=True)
    return lines


def _ceilings(out: dict) -> list[str]:
    """The two mma.sync ceilings (one operand value per lane, changing operands); their lines."""
    from . import runs

    out["mma_peak"] = runs.mma_peak_run()
    out["mma_peak_vary"] = runs.mma_peak_run(chains_options=(8, 12), threads_options=(128,),
                                             blocks_per_sm_options=(4, 8), vary=True)
    return [_peak_line("mma.sync ceiling", out["mma_peak"]),
            _peak_line("mma.sync ceiling, changing random operands", out["mma_peak_vary"])]


def _gemm_jobs(args: argparse.Namespace) -> list[tuple]:
    """``(name, size, job)`` for cuBLAS and ours at every size, then ``--head``'s kernel."""
    from . import runs
    from .cases import candidate_configs

    jobs, warm = [], args.warmup_ms
    for n in args.sizes:
        if "cublas" not in args.skip:
            jobs.append(("cublas", n, lambda n=n: runs.cublas_run(n, n, n, warmup_ms=warm)))
        if "ours" not in args.skip:
            for cfg in _ours_at(args, n):
                jobs.append((cfg.label, n,
                             lambda cfg=cfg, n=n: runs.gemm_run(cfg, n, n, n, warmup_ms=warm)))
    if args.head is not None:
        head = _head_config(args.head.read_text())(**candidate_configs()[0].as_dict())
        for n in args.sizes:
            jobs.append((head.label, n,
                         lambda n=n: runs.gemm_run(head, n, n, n, warmup_ms=warm)))
    return jobs


def _peer_jobs(args: argparse.Namespace, kernels: list) -> list[tuple]:
    """``(name, size, job)`` for every CUTLASS kernel built, at every size."""
    from . import runs

    jobs, warm = [], args.warmup_ms
    for n in args.sizes:
        for kern in kernels:
            jobs.append((kern.cfg.label, n,
                         lambda kern=kern, n=n: runs.peer_run(kern, n, n, n, warmup_ms=warm)))
    return jobs


def _measure_rounds(args: argparse.Namespace, jobs: list[tuple], out: dict) -> list[str]:
    """Every job in ``--rounds`` interleaved rounds; the records and their medians per kernel
    go in ``out``, their lines (fastest first per size and kernel, then failures) come back."""
    from . import runs

    records = runs.in_rounds(jobs, args.rounds, log=lambda r: print(_line(r), flush=True),
                             order=args.order)
    out["records"] = records
    merged = runs.merge_rounds(records)
    out["gemm"] = [r for r in merged if r.get("kernel") == "gemm"]
    out["cublas"] = [r for r in merged if r.get("kernel") == "cublas"]
    out["cutlass"] = [r for r in merged if r.get("kernel") == "cutlass"]
    lines = [_line(r) for r in sorted(merged, key=lambda r: (r["m"], r.get("kernel", ""),
                                                              -r["tflops"]))]
    return lines + [_line(r) for r in records if "error" in r]


def _ncu_picks(args: argparse.Namespace, out: dict) -> list:
    """The configurations to profile: the fastest of ours, the first candidate and the fastest
    CUTLASS configuration at ``--ncu-size`` (B row-major, f16 out)."""
    from . import cutlass_peer, runs
    from .cases import candidate_configs
    from .kernels import GemmConfig

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
    return picks


def _ncu_lines(args: argparse.Namespace, out: dict) -> list[str]:
    """Profile the picks with Nsight Compute (into ``out["ncu"]``); a line per profile."""
    from . import gemm_profile

    out["ncu"] = [gemm_profile.measure(cfg, args.ncu_size) for cfg in _ncu_picks(args, out)]
    return [_ncu_line(prof) for prof in out["ncu"]]


def _ncu_line(prof: dict) -> str:
    """One profile: rate under ncu, clock, tensor-pipe use, instruction mix, registers and the
    top stall reasons."""
    if not prof.get("measured"):
        return f"ncu: not measured: {prof.get('reason', '')[:300]}"
    c = prof["counters"]
    return (
        f"ncu {prof['kernel']} {prof['config']}: {prof.get('tflops_under_ncu', 0):.0f} "
        f"TFLOP/s at {c.get('sm__cycles_elapsed.avg.per_second', 0) / 1e9:.2f} GHz, "
        "tensor "
        f"{c.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 0):.1f}%, "
        f"inst/HMMA {prof.get('instructions_per_hmma', 0):.2f}, "
        f"ldsm/HMMA {prof.get('ldmatrix_per_hmma', 0):.3f}, "
        f"regs {c.get('launch__registers_per_thread', 0):.0f}, stalls "
        + ", ".join(f"{k} {v:.1f}" for k, v in list(prof["stalls_pct"].items())[:6]))


if __name__ == "__main__":
    sys.exit(main())
