"""Capstone kernels: configuration checks (pure Python), and correctness of the real kernels at
small sizes on the CPU model (skipped with the reason where ptxlab.cpu is absent) and on a GPU:
every variant of the course's small GEMM, every kernel option, and every configuration the
benchmark can pick, at its own tile size."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import backends
from ptxlab.bench import cases
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


@pytest.mark.parametrize("index", range(8))
def test_gemm_options_on_cpu_model(index):
    _run_on_cpu(cases.feature_cases(np.random.default_rng(200 + index))[index])


@pytest.mark.parametrize("index", range(len(cases.candidate_configs())))
def test_benchmark_candidates_on_cpu_model(index):
    _run_on_cpu(cases.candidate_cases(np.random.default_rng(300 + index))[index])


@pytest.mark.gpu
@pytest.mark.parametrize("small", [True, False])
def test_capstone_kernels_on_gpu(small):
    for case in cases.kernel_cases(np.random.default_rng(7), small=small):
        res = case.launch("gpu")
        problem = cases.check_output(case, res.outputs[case.compare[0]])
        assert problem is None, problem
