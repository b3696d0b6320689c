"""Whole programs as printed: each test program on the CPU model and on the GPU, side by side.

    python measure/benchmarks/bench_programs.py [--out reports/programs] [--only NAME ...]

Runs every program of ``tests/programs/manifest.json`` with ``ptxlab run`` on each backend this
machine has (the CPU model always, the GPU when there is one; a program marked ``"gpu": false``,
the endless loop, only on the model), and the same source as a ``%%cuda`` cell where IPython is
installed. It records what each printed (stdout, exit status, the lab's stderr lines) in
``outputs-<backend>.json`` (the GPU's is what CI compares the model's against) and the build and
run times in ``SPEED.md``, with the machine and date.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ptxlab.run.programs import runner, toolchain  # noqa: E402

PROGRAMS = ROOT / "tests" / "programs"
#: The endless loop is stopped after this long on the model (the test uses the same figure).
HANG_LIMIT_S = 3.0


def case_name(entry: dict) -> str:
    """A manifest entry's key in the record: the file, and its arguments when it has some."""
    args = entry.get("args") or []
    return entry["file"] + (" -- " + " ".join(args) if args else "")


def run_once(path: Path, backend: str, args: list[str]) -> dict:
    """One ``ptxlab run``: what it printed and how long it took."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        res = runner.run_program(path, backend, args, stdout=out, stderr=err,
                                 kernel_time_limit_s=HANG_LIMIT_S if "hang" in path.name
                                 else runner.DEFAULT_KERNEL_TIME_LIMIT_S)
        status, build_s, run_s = res.exit_status, res.build_s, res.run_s
        where = res.backend
    except toolchain.ProgramCompileError as exc:
        err.write(f"[ptxlab] {exc}\n")
        status, build_s, run_s, where = "compile_error", time.perf_counter() - t0, 0.0, backend
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "exit_status": status,
            "backend": where, "build_s": round(build_s, 3), "run_s": round(run_s, 3)}


def run_cell(path: Path, backend: str, args: list[str]) -> dict | None:
    """The same source as a ``%%cuda`` cell in an IPython shell (``None`` without IPython)."""
    try:
        from IPython.core.interactiveshell import InteractiveShell
    except ImportError:
        return None
    shell = InteractiveShell.instance()
    if "ptxlab" not in shell.extension_manager.loaded:
        shell.run_line_magic("load_ext", "ptxlab")
    from ptxlab.run.programs import cell_magic

    line = f"--{backend} --name={path.name}" + (" -- " + " ".join(args) if args else "")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        shell.run_cell_magic("cuda", line, path.read_text())
    last = cell_magic.last_run
    return {"stdout": out.getvalue(), "exit_status": last.exit_status if last else None}


def machine() -> str:
    from ptxlab.run import gpu

    st = gpu.status()
    gpu_line = st.device_label if st.available else "no GPU"
    try:
        tc = toolchain.find_toolchain().describe()
    except toolchain.ToolchainMissing as exc:
        tc = str(exc)
    return f"{platform.node()}, {gpu_line}, {tc}, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "reports" / "programs"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--dir", default=None, help="run every .cu of this folder instead (no "
                                                "arguments, both backends)")
    ns = ap.parse_args(argv)
    from ptxlab.run import gpu

    backends = ["cpu"] + (["gpu"] if gpu.status().available else [])
    folder = Path(ns.dir).resolve() if ns.dir else PROGRAMS
    manifest = ([{"file": p.name} for p in sorted(folder.glob("*.cu"))] if ns.dir
                else json.loads((PROGRAMS / "manifest.json").read_text()))
    results: dict[str, dict] = {b: {} for b in backends}
    cells: dict[str, dict] = {b: {} for b in backends}
    for entry in manifest:
        name = case_name(entry)
        if ns.only and entry["file"] not in ns.only:
            continue
        for backend in backends:
            if backend == "gpu" and not entry.get("gpu", True):
                continue
            r = run_once(folder / entry["file"], backend, list(entry.get("args", [])))
            results[backend][name] = r
            print(f"{backend}  {name:36s} status {r['exit_status']!s:>13}  build "
                  f"{r['build_s']:6.2f} s  run {r['run_s']:6.2f} s", flush=True)
            if entry.get("expect") != "compile_error" and entry.get("gpu", True):
                c = run_cell(folder / entry["file"], backend, list(entry.get("args", [])))
                if c is not None:
                    c["same_as_run"] = c["stdout"] == r["stdout"] and \
                        c["exit_status"] == r["exit_status"]
                    cells[backend][name] = c
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for backend in backends:
        doc = {"machine": machine(), "date": stamp, "programs": results[backend],
               "cells": cells[backend]}
        (out / f"outputs-{backend}.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_speed(out, results, cells, stamp)
    return 0


def write_speed(out: Path, results: dict, cells: dict, stamp: str) -> None:
    names = sorted({n for r in results.values() for n in r})
    has_gpu = "gpu" in results
    lines = [f"# Whole programs: the CPU model beside the GPU ({stamp})", "",
             f"Machine: {machine()}.", "",
             "Build = nvcc (for the model: `-cudart none`, the lab's runtime, PTX kept); run = "
             "the program from start to exit. Same programs, same run, one machine.", ""]
    head = "| program | model build s | model run s |"
    rule = "| --- | ---: | ---: |"
    if has_gpu:
        head += " GPU build s | GPU run s | same stdout and status |"
        rule += " ---: | ---: | --- |"
    lines += [head, rule]
    for n in names:
        c = results["cpu"].get(n, {})
        row = f"| {n} | {c.get('build_s', '')} | {c.get('run_s', '')} |"
        if has_gpu:
            g = results["gpu"].get(n)
            if g:
                same = g["stdout"] == c.get("stdout") and g["exit_status"] == c.get("exit_status")
                row += f" {g['build_s']} | {g['run_s']} | {'yes' if same else 'NO'} |"
            else:
                row += " - | - | (model only) |"
        lines.append(row)
    for backend, per in cells.items():
        if per:
            same = sum(1 for c in per.values() if c["same_as_run"])
            lines += ["", f"`%%cuda` cells on the {backend}: {same} of {len(per)} printed what "
                          "`ptxlab run` printed, with the same exit status."]
    (out / f"SPEED-{'gpu' if has_gpu else 'cpu'}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
