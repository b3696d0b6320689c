"""The engines bench's report says a grading target is met only when both the best and the
mean wall time of the code now beat the code before by the CPU model's share."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measure" / "benchmarks"))
engines = pytest.importorskip("bench_cpu_engines")


def _class(now_walls: list[float], before_walls: list[float]) -> dict:
    """A class graded by both codes; the judge (the CPU model) 10% of each grading's steps."""
    steps = {"judge": 0.1, "notebook cells": 0.5, "kernel start": 0.4}
    runs = [{"round": i + 1, "code": code, "wall_s": w, "cpu_s": w, "steps_s": steps}
            for i, (a, b) in enumerate(zip(now_walls, before_walls))
            for code, w in (("now", a), ("before", b))]
    return {"assignment": "02_ldmatrix", "submissions": 100, "mix": {"solution": 100},
            "runs": runs, "rounds": len(now_walls), "scores_agree": True,
            "score_differences": {}}


@pytest.mark.parametrize("now, before, verdict", [
    ([50.0, 52.0], [60.0, 60.0], "**met**"),          # best +16.7%, mean +15%
    ([50.0, 59.0], [60.0, 60.0], "**not met**"),      # best +16.7%, mean +9.2%: the mean falls short
    ([57.0, 57.0], [60.0, 60.0], "**not met**"),      # +5% both
])
def test_the_grading_target_line_weighs_best_and_mean_against_the_share(now, before, verdict):
    lines = engines.target_lines([], [], [], [_class(now, before)])
    said = [line for line in lines if line.startswith("- Grading 100 submissions of 02_ldmatrix")]
    assert len(said) == 1 and "**10.0%**" in said[0] and said[0].endswith(verdict + ".")


def test_the_report_has_each_class_section_under_the_grading_heading():
    md = engines.markdown([{"size": 128, "mma_sync": 1, "warp": 2.0, "vector": 1.0,
                            "same_bits": True, "vector_ran_as": ["vector"]}], [], [],
                          {"date": "d", "machine": "m", "command": "c"},
                          grading=[_class([50.0, 52.0], [60.0, 60.0])])
    head = md.index("## Grading on the CPU path")
    assert md.index("### 02_ldmatrix, 100 submissions, 2 rounds") > head
    assert "Every student the same score under both codes: **yes**" in md[head:]
