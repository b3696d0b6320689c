"""A learner's exercise-3 k-loop as a whole GEMM (ptxlab.bench.learner_gemm) and its place in
the capstone's table (notebook.time_my_gemm, the report's learner section): the course's answer
is right on the CPU model, slips are named by warp, lane and accumulator, unanswered or
reshaped sources get a sentence, and nothing is timed without a GPU or under the grader."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab.bench import learner_gemm as lg
from ptxlab.bench import notebook as nb
from ptxlab.bench import report
from ptxlab.bench.kernels import GEMM_BEST
from ptxlab.exercises import capstone as ex
from ptxlab.teach.exercises.base import GRADED_BY_GRADER_ENV


@pytest.fixture(scope="module")
def answer() -> str:
    return lg.course_solution().text.split("// ---- a whole GEMM")[0]


def test_the_course_answer_is_a_right_gemm_on_the_cpu_model(answer):
    gemm = lg.gemm_from_k_loop(answer)
    assert (gemm.bm, gemm.bn, gemm.threads) == (64, 64, 512)
    found = lg.check(gemm, "cpu")
    assert found.ok, found.problem
    assert found.shape == (128, 128, 128) and "CPU model" in found.device


def test_it_answers_what_the_benchmark_asks_of_a_gemm_configuration(answer):
    """runs.gemm_run times a LearnerGemm as it times a GemmConfig: same methods, same kinds."""
    gemm, cfg = lg.gemm_from_k_loop(answer), GEMM_BEST
    for name in ("source", "check_shape", "grid", "as_dict"):
        assert callable(getattr(gemm, name)) and callable(getattr(cfg, name)), name
    for name in ("kernel_name", "threads", "smem_bytes", "label", "variant", "b_col", "out_f32"):
        assert type(getattr(gemm, name)) is type(getattr(cfg, name)), name
    assert gemm.source().startswith(answer) and gemm.grid(128, 256, 132) == (8,)


def test_fewer_warps_down_the_block_are_right_too(answer):
    gemm = lg.gemm_from_k_loop(answer, warps_m=1)
    assert (gemm.bm, gemm.threads) == (16, 128)
    assert lg.check(gemm, "cpu", m=48, n=64, k=192).ok


def test_swapped_b_registers_name_the_warp_lane_and_accumulator(answer):
    bad = answer.replace("mma_f16_f32(acc[1], a, b[2], b[3]);",
                         "mma_f16_f32(acc[1], a, b[3], b[2]);")
    assert bad != answer
    found = lg.check(lg.gemm_from_k_loop(bad), "cpu")
    assert not found.ok
    assert "C[0,8] is block tile (0,0), warp 0, lane 0, acc[1][0]" in found.problem
    assert "expected" in found.problem and "got" in found.problem


@pytest.mark.parametrize("j", [0, 1])
@pytest.mark.parametrize("e", range(4))
def test_where_an_element_is_computed_follows_the_accumulator_layout(j, e):
    gemm = lg.gemm_from_k_loop(lg.course_solution().text.split("// ---- a whole GEMM")[0])
    for lane in range(32):
        row, col = ex.acc_expected(lane, 0, j, e)       # the exercise's own layout
        for warp in (0, 5, 15):
            r = 64 + 16 * (warp // 4) + row
            c = 128 + 16 * (warp % 4) + col
            assert gemm.warp_and_lane(r, c) == ((1, 2), warp, lane, 4 * j + e)


def test_a_fault_in_the_loop_names_the_learners_own_line(answer):
    bad = answer.replace("n_chunk + lane / 16", "n_chunk + lane / 8")
    line = next(i + 1 for i, text in enumerate(bad.split("\n")) if "b[0]), \"=r\"(b[1])" in text)
    found = lg.check(lg.gemm_from_k_loop(bad), "cpu")
    assert not found.ok and "KernelFault" in found.problem
    assert f"kernel.cu:{line}:" in found.problem


def test_a_compile_error_names_the_learners_own_line(answer):
    bad = answer.replace("mma_f16_f32(acc[1], a, b[2], b[3]);", "mma_f16_f32(acc[1], a, b[2])")
    found = lg.check(lg.gemm_from_k_loop(bad), "cpu")
    assert not found.ok and "error" in found.problem.lower()


def test_unanswered_or_reshaped_sources_get_a_sentence(answer):
    stub = answer.split("// BEGIN SOLUTION")[0] + "# YOUR CODE HERE\nraise NotImplementedError()\n}"
    with pytest.raises(lg.LearnerGemmError, match="not answered yet"):
        lg.gemm_from_k_loop(stub)
    with pytest.raises(lg.LearnerGemmError, match="is not in this source"):
        lg.gemm_from_k_loop(answer.replace("ks < 4", "ks < 2"))
    with pytest.raises(lg.LearnerGemmError, match="no closing brace"):
        lg.gemm_from_k_loop(answer[:answer.index("mma_f16_f32(acc[0]")])
    # braces inside comments and strings do not end the loop early
    commented = answer.replace("// BEGIN SOLUTION", "// BEGIN SOLUTION } /* { */")
    assert lg.k_loop_body(commented)[0].count("mma_f16_f32") == 2
    view = nb.time_my_gemm(stub)
    assert not view.ok and not view.rows and "not answered yet" in str(view)


def test_without_a_gpu_it_is_checked_and_shown_with_the_committed_figures(answer, monkeypatch):
    from ptxlab.bench import collect as cli
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no GPU in this test")
    view = nb.time_my_gemm(answer)
    assert view.ok and "is right at 128x128x128 on CPU model" in view.note
    assert "no GPU in this test" in view.note
    names = [name for name, _, _ in view.rows]
    assert names[:1] == ["the course's answer to exercise 3, as a GEMM"]
    assert {"the capstone GEMM (GEMM_BEST)", "cuBLAS (cupy.matmul, wgmma)",
            "mma.sync ceiling (registers only)"} <= set(names)
    committed = nb.committed_report()
    for _, where, vals in view.rows:
        assert where.startswith("committed") and committed["date"][:10] in where
        assert set(vals) == {2048, 4096}
    text, html = str(view), view._repr_html_()
    assert "TFLOP/s" in text and html.count("<tr>") == len(view.rows) + 1


def test_a_wrong_loop_is_not_timed(answer, monkeypatch):
    from ptxlab.bench import collect as cli
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)   # would time, if it were right
    bad = answer.replace("mma_f16_f32(acc[0], a, b[0], b[1]);", "")
    view = nb.time_my_gemm(bad)
    assert not view.ok and not view.rows and "is wrong at 128x128x128" in view.note
    assert "acc[0][" in view.note


class FakeRuns:
    def __init__(self):
        self.timed = []

    def device_info(self):
        return {"name": "NVIDIA Fake GPU", "multiprocessors": 1}

    def gemm_run(self, cfg, m, n, k, sets=3, kind="gemm"):
        self.timed.append((kind, m))
        return {"m": m, "tflops": 100.0 if kind == "learner" else 400.0, "correct": True,
                "rel_error_vs_fp32": 1e-4}

    def cublas_run(self, m, n, k, sets=3):
        return {"m": m, "tflops": 600.0}


def test_with_a_gpu_it_is_timed_beside_ours_and_cublas(answer, monkeypatch):
    from ptxlab.bench import collect as cli, runs
    fake = FakeRuns()
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    for name in ("device_info", "gemm_run", "cublas_run"):
        monkeypatch.setattr(runs, name, getattr(fake, name))
    view = nb.time_my_gemm(answer, sizes=(2048,))
    assert fake.timed == [("learner", 2048), ("gemm", 2048)]
    mine, ours, cublas = view.rows[:3]
    assert mine == ("your k-loop as a GEMM", "measured now, Fake GPU", {2048: 100.0})
    assert ours[2] == {2048: 400.0} and cublas[2] == {2048: 600.0}
    assert all(where.startswith("committed") for _, where, _ in view.rows[3:])


def test_under_the_grader_nothing_is_run_or_timed(answer, monkeypatch):
    from ptxlab.bench import collect as cli, learner_gemm, runs
    monkeypatch.setenv(GRADED_BY_GRADER_ENV, "1")
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    monkeypatch.setattr(runs, "gemm_run", lambda *a, **k: pytest.fail("timed under the grader"))
    monkeypatch.setattr(learner_gemm, "check", lambda *a, **k: pytest.fail("run under the grader"))
    view = nb.time_my_gemm(answer)
    assert view.ok and not view.rows
    assert "Not checked or timed while the grader runs this notebook" in view.note
    # nor does the performance cell measure anything on a shared grading GPU
    monkeypatch.setattr(nb, "fresh_results", lambda *a, **k: pytest.fail("benchmarked"))
    perf = nb.performance()
    assert not perf.measured_now and "the grader runs this notebook" in perf.note


def test_the_report_places_the_exercise_gemm_beside_the_others():
    res = {"mma_peak": {"tflops": 600.0},
           "gemm": [{"m": 4096, "variant": "B row-major, f16 out", "tflops": 400.0}],
           "cublas": [{"m": 4096, "tflops": 620.0}],
           "cutlass": [{"m": 4096, "variant": "B row-major, f16 out", "tflops": 410.0,
                        "correct": True}],
           "learner": [{"kernel": "learner", "m": 4096, "variant": "B row-major, f16 out",
                        "tflops": 150.0, "correct": True, "rel_error_vs_fp32": 2e-4}]}
    (row,) = report.learner_rows(res)
    assert row["vs_ours"] == 0.375 and row["vs_mma_peak"] == 0.25 and row["cutlass"] == 410.0
    text = "\n".join(report._learner_lines(res))
    assert "| 4096^3 | 150 | yes (2.0e-04) | 400 | 0.38 | 410 | 620 | 600 | 0.25 |" in text
    missing = report._learner_lines({"learner": [{"kernel": "learner", "measured": False,
                                                  "reason": "no text forms"}],
                                     "mma_peak": {"tflops": 1.0}})
    assert missing[-1] == "Not measured: no text forms"


@pytest.mark.gpu
def test_the_course_answer_as_a_gemm_on_the_gpu(answer):
    from ptxlab.bench import runs
    gemm = lg.gemm_from_k_loop(answer)
    assert lg.check(gemm, "gpu").ok
    rec = runs.gemm_run(gemm, 1024, 1024, 1024, sets=1, kind="learner")
    assert rec["correct"] and rec["tflops"] > 0 and rec["kernel"] == "learner"
    assert GEMM_BEST.variant == rec["variant"]

