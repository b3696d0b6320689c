"""ptxlab.gpu: status messages, compile cache, launches and errors.

Most tests run anywhere, against a stand-in for CuPy that records what the backend asks of it;
the ``gpu``-marked ones repeat the essentials with the real CuPy on a real GPU.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest

from ptxlab import backends, gpu


# ---------------------------------------------------------------------------------------------
# A stand-in for CuPy
# ---------------------------------------------------------------------------------------------

class FakeCompileException(Exception):
    pass


class FakeKernel:
    """Runs a Python function in place of the compiled kernel."""

    def __init__(self, name, impl):
        self.name, self.impl = name, impl
        self.max_dynamic_shared_size_bytes = 48 * 1024
        self.calls = []

    def __call__(self, grid, block, args, shared_mem=0):
        self.calls.append((grid, block, shared_mem))
        self.impl(*args)


def make_fake_cupy(cc=(9, 0), count=1, name="Fake H100", sync_error=None, count_error=None,
                   kernels=None):
    compiled = []

    class RawModule:
        def __init__(self, code, options=(), backend="nvrtc"):
            self.code, self.options = code, options

        def compile(self):
            if "syntax_error" in self.code:
                raise FakeCompileException(
                    "/tmp/tmpk3x/kern.cu(7): error: identifier \"syntax_error\" is undefined\n\n"
                    "1 error detected in the compilation of \"/tmp/tmpk3x/kern.cu\".")
            compiled.append((self.code, self.options))

        def get_function(self, kname):
            if kname not in (kernels or {}):
                raise RuntimeError("CUDA_ERROR_NOT_FOUND: named symbol not found")
            return kernels[kname]

    def get_count():
        if count_error:
            raise count_error
        return count

    def sync():
        if sync_error:
            raise sync_error

    runtime = types.SimpleNamespace(
        getDeviceCount=get_count, getDevice=lambda: 0,
        getDeviceProperties=lambda i: {"name": name.encode(), "major": cc[0], "minor": cc[1]},
        driverGetVersion=lambda: 13000, runtimeGetVersion=lambda: 12090, deviceSynchronize=sync)
    fake = types.SimpleNamespace(
        __version__="0.0-fake", RawModule=RawModule,
        asarray=lambda a: np.array(a, copy=True), asnumpy=lambda a: np.array(a, copy=True),
        cuda=types.SimpleNamespace(runtime=runtime,
                                   nvrtc=types.SimpleNamespace(getVersion=lambda: (12, 9)),
                                   compiler=types.SimpleNamespace(CompileException=FakeCompileException)))
    fake.compiled = compiled
    return fake


@pytest.fixture
def use_fake(monkeypatch):
    """Install a fake CuPy; restore the real probe afterwards."""
    monkeypatch.delenv(gpu.DISABLE_ENV, raising=False)

    def install(fake):
        monkeypatch.setattr(gpu, "_import_cupy", lambda: fake)
        gpu.clear_cache()
        gpu.status(refresh=True)
        return fake

    yield install
    monkeypatch.undo()
    gpu.clear_cache()
    gpu.status(refresh=True)


def double_first(a, *rest):
    a *= 2


# ---------------------------------------------------------------------------------------------
# status()
# ---------------------------------------------------------------------------------------------

def test_status_on_an_sm90_gpu(use_fake):
    use_fake(make_fake_cupy(cc=(9, 0)))
    st = gpu.status()
    assert st.available and st.device_label == "Fake H100 (sm_90)"
    assert st.supports("stmatrix") and st.supports("mma.m16n8k16.f32.f16.f16.f32")
    assert st.driver_version == "13.0" and "\n" not in st.message


def test_status_on_an_sm80_gpu_lacks_only_stmatrix(use_fake):
    use_fake(make_fake_cupy(cc=(8, 0), name="Fake A100"))
    st = gpu.status()
    assert st.available
    assert [k for k, ok in st.supported.items() if not ok] == ["stmatrix"]
    assert "lacks stmatrix" in st.message


def test_status_on_an_sm75_gpu(use_fake):
    use_fake(make_fake_cupy(cc=(7, 5), name="Fake T4"))
    st = gpu.status()
    assert st.available and st.supports("ldmatrix") and st.supports("mma.m16n8k8.f32.f16.f16.f32")
    assert not st.supports("mma.m16n8k16.f32.f16.f16.f32") and not st.supports("stmatrix")


def test_status_on_a_too_old_gpu(use_fake):
    use_fake(make_fake_cupy(cc=(7, 0), name="Fake V100"))
    st = gpu.status()
    assert not st.available and "too old" in st.message and "sm_70" in st.message


def test_status_without_devices(use_fake):
    use_fake(make_fake_cupy(count=0))
    assert gpu.status().message == "no CUDA GPU found"


def test_status_when_the_driver_is_missing_is_one_line(use_fake):
    use_fake(make_fake_cupy(count_error=RuntimeError("cudaErrorInsufficientDriver: CUDA driver\n"
                                                     "version is insufficient")))
    st = gpu.status()
    assert not st.available and st.message and "\n" not in st.message


def test_status_without_cupy(monkeypatch, use_fake):
    def missing():
        raise ImportError("No module named 'cupy'")
    use_fake(None)
    monkeypatch.setattr(gpu, "_import_cupy", missing)
    monkeypatch.setattr(gpu, "_driver_present", lambda: True)
    st = gpu.status(refresh=True)
    assert not st.available and "CuPy is not installed" in st.message
    assert "cupy-cuda12x" in st.message and "\n" not in st.message


def test_status_without_cupy_or_driver_says_there_is_no_gpu(monkeypatch, use_fake):
    """A laptop with no NVIDIA GPU is not told to install CuPy."""
    def missing():
        raise ImportError("No module named 'cupy'")
    use_fake(None)
    monkeypatch.setattr(gpu, "_import_cupy", missing)
    monkeypatch.setattr(gpu, "_driver_present", lambda: False)
    st = gpu.status(refresh=True)
    assert not st.available and st.message == "no NVIDIA GPU driver on this machine"


def test_status_can_be_disabled(monkeypatch, use_fake):
    use_fake(make_fake_cupy())
    monkeypatch.setenv(gpu.DISABLE_ENV, "1")
    assert not gpu.status(refresh=True).available


def test_status_never_raises(monkeypatch, use_fake):
    use_fake(make_fake_cupy())
    monkeypatch.setattr(gpu, "_probe", lambda: 1 / 0)
    st = gpu.status(refresh=True)
    assert not st.available and st.message.startswith("GPU probe failed")


# ---------------------------------------------------------------------------------------------
# compile cache, launch, errors (fake CuPy)
# ---------------------------------------------------------------------------------------------

SRC = 'extern "C" __global__ void double_first(float* a) { a[threadIdx.x] *= 2.0f; }'


def test_second_launch_of_the_same_source_does_not_recompile(use_fake):
    fake = use_fake(make_fake_cupy(kernels={"double_first": FakeKernel("double_first", double_first)}))
    before = gpu.compile_count()
    for _ in range(3):
        gpu.run_kernel(SRC, "double_first", (1,), (32,), [np.ones(32, np.float32)])
    assert gpu.compile_count() == before + 1 and len(fake.compiled) == 1
    gpu.run_kernel(SRC, "double_first", (1,), (32,), [np.ones(32, np.float32)], options=("-DX=1",))
    assert gpu.compile_count() == before + 2, "other options are another module"
    code, options = fake.compiled[0]
    assert "-std=c++17" in options and any(o.startswith("-I") and o.endswith("kernels") for o in options)


def test_run_kernel_copies_arrays_back_and_keeps_inputs(use_fake):
    use_fake(make_fake_cupy(kernels={"double_first": FakeKernel("double_first", double_first)}))
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = gpu.run_kernel(SRC, "double_first", (1,), (32,), [a, np.int32(5)])
    assert np.array_equal(out[0], 2 * a) and out[0].shape == (4, 8)
    assert np.array_equal(a, np.arange(32, dtype=np.float32).reshape(4, 8)), "input untouched"
    assert out[1] == np.int32(5) and isinstance(out[1], np.int32)


def test_a_launchs_device_buffers_are_zeroed_before_they_go_back(use_fake):
    """What a kernel wrote is gone from device memory before the next launch (of the next
    student, in a warm executor) can be given the same memory."""
    fake = make_fake_cupy(kernels={"double_first": FakeKernel("double_first", double_first)})
    made, copy = [], fake.asarray
    fake.asarray = lambda a: made.append(copy(a)) or made[-1]
    use_fake(fake)
    out = gpu.run_kernel(SRC, "double_first", (1,), (32,), [np.ones(32, np.float32), np.int32(3)])
    assert (out[0] == 2).all() and len(made) == 1 and not made[0].any()


def test_large_dynamic_shared_memory_is_opted_into(use_fake):
    k = FakeKernel("double_first", double_first)
    use_fake(make_fake_cupy(kernels={"double_first": k}))
    gpu.run_kernel(SRC, "double_first", (2,), (64,), [np.ones(4, np.float32)], shared_mem=100_000)
    assert k.max_dynamic_shared_size_bytes == 100_000
    assert k.calls[-1] == ((2, 1, 1), (64, 1, 1), 100_000)


def test_compile_error_points_at_the_first_error_line(use_fake):
    use_fake(make_fake_cupy())
    with pytest.raises(backends.CompileError) as info:
        gpu.run_kernel("syntax_error;", "k", (1,), (32,), [])
    err = info.value
    assert err.line == 7 and "line 7" in str(err) and "syntax_error" in err.first_error
    assert "1 error detected" in err.log


def test_unknown_kernel_name_is_a_launch_error(use_fake):
    use_fake(make_fake_cupy(kernels={}))
    with pytest.raises(backends.LaunchError, match="no kernel named 'nope'"):
        gpu.run_kernel(SRC, "nope", (1,), (32,), [])


def test_fault_during_the_run_is_a_kernel_fault(use_fake):
    use_fake(make_fake_cupy(kernels={"double_first": FakeKernel("double_first", double_first)},
                            sync_error=RuntimeError("cudaErrorIllegalAddress: an illegal memory "
                                                    "access was encountered")))
    with pytest.raises(backends.KernelFault, match="illegal memory access.*isolate=True"):
        gpu.run_kernel(SRC, "double_first", (1,), (32,), [np.ones(32, np.float32)])


def test_no_gpu_means_backend_unavailable(use_fake):
    use_fake(make_fake_cupy(count=0))
    with pytest.raises(backends.BackendUnavailable, match="no CUDA GPU found"):
        gpu.compile_module(SRC)


# ---------------------------------------------------------------------------------------------
# What a source needs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, need", [
    ('asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};" ::);', 90),
    ("ptxlab::stmatrix_x2(addr, r);", 90),
    ("ptxlab::ldmatrix_x4_trans(r, p); ptxlab::movmatrix_trans(x);", 75),
    ("ptxlab::mma_m16n8k16_f32_f16_f16_f32(d, a, b, c);", 80),
    ("ptxlab::mma_m16n8k8_f32_f16_f16_f32(d, a, b, c);", 75),
    ("ptxlab::mma_m16n8k8_f32_tf32_tf32_f32(d, a, b, c);", 80),
    ('#include "stmatrix.cuh"\n// stmatrix is not used here\n__global__ void k() {}', 0),
    # the 8-bit and packed forms: no sm_90 GPU has them
    ('asm volatile("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%0,%1}, [%2];" ::);', 100),
    ('asm volatile("stmatrix.sync.aligned.m16n8.x4.trans.shared::cta.b8 [%0], {%1};" ::);', 100),
    ('asm("ldmatrix.sync.aligned.m8n16.x2.shared.b8x16.b4x16_p64 {%0,%1}, [%2];");', 100),
    ("ptxlab::ldmatrix_m16n16_x2_trans_b8(r, p);", 100),
])
def test_required_compute_capability(source, need):
    assert gpu.required_compute_capability(source)[0] == need


def test_reference_kernels_need_what_their_forms_say():
    from ptxlab.run import reference_cases as rc
    for f in rc.FORMS:
        need, _ = gpu.required_compute_capability(f.source())
        assert need >= f.min_sm, f.name


# ---------------------------------------------------------------------------------------------
# On a real GPU
# ---------------------------------------------------------------------------------------------

REAL_SRC = textwrap.dedent("""\
    #include "movmatrix.cuh"
    extern "C" __global__ void scale_and_transpose(unsigned* regs, float* x, float factor) {
      extern __shared__ float big[];
      const unsigned t = threadIdx.x;
      big[t * 512] = x[t] * factor;          // touch shared memory beyond 48 KiB
      __syncthreads();
      x[t] = big[((t + 1) % 32) * 512];
      regs[t] = ptxlab::movmatrix_trans(regs[t]);
    }
    """)


@pytest.mark.gpu
def test_real_gpu_status():
    st = gpu.status()
    assert st.available and st.name and st.cc_number >= 75 and st.cupy_version


@pytest.mark.gpu
def test_real_launch_copies_back_and_caches_the_compile():
    from ptxlab import emulator
    gpu.clear_cache()
    before = gpu.compile_count()
    rng = np.random.default_rng(3)
    regs = rng.integers(0, 2**32, size=32, dtype=np.uint32)
    x = rng.standard_normal(32).astype(np.float32)
    times = []
    for _ in range(2):
        t = time.perf_counter()
        res = backends.launch(REAL_SRC, "scale_and_transpose", grid=1, block=32,
                              args=[regs, x, np.float32(3.0)], shared_mem=32 * 512 * 4,
                              backend="gpu")
        times.append(time.perf_counter() - t)
    assert gpu.compile_count() == before + 1
    assert times[1] < times[0]
    assert res.backend == "gpu" and "sm_" in res.device
    assert np.array_equal(res.outputs[0], emulator.movmatrix(regs))
    assert np.array_equal(res.outputs[1], np.roll(x * np.float32(3.0), -1))
    assert res.outputs[2] == np.float32(3.0)


@pytest.mark.gpu
def test_real_compile_error_names_the_line():
    src = 'extern "C" __global__ void k(int* p) {\n  p[0] = 1;\n  p[1] = undefined_name;\n}\n'
    with pytest.raises(backends.CompileError) as info:
        backends.launch(src, "k", args=[np.zeros(2, np.int32)], backend="gpu")
    assert info.value.line == 3 and "undefined_name" in info.value.first_error


@pytest.mark.gpu
def test_real_fault_is_a_kernel_fault_with_a_clear_message():
    """In a child process: after a fault the CUDA context of a process is unusable."""
    code = textwrap.dedent("""\
        import numpy as np
        from ptxlab import backends
        src = 'extern "C" __global__ void bad(int* p) { p[1 << 28] = 1; }'
        try:
            backends.launch(src, "bad", args=[np.zeros(4, np.int32)], backend="gpu")
        except backends.KernelFault as exc:
            print("FAULT:", exc)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "FAULT:" in proc.stdout and "bad" in proc.stdout, proc.stdout + proc.stderr
