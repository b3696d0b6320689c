#!/usr/bin/env python3
"""Execute every source notebook of the course top to bottom and write a report.

    python3 tools/course/course_execute_all.py                 # all notebooks -> reports/course/
    python3 tools/course/course_execute_all.py --out DIR 02_ldmatrix 03_ldmatrix_trans

For each notebook: whether it ran without an error, which backend its kernels ran on, how long
it took, and the verdict of every graded cell (with the solutions in, all must pass). Writes
REPORT.md and report.json; exits 1 if any notebook failed. On a GPU machine this is the
"every notebook on the GPU path" run; without one it is the CPU path.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.authoring import course_notebooks as nt  # noqa: E402


def _describe_backend() -> str:
    try:
        from ptxlab.run import backends
        return backends.describe()
    except Exception as exc:  # report, do not fail: the notebooks will say more
        return f"unknown ({type(exc).__name__}: {exc})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="assignments to run (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "course")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    ap.add_argument("--save-executed", action="store_true",
                    help="also write the executed notebooks (with outputs) next to the report")
    args = ap.parse_args(argv)
    names = args.names or nt.assignments()
    args.out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    machine = _describe_backend()
    print(f"backend here: {machine}", flush=True)
    results = []
    for name in names:
        rep = nt.execute(nt.notebook_path(name), timeout=args.timeout)
        graded_ok = all(v == "ok" for v in rep.grade_cells.values())
        status = "passed" if rep.ok and graded_ok else "failed"
        results.append({"notebook": name, "status": status, "seconds": round(rep.seconds, 1),
                        "backend": rep.backend, "graded_cells": rep.grade_cells,
                        "error": rep.error[-2000:]})
        print(f"{name}: {status} in {rep.seconds:.1f} s ({rep.backend})", flush=True)
        if args.save_executed:
            import nbformat
            nbformat.write(rep.outputs, str(args.out / f"{name}.executed.ipynb"))
    summary = {"date": started.isoformat(timespec="seconds"), "machine": machine,
               "python": platform.python_version(), "notebooks": results,
               "passed": sum(r["status"] == "passed" for r in results), "total": len(results)}
    (args.out / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["# Course notebooks executed top to bottom",
             "",
             f"- date (UTC): {summary['date']}",
             f"- backend: {machine}",
             f"- Python {summary['python']}",
             f"- result: {summary['passed']} of {summary['total']} notebooks passed "
             "(every graded cell with the solutions in)",
             "",
             "| notebook | status | seconds | graded cells passed | kernels ran on |",
             "| --- | --- | --- | --- | --- |"]
    for r in results:
        ok = sum(v == "ok" for v in r["graded_cells"].values())
        lines.append(f"| {r['notebook']} | {r['status']} | {r['seconds']} | "
                     f"{ok}/{len(r['graded_cells'])} | {r['backend'] or '-'} |")
    failed = [r for r in results if r["status"] != "passed"]
    if failed:
        lines += ["", "## Failures", ""]
        for r in failed:
            bad = {k: v for k, v in r["graded_cells"].items() if v != "ok"}
            lines.append(f"- **{r['notebook']}**: {r['error'][:600] or bad}")
    (args.out / "REPORT.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'REPORT.md'}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
