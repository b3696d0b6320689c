#!/usr/bin/env python3
"""Nsight Compute counters of chosen GEMM configurations side by side, at one size.

Each configuration is profiled for one launch (``ptxlab.bench.gemm_profile.measure``): the SM
clock, how busy the tensor pipe is, instructions per mma.sync, shared memory, L2 and DRAM
traffic and the warps' stall reasons. It answers "what does this kernel do differently from that
one" where the benchmark only says that one is faster.

    python3 measure/gpu/gpu_gemm_counters.py --size 4096 --out DIR \\
        --ours split_copies=1,group_m=16,b_col=1 --peer tb_k=64,stages=3,b_col=1

``--ours`` takes ``GemmConfig`` fields, ``--peer`` CUTLASS's ``PeerConfig`` fields, as
comma-separated ``key=value`` (integers). Writes ``DIR/COUNTERS.md`` and ``DIR/counters.json``.
Exit status 0 when every configuration was profiled, 1 otherwise, 2 without ncu.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_fields(cls, spec: str):
    """``cls`` built from ``"key=value,key=value"`` (integer values, booleans as 0/1), read as
    ``profile_target`` reads its ``KEY=VALUE`` arguments."""
    from ptxlab.bench.profile_target import config_params

    return cls(**config_params(cls, list(filter(None, spec.split(",")))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ours", action="append", default=[], metavar="FIELDS")
    p.add_argument("--peer", action="append", default=[], metavar="FIELDS")
    args = p.parse_args(argv)
    from ptxlab.bench import gemm_profile
    from ptxlab.bench.cutlass_peer import PeerConfig
    from ptxlab.bench.kernels import GemmConfig

    configs = ([parse_fields(GemmConfig, s) for s in args.ours]
               + [parse_fields(PeerConfig, s) for s in args.peer])
    if not configs:
        p.error("name at least one configuration (--ours or --peer)")
    if shutil.which("ncu") is None:
        print("ncu (Nsight Compute) is not on PATH", file=sys.stderr)
        return 2
    profiles = []
    for cfg in configs:
        prof = gemm_profile.measure(cfg, args.size)
        profiles.append(prof)
        print(f"{cfg.label} ({cfg.variant}): "
              + (f"{prof.get('tflops_under_ncu', 0):.0f} TFLOP/s under ncu" if prof["measured"]
                 else prof["reason"][:300]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    (args.out / "counters.json").write_text(json.dumps({"date": date, "size": args.size,
                                                        "profiles": profiles}, indent=1))
    lines = [f"# GEMM counters at {args.size}^3 (one launch each under ncu)", "",
             f"- date (UTC): {date}", "- command: `python3 measure/gpu/gpu_gemm_counters.py "
             + " ".join(sys.argv[1:] if argv is None else argv) + "`", ""]
    lines += gemm_profile.summary_lines(profiles)
    (args.out / "COUNTERS.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(p["measured"] for p in profiles) else 1


if __name__ == "__main__":
    sys.exit(main())
