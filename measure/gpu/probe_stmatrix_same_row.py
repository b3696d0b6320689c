#!/usr/bin/env python3
"""What a GPU stores when two lanes of ``stmatrix`` give the same row address.

The PTX ISA does not say; the CPU model refuses such a store (``UndefinedResult``). This probe
records what one GPU does, for the course to quote as an observation and never as a rule: an
``stmatrix.x1`` in which lane ``b`` gives the address of row ``a``'s slot (``a < b``, every
other lane its own row), the registers tagged with their row, run ``--repeats`` times for each
pair. It prints, for each pair, whose row landed in the shared slot.

    python3 measure/gpu/probe_stmatrix_same_row.py --out reports/hardware   # on the GPU machine

Writes ``stmatrix_same_row.json``; exit status 0 when it ran (whatever it saw), 2 without a
GPU or CuPy.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

KERNEL = r'''
extern "C" __global__ void probe(const unsigned* addr_rows, unsigned* out) {
    __shared__ __align__(16) unsigned short rows[8 * 8];
    const unsigned lane = threadIdx.x;
    for (unsigned i = lane; i < 64; i += 32) rows[i] = 0xFFFF;
    __syncwarp();
    // lane t holds row t / 4, columns 2(t % 4) and 2(t % 4) + 1: tag = 0x100 * row + column
    const unsigned r = lane / 4, c = 2 * (lane % 4);
    const unsigned value = (0x100u * r + c) | ((0x100u * r + c + 1) << 16);
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(rows));
    const unsigned addr = base + 16 * addr_rows[lane % 8];
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};"
                 :: "r"(addr), "r"(value) : "memory");
    __syncwarp();
    for (unsigned i = lane; i < 64; i += 32) out[i] = rows[i];
}
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="folder for stmatrix_same_row.json")
    ap.add_argument("--repeats", type=int, default=100)
    args = ap.parse_args()
    try:
        import cupy as cp
        device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception as exc:  # noqa: BLE001 - no CuPy or no GPU
        print(f"needs CuPy and a GPU: {exc}")
        return 2
    kernel = cp.RawKernel(KERNEL, "probe", options=("-arch=sm_90",))
    results = []
    for a, b in [(0, 1), (0, 7), (3, 4), (2, 6), (5, 6)]:
        rows = np.arange(8, dtype=np.uint32)
        rows[b] = a                      # lane b gives row a's address; row b's slot stays empty
        seen: dict[str, int] = {}
        for _ in range(args.repeats):
            out = cp.zeros(64, dtype=cp.uint32)
            kernel((1,), (32,), (cp.asarray(rows), out))
            slot = cp.asnumpy(out).reshape(8, 8)[a]
            owners = sorted({int(v) >> 8 for v in slot})
            label = f"row {owners[0]}" if len(owners) == 1 else f"mixed rows {owners}"
            seen[label] = seen.get(label, 0) + 1
        lower = f"row {a}"
        results.append({"lanes": [a, b], "slot_of_row": a, "seen": seen,
                        "always_lower_lane": seen == {lower: args.repeats}})
        print(f"lanes {a} and {b} both address row {a}'s slot: {seen} "
              f"(row {a} is lane {a}'s, row {b} lane {b}'s)")
    report = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "device": device, "repeats": args.repeats, "results": results,
              "verdict": ("the lower lane's row was stored every time"
                          if all(r["always_lower_lane"] for r in results)
                          else "not always the lower lane's row")}
    print(report["verdict"])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stmatrix_same_row.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
