"""Verdicts from answers as data: questions from the judge, replies from the notebook's client,
verdicts in the grader, reference use flagged.

The end-to-end class is ``tests/grading/test_grading_attacks.py``; these are the parts, fast.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from ptxlab.grading import judge as verdicts
from ptxlab.grading import reference_use, sandbox_client
from ptxlab.teach.answers import AnswerSlot, judge, questions
from ptxlab.teach.exercises.base import grading_seed, hidden_rng

LD = "ptxlab.teach.exercises.ldmatrix"
RECEIVE = AnswerSlot("receive_tests", LD, "receive", "receive", True)
ROWS = AnswerSlot("rows_tests", LD, "a_operand_rows", "a_operand_rows", True)


def receive(lane, reg, half):
    return reg, lane // 4, 2 * (lane % 4) + half


def a_operand_rows(lane, base, stride):
    return base + (lane % 16) * stride + (lane // 16) * 16


def _through_json(record: dict) -> dict:
    return json.loads(json.dumps(record))


def record_answers(namespace: dict, slots: list[AnswerSlot], seed: int) -> dict:
    """What a grading run gets: the judge's questions for ``seed``, answered by the notebook's
    client (the sandbox side), as the judge reads them back."""
    requests = [{"key": s.key, "answer": s.answer, "questions": questions(s, seed)}
                for s in slots]
    return {"answers": sandbox_client.replies(namespace, requests)}


def test_right_answers_pass_and_wrong_ones_fail_with_the_checks_words():
    ns = {"receive": receive, "a_operand_rows": a_operand_rows}
    record = _through_json(record_answers(ns, [RECEIVE, ROWS], seed=11))
    assert judge(RECEIVE, record, 11).passed and judge(ROWS, record, 11).passed

    def swapped(lane, base, stride):          # the known mistake: halves exchanged
        return base + (lane % 16) * 16 + (lane // 16) * stride
    wrong = _through_json(record_answers({"a_operand_rows": swapped}, [ROWS], seed=11))
    verdict = judge(ROWS, wrong, 11)
    from ptxlab.exercises import ldmatrix as ex
    with grading_seed(11):
        direct = ex.a_operand_rows.evaluate(swapped, hidden=True)
    assert not verdict.passed and verdict.message == direct.message
    assert verdict.advice == direct.advice


def test_a_record_for_another_seed_answers_nothing():
    """Hidden inputs are drawn per grading run: answers recorded for other inputs are wrong."""
    record = _through_json(record_answers({"a_operand_rows": a_operand_rows}, [ROWS], seed=1))
    assert not judge(ROWS, record, 2).passed
    with grading_seed(1):
        first = hidden_rng().integers(1 << 30)
    with grading_seed(2):
        assert hidden_rng().integers(1 << 30) != first


def test_only_data_leaves_the_notebook():
    class Always:
        def __eq__(self, other):
            return True

        def __int__(self):
            return 0

    record = _through_json(record_answers({"receive": lambda l, r, h: Always()}, [RECEIVE], 3))
    result = judge(RECEIVE, record, 3)
    assert not result.passed and "returned <" in result.report()


def test_raised_and_missing_answers():
    def broken(lane, reg, half):
        raise ZeroDivisionError("oops")

    record = _through_json(record_answers({"receive": broken}, [RECEIVE], 5))
    result = judge(RECEIVE, record, 5)
    assert not result.passed and "ZeroDivisionError" in result.report()
    assert "no `receive`" in judge(RECEIVE, _through_json(record_answers({}, [RECEIVE], 5)), 5).message
    assert "no answer reached the grader" in judge(RECEIVE, None, 5).message
    record = _through_json(record_answers({"receive": receive}, [RECEIVE], 5))
    key = next(iter(record["answers"]))
    record["answers"][key]["calls"] = dict(list(record["answers"][key]["calls"].items())[:10])
    assert not judge(RECEIVE, record, 5).passed          # unanswered questions count as wrong


def test_kernels_get_fresh_values_so_a_table_fails():
    from ptxlab.teach.exercises.ldmatrix import a_operand_expected, a_operand_run

    run = a_operand_run(24)
    fresh = run.with_fresh_values(np.random.default_rng(7))
    assert not np.array_equal(fresh.args[0], run.args[0])
    assert not np.array_equal(fresh.expected, a_operand_expected(24))
    # the same move of values: renaming commutes with the load
    v = int(fresh.args[0][5 * 16 + 3])
    assert fresh.describe_value(v) == "A[5][3]"
    # every renamed value names the element it stands for
    assert all(fresh.describe_value(int(new)) == run.describe_value(int(old))
               for new, old in zip(fresh.args[0], run.args[0]))


@pytest.mark.parametrize("args, kwargs", [
    ((), {}), ((3,), {}), ((31, 3, 1), {}), ((-1, 10**30), {}), ((True, 1), {}),
    ((1.5, 2), {}), ((np.int64(7), 2), {}), (((1, 2), 3), {}), (("a",), {}), ((1,), {"bits": 16}),
])
def test_a_call_is_named_alike_however_its_numbers_came(args, kwargs):
    """The judge names each call of a learner's function by its arguments as data; plain ints
    take a shorter road to the same text."""
    from ptxlab.teach import answers

    assert answers._key(args, kwargs) == json.dumps(
        [answers.to_plain(list(args)), answers.to_plain(sorted(kwargs.items()))])
    assert answers._key((np.int64(5),), {}) == answers._key((5,), {})


def _cell(source, grade_id=None, solution=False, grade=False):
    meta = {"nbgrader": {"grade_id": grade_id, "solution": solution, "grade": grade}} \
        if grade_id else {}
    return {"cell_type": "code", "source": source, "metadata": meta, "outputs": []}


SETUP = "from ptxlab import layouts, widgets\nfrom ptxlab.exercises import ldmatrix as ex\n"


def _flags(*cells):
    nb_cells = [_cell(SETUP), *cells,
                _cell("ex.receive.grade(receive)", "receive_tests", grade=True)]
    ref = reference_use.reference_names([SETUP])
    return reference_use.flagged_answers(nb_cells, {SETUP}, ref,
                                         {"receive": len(nb_cells) - 1})


def test_reference_names_are_the_reference_modules():
    ref = reference_use.reference_names([SETUP])
    assert set(ref) == {"layouts", "ex"}          # widgets is a helper


@pytest.mark.parametrize("source", [
    "def receive(lane, reg, half):\n    return layouts.ldmatrix_fragment(4).element(lane, reg, half)\n",
    "def receive(lane, reg, half):\n    return ex.receive.visible()[0][0].element(lane, reg, half)\n",
    "def receive(lane, reg, half):\n    m = __import__('ptx' + 'lab')\n    return 0, 0, 0\n",
    "import importlib\ndef receive(lane, reg, half):\n    return 0, 0, 0\n",
    "res = ex.receive.check(lambda *a: (0, 0, 0))\ndef receive(lane, reg, half):\n    return 0, 0, 0\n",
    "def receive(lane, reg, half):\n    return receive.__globals__['layouts']\n",
])
def test_reaching_the_reference_is_flagged(source):
    flags = _flags(_cell(source, "receive", solution=True))
    assert "receive" in flags and flags["receive"][0].line >= 1


def test_checks_hints_and_widgets_are_not_flagged():
    flags = _flags(_cell("def receive(lane, reg, half):\n    return reg, lane // 4, 0\n"
                         "ex.receive.check(receive);\nex.receive.hint()\n", "receive", solution=True),
                   _cell("widgets.FragmentMap(num=4, lane=3, formula=receive)\n"))
    assert flags == {}


def test_a_helper_cell_taints_the_answer_that_uses_it():
    helper = _cell("def table(lane, reg, half):\n    return layouts.ldmatrix_fragment(4).element(lane, reg, half)\n")
    answer = _cell("def receive(lane, reg, half):\n    return table(lane, reg, half)\n",
                   "receive", solution=True)
    flags = _flags(helper, answer)
    assert "receive" in flags and "layouts" in flags["receive"][0].text


def test_kernel_includes():
    assert reference_use.include_findings('#include "ldmatrix.cuh"\n#include <cuda_fp16.h>\n') == []
    for src in ('#include "reference/ldmatrix_ref.cu"\n', '#define F "x.cu"\n#include F\n',
                '  #  include "../../source/02_ldmatrix/02_ldmatrix.ipynb"\n'):
        assert reference_use.include_findings(src), src


def test_slots_come_from_the_test_cells_and_the_instructors_imports():
    nb = {"cells": [_cell(SETUP),
                    _cell("ex.receive.grade(receive)\n### BEGIN HIDDEN TESTS\n"
                          "ex.receive.grade(receive, hidden=True)\n### END HIDDEN TESTS\n",
                          "receive_tests", grade=True)]}
    slots = verdicts.answer_slots(nb, verdicts.exercise_aliases([SETUP]))
    assert slots == [AnswerSlot("receive_tests", LD, "receive", "receive", False),
                     AnswerSlot("receive_tests", LD, "receive", "receive", True)]


def test_every_kernel_exercise_gets_values_no_table_can_hold():
    """For each kernel exercise of the course, every hidden run's inputs change with the grading
    seed (every kernel test cell has a hidden call, so a table fails the cell), and the course's
    solution still passes on them."""
    import nbformat

    from ptxlab.authoring.course_cases import solution_kernels
    from ptxlab.authoring.course_notebooks import COURSE_DIR, assignments, notebook_path

    kernels = solution_kernels()
    hidden_calls = set()
    for name in assignments(COURSE_DIR):
        nb = nbformat.read(str(notebook_path(name, COURSE_DIR)), as_version=4)
        aliases = verdicts.exercise_aliases(verdicts.code_sources(nb))
        hidden_calls |= {(s.module, s.attr) for s in verdicts.answer_slots(nb, aliases)
                         if s.hidden}
    for notebook, exercise, source in kernels:
        module = type(exercise).__module__
        attr = exercise.key.split(".")[-1]
        assert any(a == attr for _, a in hidden_calls), (notebook, exercise.key)
        visible = len(exercise.visible())
        inputs = []
        for seed in (101, 202):
            with grading_seed(seed):
                runs = exercise.runs(hidden=True)[visible:]
                inputs.append([np.concatenate([np.asarray(a).ravel().view(np.uint8)
                                               for a in r.args if isinstance(a, np.ndarray)])
                               for r in runs])
        assert inputs[0], exercise.key
        for label, (a, b) in enumerate(zip(*inputs)):
            assert not np.array_equal(a, b), (exercise.key, label)
        with grading_seed(303):
            assert exercise.evaluate(source, hidden=True).passed, (module, exercise.key)


def test_no_solution_of_the_course_is_flagged():
    """The instructor's own answers (CUDA with the ptxlab:: helpers, widgets beside them) are
    what an honest learner writes: none may be flagged."""
    import nbformat

    from ptxlab.authoring.course_notebooks import COURSE_DIR, assignments, notebook_path

    for name in assignments(COURSE_DIR):
        nb = nbformat.read(str(notebook_path(name, COURSE_DIR)), as_version=4)
        trusted = verdicts.trusted_cell_sources(nb)
        slots = verdicts.answer_slots(nb, verdicts.exercise_aliases(verdicts.code_sources(nb)))
        index = {s.answer: i for i, c in enumerate(nb.cells) for s in slots
                 if c.metadata.get("nbgrader", {}).get("grade_id") == s.cell}
        ref = reference_use.reference_names(verdicts.code_sources(nb))
        flags = reference_use.flagged_answers(nb.cells, trusted, ref, index)
        assert flags == {}, (name, {a: [f.describe() for f in fs] for a, fs in flags.items()})
        assert slots, name


def test_every_answer_function_of_the_course_is_asked_all_it_is_judged_on():
    """For every solution of the course that is a function or a choice: the judge's questions
    (drawn before the notebook runs) are all the exercise asks when it judges the replies -- no
    follow-up round is needed -- and the course's own solution, asked through the client, passes
    the visible and hidden cases."""
    from types import SimpleNamespace

    from ptxlab.teach.answers import missing_questions
    from ptxlab.authoring.course_cases import exercise_home, solution_cells

    checked = 0
    for cell in solution_cells():
        if cell.kernel_source() is not None:
            continue                      # kernel answers are data; the judge launches them
        module, attr = exercise_home(cell.exercise)
        namespace: dict = {}
        exercise_ns = SimpleNamespace(**{attr: SimpleNamespace(check=lambda *a, **k: None)})
        exec(compile(cell.code, f"{cell.notebook}:{cell.line}", "exec"),
             {"ex": exercise_ns, "np": np}, namespace)
        for hidden in (False, True):
            slot = AnswerSlot("c", module, attr, cell.answer_name, hidden)
            seed = 4242 + hidden
            record = _through_json(record_answers(namespace, [slot], seed))
            assert missing_questions(slot, record["answers"][slot.key], seed) == [], \
                (cell.notebook, attr, hidden)
            result = judge(slot, record, seed)
            assert result.passed, (cell.notebook, attr, hidden, result.report())
        checked += 1
    assert checked >= 30, checked


def test_a_dict_answer_leaves_the_sandbox_as_data_and_a_dict_subclass_does_not():
    """Notebook 10's quiz answers with ``{case: answer}``: the client copies a plain dict's own
    items (never a method the learner overrode) and the judge rebuilds the dict; a subclass of
    dict, whose ``items`` or ``__eq__`` could lie, arrives as a description that equals nothing."""
    from ptxlab.grading import sandbox_client
    from ptxlab.teach.answers import _from_plain

    sent = _through_json(sandbox_client.plain({"a": (4, True), "b": None}))
    assert _from_plain(sent) == {"a": (4, True), "b": None}

    class Lying(dict):
        def items(self):
            return [("a", (4, True))]

        def __eq__(self, other):
            return True

    got = _from_plain(_through_json(sandbox_client.plain(Lying(a=1))))
    assert not isinstance(got, dict) and got != {"a": 1}


def test_drawing_the_questions_reads_no_traceback(monkeypatch):
    """The judge draws each notebook's questions by letting the exercise ask a stand-in that
    answers nothing; a check that looked up the learner's line in each refusal's traceback
    spent two thirds of the draw there. The questions must be the same without it."""
    from ptxlab.teach import checks
    slot = AnswerSlot("c", "ptxlab.teach.exercises.ldmatrix", "receive", "receive", True)
    asked = questions(slot, 7)

    def no_traceback(tb):
        raise AssertionError("a draw looked up a traceback")
    monkeypatch.setattr(checks.traceback, "extract_tb", no_traceback)
    assert questions(slot, 7) == asked and len(asked) > 10
