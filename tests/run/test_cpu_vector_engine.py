"""The vector run of many warps (``ptxlab.run.ptx.wide``) against the warp-by-warp model it must
equal: the same bits for every course kernel and for random GEMMs, and, wherever the two could
differ, the warp-by-warp model's own report, warning or answer (the vector run steps aside)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from ptxlab.run.cpu import program_for
from ptxlab.run.in_process import cpu_available
from ptxlab.run.ptx.errors import KernelFault
from ptxlab.run.ptx.interpreter import Launch
from ptxlab.run.ptx.racecheck import UninitializedSharedRead

pytestmark = pytest.mark.skipif(not cpu_available()[0], reason="no CUDA-to-PTX compiler here")


def _launch(source: str, kernel: str, grid, block, args, engine: str, shared_mem: int = 0,
            options=(), **kw):
    """``(outputs, launch)`` of one launch on ``engine``, inputs copied."""
    prog = program_for(source, kernel, tuple(options))
    launch = Launch(prog, grid, block, [a.copy() if isinstance(a, np.ndarray) else a
                                        for a in args],
                    shared_mem=int(shared_mem), engine=engine, **kw)
    return launch.run(), launch


def _failure(source, kernel, grid, block, args, engine, **kw):
    """What a launch ends in: ``(class name, message, lanes, block, warp)``, or its outputs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out, launch = _launch(source, kernel, grid, block, args, engine, **kw)
        except KernelFault as exc:
            return (type(exc).__name__, str(exc), exc.where.lanes, exc.where.block,
                    exc.where.warp), [str(w.message) for w in caught], None
    return [None if o is None else o.tobytes() for o in out], \
        [str(w.message) for w in caught], launch


# ---------------------------------------------------------------------------------------------
# The same bits
# ---------------------------------------------------------------------------------------------

def _course_cases():
    from ptxlab.authoring.course_cases import kernel_cases
    return kernel_cases(np.random.default_rng(7), small=False)


def test_every_course_kernel_gives_the_same_bits_both_ways():
    vector_runs = 0
    for case in _course_cases():
        kw = dict(shared_mem=case.shared_mem, options=case.options)
        warp = _failure(case.source, case.kernel, case.grid, case.block, case.args, "warp", **kw)
        vec = _failure(case.source, case.kernel, case.grid, case.block, case.args, "vector",
                       **kw)
        assert vec[:2] == warp[:2], case.name
        if vec[2] is not None and vec[2].ran_as[0] == "vector":
            vector_runs += 1
    assert vector_runs >= 3       # the course's multi-warp kernels do run as one vector


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_learner_gemm_runs_as_one_vector_and_gives_the_same_bits(seed):
    from ptxlab.bench import learner_gemm
    gemm = learner_gemm.course_solution()
    m, n, k = 2 * gemm.bm, 3 * gemm.bn, 3 * gemm.bk
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16).view(np.uint16)
    b = rng.standard_normal((k, n)).astype(np.float16).view(np.uint16)
    c = np.full((m, n), 0x7E00, dtype=np.uint16)
    args = [a, b, c, np.int32(m), np.int32(n), np.int32(k)]
    got = {}
    for engine in ("warp", "vector"):
        out, launch = _launch(gemm.source(), gemm.kernel_name, gemm.grid(m, n), (gemm.threads,),
                              args, engine, shared_mem=gemm.smem_bytes)
        got[engine] = out[2]
        assert launch.ran_as[0] == engine, launch.ran_as
    assert got["vector"].tobytes() == got["warp"].tobytes()


def test_blocks_beyond_one_batch_run_in_batches(monkeypatch):
    """A launch of more lanes than one vector holds runs in batches of whole blocks, the last
    one short; the result is the same."""
    from ptxlab.run.ptx import wide
    src = r'''
    extern "C" __global__ void scale(const float* x, float* y, int n) {
        __shared__ float t[128];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        t[threadIdx.x] = i < n ? x[i] : 0.f;
        __syncthreads();
        if (i < n) y[i] = 2.f * t[blockDim.x - 1 - threadIdx.x] + (float)blockIdx.x;
    }'''
    monkeypatch.setattr(wide, "MAX_LANES", 3 * 128)
    n = 7 * 128 - 5
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    args = [x, np.zeros(n, np.float32), np.int32(n)]
    warp, _ = _launch(src, "scale", (7,), (128,), args, "warp")
    vec, launch = _launch(src, "scale", (7,), (128,), args, "vector")
    assert launch.ran_as == ("vector", "")
    assert vec[1].tobytes() == warp[1].tobytes()


# ---------------------------------------------------------------------------------------------
# Where the two could differ, the warp-by-warp model answers
# ---------------------------------------------------------------------------------------------

_RACE = r'''
extern "C" __global__ void k(const int* in, int* out) {
    __shared__ int s[64];
    s[threadIdx.x] = in[threadIdx.x];
    out[threadIdx.x] = s[(threadIdx.x + 32) % 64];     // no barrier: warp 1's values
}'''

_DIVERGENT_BARRIER = r'''
extern "C" __global__ void k(const int* in, int* out) {
    __shared__ int s[64];
    s[threadIdx.x] = in[threadIdx.x];
    if (threadIdx.x < 32) __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}'''

_FAULT_IN_A_LATER_BLOCK = r'''
extern "C" __global__ void k(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.x == 2 ? i + 4096 : i;             // block 2 reads far past the end
    out[i] = in[j];
}'''

_UNINITIALIZED = r'''
extern "C" __global__ void k(const int* in, int* out) {
    __shared__ int s[64];
    if (threadIdx.x < 48) s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}'''

_ENDLESS = r'''
extern "C" __global__ void k(const int* in, int* out) {
    int v = in[threadIdx.x];
    while (v >= 0) v = (v + 1) & 7;                       // never ends
    out[threadIdx.x] = v;
}'''

_ATOMIC = r'''
extern "C" __global__ void k(const int* in, int* out) {
    out[threadIdx.x] = atomicAdd(out + 64, in[threadIdx.x]);
}'''

_CROSS_BLOCK = r'''
extern "C" __global__ void k(const int* in, int* out) {
    // block 1 reads what block 0 writes, unordered: the warp-by-warp model's answer is kept
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i];
    if (blockIdx.x == 1) out[i] += out[threadIdx.x];
}'''


@pytest.mark.parametrize("source,grid,block,kw", [
    (_RACE, (1,), (64,), {}),
    (_DIVERGENT_BARRIER, (1,), (64,), {}),
    (_FAULT_IN_A_LATER_BLOCK, (4,), (64,), {}),
    (_UNINITIALIZED, (1,), (64,), {}),
    (_ENDLESS, (2,), (64,), {"branch_budget": 5000}),
    (_ATOMIC, (1,), (64,), {}),
    (_CROSS_BLOCK, (2,), (64,), {}),
], ids=["race", "divergent-barrier", "fault-in-block-2", "uninitialized-shared",
        "endless-loop", "atomic", "cross-block"])
def test_the_warp_by_warp_model_answers_where_the_order_could_matter(source, grid, block, kw):
    n = 256
    args = [np.arange(n, dtype=np.int32), np.zeros(n, np.int32)]
    warp = _failure(source, "k", grid, block, args, "warp", **kw)
    vec = _failure(source, "k", grid, block, args, "vector", **kw)
    assert vec[:2] == warp[:2]
    if vec[2] is not None:           # it ran to the end: warp by warp, and why
        assert vec[2].ran_as[0] == "warp" and vec[2].ran_as[1]


def test_a_report_is_the_warp_by_warp_models_own():
    args = [np.arange(256, dtype=np.int32), np.zeros(256, np.int32)]
    (name, message, *_), _, _ = _failure(_RACE, "k", (1,), (64,), args, "vector")
    assert name == "SharedMemoryRace" and "warp 1" in message and "warp 0" in message
    (name, message, lanes, block, _), _, _ = _failure(_FAULT_IN_A_LATER_BLOCK, "k", (4,), (64,),
                                                      args, "vector")
    assert name == "MemoryFault" and block == (2, 0, 0) and lanes


def test_uninitialized_shared_reads_warn_as_before():
    args = [np.arange(64, dtype=np.int32), np.zeros(64, np.int32)]
    with pytest.warns(UninitializedSharedRead):
        _launch(_UNINITIALIZED, "k", (1,), (64,), args, "vector")


def test_the_engine_is_chosen_by_name_or_environment(monkeypatch):
    from ptxlab.run.ptx import interpreter
    assert interpreter.engine_named() == "vector"
    monkeypatch.setenv(interpreter.ENGINE_ENV, "warp")
    assert interpreter.engine_named() == "warp"
    with pytest.raises(ValueError, match="vector"):
        interpreter.engine_named("fast")


def test_a_one_warp_check_never_loads_the_vector_engine(fresh_python):
    """One warp gains nothing from the vector run, so a process that launches only one warp
    does not load it (a learner's first check pays for every module it loads)."""
    code = ("import sys, numpy as np\n"
            "from ptxlab.run import cpu\n"
            "src = 'extern \"C\" __global__ void k(int* o) { o[threadIdx.x] = threadIdx.x; }'\n"
            "out = cpu.run_kernel(src, 'k', (1,), (32,), [np.zeros(32, np.int32)])[0]\n"
            "assert list(out) == list(range(32))\n"
            "print('ptxlab.run.ptx.wide' in sys.modules)\n"
            "cpu.run_kernel(src, 'k', (2,), (32,), [np.zeros(64, np.int32)])\n"
            "print('ptxlab.run.ptx.wide' in sys.modules)\n")
    assert fresh_python(code) == ["False", "True"]
