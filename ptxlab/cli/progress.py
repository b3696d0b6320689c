"""``ptxlab progress [WORKSPACE]``: each notebook's exercises as passed, attempted or not started."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..run import sources
from ..teach.progress_report import text_report
from ..teach.progress_store import progress_file

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workspace", nargs="?", type=Path, default=None,
                        help="the workspace (default: the one this folder is in, else "
                             "workspace/ beside the course)")
    parser.add_argument("--brief", action="store_true", help="one line per notebook")


def run(args: argparse.Namespace) -> int:
    start = args.workspace or Path.cwd()
    path = progress_file(start)
    if path is None and args.workspace is None:
        path = progress_file(sources.PROJECT_ROOT / "workspace")
    if path is None:
        print(f"no workspace at {start} (run 'ptxlab open' or './lab open' first, or name the "
              "workspace)", file=sys.stderr)
        return 2
    print(text_report(path, detail=not args.brief))
    return 0
