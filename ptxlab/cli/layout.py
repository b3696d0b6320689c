"""``ptxlab layout "<PTX instruction>"``: what an ldmatrix/stmatrix/movmatrix form does.

Prints which lanes give row addresses and which lane/register/byte receives (or stores) which
matrix row and column, from the same byte map the emulator and the CPU model use; ``--json``
prints the map itself. A form that does not exist gets the CPU model's message, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from ..model import matrix_forms
from ..teach import layout_table


def _forms_help() -> str:
    lines = ["forms (operands optional; .shared, .shared::cta or generic addressing):"]
    for f in matrix_forms.all_forms():
        lines.append(f"  {f.ptx}")
    lines.append("  mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c> (the course's variants, e.g. "
                 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32): its A, B, C, D fragments")
    blackwell = next(f for f in matrix_forms.all_forms() if f.blackwell)
    lines.append("the .b8, .m16n16, .m8n16 and .m16n8 forms need "
                 f"{layout_table.targets_and_versions(blackwell)} (see docs/blackwell_forms.md)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = __doc__.splitlines()[0].strip("`: ") if __doc__ else None
    parser.epilog = (_forms_help() + "\n\nexamples:\n"
                     '  ptxlab layout "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8"\n'
                     '  ptxlab layout --json "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r1], '
                     '{%r2,%r3,%r4,%r5};"')
    parser.add_argument("instruction", nargs="?",
                        help="the PTX instruction, e.g. ldmatrix.sync.aligned.m8n8.x4.shared.b16")
    parser.add_argument("--json", action="store_true",
                        help='print {"instruction", "address_lane", "map"} as JSON')
    parser.add_argument("--target", help="also check the form against this .target (e.g. sm_90)")
    parser.add_argument("--ptx-version", default="9.0",
                        help="the .version to check --target with (default 9.0)")
    parser.add_argument("--list", action="store_true", help="list every form the model knows")


def run(args: argparse.Namespace) -> int:
    if args.list or not args.instruction:
        print(_forms_help())
        return 0 if args.list else 2
    if args.instruction.lstrip().startswith("mma"):
        return _show(args, lambda: matrix_forms.parse_mma(args.instruction),
                     matrix_forms.mma_record, layout_table.render_mma_text)
    return _show(args, lambda: _parse_checked(args), matrix_forms.layout_record,
                 layout_table.render_text)


def _parse_checked(args: argparse.Namespace) -> matrix_forms.MatrixForm:
    """The ldmatrix/stmatrix/movmatrix form, checked against ``--target`` when one is given."""
    form = matrix_forms.parse_form(args.instruction)
    if args.target:
        matrix_forms.check_target(form, args.target, args.ptx_version)
    return form


def _show(args: argparse.Namespace, parse: Callable[[], Any], record: Callable[[Any], dict],
          render: Callable[[Any], str]) -> int:
    """Print the parsed form's map as JSON (``--json``) or as tables; a form that does not exist
    is the model's message on stderr, exit status 2."""
    try:
        form = parse()
    except matrix_forms.FormError as exc:
        print(f"ptxlab layout: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(record(form)) if args.json else render(form))
    return 0
