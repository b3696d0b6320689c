"""The ``ptxlab`` command: every subcommand a module of this folder, each a thin front on the
layer that does the job (``status`` and ``run`` on ``ptxlab.run``, ``open``, ``progress`` and
``layout`` on ``ptxlab.teach``, ``fit`` on ``ptxlab.model``, ``grade`` on ``ptxlab.grading``,
``bench`` on ``ptxlab.bench``); this module only dispatches."""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, help). Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "status": ("ptxlab.cli.status", "which backend runs kernels here (GPU or the CPU model)"),
    "open": ("ptxlab.cli.open_course", "open the course in JupyterLab: your workspace of student "
                                      "notebooks (--instructor: the course source)"),
    "progress": ("ptxlab.cli.progress", "your exercises: passed, attempted, not started"),
    "layout": ("ptxlab.cli.layout", "what an ldmatrix/stmatrix/movmatrix form does: which "
                                          "lane gives which row address, which lane/register/byte "
                                          "gets which row and column (old m8n8 and sm_100a-class "
                                          ".b8/packed forms)"),
    "run": ("ptxlab.cli.run_program", "build and run a whole CUDA program as printed (host main, "
                                      "launches, printf) on the GPU or on the CPU model"),
    "grade": ("ptxlab.cli.grade", "autograde every collected submission of an assignment"),
    "bench": ("ptxlab.cli.bench", "run the capstone benchmarks on a GPU and write a report"),
}
# The layout-fit rule: does a register<->shared copy lower to ldmatrix/stmatrix?
SUBCOMMANDS["fit"] = ("ptxlab.cli.fit", "will a register<->shared copy (two CuTe layouts) "
                                              "lower to ldmatrix/stmatrix, and how")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ptxlab", description="PTX Matrix Lab")
    sub = parser.add_subparsers(dest="command", required=True)
    loaded = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a part of the project not installed here
            p.set_defaults(_missing=f"'ptxlab {name}' is unavailable: {exc}")
            continue
        module.add_arguments(p)
        loaded[name] = module
    args = parser.parse_args(argv)
    if getattr(args, "_missing", None):
        print(args._missing, file=sys.stderr)
        return 2
    try:
        return int(loaded[args.command].run(args) or 0)
    except BrokenPipeError:  # `ptxlab status | head`: the reader left, which is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
