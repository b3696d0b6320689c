"""Capstone kernels: configuration checks (pure Python), and correctness of the real kernels at
small sizes on the CPU model (skipped with the reason where ptxlab.cpu is absent) and on a GPU:
every variant of the course's small GEMM, every kernel option, and every configuration the
benchmark can pick, at its own tile size."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ptxlab import backends
from ptxlab.bench import cases, kernels
from ptxlab.bench.kernels import (GEMM_BEST, GEMM_CANDIDATES, GEMM_SMALL, GemmConfig,
                                  TransposeConfig)


def test_gemm_shape_check_names_the_bad_dimension():
    with pytest.raises(ValueError, match="K=100 is not a multiple of 64"):
        GEMM_BEST.check_shape(256, 256, 100)
    GEMM_BEST.check_shape(4096, 4096, 4096)


def test_transpose_shape_check():
    with pytest.raises(ValueError, match="whole 64x64 tiles"):
        TransposeConfig().check_shape(64, 96)


def test_gemm_shared_memory_covers_ring_and_epilogue():
    # ring: 3 stages x (128x64 + 64x256) halves = 147456 B; f16 staging 8 warps x 64x64 x 2 B
    # inside it (one tile per block), after it when persistent
    assert GEMM_BEST.ring_bytes == 3 * (128 * 64 + 64 * 256) * 2
    assert GEMM_BEST.staging_bytes == 8 * 64 * 64 * 2
    assert GEMM_BEST.smem_bytes == GEMM_BEST.ring_bytes
    assert GEMM_BEST.replace(persistent=True).smem_bytes == GEMM_BEST.ring_bytes + 8 * 64 * 64 * 2
    # f32: one m16 slab of 16 x 32 floats per warp; staged rows: 16 x 64 halves per warp
    small_f32 = GEMM_SMALL.replace(out_f32=True)
    assert small_f32.smem_bytes == max(2 * (64 * 32 + 32 * 64) * 2, 4 * 16 * 32 * 4)
    assert GEMM_BEST.replace(epi_rows=16, persistent=True).smem_bytes == \
        GEMM_BEST.ring_bytes + 8 * 16 * 64 * 2


def test_every_candidate_fits_in_shared_memory_and_has_its_own_label():
    for cfg in cases.candidate_configs():
        assert cfg.smem_bytes <= 227 * 1024 // cfg.min_blocks, cfg.label
    labels = [(c.label, c.variant) for c in cases.candidate_configs()]
    assert len(set(labels)) == len(labels)
    assert GEMM_BEST in GEMM_CANDIDATES


def test_persistent_grid_is_one_block_per_sm_at_most_one_per_tile():
    p = GEMM_BEST.replace(persistent=True)
    assert p.grid(4096, 4096, 132) == (132,)
    assert p.grid(256, 256, 132) == (2,)
    assert p.replace(min_blocks=2).grid(8192, 8192, 132) == (264,)
    assert GEMM_BEST.grid(4096, 4096, 132) == (32 * 16,)


def test_sources_define_every_parameter():
    src = GemmConfig(b_col=True, out_f32=True).source()
    assert "#define GEMM_B_COL 1" in src and "#define GEMM_OUT_F32 1" in src
    assert src.rstrip().endswith('#include "capstone/gemm.cu"')


def test_reference_check_catches_unwritten_and_wrong_outputs():
    rng = np.random.default_rng(3)
    case = cases.kernel_cases(rng)[0]
    poisoned = case.args[2]
    assert "never written" in cases.check_output(case, poisoned)
    good = cases.reference_output(case).astype(np.float16).view(np.uint16)
    assert cases.check_output(case, good) is None
    wrong = good.copy()
    wrong[5, 7] ^= 0x4000
    assert cases.check_output(case, wrong) is not None
    tcase = next(c for c in cases.kernel_cases(rng) if "transpose" in c.name)
    assert cases.check_output(tcase, tcase.args[0].T.copy()) is None
    assert "out[0,0]" in cases.check_output(tcase, tcase.args[1])


def _cpu_reason() -> str | None:
    ok, why = backends.cpu_available()
    return None if ok else why


def _run_on_cpu(case):
    reason = _cpu_reason()
    if reason:
        pytest.skip(f"CPU model unavailable: {reason}")
    res = case.launch("cpu")
    problem = cases.check_output(case, res.outputs[case.compare[0]])
    assert problem is None, problem


@pytest.mark.parametrize("index", range(6))
def test_capstone_kernels_on_cpu_model(index):
    _run_on_cpu(cases.kernel_cases(np.random.default_rng(100 + index))[index])


@pytest.mark.parametrize("index", range(len(cases.feature_cases(np.random.default_rng(0)))))
def test_gemm_options_on_cpu_model(index):
    _run_on_cpu(cases.feature_cases(np.random.default_rng(200 + index))[index])


@pytest.mark.parametrize("index", range(len(cases.candidate_configs())))
def test_benchmark_candidates_on_cpu_model(index):
    _run_on_cpu(cases.candidate_cases(np.random.default_rng(300 + index))[index])


@pytest.mark.parametrize("index", range(len(kernels.TRANSPOSE_SWEEP)))
def test_transpose_sweep_tiles_on_cpu_model(index):
    _run_on_cpu(cases.transpose_sweep_cases(np.random.default_rng(400 + index))[index])


def test_split_k_leaves_its_counters_at_zero_and_needs_whole_slices():
    """Each launch's last block per tile resets the tile's counter, so the next launch starts
    from zero; a K that does not split into whole k-tiles per slice is refused."""
    cfg = GEMM_SMALL.replace(split_k=2)
    assert cfg.grid(128, 128) == (8,) and cfg.scratch(128, 128) == [(128 * 128 * 2, "float32"),
                                                                     (4, "int32")]
    assert GEMM_SMALL.scratch(128, 128) == []
    with pytest.raises(ValueError, match="K=96 is not a multiple of 64"):
        cfg.check_shape(128, 128, 96)
    reason = _cpu_reason()
    if reason:
        pytest.skip(f"CPU model unavailable: {reason}")
    case = cases.gemm_case(np.random.default_rng(9), cfg, 128, 128, 128)
    res = case.launch("cpu")
    assert cases.check_output(case, res.outputs[2]) is None
    assert not res.outputs[-1].any()
    # Without the reduction (one slice's partial only) the check fails.
    half = cases.gemm_case(np.random.default_rng(9), GEMM_SMALL, 128, 128, 64)
    half.args[0][:] = case.args[0][:, :64]
    half.args[1][:] = case.args[1][:64]
    assert cases.check_output(case, half.launch("cpu").outputs[2]) is not None


def test_the_benchmark_picks_the_configuration_of_the_problem_size():
    for size, by_layout in kernels.GEMM_BY_SIZE.items():
        for b_col, cfg in by_layout.items():
            assert cfg.b_col == b_col and not cfg.out_f32
            assert cfg in kernels.GEMM_SWEEP[size], f"{size}: {cfg.label} was not swept there"
            assert kernels.gemm_config_for(size, size, size, b_col=b_col) == cfg
            assert kernels.gemm_config_for(size, size, size, b_col=b_col,
                                           out_f32=True) == cfg.replace(out_f32=True)
    small = min(kernels.GEMM_BY_SIZE)
    assert kernels.gemm_config_for(2 * small, 2 * small, 3 * small) == \
        kernels.GEMM_BY_SIZE[2 * small][False]
    for size, cfg in kernels.TRANSPOSE_BY_SIZE.items():
        assert cfg in kernels.TRANSPOSE_SWEEP and kernels.transpose_config_for(size, size) == cfg
    with pytest.raises(ValueError, match="not a multiple"):
        kernels.gemm_config_for(1000, 1000, 1000)


def test_the_per_size_tables_are_the_committed_sweeps_fastest():
    """GEMM_BY_SIZE and TRANSPOSE_BY_SIZE hold what the committed sweeps measured fastest (the
    later ones, large/ and s3_2048/ to s8_4096/, for the sizes and B layouts they measured)."""
    import json
    from pathlib import Path

    from ptxlab.bench import tune
    folder = Path(__file__).parents[2] / "reports/capstone/sweep_2026-11-26"
    sweep = json.loads((folder / "tune.json").read_text())
    picks = tune.fastest_by_size(sweep)
    for later in ("large", "s3_2048", "s4_4096", "s5_4096", "s6_2048", "s7_8192", "s8_4096"):
        sweep_picks = tune.fastest_by_size(json.loads((folder / later / "tune.json").read_text()))
        for size, by_layout in sweep_picks.items():
            picks.setdefault(size, {}).update(by_layout)
    assert sorted(picks) == sorted(kernels.GEMM_BY_SIZE)
    for size, by_layout in kernels.GEMM_BY_SIZE.items():
        for b_col, cfg in by_layout.items():
            assert GemmConfig(**picks[size][b_col]["params"]) == cfg, (size, b_col)
    for size, rec in tune.fastest_transpose_by_size(sweep).items():
        assert TransposeConfig(**rec["params"]) == kernels.TRANSPOSE_BY_SIZE[size]


def test_noisy_timings_are_flagged_and_rounds_keep_their_spread():
    from ptxlab.bench import runs
    from ptxlab.bench.timing import Timing
    steady = Timing(tuple(1.0 + 0.001 * i for i in range(20)), batch=8, method="graph")
    noisy = Timing(tuple([1.0] * 10 + [1.5] * 10))
    assert not steady.noisy and steady.as_dict()["batch"] == 8
    assert noisy.noisy and noisy.as_dict()["noisy"] and noisy.as_dict()["min_ms"] == 1.0
    recs = [{"kernel": "gemm", "config": "c", "variant": "v", "m": 64, "tflops": t,
             "correct": True, "round": r, "spread": sp, "min_ms": 1.0 / t, "median_ms": 1.1 / t}
            for r, (t, sp) in enumerate([(10, 0.02), (11, 0.2), (12, 0.3)])]
    merged = runs.merge_rounds(recs)[0]
    assert merged["spread_rounds"] == [0.02, 0.2, 0.3] and merged["spread"] == 0.2
    assert merged["noisy"] and merged["min_ms"] == 1.0 / 12
    assert abs(merged["rounds_spread"] - 2 / 11) < 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("small", [True, False])
def test_capstone_kernels_on_gpu(small):
    for case in cases.kernel_cases(np.random.default_rng(7), small=small):
        res = case.launch("gpu")
        problem = cases.check_output(case, res.outputs[case.compare[0]])
        assert problem is None, problem


# ---------------------------------------------------------------------------------------------
# The CUTLASS peer and the report, without a GPU
# ---------------------------------------------------------------------------------------------

def test_peer_says_why_it_cannot_be_built(monkeypatch, tmp_path):
    from ptxlab.bench import cutlass_peer, runs
    monkeypatch.setenv("PTXLAB_CUTLASS_INCLUDE", str(tmp_path))
    monkeypatch.setenv("PTXLAB_PEER_CACHE", str(tmp_path / "cache"))
    why = cutlass_peer.find_headers()[1]
    assert why.endswith("has no cutlass/gemm/device/gemm.h")
    monkeypatch.setattr(cutlass_peer, "find_nvcc", lambda: None)
    assert "nvcc is not installed" in cutlass_peer.problem()
    kernels, info = runs.peer_kernels(None, log=lambda s: None)
    assert kernels == [] and info == {"measured": False, "reason": cutlass_peer.problem()}
    built = cutlass_peer.build(cutlass_peer.PEER_SWEEP[:1])
    assert list(built.values()) == [cutlass_peer.problem()]


def test_peer_headers_from_a_wheel_and_its_nvcc_command(monkeypatch, tmp_path):
    import zipfile
    from pathlib import Path
    from ptxlab.bench import cutlass_peer
    wheel = tmp_path / "nvidia_cutlass-9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("cutlass_library/source/include/cutlass/gemm/device/gemm.h", "// gemm\n")
        zf.writestr("cutlass_library/source/include/cutlass/version.h",
                    "#define CUTLASS_MAJOR 9\n#define CUTLASS_MINOR 9\n#define CUTLASS_PATCH 0\n")
    monkeypatch.delenv("PTXLAB_CUTLASS_INCLUDE", raising=False)
    monkeypatch.setenv("PTXLAB_PEER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cutlass_peer, "_wheels", lambda: [wheel])
    monkeypatch.setattr(cutlass_peer._importlib_util, "find_spec", lambda name: None)
    include, how = cutlass_peer.find_headers()
    assert (include / "cutlass/gemm/device/gemm.h").exists() and "unpacked" in how
    assert cutlass_peer.cutlass_version(include) == "9.9.0"
    cfg = cutlass_peer.PeerConfig(tb_m=256, tb_n=128, stages=4, b_col=True)
    cmd = cutlass_peer.nvcc_command(cfg, Path("nvcc"), include, tmp_path / "x.so")
    assert "-gencode=arch=compute_90,code=sm_90" in cmd and "-DPEER_B_COL=1" in cmd
    assert "-DPEER_TB_M=256" in cmd and "-DPEER_STAGES=4" in cmd and f"-I{include}" in cmd
    assert cmd[-3].endswith("kernels/cutlass_peer/gemm_sm80.cu")


def test_rounds_merge_to_medians_and_the_fastest_peer():
    from ptxlab.bench import runs
    recs = [{"kernel": "cutlass", "config": c, "variant": "v", "m": 64, "tflops": t,
             "correct": True, "round": r}
            for r, (a, b) in enumerate([(10, 30), (12, 20), (11, 25)]) for c, t in (("x", a), ("y", b))]
    recs.append({"config": "z", "m": 64, "error": "boom", "round": 0})
    merged = {r["config"]: r for r in runs.merge_rounds(recs)}
    assert merged["x"]["tflops"] == 11 and merged["y"]["tflops_rounds"] == [30, 20, 25]
    assert "z" not in merged and "round" not in merged["x"]
    assert [r["config"] for r in runs.best_by(list(merged.values()), "cutlass")] == ["y"]


def _fake_results(peer_measured: bool) -> dict:
    def rec(kernel, variant, m, tflops, **kw):
        return {"kernel": kernel, "config": "c", "variant": variant, "m": m, "tflops": tflops,
                "correct": True, "rel_error_vs_fp32": 1e-4, **kw}
    peak = {"tflops": 600.0, "best": {"chains": 12, "threads": 128, "blocks": 4}, "trials": [1]}
    res = {"command": "ptxlab bench", "date": "2026-01-01 00:00:00",
           "device": {"name": "GPU", "sm": "sm_90", "multiprocessors": 1, "cuda_driver": 1,
                      "cuda_runtime": 1, "cupy": "x"},
           "mma_peak": peak, "mma_peak_vary": {**peak, "tflops": 500.0},
           "gemm": [rec("gemm", "B row-major, f16 out", 4096, 480.0)],
           "cublas": [rec("cublas", "cupy", 4096, 800.0)], "cutlass": [],
           "transpose": [], "copy": [], "cupy_transpose": [],
           "bank_study": {"measured": False, "reason": "--no-ncu given"}}
    if peer_measured:
        res["cutlass"] = [rec("cutlass", "B row-major, f16 out", 4096, 500.0)]
        res["peer"] = {"measured": True, "cutlass_version": "9"}
        res["cutlass_sweep"] = list(res["cutlass"])
    else:
        res["peer"] = {"measured": False, "reason": "nvcc is not installed"}
    return res


def test_report_puts_cutlass_beside_ours_or_says_why_not():
    from ptxlab.bench import report
    row = report.gemm_rows(_fake_results(True))[0]
    assert row["vs_mma_peak"] == 0.8 and row["target_met"] and row["vs_cutlass"] == 0.96
    assert row["peer_target_met"] is False and row["vs_mma_peak_vary"] == 0.96
    text = report.markdown(_fake_results(True), [])
    assert "| 500 (c) | 0.96 |" in text and "| met | **missed** |" in text
    text = report.markdown(_fake_results(False), [])
    assert "not measured (why: below)" in text and "Not measured: nvcc is not installed" in text
    assert "CUTLASS: not measured (nvcc is not installed)" in report.table_lines(
        _fake_results(False))


def test_report_says_what_held_the_clock_and_prints_the_ratio_table():
    from ptxlab.bench import report
    res = _fake_results(True)
    res["device"]["max_sm_clock_mhz"] = 1980.0
    res["gemm"][0].update(nvml_sm_clock_mhz=1500.0, nvml_power_capped=1.0, nvml_power_w=699.0)
    res["cutlass"][0].update(nvml_sm_clock_mhz=1700.0, nvml_power_capped=0.1, nvml_power_w=600.0)
    res["cublas"][0].update(nvml_sm_clock_mhz=1980.0, nvml_power_capped=0.0, nvml_power_w=500.0)
    assert report.limit_of(res["gemm"][0], res["device"]) == "power"
    assert report.limit_of(res["cutlass"][0], res["device"]) == "clock"
    assert report.limit_of(res["cublas"][0], res["device"]) == "none"
    assert report.limit_of({"tflops": 1}, res["device"]) is None
    # At full clock the power limit named in the samples held nothing back.
    assert report.limit_of({"nvml_sm_clock_mhz": 1980.0, "nvml_power_capped": 0.8},
                           res["device"]) == "none"
    text = report.markdown(res, [])
    assert "| 4096^3 | row-major | 0.96 | - | 0.60 | 0.80 | 0.96 | power / clock / none |" in text
    assert "power (100% of samples at the limit, 1500 MHz)" in text
    assert "in turn, round r starting with the r-th kernel" in text   # a report of old runs


def test_the_ratio_to_cutlass_is_also_given_round_by_round():
    """Each round measures ours and CUTLASS on the board as that round left it: their ratio
    per round (median, lowest, highest) shows how far the comparison itself moves."""
    from ptxlab.bench import report
    res = _fake_results(True)
    res["order"], res["warmup_ms"] = "balanced", 300.0
    ours, peer = res["gemm"][0], res["cutlass"][0]
    res["gemm_rounds"] = [
        {**ours, "round": 0, "tflops": 400.0}, {**peer, "round": 0, "tflops": 500.0},
        {**ours, "round": 1, "tflops": 510.0}, {**peer, "round": 1, "tflops": 500.0},
        {**ours, "round": 2, "tflops": 490.0}, {**peer, "round": 2, "tflops": 490.0},
        {**peer, "round": 3, "tflops": 1.0},                            # ours failed there
        {**ours, "round": 4, "tflops": 1.0, "variant": "B col-major, f16 out"},
        {**peer, "round": 4, "tflops": 1.0, "config": "other tile"}]
    assert report.paired_ratios(res, ours, peer) == [0.8, 1.02, 1.0]
    assert report.paired_ratios(res, ours, None) == []
    text = report.markdown(res, [])
    assert "| 0.96 | 1.000 (lowest 0.800, highest 1.020, 3 rounds) |" in text
    assert "in a balanced order" in text and "warmed up for 300 ms" in text
    assert "| **missed** |" in text   # too few rounds for an interval: the ratio of medians


def test_a_cell_below_cutlass_is_level_only_when_the_rounds_cannot_tell_them_apart():
    from ptxlab.bench import report
    assert report.median_interval([5, 1, 4, 2, 3]) is None
    assert report.median_interval([6, 1, 5, 2, 4, 3]) == (1, 6)            # 96.9%
    assert report.median_interval(list(range(12))) == (2, 9)              # 96.1%
    assert report.median_interval(list(range(20))) == (5, 14)             # 95.9%
    res = _fake_results(True)           # ours 480, CUTLASS 500: 0.96 as a ratio of medians
    ours, peer = res["gemm"][0], res["cutlass"][0]
    def rounds(ratios):
        res["gemm_rounds"] = [rec for i, x in enumerate(ratios)
                              for rec in ({**ours, "round": i, "tflops": 500.0 * x},
                                          {**peer, "round": i, "tflops": 500.0})]
        return report.gemm_rows(res)[0]
    row = rounds([0.90, 0.92, 0.95, 0.97, 0.98, 0.99, 1.00, 1.01, 1.02, 1.03, 1.05, 1.08])
    assert row["vs_cutlass_interval"] == (0.95, 1.03)
    assert row["peer_target_met"] is False and row["peer_level"] is True
    assert "| level within noise (0.950 - 1.030 round by round) |" in report.markdown(res, [])
    assert "level" in report.table_lines(res)[1]
    row = rounds([0.94, 0.95, 0.95, 0.96, 0.96, 0.96, 0.97, 0.97, 0.98, 0.98, 0.99, 1.01])
    assert row["vs_cutlass_interval"] == (0.95, 0.98) and row["peer_level"] is False
    assert "| **missed** |" in report.markdown(res, [])


def test_a_noisy_figure_is_flagged_and_no_target_is_judged_on_it():
    from ptxlab.bench import report
    res = _fake_results(True)
    res["cutlass"][0].update(noisy=True, spread=0.25)
    row = report.gemm_rows(res)[0]
    assert row["noisy"] == ["CUTLASS"] and "peer_target_met" not in row
    assert row["target_met"]   # against the ceiling and cuBLAS, neither of them noisy
    text = report.markdown(res, [])
    assert "(500: noisy) (c)" in text and "| met | not judged: noisy |" in text
    assert "| 0.96 (noisy: CUTLASS) | - | 0.60 |" in text
    res["cublas"][0].update(noisy=True)
    row = report.gemm_rows(res)[0]
    assert "target_met" not in row and "peer_target_met" not in row


def test_the_counters_script_reads_configurations_before_it_needs_ncu(tmp_path):
    import subprocess
    import sys
    script = Path(__file__).parents[2] / "measure" / "gpu" / "gpu_gemm_counters.py"
    def run(*args):
        return subprocess.run([sys.executable, str(script), "--out", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PATH": str(tmp_path)})   # no ncu on it
    bad = run("--ours", "b_col=1,bogus=2")
    assert bad.returncode != 0 and "unknown parameter 'bogus' of GemmConfig" in bad.stderr
    assert "at least one configuration" in run().stderr
    good = run("--ours", "b_col=1", "--peer", "stages=4")
    assert good.returncode == 2 and "ncu (Nsight Compute) is not on PATH" in good.stderr


def test_profile_target_reads_both_kinds_of_configuration():
    from ptxlab.bench import gemm_profile, profile_target
    from ptxlab.bench.cutlass_peer import PeerConfig
    assert profile_target.config_params(PeerConfig, ["tb_m=256", "b_col=1"]) == {
        "tb_m": 256, "b_col": True}
    with pytest.raises(SystemExit, match="unknown parameter 'bogus'"):
        profile_target.config_params(GemmConfig, ["bogus=1"])
    target, kfilter = gemm_profile.target_args(PeerConfig(), 8192)
    assert target[:2] == ["--peer", "8192"] and kfilter == "regex:cutlass"
    target, kfilter = gemm_profile.target_args(GEMM_BEST, 4096)
    assert target[0] == "4096" and "split_copies=1" in target and kfilter == "gemm_f16"


def test_the_fixed_cost_of_a_block_tile_is_the_intercept_of_a_k_sweep():
    """The prologue-and-epilogue share in the report: t(K) = fixed + per_k K, fitted."""
    from ptxlab.bench import report, runs
    ks = [256, 512, 1024, 2048, 4096]
    fit = runs.fixed_cost_fit(ks, [0.02 + 0.0001 * k for k in ks])
    assert abs(fit["fixed_ms"] - 0.02) < 1e-9 and abs(fit["per_k_ms"] - 1e-4) < 1e-12
    assert abs(fit["share"][-1] - 0.02 / 0.4296) < 1e-9 and fit["max_residual_ms"] < 1e-9
    res = {"fixed_cost": {"config": "cfg", "variant": "B row-major, f16 out", "m": 4096,
                          "n": 4096, "correct": True, **fit}}
    text = "\n".join(report._fixed_cost_lines(res))
    assert "t = 20.0 us + K x 100.00 ns" in text
    assert "43.9% of the time at K = 256, 4.7% of the time at K = 4096" in text
    assert report._fixed_cost_lines({}) == []


@pytest.mark.parametrize("n", range(1, 10))
def test_balanced_orders_put_every_job_after_every_other_equally_often(n):
    from ptxlab.bench import runs
    orders = runs.balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    for pos in range(n):   # every job in every position equally often
        counts = {j: sum(o[pos] == j for o in orders) for j in range(n)}
        assert len(set(counts.values())) == 1
    follows = {}
    for o in orders:
        for a, b in zip(o, o[1:]):
            follows[a, b] = follows.get((a, b), 0) + 1
    assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1


def test_rounds_run_in_the_order_asked():
    from ptxlab.bench import runs
    jobs = [(name, 1, lambda name=name: {"config": name}) for name in "abcd"]
    seen = [(r["round"], r["position"], r["config"])
            for r in runs.in_rounds(jobs, 4, log=lambda r: None, order="balanced")]
    assert [c for _, _, c in seen[:4]] == ["a", "b", "d", "c"]
    pairs = {(x[2], y[2]) for x, y in zip(seen, seen[1:]) if x[0] == y[0]}
    assert len(pairs) == 12   # every ordered pair of neighbours once
    rotated = [r["config"] for r in runs.in_rounds(jobs, 2, log=lambda r: None, order="rotate")]
    assert rotated == list("abcd") + list("bcda")
    with pytest.raises(ValueError, match="one of balanced, rotate"):
        runs.in_rounds(jobs, 1, log=lambda r: None, order="random")


def test_a_failing_job_becomes_a_record_and_the_rounds_go_on():
    from ptxlab.bench import runs

    def boom():
        raise RuntimeError("no GPU")

    assert runs.record_of("cfg", 256, boom) == {"config": "cfg", "m": 256,
                                                "error": "RuntimeError: no GPU"}
    recs = runs.in_rounds([("cfg", 256, boom), ("ok", 256, lambda: {"m": 256})], 2,
                          log=lambda r: None)
    assert [r.get("error", "ok") for r in recs] == ["RuntimeError: no GPU", "ok", "ok",
                                                     "RuntimeError: no GPU"]
    assert [r["round"] for r in recs] == [0, 0, 1, 1]
