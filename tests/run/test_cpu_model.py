"""Ordinary CUDA that learners write around the matrix instructions, on the CPU model: a local
array indexed at run time (a ``.local`` depot in the PTX), device ``printf``, and the warp
intrinsics that compile to ``shfl``/``vote``/``match``/``activemask``."""
from __future__ import annotations

import numpy as np
import pytest

from ptxlab import backends

ok, why = backends.cpu_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"CPU model unavailable: {why}")


def test_local_array_indexed_at_run_time():
    src = r'''extern "C" __global__ void k(float* x, const int* idx) {
      float buf[8];
      for (int i = 0; i < 8; ++i) buf[i] = x[threadIdx.x] * i;
      x[threadIdx.x] = buf[idx[threadIdx.x] & 7];
    }'''
    lanes = np.arange(32)
    res = backends.launch(src, "k", block=(32,), backend="cpu",
                          args=[lanes.astype(np.float32), (lanes * 5).astype(np.int32)])
    assert np.array_equal(res.outputs[0], lanes * ((lanes * 5) & 7))


def test_printf_prints_each_lane(capsys):
    src = r'''extern "C" __global__ void k(const float* x) {
      if (threadIdx.x < 2) printf("lane %d: %.2f %s\n", (int)threadIdx.x, x[threadIdx.x], "ok");
    }'''
    backends.launch(src, "k", block=(32,), backend="cpu",
                    args=[np.array([0.5] * 32, dtype=np.float32)])
    assert capsys.readouterr().out == "lane 0: 0.50 ok\nlane 1: 0.50 ok\n"


def test_warp_intrinsics():
    src = r'''extern "C" __global__ void k(unsigned* out) {
      unsigned t = threadIdx.x, am = 0;
      unsigned b = __ballot_sync(0xffffffffu, t % 3 == 0);
      if (t < 20) am = __activemask();
      int s = __shfl_down_sync(0xffffffffu, (int)t, 3);
      unsigned mt = __match_any_sync(0xffffffffu, t / 8);
      out[t] = b ^ am ^ (unsigned)s ^ mt;
    }'''
    res = backends.launch(src, "k", block=(32,), args=[np.zeros(32, np.uint32)], backend="cpu")
    t = np.arange(32)
    ballot = sum(1 << i for i in range(0, 32, 3))
    active = np.where(t < 20, (1 << 20) - 1, 0)
    shuffled = np.where(t + 3 < 32, t + 3, t)
    matched = 0xFF << (8 * (t // 8))
    assert np.array_equal(res.outputs[0], (ballot ^ active ^ shuffled ^ matched).astype(np.uint32))


def test_the_shared_window_is_laid_out_as_on_sm90():
    """Variables start after the reserved first KiB (measured on an H100:
    reports/hardware/SHARED_LAYOUT.md); a row there faults and says why."""
    from ptxlab.run import cpu
    from ptxlab.run.ptx import memory

    src = r'''
    extern "C" __global__ void k(unsigned* out, unsigned back) {
        __shared__ __align__(16) unsigned short st[8 * 24];
        extern __shared__ __align__(16) unsigned short dyn[];
        for (int i = threadIdx.x; i < 8 * 24; i += 32) st[i] = i;
        dyn[threadIdx.x] = 1;
        __syncwarp();
        out[0] = (unsigned)__cvta_generic_to_shared(st);
        out[1] = (unsigned)__cvta_generic_to_shared(dyn);
        unsigned r, addr = (unsigned)__cvta_generic_to_shared(st) + (threadIdx.x % 8) * 48 - back;
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(addr));
        out[2 + threadIdx.x] = r;
    }'''
    out = cpu.run_kernel(src, "k", (1,), (32,), [np.zeros(34, np.uint32), np.uint32(0)],
                         shared_mem=64)[0]
    assert memory.SHARED_START == 1024
    assert out[0] == 1024 and out[1] == 1024 + 8 * 24 * 2
    assert out[2] == (1 << 16) | 0           # row 0: elements 0 and 1
    from ptxlab.run.ptx.errors import KernelFault

    with pytest.raises(KernelFault, match=r"below the block's shared memory.*reserved"):
        cpu.run_kernel(src, "k", (1,), (32,), [np.zeros(34, np.uint32), np.uint32(1024)],
                       shared_mem=64)


@pytest.mark.parametrize("instruction, expect", [
    ('asm volatile("movmatrix.sync.aligned.m8n8.b16 %0, %0;" : "+r"(r));', ".trans required"),
    ('asm volatile("ldmatrix.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(a));',
     "needs .sync.aligned"),
])
def test_forms_that_do_not_exist_are_compile_errors_as_with_ptxas(instruction, expect):
    """ptxas refuses them, so the model does too, before anything runs: a learner gets the same
    'does not compile' on every machine (not 'the CPU model cannot run this')."""
    src = ('extern "C" __global__ void k(unsigned* out) { unsigned r = out[threadIdx.x], '
           'a = 0; ' + instruction + ' out[threadIdx.x] = r; }')
    with pytest.raises(backends.CompileError, match=expect):
        backends.launch(src, "k", args=[np.zeros(32, np.uint32)], backend="cpu", isolate=False)
