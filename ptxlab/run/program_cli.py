"""``ptxlab run FILE.cu [--cpu | --gpu] [-- ARGS]``: a whole CUDA program, as printed."""
from __future__ import annotations

import argparse
import sys

from .programs import runner, toolchain


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the CUDA program (.cu) to build and run")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cpu", action="store_true",
                       help="run every launch on the CPU model (the default without a GPU)")
    where.add_argument("--gpu", action="store_true", help="run on the GPU (the default with one)")
    p.add_argument("--kernel-time-limit", type=float, default=runner.DEFAULT_KERNEL_TIME_LIMIT_S,
                   metavar="S", help="on the CPU model, stop a launch that runs longer than S "
                                     "seconds as an endless loop (default %(default)g)")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="after --: the program's own arguments (argv[1:])")


def run(args: argparse.Namespace) -> int:
    backend = "cpu" if args.cpu else "gpu" if args.gpu else "auto"
    argv = list(args.args)
    if argv and argv[0] == "--":
        argv = argv[1:]
    try:
        result = runner.run_program(args.file, backend, argv,
                                    kernel_time_limit_s=args.kernel_time_limit)
    except (toolchain.ToolchainMissing, toolchain.ProgramCompileError) as exc:
        print(f"[ptxlab] {exc}", file=sys.stderr)
        return 2 if isinstance(exc, toolchain.ToolchainMissing) else 1
    except (FileNotFoundError, IsADirectoryError) as exc:
        print(f"[ptxlab] cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    status = result.exit_status
    return 128 - status if status < 0 else status
