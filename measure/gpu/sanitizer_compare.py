"""What the GPU comparisons of the CPU model's sanitizer checks share
(``gpu_sanitizer_check.py``, ``gpu_synccheck_check.py``): the kernel fixtures on the path,
compute-sanitizer watching a child that launches one kernel, the head of the result and of the
report, and the command line (``--out``, ``--render``, the child's ``--one``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
for _extra in (ROOT, ROOT / "tests" / "fixtures" / "sanitizer"):
    if str(_extra) not in sys.path:
        sys.path.insert(0, str(_extra))


def compute_sanitizer(tool: list[str], script: str, child: list[str],
                      timeout: float) -> tuple[str, int] | None:
    """compute-sanitizer with ``tool`` options over ``script --one <child>``: its output and
    return code, or None when it is not on PATH (subprocess.TimeoutExpired past ``timeout``)."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return None
    r = subprocess.run([exe, *tool, sys.executable, script, "--one", *child],
                       capture_output=True, text=True, timeout=timeout)
    return r.stdout + r.stderr, r.returncode


def stamped(script: str, **body: object) -> dict:
    """A result: when, on which device and CuPy, ``body``, and the command that made it."""
    from ptxlab.run import gpu

    st = gpu.status()
    return {"date": _dt.datetime.now().isoformat(timespec="seconds"), "device": st.device_label,
            "cupy": st.cupy_version, **body,
            "command": f"python3 measure/gpu/{script} " + " ".join(sys.argv[1:])}


def report_head(title: str, result: dict) -> list[str]:
    """The report's title and its line of date, device, command and verdict."""
    return [f"# {title}", "",
            f"{result['date']}, {result['device']}, CuPy {result['cupy']}. Command: "
            f"`{result['command']}`. **{'PASS' if result['ok'] else 'FAIL'}**.", ""]


def main(argv: list[str] | None, *, doc: str, json_name: str, report_name: str,
         one: Callable[[list[str]], object], run: Callable[[argparse.Namespace], dict],
         verdict: Callable[[dict], bool], write_report: Callable[[dict, Path], Path],
         options: Callable[[argparse.ArgumentParser], None] = lambda parser: None) -> int:
    """``--one ARGS`` (the child compute-sanitizer watches) launches one kernel; ``--render``
    writes the report again from ``--out/<json_name>``; otherwise ``run`` on the GPU. Exit 0
    when the verdict holds, 1 when not, 2 without a GPU."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:
        one(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    options(parser)
    parser.add_argument("--render", action="store_true",
                        help=f"only write {report_name} again from --out/{json_name}")
    args = parser.parse_args(argv)
    if args.render:
        result = json.loads((args.out / json_name).read_text())
        result["ok"] = verdict(result)
        print(write_report(result, args.out).read_text())
        return 0 if result["ok"] else 1
    from ptxlab.run import gpu
    if not gpu.status().available:
        print(f"no usable GPU: {gpu.status().message}", file=sys.stderr)
        return 2
    result = run(args)
    print(write_report(result, args.out).read_text())
    return 0 if result["ok"] else 1
