"""Kernels pasted from an article: standard headers, C++ kernel names, template instances.

A learner pastes a kernel as an article prints it: ``#include <cstdint>`` and friends on top, a
C++ ``__global__`` function (not ``extern "C"``), perhaps a template. NVRTC has no standard
headers, so ``ptxlab/run/nvrtc_headers`` stands in for them on every NVRTC compile (the CPU
model's and CuPy's); the kernel is found by its C++ name through NVRTC's lowered names. The
grading include check lets exactly those stand-ins through and nothing more. Each launch test
runs on the CPU model here and again on a GPU where there is one (skipped, with the reason,
elsewhere).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptxlab.run import backends, gpu, includes, sources
from ptxlab.run.errors import CompileError, LaunchError, RequestRefused
from ptxlab.run.ptx import nvrtc

_cpu_ok, _cpu_why = backends.cpu_available()
needs_cpu = pytest.mark.skipif(not _cpu_ok, reason=f"no CPU model here: {_cpu_why}")
needs_cpp = pytest.mark.skipif(includes.preprocessor() is None, reason="no C preprocessor here")
needs_toolkit_headers = pytest.mark.skipif(
    not nvrtc.cuda_include_dirs(),
    reason="no CUDA include folder (cuda_fp16.h) here: pip install nvidia-cuda-runtime-cu12")
_gpu = gpu.status()
needs_gpu = [pytest.mark.gpu,
             pytest.mark.skipif(not _gpu.available, reason=f"no usable GPU: {_gpu.message}")]

#: As an article prints it: standard headers (one of them only for its host main), a C++
#: kernel, a template kernel and an extern "C" one.
PASTED = r'''
#include <cstdint>
#include <cstdio>
#include <cuda_fp16.h>
#include <iostream>
#include <cassert>
#include <cfloat>
#include <cmath>

__global__ void ldmatrix_x4(std::uint16_t* out, const float* in) {
    assert(threadIdx.x < 32);
    if (threadIdx.x == 0) printf("pasted kernel: lane 0 reads %.1f\n", in[0]);
    __half h = __float2half(std::sqrt(in[threadIdx.x]) * 2.0f);
    out[threadIdx.x] = __half_as_ushort(h);
}

template <typename T, int N>
__global__ void scale(T* a) { a[threadIdx.x] = a[threadIdx.x] * T(N); }

extern "C" __global__ void plain(int32_t* a) { a[threadIdx.x] += 1; }
'''

#: What the standard stand-ins define, written out by a kernel to compare with numpy.
LIMITS = r'''
#include <cstdint>
#include <climits>
#include <cfloat>
#include <cmath>
__global__ void limits(std::uint64_t* u, float* f, double* d) {
    u[0] = UINT64_MAX; u[1] = (std::uint64_t)INT64_MIN; u[2] = INT_MAX; u[3] = UINT32_MAX;
    u[4] = sizeof(int8_t) + sizeof(std::int16_t) + sizeof(int64_t); u[5] = CHAR_BIT;
    f[0] = FLT_MAX; f[1] = FLT_MIN; f[2] = FLT_EPSILON; f[3] = INFINITY; f[4] = NAN;
    f[5] = std::fabs(-2.5f); f[6] = std::fmax(1.0f, 3.0f); f[7] = (float)M_PI;
    d[0] = DBL_MAX; d[1] = DBL_EPSILON; d[2] = HUGE_VAL; d[3] = std::sqrt(2.0);
}
'''


def _launch_pasted(backend: str, **kw):
    x = np.arange(32, dtype=np.float32)
    return backends.launch(PASTED, "ldmatrix_x4", 1, 32, [np.zeros(32, np.uint16), x],
                           backend=backend, **kw)


def _expect_pasted(result) -> None:
    want = (np.sqrt(np.arange(32, dtype=np.float32)) * 2).astype(np.float16)
    assert np.array_equal(result.outputs[0].view(np.float16), want)


def _check_pasted_runs(backend: str) -> None:
    _expect_pasted(_launch_pasted(backend))


def _check_template_instance(backend: str) -> None:
    a = np.arange(32, dtype=np.float32)
    out = backends.launch(PASTED, "scale<float, 4>", 1, 32, [a.copy()], backend=backend)
    assert np.array_equal(out.outputs[0], 4 * a)
    i = np.arange(32, dtype=np.int32)
    out = backends.launch(PASTED, "scale<int, 3>", 1, 32, [i.copy()], backend=backend)
    assert np.array_equal(out.outputs[0], 3 * i)


def _check_extern_c(backend: str) -> None:
    out = backends.launch(PASTED, "plain", 1, 32, [np.arange(32, dtype=np.int32)],
                          backend=backend)
    assert np.array_equal(out.outputs[0], np.arange(1, 33))


def _check_unknown_name(backend: str) -> None:
    with pytest.raises(LaunchError, match="no kernel named 'ldmatrix_x2'") as err:
        _launch_kernel(backend, "ldmatrix_x2")
    text = str(err.value)
    assert "plain" in text and "scale" in text
    assert "ldmatrix_x4(unsigned short*, float const*)" in text or "_Z11ldmatrix_x4" in text


def _check_limits(backend: str) -> None:
    u, f, d = np.zeros(6, np.uint64), np.zeros(8, np.float32), np.zeros(4, np.float64)
    u, f, d = backends.launch(LIMITS, "limits", 1, 1, [u, f, d], backend=backend).outputs
    f32 = np.finfo(np.float32)
    assert list(u) == [2**64 - 1, 2**63, 2**31 - 1, 2**32 - 1, 1 + 2 + 8, 8]
    assert (f[0], f[1], f[2]) == (f32.max, f32.tiny, f32.eps)
    assert np.isposinf(f[3]) and np.isnan(f[4])
    assert (f[5], f[6], f[7]) == (2.5, 3.0, np.float32(np.pi))
    assert (d[0], d[1]) == (np.finfo(np.float64).max, np.finfo(np.float64).eps)
    assert np.isposinf(d[2]) and d[3] == np.sqrt(2.0)


def _launch_kernel(backend: str, kernel: str):
    return backends.launch(PASTED, kernel, 1, 32, [np.zeros(32, np.float32)], backend=backend)


# ---------------------------------------------------------------------------------------------
# The CPU model
# ---------------------------------------------------------------------------------------------

@needs_cpu
@needs_toolkit_headers
def test_pasted_kernel_with_standard_headers_runs_by_its_cxx_name(capsys):
    _check_pasted_runs("cpu")
    assert "pasted kernel: lane 0 reads 0.0" in capsys.readouterr().out


@needs_cpu
@needs_toolkit_headers
def test_template_instance_runs_by_name():
    _check_template_instance("cpu")


@needs_cpu
@needs_toolkit_headers
def test_extern_c_kernel_takes_the_one_compile_it_always_took(monkeypatch):
    def no_second_compile(*a, **k):
        raise AssertionError("an extern \"C\" kernel needs no name expression")

    monkeypatch.setattr(nvrtc, "compile_with_lowered_names", no_second_compile)
    _check_extern_c("cpu")


def test_extern_c_cache_key_has_no_name_expressions():
    compiler = nvrtc.Compiler("nvrtc", "lib", "12.9")
    opts = ("-std=c++17",)
    assert (nvrtc.cache_key("src", opts, "kernel.cu", compiler)
            == nvrtc.cache_key("src", opts, "kernel.cu", compiler, name_expressions=()))
    assert (nvrtc.cache_key("src", opts, "kernel.cu", compiler)
            != nvrtc.cache_key("src", opts, "kernel.cu", compiler, name_expressions=("k",)))


@needs_cpu
@needs_toolkit_headers
def test_unknown_kernel_name_lists_the_kernels_by_their_cxx_names():
    _check_unknown_name("cpu")


@needs_cpu
@needs_toolkit_headers
def test_a_template_kernel_named_without_arguments_says_how_to_name_it():
    with pytest.raises(LaunchError, match=r"'scale' is a template kernel.*scale<float, 4>"):
        _launch_kernel("cpu", "scale")


@needs_cpu
@needs_toolkit_headers
@pytest.mark.parametrize("name", ['plain\n#include "/etc/hostname"', 'scale<float, 4>; int x',
                                  'scale<"a">', "scale<float, 4> // c", ""])
def test_a_kernel_name_that_is_no_cxx_name_never_reaches_the_compiler(name, monkeypatch):
    def no_compile(*a, **k):
        raise AssertionError("a name that is no C++ name must not be compiled")

    monkeypatch.setattr(nvrtc, "compile_with_lowered_names", no_compile)
    with pytest.raises(LaunchError, match="no kernel named"):
        _launch_kernel("cpu", name)


@needs_cpu
def test_standard_stand_ins_give_the_standard_values():
    _check_limits("cpu")


@needs_cpu
def test_ndebug_before_cassert_turns_asserts_off():
    src = ("#define NDEBUG\n#include <cassert>\n"
           "__global__ void k(int* a) { assert(a[0] == 12345); a[threadIdx.x] = 7; }\n")
    out = backends.launch(src, "k", 1, 32, [np.zeros(32, np.int32)], backend="cpu")
    assert (out.outputs[0] == 7).all()


@needs_cpu
@needs_toolkit_headers
def test_a_pasted_cxx_kernel_runs_isolated_too():
    _expect_pasted(_launch_pasted("cpu", isolate=True, timeout_s=120))


@needs_cpu
def test_a_whole_program_says_launch_takes_device_code_only():
    program = PASTED + r'''
int main() {
    std::uint16_t* d; cudaMalloc(&d, 64);
    ldmatrix_x4<<<1, 32>>>(d, nullptr);
    cudaDeviceSynchronize();
    return 0;
}
'''
    with pytest.raises(CompileError, match=r"device code only.*ptxlab run FILE\.cu"):
        backends.launch(program, "ldmatrix_x4", 1, 32, [np.zeros(32, np.uint16)],
                        backend="cpu")


@needs_cpu
def test_a_standard_header_nobody_stands_in_for_names_those_there_are():
    src = "#include <vector>\n__global__ void k(int* a) {}\n"
    with pytest.raises(CompileError, match=r"<vector> is not available.*<cstdint>"):
        backends.launch(src, "k", 1, 32, [np.zeros(32, np.int32)], backend="cpu")


# ---------------------------------------------------------------------------------------------
# The stand-in headers and the grading include check
# ---------------------------------------------------------------------------------------------

STANDARD = ["cstdint", "stdint.h", "cstdio", "stdio.h", "iostream", "cfloat", "float.h",
            "cassert", "assert.h", "cstdlib", "stdlib.h", "cmath", "math.h", "climits",
            "limits.h", "cstddef", "stddef.h"]


def test_every_stand_in_says_what_it_stands_for_and_why():
    assert sorted(includes.standin_headers()) == sorted(STANDARD)
    for name in STANDARD:
        text = (sources.nvrtc_headers_dir() / name).read_text()
        assert f"stand-in for <{name}>" in text and "Why:" in text, name


def test_no_stand_in_shadows_a_toolkit_header():
    for folder in nvrtc.cuda_include_dirs():
        clash = [n for n in STANDARD if (Path(folder) / n).exists()]
        assert not clash, f"{folder} has its own {clash}"


def test_stand_ins_are_for_nvrtc_compiles_only():
    """``ptxlab run`` hands include_options() to nvcc and a host compiler: the real headers."""
    assert not any("nvrtc_headers" in o for o in sources.include_options())
    assert sources.nvrtc_include_options() == (f"-I{sources.nvrtc_headers_dir()}",)


@needs_cpp
@pytest.mark.parametrize("header", STANDARD + ["cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h"])
def test_standard_and_toolkit_headers_pass_the_include_check(header):
    includes.check_includes(f"#include <{header}>\n__global__ void k(int* a) {{}}\n")


@needs_cpp
@pytest.mark.parametrize("spelling", [
    "#include <vector>",                                   # no stand-in: refused
    "#include <README.md>",                                # in the folder, but no header
    "#include <../ptx/nvrtc.py>",                          # beside the stand-ins
    "#include <../../../kernels/reference/ldmatrix_ref.cu>",  # a reference kernel, through them
    '#include "reference/mma_ref.cu"',
    '#include "/etc/hostname"',
    "#define H <../../../kernels/reference/movmatrix_ref.cu>\n#include H",
])
def test_an_include_outside_the_allowed_set_is_still_refused(spelling):
    with pytest.raises(RequestRefused, match="the kernel includes|could not be resolved"):
        includes.check_includes(spelling + "\n#include <cstdint>\n__global__ void k() {}\n")


@needs_cpu
@needs_cpp
@needs_toolkit_headers
def test_a_pasted_kernel_passes_the_grading_include_check(monkeypatch):
    monkeypatch.setenv(includes.CHECK_ENV, "1")
    _check_pasted_runs("cpu")


# ---------------------------------------------------------------------------------------------
# The same on a GPU (CuPy for CUDA 12 or 13)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", [_check_pasted_runs, _check_template_instance, _check_extern_c,
                                   _check_unknown_name, _check_limits],
                         ids=["pasted", "template", "extern-c", "unknown-name", "limits"])
@needs_gpu[0]
@needs_gpu[1]
def test_on_the_gpu(check):
    check("gpu")


@needs_gpu[0]
@needs_gpu[1]
def test_on_the_gpu_a_pasted_cxx_kernel_matches_the_cpu_model():
    if not _cpu_ok:
        pytest.skip(f"no CPU model here: {_cpu_why}")
    a, b = _launch_pasted("gpu"), _launch_pasted("cpu")
    assert np.array_equal(a.outputs[0], b.outputs[0])


@needs_gpu[0]
@needs_gpu[1]
def test_on_the_gpu_mma_h_compiles():
    src = ("#include <mma.h>\n#include <cstdint>\n"
           "__global__ void k(std::int32_t* a) { a[threadIdx.x] = 2; }\n")
    out = backends.launch(src, "k", 1, 32, [np.zeros(32, np.int32)], backend="gpu")
    assert (out.outputs[0] == 2).all()


@needs_gpu[0]
@needs_gpu[1]
def test_on_the_gpu_a_whole_program_says_launch_takes_device_code_only():
    program = PASTED + "int main() { ldmatrix_x4<<<1, 32>>>(nullptr, nullptr); return 0; }\n"
    with pytest.raises(CompileError, match="device code only"):
        backends.launch(program, "ldmatrix_x4", 1, 32, [np.zeros(32, np.uint16)],
                        backend="gpu")
