"""The exercises of the notebook on the layout-fit rule: right answers pass (hidden cases too),
wrong ones fail saying where, and the quiz's expectations are the rule's."""
from __future__ import annotations

import pytest

from ptxlab.exercises import layout_fit as ex
from ptxlab.model.layout_fit import fit_copy
from ptxlab.run import backends
from ptxlab.authoring.course_cases import solution_kernels

#: The kernel learners are asked to write, as the notebook's solution cell has it
#: (course/text/10_layout_fit.py).
KERNEL = next(src for _, exercise, src in solution_kernels()
              if exercise.key == ex.x2_kernel.key)

QUIZ = {"A": (4, False), "B": (2, True), "C": (2, False), "D": "aligned", "E": "dtype",
        "F": "register"}


def test_quiz_expectations_are_the_rule_and_cover_each_kind():
    assert {c.name: c.expected() for c in ex.FIT_CASES} == {
        k: v if isinstance(v, tuple) else (v,) for k, v in QUIZ.items()}
    for case in ex.FIT_CASES:
        fit = fit_copy(case.reg, case.smem, case.dtype, case.direction)
        assert fit.fits == (len(case.expected()) == 2)


def test_quiz_right_and_wrong():
    ex.will_it_fit.grade(QUIZ, hidden=True)
    res = ex.will_it_fit.evaluate({**QUIZ, "D": (2, False), "B": (2, False)})
    assert not res.passed and "2 of 6" in res.message
    assert "multiple of 16" in "\n".join(res.advice)
    assert not ex.will_it_fit.evaluate([1, 2]).passed


def test_addresses_right_and_mistakes():
    ex.fit_addresses.grade(lambda lane, base, pitch: base + (lane % 8) * 2 * pitch
                           + (lane // 8) * 16, hidden=True)
    for wrong, text in ex.fit_addresses.mistakes:
        res = ex.fit_addresses.evaluate(wrong, hidden=True)
        assert not res.passed and text in "\n".join(res.advice)


def test_cute_atom_choice():
    assert ex.cute_atom.correct == "b"
    assert "SM75_U16x8_LDSM_T" in ex.cute_atom.explanations["b"]
    assert not ex.cute_atom.evaluate("a").passed


def test_kernel_right_and_the_trap_caught():
    if not backends.cpu_available()[0]:
        pytest.skip("the CPU model is not available")
    assert ex.x2_kernel.evaluate(KERNEL, hidden=True).passed
    trap = KERNEL.replace("(lane % 8) * ld * 2 + ((lane / 8) % 2) * 16",
                          "(lane % 8) * 16 + ((lane / 8) % 2) * 128")
    res = ex.x2_kernel.evaluate(trap)
    assert not res.passed and "expected tile element (0, 8)" in res.report()
