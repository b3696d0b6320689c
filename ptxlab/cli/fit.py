"""``ptxlab fit REG SMEM``: will this register<->shared copy lower to ldmatrix/stmatrix?"""
from __future__ import annotations

import argparse
import json
import sys

from ..model.cute_layout import LayoutSyntaxError
from ..model.layout_fit import DTYPE_BITS, fit_copy

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reg", help="register side, a (thread, value) layout in CuTe's shape:stride "
                                    "notation, e.g. '((4,8),(2,2)):((16,1),(8,64))'")
    parser.add_argument("smem", help="shared side over the same tile, offsets in elements, "
                                     "e.g. '(8,16):(16,1)' (row-major 8x16)")
    parser.add_argument("--dtype", default="f16", choices=sorted(DTYPE_BITS),
                        help="element type (default f16)")
    parser.add_argument("--store", action="store_true",
                        help="registers -> shared (stmatrix); default shared -> registers (ldmatrix)")
    parser.add_argument("--target", default=None, help="leave out forms this target lacks, e.g. sm_90")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the copy fits, 1 when the rule declines, 2 for a malformed layout."""
    try:
        fit = fit_copy(args.reg, args.smem, dtype=args.dtype,
                       direction="store" if args.store else "load", target=args.target)
    except (LayoutSyntaxError, ValueError) as exc:
        print(f"ptxlab fit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(fit.as_dict(), indent=1) if args.json else str(fit))
    return 0 if fit.fits else 1
