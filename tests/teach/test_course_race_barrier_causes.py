"""The course's races and divergent barriers: each cause fits in 400 characters, names the warps,
lanes and lines, and the check's verdict is the one it always was.

The cases are the named mistakes of the course (``mutants.NAMED_MISTAKES``) whose kernel races
or reaches a barrier with part of the block: the block barrier missing (write-after-read), the
copy loop not split by thread (write-after-write of the same values), ``__syncwarp()`` for a
block barrier, and ``__syncthreads()`` inside a branch on the warp. What the check shows of
each (its message, then its advice, as its report prints them) fits in 400 characters too.
"""
from __future__ import annotations

import re

import pytest

from ptxlab.authoring import mutants
from ptxlab.run.failure import MAX_CAUSE, FailureKind, lanes_text
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.racecheck import BARRIER_ADVICE, REDUNDANT_COPY_ADVICE

ok, why = cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")

#: The race and barrier mistakes of the course, with the kind of failure each must end in.
EXPECTED = {"barrier missing": FailureKind.RACE,
            "copy loop not split between the warps": FailureKind.RACE,
            "__syncwarp for a block barrier": FailureKind.RACE,
            "barrier inside a branch on the warp": FailureKind.BARRIER}


@pytest.fixture(scope="module")
def course_cases():
    """``{mistake kind: (named mistake, its check's result)}`` for every named mistake of the
    course whose check ends in a race or a divergent barrier."""
    cells = {c.exercise.key: c for c in mutants.solution_cells()}
    keys = {m.key for m in mutants.NAMED_MISTAKES if m.kind in EXPECTED}
    out = {}
    for m in mutants.NAMED_MISTAKES:
        if m.key in keys:
            res = mutants.named_mistake_result(cells[m.key], m)
            if res.failure is not None and res.failure.kind in (FailureKind.RACE,
                                                                 FailureKind.BARRIER):
                out[m.kind] = (m, res)
    return out


def _line(text: str, cuda_line: str) -> bool:
    return re.search(re.escape(cuda_line) + r"(?!\d)", text) is not None


def test_the_course_has_its_race_and_barrier_cases(course_cases):
    assert {k: r.failure.kind for k, (_, r) in course_cases.items()} == EXPECTED


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_cause_fits_and_names_lanes_and_lines(course_cases, kind):
    m, res = course_cases[kind]
    f = res.failure
    cause = f.cause()
    assert len(cause) <= MAX_CAUSE, (len(cause), cause)
    # what the teacher's table shows of a check that stopped: its message, from the same words
    assert len(res.message) <= MAX_CAUSE, (len(res.message), res.message)
    if f.kind is FailureKind.RACE:
        first, second = f.race
        for side in f.race:
            assert side.who() in cause and f"PTX line {side.ptx_line}" in cause, cause
        assert _line(cause, second.cuda_line), cause
        assert _line(cause, first.cuda_line) or "the same line" in cause, cause
        assert f"shared address 0x{f.address:x}" in cause
        assert "no barrier between them" in cause
    else:
        assert f"warp {f.warp}" in cause and (not f.lanes or lanes_text(f.lanes) in cause)
        assert f"PTX line {f.ptx_line}" in cause and _line(cause, f.cuda_line), cause
        assert "__syncthreads()" in f.advice


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_checks_message_and_advice_fit_and_name_lanes_and_lines(course_cases, kind):
    """The check's own words (what failed, on what launch, its advice) leave the model's finding
    its warps, lanes and lines, and all of it, as the report prints it, fits in 400."""
    m, res = course_cases[kind]
    f = res.failure
    shown = res.message + "".join(f"\n  => {a}" for a in res.advice)
    assert len(shown) <= MAX_CAUSE, (len(shown), shown)
    assert len(res.message) + sum(map(len, res.advice)) <= MAX_CAUSE
    assert m.says in shown, shown
    if f.kind is FailureKind.RACE:
        assert "has a race" in res.message and "(4 warps)" in res.message, res.message
        for side in f.race:
            assert side.who() in res.message and f"PTX line {side.ptx_line}" in res.message
            assert _line(res.message, side.cuda_line) or "the same line" in res.message
        assert "__syncthreads()" in res.advice[0] or "a barrier does not fix this" \
            in res.advice[0], res.advice
    else:
        assert "reached by only part of the threads" in res.message, res.message
        assert f"warp {f.warp}" in res.message and "warps 1-3" in res.message, res.message
        assert f"PTX line {f.ptx_line}" in res.message and _line(res.message, f.cuda_line)
        assert res.advice == [f.advice] and "__syncthreads()" in f.advice


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_verdict_and_the_named_cause_are_unchanged(course_cases, kind):
    """Decided from the record's fields: failed, score 0, the failure's kind; the report still
    holds the phrase the course expects of it."""
    m, res = course_cases[kind]
    assert not res.passed and res.score == 0 and res.status == "error"
    assert res.details["failure"] == EXPECTED[kind]
    assert m.says in res.report(max_lines=2), res.report(max_lines=2)
    assert res.named_cause()


def test_the_advice_follows_from_what_was_seen(course_cases):
    assert course_cases["barrier missing"][1].advice == [BARRIER_ADVICE]
    assert course_cases["copy loop not split between the warps"][1].advice \
        == [REDUNDANT_COPY_ADVICE]
    assert "(write-after-read)" in course_cases["barrier missing"][1].message
    assert "(write-after-write)" in course_cases["copy loop not split between the warps"][1].message
    warp_barrier = course_cases["__syncwarp for a block barrier"][1].advice[0]
    assert "__syncwarp() at line 10" in warp_barrier and "__syncthreads()" in warp_barrier
