#!/usr/bin/env python3
"""Where a block's shared memory sits in the ``.shared`` window, on the GPU and in the CPU model.

A learner's address mistake (a base multiplied instead of added, a remainder by zero, a row
counted from the wrong place) only gets the same verdict on both machines when the CPU model
puts shared variables at the same ``.shared`` addresses as the hardware, treats the bytes around
them alike, and computes what the hardware computes for the undefined cases of integer division.
Each probe runs in a child process of its own (a fault leaves a CUDA context unusable) on the
GPU, and on the CPU model:

* the ``.shared`` address of static arrays of several sizes, of dynamic shared memory alone,
  and of dynamic shared memory after a static array;
* a load from below the first variable, and from past the end of the block's shared memory;
* ``div``/``rem`` by zero, unsigned and signed.

    python3 measure/gpu/gpu_shared_layout.py --out reports/hardware     # on the GPU machine

Writes ``SHARED_LAYOUT.md`` and ``shared_layout.json``; exit status 0 when the GPU and the model
agree on every probe (the model may refuse a load the GPU serves outside every variable), 1
otherwise, 2 without a GPU.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ADDRESS = r'''
extern "C" __global__ void probe(unsigned* out) {
    STATIC_DECL
    extern __shared__ __align__(16) unsigned char dyn[];
    out[0] = STATIC_ADDR;
    out[1] = DYN_ADDR;
    TOUCH
}'''

LOAD = r'''
extern "C" __global__ void probe(unsigned* out, unsigned where) {
    __shared__ __align__(16) unsigned words[12];
    words[threadIdx.x % 12] = 7u;
    __syncthreads();
    unsigned addr = (unsigned)__cvta_generic_to_shared(words) + where, v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    out[0] = (unsigned)__cvta_generic_to_shared(words);
    out[1] = v;
}'''

DIVIDE = r'''
extern "C" __global__ void probe(unsigned* out, unsigned a, unsigned z) {
    out[0] = a / z;
    out[1] = a % z;
    out[2] = (unsigned)((int)a / (int)z);
    out[3] = (unsigned)((int)a % (int)z);
}'''


def _address_source(static: int, dynamic: bool) -> str:
    decl = f"__shared__ __align__(16) unsigned char st[{static}];" if static else ""
    touch = []
    if static:
        touch.append("st[threadIdx.x % " + str(static) + "] = 1;")
    if dynamic:
        touch.append("dyn[threadIdx.x] = 2;")
    return (ADDRESS.replace("STATIC_DECL", decl)
            .replace("STATIC_ADDR", "(unsigned)__cvta_generic_to_shared(st)" if static else "0u")
            .replace("DYN_ADDR", "(unsigned)__cvta_generic_to_shared(dyn)" if dynamic else "0u")
            .replace("TOUCH", " ".join(touch)))


def probes() -> list[dict]:
    """Every probe: a name, the source, the launch's arguments and dynamic shared memory."""
    out = []
    for static in (16, 48, 1000):
        out.append({"name": f"static {static} B", "what": "address", "source":
                    _address_source(static, False), "args": [], "shared_mem": 0})
    for dyn in (64, 4096):
        out.append({"name": f"dynamic {dyn} B", "what": "address", "source":
                    _address_source(0, True), "args": [], "shared_mem": dyn})
    out.append({"name": "static 48 B + dynamic 64 B", "what": "address", "source":
                _address_source(48, True), "args": [], "shared_mem": 64})
    for where in (-16, -1024, 48, 4096, 1 << 20):
        out.append({"name": f"load at first variable {where:+d} B", "what": "load",
                    "source": LOAD, "args": [("u32", where & 0xFFFFFFFF)], "shared_mem": 0})
    for a in (12345, -12345, -1, -(1 << 31)):
        out.append({"name": f"{a} / 0 and % 0 (u32, s32)", "what": "divide", "source": DIVIDE,
                    "args": [("u32", a & 0xFFFFFFFF), ("u32", 0)], "shared_mem": 0})
    return out


def run_one(index: int, backend: str) -> dict:
    """One probe on one backend, in this process: ``{"outputs": [...]} or {"error": ...}``."""
    from ptxlab.run import backends

    probe = probes()[index]
    args = [np.zeros(8, np.uint32)] + [np.uint32(v) for _, v in probe["args"]]
    try:
        res = backends.launch(probe["source"], "probe", args=args, backend=backend,
                              shared_mem=probe["shared_mem"], isolate=False)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return {"outputs": [int(x) for x in np.asarray(res.outputs[0])[:4]]}


def _in_child(index: int, backend: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--one", str(index), backend],
                          capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except Exception:
        return {"error": f"child exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}


def _shown(result: dict, what: str) -> str:
    if "error" in result:
        return "fault: " + result["error"].split(": ", 1)[-1][:90]
    o = result["outputs"]
    if what == "address":
        return f"static at {o[0]}, dynamic at {o[1]}"
    if what == "load":
        return f"first variable at {o[0]}, loaded 0x{o[1]:08x}"
    return ", ".join(f"0x{v:08x}" for v in o)


def _agreement(what: str, gpu: dict, model: dict) -> str:
    """``same``; ``model stricter`` for a load outside every variable that the GPU serves
    without a fault (the reserved first KiB, the rest of the block's allocation) and the model
    refuses, naming the mistake; ``differ`` otherwise."""
    if "error" in gpu or "error" in model:
        if ("error" in gpu) == ("error" in model):
            return "same"
        return "model stricter" if what == "load" and "error" in model else "differ"
    return "same" if gpu["outputs"] == model["outputs"] else "differ"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "hardware")
    ap.add_argument("--one", nargs=2, metavar=("INDEX", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(int(args.one[0]), args.one[1])))
        return 0
    from ptxlab.run import gpu

    st = gpu.status()
    if not st.available:
        print(f"no GPU: {st.message}")
        return 2
    rows = []
    for i, probe in enumerate(probes()):
        g, m = _in_child(i, "gpu"), _in_child(i, "cpu")
        rows.append({"probe": probe["name"], "what": probe["what"], "gpu": g, "model": m,
                     "agreement": _agreement(probe["what"], g, m)})
        print(f"{probe['name']}: GPU {_shown(g, probe['what'])}; model "
              f"{_shown(m, probe['what'])}", flush=True)
    bad = sum(r["agreement"] == "differ" for r in rows)
    lines = ["# Shared memory's layout and integer division by zero: the GPU and the CPU model",
             "", f"{_dt.datetime.now().isoformat(timespec='seconds')}, {st.device_label}. "
             f"Command: `python3 measure/gpu/gpu_shared_layout.py`. **{'PASS' if not bad else 'FAIL'}**"
             ".", "", "Each probe ran in a child process of its own on each backend. *Model "
             "stricter*: the GPU serves a load outside every variable of the block without a "
             "fault (the reserved first KiB of the window, or the rest of the block's "
             "allocation), the model refuses it and says where the address points: such a load "
             "is never the kernel's data, and the verdict is the model's on every machine.", "",
             "| probe | GPU | CPU model | agreement |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['probe']} | {_shown(r['gpu'], r['what'])} | "
                     f"{_shown(r['model'], r['what'])} | "
                     f"{'**differ**' if r['agreement'] == 'differ' else r['agreement']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "shared_layout.json").write_text(json.dumps(rows, indent=1))
    (args.out / "SHARED_LAYOUT.md").write_text("\n".join(lines) + "\n")
    print(f"{len(rows)} probes, {bad} differ")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
