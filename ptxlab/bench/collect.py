"""What ``ptxlab bench`` measures: the capstone kernels, their peers and their ceilings on a GPU,
collected into the record its report is written from (the command is ``ptxlab.cli.bench``)."""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

from .timing import GEMM_WARMUP_MS, ROUND_ORDERS

DEFAULT_OUT = Path("reports/capstone")
GEMM_SIZES = (1024, 2048, 4096, 8192)
TRANSPOSE_SIZES = (2048, 4096, 8192, 16384)


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
    """Every measurement of the report, in one run (ceilings and peers included).

    Per GEMM size: CUTLASS's sweep once (every configuration), then ``--rounds`` interleaved
    rounds of our three variants (the size's configuration of ``GEMM_BY_SIZE``, B row- and
    column-major, and f32 out), cuBLAS and CUTLASS's fastest configuration per B layout; the
    report keeps each kernel's median over the rounds.
    """
    from concurrent.futures import ThreadPoolExecutor

    from . import runs
    from .kernels import GEMM_BEST

    res = _run_header(args)
    log(f"device: {res['device']['name']}  CuPy {res['device']['cupy']}")
    pool = ThreadPoolExecutor(max_workers=1)   # CUTLASS builds while the ceilings run
    peer = None if args.no_peer else pool.submit(runs.peer_kernels, None, log)
    res.update(_ceilings(log))
    res.update(_transpose_records(args.transpose_sizes, log))
    kernels = []
    if peer is None:
        res["peer"] = {"measured": False, "reason": "--no-peer given"}
    else:
        kernels, res["peer"] = peer.result()
    records, sweep = [], []
    for n in args.gemm_sizes:
        records += _gemm_rounds(n, kernels, sweep, args, log)
    merged = runs.merge_rounds(records)
    res["gemm"] = [r for r in merged if r.get("kernel") == "gemm"]
    res["cublas"] = [r for r in merged if r.get("kernel") == "cublas"]
    res["cutlass"] = [r for r in merged if r.get("kernel") == "cutlass"]
    res["cutlass_sweep"] = sweep
    res["gemm_rounds"] = records
    res["learner"] = _learner_records(args.gemm_sizes, log)
    res["fixed_cost"] = runs.fixed_cost_run(GEMM_BEST, 4096, 4096)
    log(f"fixed cost per block tile (K sweep at 4096 x 4096): "
        f"{res['fixed_cost']['fixed_ms'] * 1e3:.1f} us, "
        f"{res['fixed_cost']['share'][-1]:.1%} of the 4096^3 GEMM")
    res.update(_profiles(args, res["cutlass"]))
    return res


def _run_header(args: argparse.Namespace) -> dict:
    """What the report says about the run itself: command, date, device, settings, and our
    GEMM configuration per size."""
    from . import runs
    from .kernels import gemm_config_for

    argv = sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]
    return {"command": " ".join(["ptxlab", "bench", *argv]),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "device": runs.device_info(), "notes": args.notes, "rounds": args.rounds,
            "order": args.order, "warmup_ms": args.warmup_ms,
            "gemm_configs": {n: {"row": gemm_config_for(n, n, n).label,
                                 "col": gemm_config_for(n, n, n, b_col=True).label}
                             for n in args.gemm_sizes}}


def _ceilings(log=print) -> dict:
    """The mma.sync ceilings: one operand value per lane, and operands that change."""
    from . import runs

    res = {"mma_peak": runs.mma_peak_run(),
           "mma_peak_vary": runs.mma_peak_run(chains_options=(8, 12), threads_options=(128,),
                                              blocks_per_sm_options=(4, 8), vary=True)}
    log(f"mma.sync ceiling: {res['mma_peak']['tflops']:.1f} TFLOP/s; with changing random "
        f"operands {res['mma_peak_vary']['tflops']:.1f}")
    return res


def _transpose_records(sizes, log=print) -> dict:
    """Per size: the device-to-device copy, CuPy's transpose and ours."""
    from . import runs
    from .kernels import transpose_config_for

    res: dict = {"transpose": [], "copy": [], "cupy_transpose": []}
    for n in sizes:
        res["copy"].append(runs.copy_run(n * n * 2))
        res["cupy_transpose"].append(runs.cupy_transpose_run(n, n))
        rec = runs.transpose_run(transpose_config_for(n, n), n, n)
        res["transpose"].append(rec)
        log(f"transpose {n}^2: {rec['tbps']:.3f} TB/s (copy {res['copy'][-1]['tbps']:.3f}, "
            f"cupy {res['cupy_transpose'][-1]['tbps']:.3f}), mismatches {rec['mismatches']}")
    return res


def _gemm_rounds(n: int, kernels: list, sweep: list[dict], args: argparse.Namespace,
                 log=print) -> list[dict]:
    """At size ``n``: CUTLASS's sweep once (its records appended to ``sweep``), then the
    interleaved rounds of cuBLAS, our three variants and CUTLASS's fastest per B layout."""
    from . import runs
    from .kernels import gemm_config_for

    variants = [gemm_config_for(n, n, n), gemm_config_for(n, n, n, b_col=True),
                gemm_config_for(n, n, n, out_f32=True)]
    best = {}
    for kern in kernels:   # CUTLASS's sweep at this size
        rec = runs.record_of(kern.cfg.label, n, lambda k=kern: runs.peer_run(k, n, n, n))
        sweep.append(rec)
        if rec.get("correct") and rec["tflops"] > best.get(rec["variant"], (0, None))[0]:
            best[rec["variant"]] = (rec["tflops"], kern)
    warm = args.warmup_ms
    jobs = [("cublas", n, lambda: runs.cublas_run(n, n, n, warmup_ms=warm))]
    jobs += [(cfg.label, n, lambda cfg=cfg: runs.gemm_run(cfg, n, n, n, warmup_ms=warm))
             for cfg in variants]
    jobs += [(k.cfg.label, n, lambda k=k: runs.peer_run(k, n, n, n, warmup_ms=warm))
             for _, k in best.values()]
    return runs.in_rounds(jobs, args.rounds, log=lambda r: log(_record_line(r)),
                          order=args.order)


def _profiles(args: argparse.Namespace, cutlass: list[dict]) -> dict:
    """Nsight Compute: our GEMM and CUTLASS's fastest at the largest size, and the
    bank-conflict study (only their predictions with ``--no-ncu``)."""
    from . import bank_study, runs
    from .kernels import gemm_config_for

    if args.no_ncu:
        return {"gemm_profile": [{"measured": False, "reason": "--no-ncu given"}],
                "bank_study": {"measured": False, "reason": "--no-ncu given",
                               "rows": [{"predicted": p} for p in bank_study.predictions()]}}
    from . import gemm_profile
    size = max(args.gemm_sizes)
    ours = gemm_config_for(size, size, size)
    profiles = [gemm_profile.measure(ours, size)]
    peer_best = [r for r in runs.best_by(cutlass, "cutlass")
                 if r["m"] == size and r["variant"] == ours.variant]
    if peer_best:
        from .cutlass_peer import PeerConfig
        profiles.append(gemm_profile.measure(PeerConfig(**peer_best[0]["params"]), size))
    return {"gemm_profile": profiles, "bank_study": bank_study.measure()}


def _learner_records(sizes, log=print) -> list[dict]:
    """The course's answer to the capstone's exercise 3 (one warp's k-loop) as a whole GEMM
    (:mod:`.learner_gemm`), once per size: where a learner's GEMM built from that loop lands."""
    from . import learner_gemm, runs

    try:
        gemm = learner_gemm.course_solution()
    except learner_gemm.LearnerGemmError as exc:
        return [{"kernel": "learner", "measured": False, "reason": str(exc)}]
    out = []
    for n in sizes:
        rec = runs.record_of(gemm.label, n,
                             lambda n=n: runs.gemm_run(gemm, n, n, n, kind="learner"))
        log(_record_line(rec))
        out.append(rec)
    return out


def _record_line(r: dict) -> str:
    if "error" in r:
        return f"  {r.get('config')} {r.get('m')}^3: FAILED {r['error'][:200]}"
    err = f", rel. error {r['rel_error_vs_fp32']:.2e}" if "rel_error_vs_fp32" in r else ""
    clock = f", {r['nvml_sm_clock_mhz']:.0f} MHz" if r.get("nvml_sm_clock_mhz") else ""
    return (f"  round {r.get('round', 0)}: {r.get('kernel')} {r.get('config', '')} "
            f"[{r.get('variant')}] {r['m']}^3: {r['tflops']:.1f} TFLOP/s{err}{clock}")
