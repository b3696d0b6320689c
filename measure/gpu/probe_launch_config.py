#!/usr/bin/env python3
"""What ``kernel<<<132>>>(...)`` launches: the launch notebook 1's exercise 4 asks about.

A published ``ldmatrix`` example launches its one-warp kernel as ``ldmatrix<<<132>>>(d_value)``
(``<<<1, 32>>>`` with the comma lost). nvcc compiles a one-argument launch configuration; this
probe says what it means, three ways:

1. how nvcc's front end rewrites the launch (``nvcc -cuda``: the call it makes and the
   declaration, with its default arguments, of the function it calls);
2. the launch run on this machine's GPU: a program compiled by nvcc with the literal
   ``<<<132>>>`` records ``gridDim``, ``blockDim``, how many threads ran and how many lanes
   each block's warp has (``__activemask()``);
3. with CuPy present, the device's name, for the report.

    python3 measure/gpu/probe_launch_config.py                    # prints the verdict
    python3 measure/gpu/probe_launch_config.py --out reports/hardware   # also writes launch_config.json

Exit status 0 when the GPU saw what nvcc's rewrite says (132 blocks of 1 thread), 1 when it saw
something else, 2 without nvcc or without a GPU (step 1 still runs where nvcc is).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = r'''
#include <cstdio>
__global__ void probe(unsigned* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        out[0] = gridDim.x;  out[1] = gridDim.y;  out[2] = gridDim.z;
        out[3] = blockDim.x; out[4] = blockDim.y; out[5] = blockDim.z;
        out[6] = __popc(__activemask());
    }
    atomicAdd(&out[7], 1u);
}
int main() {
    unsigned* d;
    unsigned h[8] = {0};
    if (cudaMalloc(&d, sizeof h) != cudaSuccess) { printf("error cudaMalloc\n"); return 3; }
    cudaMemset(d, 0, sizeof h);
    probe<<<132>>>(d);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 3; }
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("gridDim %u %u %u blockDim %u %u %u lanes_in_warp %u threads_ran %u\n",
           h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    return 0;
}
'''

#: What nvcc's rewrite of ``<<<132>>>`` implies: 132 blocks, one thread each.
EXPECTED = {"gridDim": [132, 1, 1], "blockDim": [1, 1, 1], "lanes_in_warp": 1, "threads_ran": 132}


def front_end_rewrite(nvcc: str, work: Path) -> dict:
    """The launch as nvcc's front end rewrites it, and the declaration of what it calls."""
    src = work / "launch.cu"
    src.write_text(PROGRAM)
    out = subprocess.run([nvcc, "-cuda", str(src), "-o", str(work / "launch.cpp.ii")],
                         capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip()[-2000:]}
    text = (work / "launch.cpp.ii").read_text(errors="replace")
    call = re.search(r"\(__cudaPushCallConfiguration\([^;]*?\)\)[^;]*;", text)
    decl = re.search(r"[^\n;]*unsigned __cudaPushCallConfiguration\([^)]*\);", text)
    return {"call": call.group(0) if call else None,
            "declaration": " ".join(decl.group(0).split()) if decl else None}


def run_on_gpu(nvcc: str, work: Path) -> dict:
    """Compile the program with the literal ``<<<132>>>`` and run it."""
    exe = work / "launch"
    build = subprocess.run([nvcc, "-arch=native", str(work / "launch.cu"), "-o", str(exe)],
                           capture_output=True, text=True)
    if build.returncode:
        return {"error": "nvcc: " + build.stderr.strip()[-2000:]}
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    line = ran.stdout.strip()
    m = re.match(r"gridDim (\d+) (\d+) (\d+) blockDim (\d+) (\d+) (\d+) lanes_in_warp (\d+) "
                 r"threads_ran (\d+)", line)
    if not m:
        return {"error": f"the program printed {line!r} (exit {ran.returncode}) {ran.stderr}"}
    v = [int(x) for x in m.groups()]
    return {"gridDim": v[0:3], "blockDim": v[3:6], "lanes_in_warp": v[6], "threads_ran": v[7]}


def device_name() -> str | None:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: the report just has no name
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="folder for launch_config.json")
    args = ap.parse_args()
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                    if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    report: dict = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    "launch": "probe<<<132>>>(d)", "expected": EXPECTED}
    if not nvcc:
        print("no nvcc here: the <<<...>>> syntax needs nvcc to compile")
        return 2
    report["nvcc"] = subprocess.run([nvcc, "--version"], capture_output=True,
                                    text=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        report["front_end"] = front_end_rewrite(nvcc, work)
        print("nvcc's rewrite:", report["front_end"].get("call"))
        print("declaration   :", report["front_end"].get("declaration"))
        report["device"] = device_name()
        report["gpu"] = run_on_gpu(nvcc, work)
    gpu = report["gpu"]
    if "error" in gpu:
        print("GPU run:", gpu["error"])
        verdict, status = "not run on a GPU", 2
    else:
        print(f"GPU ({report['device'] or 'unknown'}): gridDim {gpu['gridDim']}, blockDim "
              f"{gpu['blockDim']}, lanes in each block's warp {gpu['lanes_in_warp']}, "
              f"threads that ran {gpu['threads_ran']}")
        same = all(gpu[k] == v for k, v in EXPECTED.items())
        verdict = ("PASS: <<<132>>> launched 132 blocks of one thread (block size defaults to 1)"
                   if same else "FAIL: the GPU saw another launch than nvcc's rewrite implies")
        status = 0 if same else 1
    report["verdict"] = verdict
    print(verdict)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "launch_config.json").write_text(json.dumps(report, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
