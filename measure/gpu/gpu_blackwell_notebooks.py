#!/usr/bin/env python3
"""Notebooks 9 and 10 on a GPU machine: they run top to bottom, every graded cell passes, and
the sm_100a-class kernels fall back to the CPU model with the reason said.

    python3 measure/gpu/gpu_blackwell_notebooks.py [--out reports/course_gpu]

On an sm_90 GPU (H100) the verdict is PASS when both notebooks pass, notebook 9 says that this
GPU lacks the 8-bit forms and that the CPU model runs them, and its kernel cells report the CPU
model as the machine that ran them. Writes ``blackwell_notebooks.md`` and ``.json`` under
``--out`` (with the executed notebooks) and exits 1 on FAIL.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.run import backends, gpu  # noqa: E402
from ptxlab.authoring import course_notebooks as nt  # noqa: E402

NOTEBOOKS = ("09_blackwell_forms", "10_layout_fit")
#: What notebook 9 must print on a GPU older than sm_100 (backends.choose_backend's reason).
FALLBACK_WORDS = ("lacks ldmatrix/stmatrix .m16n16/.m8n16/.m16n8", "using the CPU model")


def _text_outputs(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            elif "data" in o and "text/plain" in o["data"]:
                out.append(o["data"]["text/plain"])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "course_gpu")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    st = gpu.status()
    old_gpu = st.available and st.cc_number < 100
    problems: list[str] = []
    rows = []
    for name in NOTEBOOKS:
        rep = nt.execute(nt.notebook_path(name), timeout=args.timeout)
        import nbformat
        nbformat.write(rep.outputs, str(args.out / f"{name}.executed.ipynb"))
        failed = {k: v for k, v in rep.grade_cells.items() if v != "ok"}
        if not rep.ok:
            problems.append(f"{name} stopped: {rep.error[-600:]}")
        if failed:
            problems.append(f"{name}: graded cells failed: {failed}")
        text = _text_outputs(rep.outputs)
        if name == "09_blackwell_forms" and old_gpu:
            for words in FALLBACK_WORDS:
                if words not in text:
                    problems.append(f"{name}: on {st.device_label} the notebook does not say "
                                    f"{words!r}")
            if "ran on: CPU model" not in text:
                problems.append(f"{name}: the demo kernel did not report the CPU model")
        rows.append({"notebook": name, "ok": rep.ok, "seconds": round(rep.seconds, 1),
                     "backend": rep.backend, "graded_cells": rep.grade_cells})
        print(f"{name}: {'ran' if rep.ok else 'FAILED'} in {rep.seconds:.0f} s "
              f"({rep.backend}); graded cells: {len(rep.grade_cells) - len(failed)} of "
              f"{len(rep.grade_cells)} ok", flush=True)
    verdict = "PASS" if not problems else "FAIL"
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": backends.describe(), "gpu": st.device_label if st.available else None,
              "gpu_older_than_sm100": old_gpu, "verdict": verdict, "problems": problems,
              "notebooks": rows}
    (args.out / "blackwell_notebooks.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# Notebooks 9 and 10 on this machine", "",
             f"- date: {report['date']}", f"- machine: {report['machine']}",
             f"- verdict: **{verdict}**", ""]
    lines += [f"- {r['notebook']}: {'ran' if r['ok'] else 'failed'} in {r['seconds']} s on "
              f"{r['backend']}; graded cells {r['graded_cells']}" for r in rows]
    lines += [""] + [f"- problem: {p}" for p in problems]
    (args.out / "blackwell_notebooks.md").write_text("\n".join(lines) + "\n")
    print(f"verdict: {verdict}" + "".join(f"\n  {p}" for p in problems))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
