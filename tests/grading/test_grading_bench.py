"""measure/benchmarks/bench_grading.py without running it (that takes minutes): its class is the mix it
says, nothing in it hangs, and its report states the times, the ratio and the costs."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "measure" / "benchmarks"))
import bench_grading as bench  # noqa: E402


def test_class_is_the_mix_and_never_hangs():
    roster = bench.class_roster(100)
    assert len(roster) == 100 and len({s for s, _ in roster}) == 100
    counts = {name: sum(c.name == name for _, c in roster) for name, _ in bench.MIX}
    assert sum(counts.values()) == 100 and counts["good_a"] >= 20
    assert not any("hang" in c.name or "loop" in c.name or "hog" in c.name for _, c in roster)
    assert [c.name for _, c in bench.class_roster(25)] == [c.name for _, c in roster[:25]]


def test_report_states_times_ratio_and_costs(tmp_path):
    result = {
        "date": "2026-01-01", "submissions": 100, "workers": 2, "stock_s": 100.0,
        "ptxlab_s": 40.0, "ratio": 2.5, "scores_agree": True, "score_differences": {},
        "mix": {"good_a": 100}, "mean_score": 10.0,
        "machine": {"cores": 2, "cores_available": 2, "cpu": "cpu", "python": "3", "nbgrader": "0.9",
                    "platform": "linux", "load_average_before": [0.1], "load_average_after": [0.2],
                    "sandbox": "bubblewrap"},
        "per_submission_s": {"stock": {"100": 1.0}, "ptxlab": {"100": 0.4, "25": 0.5, "50": 0.44}},
        "ptxlab_by_size_s": {"100": 40.0, "25": 12.5, "50": 22.0},
    }
    text = bench.write_report(result, tmp_path).read_text()
    assert "**2.50x** faster" in text and "| stock nbgrader autograde | 100 | 100.0 s | 1.000 s |" in text
    assert text.index("| ptxlab grade | 25 |") < text.index("| ptxlab grade | 100 |")
    assert "25->50: 0.380 s, 50->100: 0.360 s" in text
    assert (tmp_path / "bench.json").is_file()


def test_the_versions_report_weighs_the_speed_up_against_the_models_share():
    import bench_grading_versions as versions

    def run(code, wall, judge, other):
        return {"round": 1, "code": code, "wall_s": wall, "cpu_s": wall,
                "steps_s": {"judge": judge, "kernel start": other}}

    runs = [run("now", 90.0, 0.05, 0.85), run("before", 100.0, 0.10, 0.90),
            run("before", 100.0, 0.10, 0.90), run("now", 91.0, 0.05, 0.85)]
    assert versions.model_share_of_steps(runs) == 0.1
    lines = versions.share_lines(runs)
    assert "**10.0%**" in lines[0] and "best wall +10.0%, mean +9.5%: **not met**" in lines[0]
    runs[-1]["wall_s"] = 89.0
    assert "best wall +11.0%, mean +10.5%: **met**" in versions.share_lines(runs)[0]
    assert versions.share_lines([run("now", 1.0, 0.0, 0.0)]) == []
