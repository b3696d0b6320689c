"""Every kernel launch of the benchmark and of the GPU scripts, run on the CPU model at tiny sizes.

The benchmark launches its kernels with raw CuPy calls, which pack whatever they are given: a
kernel that gained a parameter while its launch did not crashed ``ptxlab bench`` on the H100.
Here the benchmark's own run functions (the exact calls ``ptxlab bench``, ``ptxlab.bench.tune``
and the profiling target make) run with numpy standing in for CuPy and the CPU model standing in
for the GPU; every launch passes through the same argument check the GPU path uses. The GPU
verification scripts run whole, on the CPU backend, with a few cases each. (The notebooks'
launches run in ``tests/authoring/test_notebooks.py``, every notebook top to bottom on the CPU model.)
"""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from ptxlab.bench import bank_study, runs
from ptxlab.bench.kernels import GEMM_SMALL, TRANSPOSE_SMALL, GemmConfig, TransposeConfig
from ptxlab.bench.timing import Timing
from ptxlab.run import backends, kernel_params


def _cpu_reason() -> str | None:
    ok, why = backends.cpu_available()
    return None if ok else why


pytestmark = pytest.mark.skipif(_cpu_reason() is not None,
                                reason=f"the CPU model is unavailable: {_cpu_reason()}")


class _RandomState:
    """``cupy.random.RandomState``'s calls the benchmark makes, on numpy."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)

    def standard_normal(self, shape, dtype=np.float64):
        return self._rng.standard_normal(shape, dtype=dtype)

    def randint(self, low, high, shape, dtype=np.int64):
        return self._rng.integers(low, high, shape, dtype=dtype)


def _numpy_as_cupy() -> types.SimpleNamespace:
    """The part of CuPy the benchmark uses, on numpy: arrays live in host memory."""
    fake = types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np)
                                    if not name.startswith("_")})
    fake.random = types.SimpleNamespace(RandomState=_RandomState)
    fake.asnumpy = np.asarray
    fake.cuda = types.SimpleNamespace(Device=lambda *a: types.SimpleNamespace(
        synchronize=lambda: None, id=0))
    return fake


class _CpuKernel:
    """Stands in for a CuPy RawKernel: runs the launch on the CPU model, outputs written back."""

    def __init__(self, source: str, name: str, log: list):
        self.source, self.name, self.log = source, name, log
        self.max_dynamic_shared_size_bytes = 48 * 1024

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        res = backends.launch(self.source, self.name, grid=grid, block=block, args=list(args),
                              shared_mem=shared_mem, backend="cpu", isolate=False)
        for arg, out in zip(args, res.outputs):
            if isinstance(arg, np.ndarray):
                arg[...] = out
        self.log.append((self.name, len(args)))


@pytest.fixture
def cpu_bench(monkeypatch):
    """The benchmark's run functions with numpy for CuPy and the CPU model for the GPU."""
    log: list = []
    runs.compile_kernel.cache_clear()
    monkeypatch.setattr(runs, "cupy_module", _numpy_as_cupy)
    monkeypatch.setattr(runs, "_raw_kernel", lambda source, name: _CpuKernel(source, name, log))
    monkeypatch.setattr(runs, "device_info", lambda: {"multiprocessors": 1})

    def time_once(call, *, sets: int = 1, **_):
        call(0)
        return Timing((1.0,))

    monkeypatch.setattr(runs, "time_gpu", time_once)
    yield log
    runs.compile_kernel.cache_clear()


@pytest.mark.parametrize("b_col, out_f32", [(False, False), (True, True)])
def test_gemm_run_launches_and_checks(cpu_bench, b_col, out_f32):
    cfg = GemmConfig(**{**GEMM_SMALL.as_dict(), "b_col": b_col, "out_f32": out_f32})
    rec = runs.gemm_run(cfg, 64, 64, 64, sets=1, time_it=False)
    assert cpu_bench == [(cfg.kernel_name, 6)]
    assert rec["correct"], rec


@pytest.mark.parametrize("movmatrix", [False, True])
def test_transpose_run_launches_and_checks(cpu_bench, movmatrix):
    cfg = TransposeConfig(**{**TRANSPOSE_SMALL.as_dict(), "movmatrix": movmatrix})
    rec = runs.transpose_run(cfg, 64, 32, sets=1, time_it=False)
    assert cpu_bench == [(cfg.kernel_name, 4)] and rec["correct"], rec


def test_mma_peak_run_launches_with_every_parameter(cpu_bench):
    rec = runs.mma_peak_run(chains_options=(2,), threads_options=(32,),
                            blocks_per_sm_options=(1,), iters=2)
    assert cpu_bench == [("mma_peak", 4)]
    assert rec["best"]["chains"] == 2 and rec["tflops"] > 0
    assert "sm_clock_mhz" in rec["best"]


def test_bank_study_target_launches(cpu_bench, monkeypatch):
    monkeypatch.setattr(bank_study, "STUDY", bank_study.STUDY[:1])
    monkeypatch.setattr(bank_study, "REPS", 1)
    bank_study.run_target()
    assert cpu_bench == [(bank_study.KERNEL_NAME, 2)]


# ---------------------------------------------------------------------------------------------
# The check itself
# ---------------------------------------------------------------------------------------------

def test_a_missing_argument_is_refused_before_the_launch():
    launched = []
    sizes = kernel_params.param_sizes(runs.mma_peak_source(2), "mma_peak")
    assert sizes == (8, 8, 4, 8)
    kern = runs.CheckedKernel("mma_peak", lambda *a, **k: launched.append(a), sizes)
    seed, out = np.zeros(192, np.uint32), np.zeros(32, np.float32)
    with pytest.raises(kernel_params.KernelArgumentError,
                       match=r"'mma_peak' takes 4 parameters .*passes 3 arguments"):
        kern((1,), (32,), (seed, out, np.int32(1)))
    with pytest.raises(kernel_params.KernelArgumentError,
                       match="parameter 2 has 4 bytes; the int64 scalar passed has 8"):
        kern((1,), (32,), (seed, out, np.int64(1), np.zeros(4, np.uint64)))
    with pytest.raises(kernel_params.KernelArgumentError, match="parameter 2: a Python int"):
        kern((1,), (32,), (seed, out, 1, np.zeros(4, np.uint64)))
    with pytest.raises(kernel_params.KernelArgumentError, match="parameter 2: an array"):
        kern((1,), (32,), (seed, out, np.zeros(1, np.int32), np.zeros(4, np.uint64)))
    assert launched == []
    kern((1,), (32,), (seed, out, np.int32(1), np.zeros(4, np.uint64)))
    assert len(launched) == 1


def test_an_unknown_kernel_name_is_named():
    with pytest.raises(kernel_params.KernelArgumentError, match="no kernel 'nope'.*mma_peak"):
        kernel_params.param_sizes(runs.mma_peak_source(2), "nope")


# ---------------------------------------------------------------------------------------------
# The GPU verification scripts, whole, on the CPU backend
# ---------------------------------------------------------------------------------------------

SCRIPTS = Path(__file__).resolve().parents[2] / "measure" / "gpu"


@pytest.mark.parametrize("script, args, says", [
    ("verify_hardware.py", ["--backend", "cpu", "--cases", "2", "--vector-cases", "1",
                            "--mma-vector-cases", "1", "--no-probe", "--out-dir", "{tmp}",
                            "--vectors-dir", "{tmp}"], ", 0 mismatched"),
    ("collect_mma_rounding.py", ["--backend", "cpu", "--cases", "2", "--out", "{tmp}"],
     "0 of "),
    ("compare_backends.py", ["--backend-a", "cpu", "--backend-b", "cpu", "--rounds", "1",
                             "--no-course", "--out-dir", "{tmp}"], "0 differing, 0 errors"),
])
def test_gpu_scripts_run_every_launch_on_the_cpu_model(tmp_path, script, args, says):
    cmd = [sys.executable, str(SCRIPTS / script), *(a.format(tmp=tmp_path) for a in args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert says in proc.stdout, proc.stdout[-3000:]
