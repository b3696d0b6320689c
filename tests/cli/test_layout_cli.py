"""``ptxlab layout``: the picture and the JSON map of every modelled form, and its refusals."""
from __future__ import annotations

import json

import pytest

from ptxlab import cli
from ptxlab.model import matrix_forms
from ptxlab.run.ptx import ptxas_gates

ALL = matrix_forms.all_forms()


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(["layout", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("f", ALL, ids=[f.ptx for f in ALL])
def test_json_is_the_model_map(capsys, f):
    rc, out, _ = _run(capsys, "--json", f.ptx)
    assert rc == 0
    doc = json.loads(out)
    assert list(doc) == ["instruction", "address_lane", "map"]
    assert doc["instruction"] == f.ptx
    assert len(doc["address_lane"]) == 32 and len(doc["map"]) == 32
    assert all(len(lane) == f.regs and all(len(reg) == 4 for reg in lane) for lane in doc["map"])
    assert doc == matrix_forms.layout_record(f)


def test_json_of_the_classic_form_is_the_ptx_isa_fragment(capsys):
    """ldmatrix .m8n8.x4 .b16: lane t, register i holds row t//4 of matrix i, elements 2(t%4)
    and 2(t%4)+1, i.e. bytes 4(t%4) .. 4(t%4)+3 of that 16-byte row; lanes 8i..8i+7 give the
    rows of matrix i."""
    _, out, _ = _run(capsys, "--json", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, "
                                        "%r4}, [%r5];")
    doc = json.loads(out)
    assert doc["address_lane"] == [[t // 8, t % 8] for t in range(32)]
    for t in range(32):
        for i in range(4):
            assert doc["map"][t][i] == [[i, t // 4, 4 * (t % 4) + b] for b in range(4)]


def test_json_of_the_m16n16_form(capsys):
    _, out, _ = _run(capsys, "--json", "ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8")
    doc = json.loads(out)
    assert doc["address_lane"] == [[t // 16, t % 16] for t in range(32)]
    # lane 5, register 3 (matrix 1, upper half of its columns), byte 2: row 4*(5%4)+2, col 5//4+8
    assert doc["map"][5][3][2] == [1, 6, 9]


def test_text_picture(capsys):
    rc, out, _ = _run(capsys, "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r1,%r2}, [%r3];")
    assert rc == 0
    assert "lanes 0-15 give the row addresses" in out
    assert "0.0    lane  0   | L0r0b0  L4r0b0  L8r0b0" in out
    assert "lane  4 addr m0.r4  r0[  0.3.1   0.2.1   0.1.1   0.0.1]" in out
    rc, out, _ = _run(capsys, "stmatrix.sync.aligned.m16n8.x1.trans.shared.b8")
    assert rc == 0 and "stores" in out and "lane  8 addr  -" in out
    rc, out, _ = _run(capsys, "ldmatrix.sync.aligned.m8n16.x1.shared.b8x16.b6x16_p32")
    assert rc == 0 and "packed 6-bit" in out and " e15" in out


@pytest.mark.parametrize("text", [
    "ldmatrix.sync.aligned.m16n16.x1.shared.b8",
    "ldmatrix.sync.aligned.m16n16.x4.trans.shared.b8",
    "ldmatrix.sync.aligned.m8n16.x2.trans.shared.b8x16.b4x16_p64",
    "stmatrix.sync.aligned.m16n8.x1.shared.b8",
    "ldmatrix.sync.aligned.m8n8.x1.shared.b8",
    "ldmatrix.m8n8.x1.shared.b16",
    "stmatrix.sync.aligned.m16n8.x4.trans.shared.b8 [%r10], {%r0, %r1};",
])
def test_invalid_forms_exit_2_with_the_cpu_models_message(capsys, text):
    rc, out, err = _run(capsys, text)
    assert rc == 2 and out == ""
    message = err.strip().removeprefix("ptxlab layout: ")
    instruction = text if text.endswith(";") else ptxas_gates.operands_for(text, 4 if "x4" in text
                                                                           else 2 if "m16n16" in text
                                                                           else 1)
    ok, model_msg = ptxas_gates.model_verdict(ptxas_gates.Probe(instruction, "sm_100a", "8.6"))
    assert not ok and message in model_msg


def test_target_gate_and_unknown_opcodes_exit_2(capsys):
    rc, _, err = _run(capsys, "--target", "sm_90", "ldmatrix.sync.aligned.m16n16.x1.trans.b8")
    assert rc == 2 and "not supported on .target sm_90" in err
    rc, _, _ = _run(capsys, "--target", "sm_120a", "--ptx-version", "8.7",
                    "ldmatrix.sync.aligned.m16n16.x1.trans.b8")
    assert rc == 0
    rc, _, err = _run(capsys, "ld.shared.b32")
    assert rc == 2 and "ldmatrix, stmatrix and movmatrix" in err


def test_help_lists_the_new_forms(capsys):
    with pytest.raises(SystemExit):
        cli.main(["layout", "--help"])
    out = capsys.readouterr().out
    for f in ALL:
        assert f.ptx in out


def test_mma_fragments(capsys):
    rc, out, _ = _run(capsys, "--json", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                                        "{%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
                                        "{%f4,%f5,%f6,%f7};")
    assert rc == 0
    doc = json.loads(out)
    assert list(doc) == ["instruction", "address_lane", "operands"]
    assert doc["address_lane"] == [None] * 32
    ops = doc["operands"]
    # PTX ISA, m16n8k16 .f16: a0,a1 = row g, cols 2q,2q+1; a2,a3 = row g+8; b0,b1 = rows 2q,2q+1
    # of column g; c0,c1 = row g, cols 2q,2q+1; c2,c3 = row g+8
    for t in range(32):
        g, q = t // 4, t % 4
        assert ops["A"][t][0] == [[g, 2 * q], [g, 2 * q + 1]]
        assert ops["A"][t][1] == [[g + 8, 2 * q], [g + 8, 2 * q + 1]]
        assert ops["B"][t][0] == [[2 * q, g], [2 * q + 1, g]]
        assert [ops["C"][t][r][0] for r in range(4)] == [[g, 2 * q], [g, 2 * q + 1],
                                                          [g + 8, 2 * q], [g + 8, 2 * q + 1]]
    rc, out, _ = _run(capsys, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32")
    assert rc == 0 and "A (16x32, 8-bit elements, 4 register(s) per lane)" in out
    rc, _, err = _run(capsys, "mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32")
    assert rc == 2 and "the model covers" in err
