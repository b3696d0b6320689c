"""The exercises of the notebook on the sm_100a-class forms: right answers pass (hidden cases
too), each known mistake fails with its advice, and the kernel runs on the CPU model."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.exercises import blackwell as ex
from ptxlab.run import backends
from ptxlab.authoring.course_cases import solution_kernels

#: The kernel learners are asked to write, as the notebook's solution cell has it
#: (course/text/09_blackwell_forms.py).
KERNEL = next(src for _, exercise, src in solution_kernels()
              if exercise.key == ex.m16n16_kernel.key)

RIGHT = [
    (ex.m16n16_rows, lambda lane, base, stride: base + (lane % 16) * stride + (lane // 16) * 16),
    (ex.received, lambda lane, reg, byte: (4 * (lane % 4) + byte, lane // 4 + 8 * (reg % 2))),
    (ex.stored, lambda lane, reg, byte: (2 * (lane % 4) + byte % 2, lane // 4 + 8 * (byte // 2))),
    (ex.packed_lane, lambda row, elem: 4 * row + elem // 4),
    (ex.gates, "c"),
]


@pytest.mark.parametrize("exercise, answer", RIGHT, ids=lambda x: getattr(x, "key", ""))
def test_right_answers_pass_hidden_cases_too(exercise, answer):
    exercise.grade(answer)
    exercise.grade(answer, hidden=True)


@pytest.mark.parametrize("exercise", [e for e, _ in RIGHT if hasattr(e, "mistakes")],
                         ids=lambda e: e.key)
def test_each_known_mistake_fails_with_its_advice(exercise):
    for wrong, text in exercise.mistakes:
        res = exercise.evaluate(wrong, hidden=True)
        assert not res.passed, text
        assert text in "\n".join(res.advice), (text, res.advice)


def test_gates_are_ptxas_verdicts():
    assert ex.gates.correct == "c"
    assert "8.7" in ex.gates.explanations["d"] and "sm_100a" in ex.gates.explanations["b"]
    assert ex.gate_verdict("sm_120f", "8.8") == "accepted"


def test_kernel_runs_on_the_cpu_model_and_a_wrong_row_is_caught():
    if not backends.cpu_available()[0]:
        pytest.skip("the CPU model is not available")
    res = ex.m16n16_kernel.evaluate(KERNEL, hidden=True)
    assert res.passed, res.report()
    wrong = ex.m16n16_kernel.evaluate(KERNEL.replace("(lane % 16) * sld", "(lane % 8) * sld"))
    assert not wrong.passed and "lane 2 reg 0" in wrong.report()


def test_pointer_parameters_with_pointee_alignment():
    """compute_100a PTX writes '.param .u64 .ptr .align 1 p': the .align is the data's, so an
    8-byte pointer after an int still sits at an 8-byte aligned offset."""
    if not backends.cpu_available()[0]:
        pytest.skip("the CPU model is not available")
    src = r'''extern "C" __global__ void k(const unsigned char* t, int s, unsigned* out)
    { out[threadIdx.x] = t[threadIdx.x] + s; }'''
    r = backends.launch(src, "k", args=[np.arange(32, dtype=np.uint8), np.int32(5),
                                        np.zeros(32, np.uint32)],
                        backend="cpu", options=ex.BLACKWELL_OPTIONS)
    np.testing.assert_array_equal(r.outputs[2], np.arange(32) + 5)


def test_on_an_sm90_gpu_the_model_runs_it_and_the_check_says_why(monkeypatch):
    """On a machine whose GPU is sm_90, the m16n16 kernel never reaches the GPU: the CPU model
    decides and the check names the GPU and the instruction it lacks."""
    if not backends.cpu_available()[0]:
        pytest.skip("the CPU model is not available")
    from ptxlab.run import gpu

    status = gpu.GpuStatus(True, "stand-in GPU", name="Stand-in H100", compute_capability=(9, 0),
                           supported={k: True for k in gpu.INSTRUCTION_MIN_SM}, cupy_version="0")
    monkeypatch.setattr(gpu, "status", lambda refresh=False: status)

    def no_gpu_launch(*args, **kwargs):
        raise AssertionError("the GPU was asked to run an sm_100a kernel")

    monkeypatch.setattr(gpu, "run_kernel", no_gpu_launch)
    monkeypatch.delenv("PTXLAB_ISOLATE", raising=False)
    where, why = backends.choose_backend(KERNEL)
    assert where == "cpu" and "lacks ldmatrix/stmatrix .m16n16" in why and "sm_100" in why
    res = ex.m16n16_kernel.evaluate(KERNEL)
    assert res.passed, res.report()
    wrong = ex.m16n16_kernel.evaluate(KERNEL.replace("(lane % 16) * sld", "(lane % 8) * sld"))
    assert not wrong.passed
    assert any("Stand-in H100 (sm_90)) cannot run the kernel" in a for a in wrong.advice), \
        wrong.advice
