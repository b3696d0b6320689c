"""``ptxlab run FILE.cu [--cpu | --gpu] [-- ARGS]``: a whole CUDA program, as printed."""
from __future__ import annotations

import argparse
import sys

from ..run.programs import runner, toolchain


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


def _split(rest: list[str], args: argparse.Namespace) -> list[str]:
    """The program's arguments (after ``--``, or after the file); the lab's options may also
    come after the file (``ptxlab run FILE.cu --cpu -- 64``)."""
    if "--" in rest:
        cut = rest.index("--")
        ours, theirs = rest[:cut], rest[cut + 1:]
    else:        # argparse drops a ``--`` right after the file: leading options are ours
        cut = 0
        while cut < len(rest) and rest[cut] in ("--cpu", "--gpu", "--kernel-time-limit"):
            cut += 2 if rest[cut] == "--kernel-time-limit" else 1
        ours, theirs = rest[:cut], rest[cut:]
    late = argparse.ArgumentParser(prog="ptxlab run FILE.cu", add_help=False)
    late.add_argument("--cpu", action="store_true")
    late.add_argument("--gpu", action="store_true")
    late.add_argument("--kernel-time-limit", type=float)
    got, unknown = late.parse_known_args(ours)
    if unknown:
        raise SystemExit(f"ptxlab run: {' '.join(unknown)}: the program's own arguments go "
                         f"after --, e.g. ptxlab run {args.file} -- {' '.join(unknown)}")
    args.cpu, args.gpu = args.cpu or got.cpu, args.gpu or got.gpu
    if args.cpu and args.gpu:
        raise SystemExit("ptxlab run: --cpu or --gpu, not both")
    if got.kernel_time_limit is not None:
        args.kernel_time_limit = got.kernel_time_limit
    return theirs


def run(args: argparse.Namespace) -> int:
    argv = _split(list(args.args), args)
    backend = "cpu" if args.cpu else "gpu" if args.gpu else "auto"
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
