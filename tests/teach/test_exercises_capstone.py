"""The capstone notebook's exercises and its ptxlab.bench.notebook helpers: right answers pass,
wrong ones are caught with actionable messages, the models agree with layouts/emulator and with
the kernels' own formulas, and performance falls back to the committed report without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import backends, emulator, layouts
from ptxlab.bench import notebook as nb
from ptxlab.bench.kernels import GEMM_BEST, GEMM_SMALL
from ptxlab.exercises import capstone as ex

LANE = np.arange(32)
FORM = layouts.mma_form("m16n8k16", "f16", "f16", "f32", "f32")


def right_b_offset(lane, k0, n_chunk, chunks):
    row, chunk = k0 + lane % 16, n_chunk + lane // 16
    return (row * chunks + (chunk ^ (row % 8))) * 16


def right_acc(lane, i, j, e):
    return 16 * i + lane // 4 + 8 * (e // 2), 8 * j + 2 * (lane % 4) + e % 2


# ---------------------------------------------------------------------------------------------
# Exercise 1: the B address
# ---------------------------------------------------------------------------------------------

def test_b_placement_is_the_kernels_b_off_and_feeds_mma():
    rows, chunks = ex.lane_rows_chunks(ex.b_two_tiles())
    # gemm.cu: row = (lane & 7) + 8 * ((lane >> 3) & 1), chunk = ... + (lane >> 4)
    assert rows.tolist() == ((LANE & 7) + 8 * ((LANE >> 3) & 1)).tolist()
    assert chunks.tolist() == (LANE >> 4).tolist()
    b = np.arange(16 * 16, dtype=np.uint16).reshape(16, 16)        # k x n, row-major
    regs = emulator.ldmatrix(b.reshape(-1).view(np.uint8), (rows * 2 + chunks) * 16, num=4,
                             trans=True)
    for t in range(2):                                             # two n8 tiles of mma's B
        got = emulator.fragment_to_matrices(regs[:, 2 * t:2 * t + 2], FORM.b)[0]
        assert (got == b[:, 8 * t:8 * t + 8]).all()


def test_b_offset_right_and_mistakes():
    assert ex.b_trans_offset.evaluate(right_b_offset, hidden=True).passed
    eight = lambda lane, k0, n_chunk, chunks: right_b_offset(lane, k0, n_chunk, 8)
    res = ex.b_trans_offset.evaluate(eight)
    assert not res.passed and any("not 8" in a for a in res.advice)
    col_major = ex.b_trans_offset.mistakes[0][0]
    res = ex.b_trans_offset.evaluate(col_major)
    assert not res.passed and 8 in res.wrong_lanes and 0 not in res.wrong_lanes
    assert any("column-major" in a for a in res.advice)
    res = ex.b_trans_offset.evaluate(lambda lane, k0, n_chunk, chunks:
                                     right_b_offset(lane, k0, n_chunk, chunks) // 16)
    assert not res.passed and any("count bytes" in a for a in res.advice)


# ---------------------------------------------------------------------------------------------
# Exercise 2: the warp tile
# ---------------------------------------------------------------------------------------------

def test_acc_expected_is_the_c_fragment_of_layouts():
    for lane in range(32):
        for e in range(4):
            _, r, c = FORM.c.element(lane, e, 0)
            assert ex.acc_expected(lane, 2, 3, e) == (32 + r, 24 + c)


def test_acc_position_right_and_wrong():
    res = ex.acc_position.evaluate(right_acc, hidden=True)
    assert res.passed and res.details["cases"] == 2
    for bad, phrase in [(ex.acc_position.mistakes[0][0], "16 rows"),
                        (ex.acc_position.mistakes[1][0], "8 rows down"),
                        (ex.acc_position.mistakes[2][0], "add where tile (i, j) starts")]:
        res = ex.acc_position.evaluate(bad)
        assert not res.passed and any(phrase in a for a in res.advice), res.advice
    res = ex.acc_position.evaluate(lambda lane, i, j, e: (right_acc(lane, i, j, e)[0], 0))
    assert any("every row is right" in a for a in res.advice)
    assert "acc[0][0][" in res.diffs[0].where


def test_acc_position_hidden_covers_the_benchmarked_warp_tile():
    small_only = lambda lane, i, j, e: right_acc(lane, i, j % 4, e)
    assert ex.acc_position.evaluate(small_only).passed
    assert not ex.acc_position.evaluate(small_only, hidden=True).passed


# ---------------------------------------------------------------------------------------------
# Exercise 3: the k-loop kernel
# ---------------------------------------------------------------------------------------------

def test_k_loop_model_is_the_matrix_product():
    a, b = ex.k_loop_inputs(np.random.default_rng(0))
    for n_chunk in (0, 6):
        acc = ex.k_loop_model(a, b, n_chunk).view(np.float32)
        ref = a.view(np.float16).astype(np.float64) @ b.view(np.float16).astype(np.float64)
        for lane in range(32):
            for j in range(2):
                for e in range(4):
                    r, c = ex.acc_expected(lane, 0, j, e)
                    assert acc[lane, 4 * j + e] == ref[r, 8 * n_chunk + c]


def test_k_loop_mistakes_change_the_result():
    a, b = ex.k_loop_inputs(np.random.default_rng(1))
    right = ex.k_loop_model(a, b, 2)
    outputs = [right] + [ex.k_loop_model(a, b, 2, **change) for change, _ in ex.K_LOOP_MISTAKES]
    for i in range(len(outputs)):
        for j in range(i):
            assert not np.array_equal(outputs[i], outputs[j])


def _course_solution(key: str) -> str:
    """The notebook's own solution source of a kernel exercise (one copy of the kernel)."""
    from ptxlab.authoring import course_cases

    return next(src for _, exercise, src in course_cases.solution_kernels() if exercise.key == key)


K_LOOP = _course_solution(ex.k_loop_kernel.key)


@pytest.fixture(scope="module")
def kernel_backend():
    ok, why = backends.cpu_available()
    if not ok:
        pytest.skip(f"CPU model unavailable: {why}")


def test_k_loop_right_kernel_passes(kernel_backend):
    res = ex.k_loop_kernel.evaluate(K_LOOP, hidden=True)
    assert res.passed, res.report()
    assert " on " in ex.k_loop_kernel.evaluate(K_LOOP).message


@pytest.mark.parametrize("old, new, phrase", [
    (".x4.trans.", ".x4.", ".trans"),
    ("mma_f16_f32(acc[0], a, b[0], b[1]);\n        mma_f16_f32(acc[1], a, b[2], b[3]);",
     "mma_f16_f32(acc[0], a, b[0], b[2]);\n        mma_f16_f32(acc[1], a, b[1], b[3]);",
     "(b[0], b[1])"),
    ("ks < 4", "ks < 1", "first k16 step"),
    ("sA + tile_offset(lane % 16, 2 * ks + lane / 16)",
     "sA + ((lane % 16) * 8 + 2 * ks + lane / 16) * 16", None),
])
def test_k_loop_mistakes_are_recognised(kernel_backend, old, new, phrase):
    assert old in K_LOOP
    res = ex.k_loop_kernel.evaluate(K_LOOP.replace(old, new))
    assert not res.passed and "differ from the emulator" in res.message
    assert res.diffs and "acc[" in res.diffs[0].where and "C[" in res.diffs[0].where
    if phrase:
        assert any(phrase in a for a in res.advice), res.advice


def test_k_loop_unswizzled_reads_are_recognised(kernel_backend):
    src = K_LOOP.replace("sA + tile_offset(lane % 16, 2 * ks + lane / 16)",
                         "sA + ((lane % 16) * 8 + 2 * ks + lane / 16) * 16")
    src = src.replace("sB + tile_offset(16 * ks + lane % 16, n_chunk + lane / 16)",
                      "sB + ((16 * ks + lane % 16) * 8 + n_chunk + lane / 16) * 16")
    res = ex.k_loop_kernel.evaluate(src)
    assert not res.passed and any("not swizzled" in a for a in res.advice)


def test_k_loop_visible_case_moves_n(kernel_backend):
    res = ex.k_loop_kernel.evaluate(K_LOOP.replace("n_chunk + lane / 16", "lane / 16"))
    assert not res.passed and "n_chunk = 6" in res.message


def test_k_loop_unfinished():
    assert ex.k_loop_kernel.evaluate(K_LOOP.replace("mma_f16_f32(acc[0], a, b[0], b[1]);",
                                                    "raise NotImplementedError()")
                                     ).status == "not_implemented"


def test_missing_barrier_choice():
    assert ex.missing_barrier.evaluate("b").passed
    assert "per thread" in ex.missing_barrier.evaluate("a").message
    assert "STAGES - 1" in ex.missing_barrier.evaluate("d").message


# ---------------------------------------------------------------------------------------------
# ptxlab.bench.notebook
# ---------------------------------------------------------------------------------------------

def test_tiling_numbers_of_the_benchmarked_configuration():
    t = nb.gemm_tiling(GEMM_BEST)
    assert t["warp tile"] == "64 x 64"
    assert t["fp32 accumulators per thread"] == 128            # the report's register argument
    assert t["mma.sync per warp per k-tile"] == 4 * 8 * 4
    assert t["cp.async stages / total"] == f"3 / {GEMM_BEST.smem_bytes // 1024} KiB"
    assert "64 x 64" in nb.tiling_html(("a", GEMM_BEST), ("b", GEMM_SMALL))


def test_warp_map_numbers_warps_like_the_kernel():
    html = nb.warp_map_html(GEMM_SMALL)
    # 64x64 tile, 2x2 warps of 32x32: the tile at C rows 32-47, cols 40-47 is warp 3, acc[0][1]
    assert "C rows 32-47, cols 40-47: warp 3, acc[0][1]" in html


def test_kernel_excerpt_quotes_the_kernel():
    text = nb.kernel_excerpt("capstone/gemm.cu", "template <int C>", "return (u32)(row * C")
    assert text.startswith("template <int C>") and "chunk ^ (row & 7)" in text
    assert text._repr_markdown_().startswith("```c++")
    second = nb.kernel_excerpt("capstone/gemm.cu", "int read_stage = 0", occurrence=2,
                               max_lines=3)
    assert len(second.splitlines()) == 3 and "for (int kt" in second
    with pytest.raises(ValueError, match="no_such_line"):
        nb.kernel_excerpt("capstone/gemm.cu", "no_such_line")


def test_check_kernels_runs_the_real_transpose(kernel_backend):
    rows = nb.check_kernels(only="transpose")
    assert len(rows) == 2 and rows and "correct" in rows._repr_html_()


def test_check_kernels_reports_a_missing_backend_as_a_row(monkeypatch):
    from ptxlab.run import in_process

    # where the launch path looks it up (backends re-exports it for callers)
    monkeypatch.setattr(in_process, "cpu_available", lambda: (False, "removed for the test"))
    monkeypatch.setattr(backends, "cpu_available", lambda: (False, "removed for the test"))
    rows = nb.check_kernels(backend="cpu", only="transpose")
    assert not rows and "removed for the test" in rows[0].problem


def test_comparison_rows_from_the_committed_report():
    report = nb.committed_report()
    rows = nb.comparison_rows(report)
    g = next(r for r in rows if r["what"] == "GEMM B row-major, f16 out" and r["size"] == "4096^3")
    rec = next(r for r in report["gemm"] if r["m"] == 4096 and r["variant"] == "B row-major, f16 out")
    peak = report["mma_peak"]["tflops"]
    cublas = next(r for r in report["cublas"] if r["m"] == 4096)
    assert g["ours"] == f"{rec['tflops']:.0f} TFLOP/s"
    assert abs(g["ratio1"] - rec["tflops"] / cublas["tflops"]) < 1e-9
    assert abs(g["ratio2"] - rec["tflops"] / peak) < 1e-9 and 0 < g["ratio2"] < 1
    t = next(r for r in rows if r["size"] == "8192^2")
    tr = next(r for r in report["transpose"] if r["rows"] == 8192)
    cp = next(r for r in report["copy"] if r["bytes"] == 8192 * 8192 * 2)
    assert abs(t["ratio1"] - tr["tbps"] / cp["tbps"]) < 1e-9 and t["correct"]


def test_performance_without_gpu_shows_the_committed_report(monkeypatch):
    from ptxlab.bench import collect as cli
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no GPU in this test")
    view = nb.performance()
    assert not view.measured_now
    assert view.note.startswith("Committed figures, not measured on this machine")
    assert "NVIDIA H100" in view.note and nb.committed_report()["date"][:10] in view.note
    assert "no GPU in this test" in view.note
    assert len(view.rows) == 16 and len(view.images) == 2
    html = view._repr_html_()
    assert html.count("data:image/png;base64,") == 2 and "<code>ptxlab bench" in html
    assert "Committed figures" in str(view)


def test_performance_without_a_report(monkeypatch, tmp_path):
    from ptxlab.bench import collect as cli
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no GPU")
    view = nb.performance(folder=tmp_path)
    assert not view.rows and "no committed capstone report" in view.note


class FakeRuns:
    """The GPU measurements, replaced by fixed figures (the fresh path without a GPU)."""

    def device_info(self):
        return {"name": "Fake GPU", "sm": "sm_90", "multiprocessors": 1}

    def cublas_run(self, m, n, k, sets=3):
        return {"m": m, "tflops": 100.0}

    def gemm_run(self, cfg, m, n, k, sets=3):
        assert cfg == GEMM_BEST
        return {"m": m, "variant": cfg.variant, "tflops": 50.0, "correct": True}

    def mma_peak_run(self, **options):
        return {"tflops": 200.0}

    def peer_kernels(self, configs, log=print):
        assert len(configs) == 1   # the committed report's fastest configuration only
        return ["peer"], {"measured": True}

    def peer_run(self, kernel, m, n, k, sets=3):
        return {"m": m, "variant": "B row-major, f16 out", "tflops": 40.0, "correct": True}

    def copy_run(self, nbytes, sets=2):
        return {"bytes": nbytes, "tbps": 2.0}

    def cupy_transpose_run(self, rows, cols, sets=2):
        return {"rows": rows, "tbps": 0.5}

    def transpose_run(self, cfg, rows, cols, sets=2):
        return {"rows": rows, "cols": cols, "config": cfg.label, "tbps": 1.5, "correct": True}


def test_fresh_results_compare_ours_with_cublas_and_copy():
    res = nb.fresh_results((256,), (512,), runs=FakeRuns(), log=lambda s: None)
    rows = nb.comparison_rows(res)
    assert [r["ratio1"] for r in rows] == [0.5, 0.75]
    # the four-way GEMM row: cuBLAS, the ceiling and CUTLASS, all measured in this run
    assert rows[0]["ratio2"] == 0.25 and rows[0]["ratio3"] == 1.25 and rows[1]["ratio2"] == 3.0


def test_fresh_results_without_cutlass_say_why(monkeypatch):
    from ptxlab.bench import collect as cli, runs
    fake = FakeRuns()
    monkeypatch.setattr(fake, "peer_kernels",
                        lambda configs, log=print: ([], {"measured": False,
                                                         "reason": "no nvcc on PATH"}))
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    for name in ("device_info", "cublas_run", "gemm_run", "copy_run", "cupy_transpose_run",
                 "transpose_run", "mma_peak_run", "peer_kernels", "peer_run"):
        monkeypatch.setattr(runs, name, getattr(fake, name))
    view = nb.performance(gemm_sizes=(256,), transpose_sizes=(512,))
    assert "CUTLASS's GEMM was not built here: no nvcc on PATH" in view.note
    assert view.rows[0]["ref3"] == "-" and view.rows[0]["ratio2"] == 0.25


def test_performance_with_a_gpu_measures_now(monkeypatch):
    from ptxlab.bench import collect as cli, runs
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    fake = FakeRuns()
    for name in ("device_info", "cublas_run", "gemm_run", "copy_run", "cupy_transpose_run",
                 "transpose_run", "mma_peak_run", "peer_kernels", "peer_run"):
        monkeypatch.setattr(runs, name, getattr(fake, name))
    view = nb.performance(gemm_sizes=(256,), transpose_sizes=(512,))
    assert view.measured_now and view.note.startswith("Measured now on Fake GPU")
    assert not view.images and len(view.rows) == 2
    assert nb.performance(fresh=False).measured_now is False


def test_bank_study_table_agrees_everywhere():
    html = nb.bank_study_html()
    assert html.count(">yes<") == 8 and ">NO<" not in html
    assert "16384 / 16384" in html
