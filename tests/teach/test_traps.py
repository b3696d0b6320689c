"""The trap clinic: every bad kernel goes wrong on the CPU model and its fix is right; where nvcc
is installed, ptxas 13 says of each bad kernel what the clinic quotes and accepts the fix."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ptxlab.run.ptx import nvrtc
from ptxlab.teach import traps

PTXAS = shutil.which("ptxas")


@pytest.mark.parametrize("key", list(traps.TRAPS))
def test_bad_goes_wrong_and_fixed_is_right(key):
    trap = traps.TRAPS[key]
    bad = traps.run_trap(trap, "bad")
    fixed = traps.run_trap(trap, "fixed")
    assert fixed.outcome == "right", fixed
    assert bad.outcome != "right", bad
    if trap.ptxas:           # what ptxas refuses, the model refuses or stops at
        assert bad.outcome in ("refused", "fault"), bad
    else:                    # what ptxas cannot see happens at run time
        assert bad.outcome in ("wrong", "fault"), bad


def test_outcomes_say_where():
    stride = traps.run_trap("stride", "bad")
    assert stride.outcome == "wrong" and "lane 0: expected" in stride.message
    assert "16-byte aligned" in traps.run_trap("misaligned", "bad").message
    assert "{ }" in traps.run_trap("reg_scope", "bad").message


def test_expected_values_are_the_layouts():
    """The stride trap's expectation is the x2 fragment of a row-major tile: lane 5 holds row 1,
    columns 2,3 (matrix 0) and 10,11 (matrix 1); value 16*row + col in each half."""
    want = traps.TRAPS["stride"].expected().reshape(32, 2)
    assert want[5, 0] == (18 | 19 << 16) and want[5, 1] == (26 | 27 << 16)


def test_html_shows_both_runs():
    html = traps.trap_html("dtype")
    assert "refused" in html and "right" in html and ".f16" in html


@pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("key", [k for k, t in traps.TRAPS.items() if t.ptxas])
def test_ptxas_says_what_the_clinic_quotes(key, tmp_path):
    """ptxas on the PTX the CPU model itself runs (its compile is cached: no second front end)."""
    trap = traps.TRAPS[key]
    for variant in ("bad", "fixed"):
        ptx = tmp_path / f"{variant}.ptx"
        ptx.write_text(nvrtc.compile_to_ptx(trap.source(variant), trap.options))
        proc = subprocess.run([PTXAS, f"-arch={trap.ptxas_arch}", str(ptx), "-o",
                               str(tmp_path / f"{variant}.cubin")],
                              capture_output=True, text=True, timeout=300)
        if variant == "bad":
            assert proc.returncode != 0 and trap.ptxas in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("key", [k for k, t in traps.TRAPS.items() if t.ptxas])
def test_what_ptxas_refuses_the_model_refuses_at_compile_time_with_its_reason(key):
    """A kernel ptxas refuses is a compile error on the CPU model too (never a run-time stop that
    suggests a GPU), and the message quotes ptxas's reason."""
    trap = traps.TRAPS[key]
    bad = traps.run_trap(trap, "bad")
    assert bad.outcome == "refused", bad
    assert "run this kernel on a GPU" not in bad.message
    assert trap.ptxas.split(" '")[0].lower() in bad.message.lower(), bad.message


def test_mma_types_ptxas_refuses_are_compile_errors():
    from ptxlab.model import matrix_forms
    for types, fix in ((("f64", "f16", "f16", "f64"), ".f16 or .f32"),
                       (("f16", "bf16", "bf16", "f16"), ".f32"),
                       (("s32", "s8", "f16", "s32"), "same type")):
        with pytest.raises(matrix_forms.FormError, match="Unexpected instruction types") as exc:
            matrix_forms.check_mma_types("mma.sync.aligned.m16n8k16.row.col", *types)
        assert fix in str(exc.value)
    # exists in PTX but the model does not cover it: not refused here (the GPU runs it)
    matrix_forms.check_mma_types("mma.sync.aligned.m8n8k4.row.col", "f64", "f64", "f64", "f64")
