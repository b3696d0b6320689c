"""The CPU model accepts and refuses the matrix-instruction forms exactly where ptxas 13 does.

``tests/fixtures/ptxas_matrix_gates.json`` holds ptxas's answers for a table of probes (one
instruction in a module with a given ``.target``/``.version``), written by
``measure/gpu/ptxas_matrix_gates.py``. The model is checked against the table on every machine, and
the table against ptxas itself where ptxas is installed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxlab.model import matrix_forms
from ptxlab.run.ptx import ptxas_gates

TABLE = json.loads((Path(__file__).parents[1] / "fixtures" / "ptxas_matrix_gates.json").read_text())
CASES = TABLE["cases"]


def _probe(row) -> ptxas_gates.Probe:
    return ptxas_gates.Probe(row["instruction"], row["target"], row["version"])


def test_model_gives_ptxas_verdict_for_every_recorded_case():
    wrong = []
    for row in CASES:
        ok, msg = ptxas_gates.model_verdict(_probe(row))
        if ok != (row["ptxas"] == "accept"):
            wrong.append(f"{row['instruction']} .target {row['target']} .version "
                         f"{row['version']}: ptxas {row['ptxas']}s ({row['ptxas_message']}), "
                         f"the model {'accepts' if ok else 'rejects: ' + msg}")
    assert not wrong, "\n".join(wrong)


def test_every_refusal_says_what_to_change():
    for row in CASES:
        ok, msg = ptxas_gates.model_verdict(_probe(row))
        if not ok:
            assert any(w in msg for w in ("write", "requires", "need", "remove", "use", "compile",
                                          "exists only", "give", "allowed")), msg


@pytest.mark.skipif(ptxas_gates.find_ptxas() is None,
                    reason="ptxas is not installed here: the recorded table stands in for it")
def test_recorded_table_is_what_this_ptxas_says():
    exe = ptxas_gates.find_ptxas()
    changed = []
    for row in CASES:
        ok, msg = ptxas_gates.ptxas_verdict(_probe(row), exe)
        if ok != (row["ptxas"] == "accept"):
            changed.append(f"{row['instruction']} {row['target']} {row['version']}: recorded "
                           f"{row['ptxas']}, ptxas {ptxas_gates.ptxas_version(exe)} says "
                           f"{'accept' if ok else 'reject: ' + msg}")
    assert not changed, ("ptxas changed its answers; rerun measure/gpu/ptxas_matrix_gates.py and "
                         "update matrix_forms' gates:\n" + "\n".join(changed))


def test_table_covers_every_new_form_on_both_sides_of_its_gate():
    by_form: dict[str, set[str]] = {}
    for row in CASES:
        by_form.setdefault(row["instruction"].split()[0], set()).add(
            f"{row['target']}:{row['ptxas']}")
    for f in matrix_forms.all_forms():
        if f.blackwell:
            seen = by_form[f.ptx]
            assert "sm_100a:accept" in seen and "sm_120f:accept" in seen, f.ptx
            assert "sm_90:reject" in seen and "sm_100:reject" in seen, f.ptx


@pytest.mark.parametrize("text, target, version, expect", [
    ("ldmatrix.sync.aligned.m16n16.x1.shared.b8", "sm_100a", "8.6", "requires .trans"),
    ("ldmatrix.sync.aligned.m16n16.x4.trans.shared.b8", "sm_100a", "8.6", "only as .x1 and .x2"),
    ("ldmatrix.sync.aligned.m8n16.x1.trans.shared.b8x16.b4x16_p64", "sm_100a", "8.6",
     "not allowed with shape .m8n16; remove it"),
    ("stmatrix.sync.aligned.m16n8.x1.shared.b8", "sm_100a", "8.6", "requires .trans"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", "sm_90", "8.6", "-arch=sm_100a"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", "sm_120", "8.7", "'a' or family 'f'"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", "sm_101a", "8.6", "renamed sm_110a"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8", "sm_100f", "8.7", "write .version 8.8"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b6x16_p32.b8x16", "sm_100a", "8.6",
     "write .b8x16.b6x16_p32"),
    ("ldmatrix.sync.aligned.m8n16.x1.shared.b4x16_p64.b8x16", "sm_100a", "8.6",
     "write .b8x16.b4x16_p64"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.trans.shared.b8", "sm_100a", "8.6",
     "one .trans modifier"),
    ("stmatrix.sync.aligned.m16n8.x1.trans.trans.shared.b8", "sm_100a", "8.6",
     "one .trans modifier"),
    ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.shared::cta.b8", "sm_100a", "8.6",
     "at most one state space"),
    ("ldmatrix.sync.aligned.m8n8.x4.x4.shared.b16", "sm_90", "8.0", "remove the extra one"),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16.b16", "sm_90", "8.0", "remove the repeated one"),
])
def test_messages_name_the_fix(text, target, version, expect):
    with pytest.raises(matrix_forms.FormError, match=expect.replace(".", r"\.")):
        matrix_forms.check_target(matrix_forms.parse_form(text), target, version)


def test_recorded_table_covers_spellings_and_module_gates():
    """The table holds ptxas's verdicts on spellings (modifier order and counts) and on
    modules with no matrix instruction, and the model agrees with each (checked above)."""
    seen = {(r["instruction"].split()[0], r["ptxas"]) for r in CASES}
    for spelling in ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b6x16_p32.b8x16",
                     "stmatrix.sync.aligned.m16n8.x1.trans.trans.shared.b8",
                     "ldmatrix.sync.aligned.m16n16.x1.trans.shared.shared::cta.b8"):
        assert (spelling, "reject") in seen
    for spelling in ("ldmatrix.sync.aligned.m8n8.x4.b16.trans",
                     "ldmatrix.sync.aligned.x4.m8n8.shared.b16"):
        assert (spelling, "accept") in seen
    module = {(r["target"], r["version"], r["ptxas"]) for r in CASES
              if r["instruction"].startswith("mov.u32")}
    for target, version in (("sm_100a", "8.5"), ("sm_120a", "8.6"), ("sm_100f", "8.7"),
                            ("sm_110a", "8.9"), ("sm_90a", "7.9")):
        assert (target, version, "reject") in module


@pytest.mark.parametrize("target, version, expect", [
    ("sm_100a", "8.5", "write .version 8.6"),
    ("sm_120a", "8.6", "write .version 8.7"),
    ("sm_121f", "8.7", "write .version 8.8"),
    ("sm_92", "8.0", "not a target ptxas 13 knows"),
])
def test_module_gate_without_matrix_instruction_names_the_fix(target, version, expect):
    ok, msg = ptxas_gates.model_verdict(ptxas_gates.Probe("mov.u32 %r1, %r0;", target, version))
    assert not ok and expect in msg and "PTX line 2" in msg, msg


def test_layout_header_gives_each_targets_oldest_version():
    from ptxlab.teach import layout_table
    text = layout_table.describe(matrix_forms.parse_form(
        "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8"))
    assert "sm_100a .version 8.6+" in text and "sm_120a .version 8.7+" in text
    assert "sm_120f" in text.split(".version 8.8+")[0].rsplit(";", 1)[-1]
    assert "sm_110a/sm_110f .version 9.0+" in text
    old = layout_table.describe(matrix_forms.parse_form("ldmatrix.sync.aligned.m8n8.x4.shared.b16"))
    assert "sm_75 .version 6.5+" in old and "sm_89/sm_90 .version 7.8+" in old
