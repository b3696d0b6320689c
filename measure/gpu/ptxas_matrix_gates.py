"""Record which ldmatrix/stmatrix/movmatrix forms ptxas accepts for which .target/.version.

Writes tests/fixtures/ptxas_matrix_gates.json: one row per probe (instruction, target, version)
with ptxas's verdict and error lines, and the ptxas that gave them. tests/model/test_matrix_gates.py
checks the CPU model against this table (and against ptxas itself where it is installed).

    python measure/gpu/ptxas_matrix_gates.py            # needs ptxas (CUDA 13) on PATH
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ptxlab.model import matrix_forms
from ptxlab.run.ptx import ptxas_gates

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "ptxas_matrix_gates.json"

#: Every target a Blackwell-class form may meet, with the versions around its gates.
BLACKWELL_TARGETS = [
    ("sm_90", "8.6"), ("sm_90a", "8.6"), ("sm_100", "8.6"), ("sm_100a", "8.5"),
    ("sm_100a", "8.6"), ("sm_100a", "9.0"), ("sm_100f", "8.7"), ("sm_100f", "8.8"),
    ("sm_101a", "8.6"), ("sm_101a", "9.0"), ("sm_103", "8.8"), ("sm_103a", "8.8"),
    ("sm_103f", "8.8"), ("sm_110", "9.0"), ("sm_110a", "8.8"), ("sm_110a", "9.0"),
    ("sm_110f", "9.0"), ("sm_120", "8.7"), ("sm_120a", "8.6"), ("sm_120a", "8.7"),
    ("sm_120f", "8.8"), ("sm_121", "8.8"), ("sm_121a", "8.8"), ("sm_121f", "8.8"),
]
#: A few targets for every other form (the full sweep is kept for one form of each kind).
FEW_TARGETS = [("sm_90", "8.6"), ("sm_100", "8.6"), ("sm_100a", "8.6"), ("sm_120f", "8.8")]

OLD_FORMS = [
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", [("sm_70", "6.5"), ("sm_75", "6.5"),
                                                 ("sm_75", "6.4"), ("sm_90", "7.8"),
                                                 ("sm_100a", "8.6"), ("sm_120", "8.7")]),
    ("ldmatrix.sync.aligned.m8n8.x1.trans.shared::cta.b16", [("sm_80", "7.0"), ("sm_80", "7.8"),
                                                            ("sm_90", "8.0")]),
    ("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", [("sm_80", "7.8"), ("sm_89", "7.8"),
                                                       ("sm_90", "7.8"), ("sm_90", "7.7"),
                                                       ("sm_100", "8.6"), ("sm_120a", "8.7")]),
    ("movmatrix.sync.aligned.m8n8.trans.b16", [("sm_75", "6.5"), ("sm_75", "7.8"),
                                              ("sm_90", "8.0")]),
]

#: Forms that do not exist (with the register count each would need), on a target that has the
#: new forms: ptxas refuses them whatever the target.
INVALID = [
    ("ldmatrix.sync.aligned.m16n16.x1.shared.b8", 2),
    ("ldmatrix.sync.aligned.m16n16.x2.shared.b8x16.b6x16_p32", 4),
    ("ldmatrix.sync.aligned.m16n16.x4.trans.shared.b8", 8),
    ("ldmatrix.sync.aligned.m8n16.x1.trans.shared.b8x16.b4x16_p64", 1),
    ("ldmatrix.sync.aligned.m8n16.x1.shared.b8", 1),
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b8", 1),
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b8x16.b4x16_p64", 1),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b16", 2),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8x16", 2),
    ("ldmatrix.sync.aligned.m16n8.x1.trans.shared.b8", 1),
    ("stmatrix.sync.aligned.m16n8.x1.shared.b8", 1),
    ("stmatrix.sync.aligned.m16n8.x2.trans.shared.b16", 2),
    ("stmatrix.sync.aligned.m8n8.x1.trans.shared.b8", 1),
    ("stmatrix.sync.aligned.m16n16.x1.trans.shared.b8", 2),
    ("ldmatrix.m16n16.x1.trans.shared.b8", 2),
]


#: Spellings of existing forms: ptxas takes the modifiers in any order and a repeated .sync, but
#: refuses a repeated modifier, two state spaces, two types and a source format before .b8x16.
SPELLINGS = [
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b6x16_p32.b8x16", 2),
    ("ldmatrix.sync.aligned.m8n16.x1.shared.b4x16_p64.b8x16", 1),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.trans.shared.b8", 2),
    ("stmatrix.sync.aligned.m16n8.x1.trans.trans.shared.b8", 1),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.shared::cta.b8", 2),
    ("ldmatrix.sync.aligned.m8n8.x4.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.m8n8.x1.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16.b16", 4),
    ("ldmatrix.sync.aligned.m8n8.m8n8.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.aligned.m8n8.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.m8n8.x4.trans.trans.shared.b16", 4),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.shared.b16", 4),
    ("stmatrix.sync.aligned.m8n8.x4.shared::cta.shared::cta.b16", 4),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8.b8", 2),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8x16.b6x16_p32.b4x16_p64", 2),
    ("ldmatrix.sync.aligned.m8n16.x4.x4.shared.b8x16.b4x16_p64", 4),
    ("movmatrix.sync.aligned.m8n8.trans.trans.b16", 1),
    ("movmatrix.sync.aligned.m8n8.trans.b16.b16", 1),
    ("ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.b4x16_p64.trans", 1),
    # accepted: a modifier after the type, any order, a repeated .sync
    ("ldmatrix.sync.aligned.m8n8.x4.b16.trans", 4),
    ("ldmatrix.sync.aligned.m8n8.x4.b16.shared", 4),
    ("ldmatrix.sync.aligned.x4.m8n8.shared.b16", 4),
    ("ldmatrix.aligned.sync.m8n8.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.sync.m8n8.x4.shared.b16", 4),
    ("ldmatrix.sync.aligned.m8n16.x1.b8x16.shared.b4x16_p64", 1),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8x16.b6x16_p32", 2),
    ("ldmatrix.sync.aligned.m16n16.x2.shared.b8.trans", 4),
    ("stmatrix.sync.aligned.m16n8.x4.b8.trans.shared", 4),
    ("movmatrix.sync.aligned.trans.m8n8.b16", 1),
]

#: Module-level gates: a kernel with no matrix instruction, for each target at and just below
#: the oldest .version ptxas takes with it.
MODULE_INSTRUCTION = "mov.u32 %r1, %r0;"


def module_cases() -> list[ptxas_gates.Probe]:
    out = []
    for target, (major, minor) in matrix_forms.TARGET_MIN_VERSION.items():
        if int(target[3:].rstrip("af")) < 75:
            continue          # ptxas 13 assembles these only for a newer -arch
        below = f"{major}.{minor - 1}" if minor else f"{major - 1}.9"
        for version in (below, f"{major}.{minor}"):
            out.append(ptxas_gates.Probe(MODULE_INSTRUCTION, target, version))
    out.append(ptxas_gates.Probe(MODULE_INSTRUCTION, "sm_100a", "8.5"))
    return out


def cases() -> list[ptxas_gates.Probe]:
    out = []
    new_forms = [f for f in matrix_forms.all_forms() if f.blackwell]
    swept = {"ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8",
             "ldmatrix.sync.aligned.m8n16.x4.shared.b8x16.b4x16_p64",
             "stmatrix.sync.aligned.m16n8.x2.trans.shared.b8"}
    for f in new_forms:
        for target, version in (BLACKWELL_TARGETS if f.ptx in swept else FEW_TARGETS):
            out.append(ptxas_gates.Probe(ptxas_gates.operands_for(f.ptx, f.regs), target, version))
    for opcode in ("ldmatrix.sync.aligned.m16n16.x2.trans.shared::cta.b8",
                   "ldmatrix.sync.aligned.m16n16.x2.trans.b8"):
        out.append(ptxas_gates.Probe(ptxas_gates.operands_for(opcode, 4), "sm_100a", "8.6"))
    for opcode, targets in OLD_FORMS:
        regs = matrix_forms.parse_form(opcode).regs
        for target, version in targets:
            out.append(ptxas_gates.Probe(ptxas_gates.operands_for(opcode, regs), target, version))
    for opcode, regs in INVALID:
        out.append(ptxas_gates.Probe(ptxas_gates.operands_for(opcode, regs), "sm_100a", "8.6"))
    for opcode, regs in SPELLINGS:
        out.append(ptxas_gates.Probe(ptxas_gates.operands_for(opcode, regs), "sm_100a", "8.8"))
    out += module_cases()
    # the register count is part of the form
    out.append(ptxas_gates.Probe(ptxas_gates.operands_for(
        "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", 1), "sm_100a", "8.6"))
    out.append(ptxas_gates.Probe(ptxas_gates.operands_for(
        "stmatrix.sync.aligned.m16n8.x4.trans.shared.b8", 2), "sm_120a", "8.7"))
    return out


def main() -> int:
    exe = ptxas_gates.find_ptxas()
    if exe is None:
        print("ptxas not found on PATH: install the CUDA 13 toolkit", file=sys.stderr)
        return 2
    rows = []
    for p in cases():
        ok, msg = ptxas_gates.ptxas_verdict(p, exe)
        rows.append({"instruction": p.instruction, "target": p.target, "version": p.version,
                     "ptxas": "accept" if ok else "reject", "ptxas_message": msg})
    table = {"ptxas": ptxas_gates.ptxas_version(exe),
             "how": "python measure/gpu/ptxas_matrix_gates.py (ptxas -arch <target> probe.ptx)",
             "cases": rows}
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    accepted = sum(r["ptxas"] == "accept" for r in rows)
    print(f"wrote {OUT}: {len(rows)} cases, {accepted} accepted by {table['ptxas']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
