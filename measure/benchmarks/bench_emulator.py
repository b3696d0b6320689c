"""Emulator throughput: warps per second for every instruction form, batched over many warps.

Usage: python measure/benchmarks/bench_emulator.py [--warps 100000] [--report reports/emulator/BENCH.md]
Each figure is the median of several timed calls after one warm-up call.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ptxlab.model import emulator, layouts  # noqa: E402


def _time(fn, repeats: int) -> tuple[float, float]:
    """(first call seconds, median of the following calls)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def run(warps: int, repeats: int) -> list[tuple[str, int, float, float]]:
    rng = np.random.default_rng(0)
    smem = rng.integers(0, 256, 48 * 1024, dtype=np.uint8)
    rows = []
    addrs = rng.integers(0, 48 * 1024 // 16, (warps, 32)) * 16
    for num in (1, 2, 4):
        for trans in (False, True):
            name = f"ldmatrix.x{num}{'.trans' if trans else ''}"
            rows.append((name, warps, *_time(lambda: emulator.ldmatrix(smem, addrs, num, trans), repeats)))
    st_warps = max(1, warps // 10)
    per_warp = np.zeros((st_warps, 512 * 16), dtype=np.uint8)
    st_addrs = np.argsort(rng.random((st_warps, 512)), axis=1)[:, :32] * 16
    for num in (1, 4):
        regs = rng.integers(0, 2**32, (st_warps, 32, num), dtype=np.uint64).astype(np.uint32)
        name = f"stmatrix.x{num}"
        rows.append((name, st_warps, *_time(lambda: emulator.stmatrix(per_warp, st_addrs, regs, num), repeats)))
    a = rng.integers(0, 2**32, (warps, 32), dtype=np.uint64).astype(np.uint32)
    rows.append(("movmatrix", warps, *_time(lambda: emulator.movmatrix(a), repeats)))
    mma_warps = max(1, warps // 10)
    for form in layouts.mma_forms():
        fa = rng.integers(0, 2**32, (mma_warps, 32, form.a.regs), dtype=np.uint64).astype(np.uint32)
        fb = rng.integers(0, 2**32, (mma_warps, 32, form.b.regs), dtype=np.uint64).astype(np.uint32)
        fc = rng.integers(0, 2**32, (mma_warps, 32, form.c.regs), dtype=np.uint64).astype(np.uint32)
        if form.atype in ("f16", "bf16"):   # keep the values finite: mask the exponent's top bit
            fa &= np.uint32(0xBFFFBFFF); fb &= np.uint32(0xBFFFBFFF)
        name = f"mma.{form.shape}.{form.atype}->{form.dtype}"
        rows.append((name, mma_warps, *_time(lambda: emulator.mma(
            form.shape, fa, fb, fc, atype=form.atype, btype=form.btype,
            ctype=form.ctype, dtype=form.dtype), repeats)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warps", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--report", type=Path, default=None, help="write a Markdown report here")
    args = ap.parse_args(argv)
    rows = run(args.warps, args.repeats)
    lines = [
        f"# Emulator throughput ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"Python {platform.python_version()}, numpy {np.__version__}. ",
        f"Command: `python measure/benchmarks/bench_emulator.py --warps {args.warps}`",
        "",
        "| instruction | warps per call | first call (s) | median call (s) | warps/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, w, first, med in rows:
        lines.append(f"| {name} | {w} | {first:.3f} | {med:.3f} | {w / med:,.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
