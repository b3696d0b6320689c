#!/usr/bin/env python3
"""The CPU model's synccheck beside compute-sanitizer's, kernel by kernel.

For every kernel of ``tests/fixtures/sanitizer/barriers.py`` (barriers reached by only part of
the block, and right kernels with barriers):

* ``compute-sanitizer --tool synccheck`` on the GPU (the errors it reports, by kind),
* what the CPU model reports (``ptxlab.run.ptx.synccheck``),
* whether a plain GPU launch finishes (a divergent barrier may hang) and whether its output
  equals the CPU model's for the right kernels.

    python3 measure/gpu/gpu_synccheck_check.py --out reports/hardware     # on the GPU machine

Writes ``SYNCCHECK.md`` and ``synccheck.json``. Exit status 0 when the CPU model reports every
planted kernel and no right one, and synccheck reports no right kernel; 1 otherwise; 2 without
a GPU. Where synccheck and the model disagree on a planted kernel the report says so (the
model follows the CUDA rule that every thread of the block reaches the same barrier; synccheck
may accept what a given GPU happens to tolerate).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import sanitizer_compare as common
import barriers as planted  # noqa: E402  (on the path from sanitizer_compare)

_KINDS = ("Divergent thread(s) in block", "Divergent thread(s) in warp", "Invalid arguments",
          "Barrier error")


def _kernel(name: str) -> tuple[str, int, str]:
    _, src, threads, report = next(b for b in planted.BARRIERS if b[0] == name)
    return src, threads, report


def launch_once(name: str, backend: str, isolate: bool = False) -> np.ndarray:
    from ptxlab.run import backends

    src, threads, _ = _kernel(name)
    res = backends.launch(src, "k", grid=(1,), block=(threads,), args=[np.zeros(128, np.uint32)],
                          backend=backend, isolate=isolate)
    return np.asarray(res.outputs[0])


def cpu_model(name: str) -> str:
    """The start of the CPU model's report, or '' when it runs the kernel without one."""
    from ptxlab.run import cpu
    from ptxlab.run.ptx.synccheck import BarrierDivergence

    src, threads, _ = _kernel(name)
    try:
        cpu.run_kernel(src, "k", (1,), (threads,), [np.zeros(128, np.uint32)])
    except BarrierDivergence as exc:
        return exc.reason.split(":")[0]
    return ""


def synccheck(name: str) -> dict:
    """compute-sanitizer synccheck on one launch of the kernel on the GPU."""
    try:
        ran = common.compute_sanitizer(["--tool", "synccheck"], __file__, [name], timeout=180)
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": "timed out after 180 s (the kernel hangs under synccheck)"}
    if ran is None:
        return {"ran": False, "why": "compute-sanitizer not on PATH"}
    text, returncode = ran
    m = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    if not m:
        return {"ran": False, "why": text[-800:], "returncode": returncode}
    kinds = [k for k in _KINDS if k in text]
    return {"ran": True, "errors": int(m.group(1)), "kinds": kinds, "returncode": returncode}


def gpu_run(name: str) -> dict:
    """A plain launch on the GPU in a child process: finished, and its output."""
    try:
        out = launch_once(name, "gpu", isolate=True)
    except Exception as exc:       # a hang (killed by the isolation's timeout) or a fault
        return {"finished": False, "why": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"finished": True, "output": out.tolist()}


def run(args: argparse.Namespace | None = None) -> dict:
    rows = []
    for name, _src, threads, expected in planted.BARRIERS:
        row = {"kernel": name, "threads": threads, "planted": bool(expected),
               "cpu_model": cpu_model(name), "synccheck": synccheck(name), "gpu": gpu_run(name)}
        if not expected and row["gpu"]["finished"]:
            row["gpu_equals_cpu_model"] = bool(np.array_equal(
                np.array(row["gpu"]["output"], np.uint32), launch_once(name, "cpu")))
        rows.append(row)
        sc = row["synccheck"]
        print(f"{name}: CPU model {row['cpu_model'] or '-'}; synccheck "
              f"{sc.get('errors', 'not run')} errors {sc.get('kinds', '')}; GPU "
              f"{'finished' if row['gpu']['finished'] else 'did not finish'}", flush=True)
    result = common.stamped("gpu_synccheck_check.py", kernels=rows)
    result["ok"] = verdict(result)
    return result


def verdict(result: dict) -> bool:
    """The model reports every planted kernel and no right one; synccheck no right one; the
    right kernels give the model's output on the GPU."""
    rows = result["kernels"]
    model = all(bool(r["cpu_model"]) == r["planted"] for r in rows)
    clean = all(r["synccheck"].get("errors", 1) == 0 for r in rows if not r["planted"])
    same = all(r.get("gpu_equals_cpu_model", False) for r in rows if not r["planted"])
    return bool(model and clean and same)


def write_report(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "synccheck.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = common.report_head("The CPU model's synccheck beside compute-sanitizer's", result)
    lines += ["Each kernel of tests/fixtures/sanitizer/barriers.py: what "
              "`compute-sanitizer --tool synccheck` reports on the GPU, what the CPU model "
              "reports, and whether a plain launch on the GPU finished.", "",
              "| kernel | threads | planted | synccheck | CPU model | GPU launch |",
              "| --- | ---: | --- | --- | --- | --- |"]
    for r in result["kernels"]:
        sc = r["synccheck"]
        scs = (f"{sc['errors']} errors" + (f" ({', '.join(sc['kinds'])})" if sc["kinds"] else "")
               if sc.get("ran") else f"not run: {sc.get('why', '')[:80]}")
        g = r["gpu"]
        gs = "finished" if g["finished"] else f"did not finish ({g['why'][:80]})"
        if "gpu_equals_cpu_model" in r:
            gs += ", output = CPU model" if r["gpu_equals_cpu_model"] else ", output differs"
        lines.append(f"| `{r['kernel']}` | {r['threads']} | {'yes' if r['planted'] else 'no'} | "
                     f"{scs} | {r['cpu_model'] or 'none'} | {gs} |")
    differ = [r["kernel"] for r in result["kernels"]
              if r["planted"] and r["synccheck"].get("errors") == 0]
    if differ:
        lines += ["", "synccheck reported nothing for " + ", ".join(f"`{k}`" for k in differ)
                  + "; the CPU model reports them because CUDA asks every thread of the block "
                  "to reach the same `__syncthreads()` (a GPU lets exited threads release it)."]
    path = out / "SYNCCHECK.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    return common.main(argv, doc=__doc__, json_name="synccheck.json", report_name="SYNCCHECK.md",
                       one=lambda child: launch_once(child[0], "gpu"), run=run, verdict=verdict,
                       write_report=write_report)


if __name__ == "__main__":
    sys.exit(main())
