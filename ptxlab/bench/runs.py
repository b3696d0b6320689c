"""GPU measurements of the capstone kernels and of the ceilings they are compared with.

Every function here needs CuPy and a GPU; each returns plain dicts ready for the JSON report.
Correctness is checked on fresh random data before anything is timed, with the output poisoned
(NaN / 0xFFFF) first so an element the kernel never writes cannot pass.
"""
from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

from ..run import kernel_params, sources
from ..run.ptx.errors import CompilerNotFound
from .kernels import (DEFAULT_SMEM_LIMIT, GEMM_TOL_F16, GEMM_TOL_F32, GemmConfig,
                      TransposeConfig, mma_peak_source)
from .timing import NOISY_SPREAD, ROUND_ORDERS, WARMUP_MS, balanced_orders, time_gpu


def cupy_module():
    """CuPy, imported on first use (every launch and array of the benchmark goes through it)."""
    import cupy as cp
    return cp


class CheckedKernel:
    """A compiled kernel that checks every launch's arguments against its parameters first.

    A raw CuPy launch with an argument missing crashes the process (see
    :mod:`ptxlab.run.kernel_params`); this one raises ``KernelArgumentError`` naming the kernel.
    Where no CUDA-to-PTX compiler is installed to read the parameters, launches go unchecked.
    """

    def __init__(self, name: str, raw, sizes: tuple[int, ...] | None):
        self.name = name
        self.raw = raw
        self.sizes = sizes

    def __call__(self, grid, block, args, **kwargs) -> None:
        if self.sizes is not None:
            kernel_params.check_args(self.name, self.sizes, args)
        self.raw(grid, block, args, **kwargs)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.raw.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.raw.max_dynamic_shared_size_bytes = value


def _raw_kernel(source: str, name: str):
    """A CuPy RawKernel for ``name`` in ``source`` (NVRTC, ``kernels/`` on the include path)."""
    cp = cupy_module()
    module = cp.RawModule(code=source, options=("-std=c++17", *sources.include_options()))
    return module.get_function(name)


def _param_sizes(source: str, name: str) -> tuple[int, ...] | None:
    try:
        return kernel_params.param_sizes(source, name)
    except CompilerNotFound as exc:
        warnings.warn(f"launches of '{name}' are not checked against its parameters: {exc}",
                      RuntimeWarning, stacklevel=3)
        return None


@lru_cache(maxsize=None)
def compile_kernel(source: str, name: str) -> CheckedKernel:
    """``name`` in ``source``, compiled for this GPU, its launches checked (cached)."""
    return CheckedKernel(name, _raw_kernel(source, name), _param_sizes(source, name))


_raised: dict[int, int] = {}


def _launch(kernel, grid, block, args, smem: int) -> None:
    """Launch with ``smem`` bytes of dynamic shared memory, raising the limit once if needed."""
    if smem > DEFAULT_SMEM_LIMIT and _raised.get(id(kernel), 0) < smem:
        kernel.max_dynamic_shared_size_bytes = smem
        _raised[id(kernel)] = smem
    kernel(grid, block, args, shared_mem=smem)


def device_info() -> dict:
    cp = cupy_module()
    props = _device_props()
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"name": name, "sm": f"sm_{props['major']}{props['minor']}",
            "multiprocessors": int(props["multiProcessorCount"]),
            "l2_bytes": int(props.get("l2CacheSize", 0)),
            "cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
            "cuda_driver": cp.cuda.runtime.driverGetVersion(), **_nvml_limits()}


@lru_cache(maxsize=None)
def _nvml_limits() -> dict:
    """The highest SM clock and the board's power limit (NVML), where NVML answers."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"max_sm_clock_mhz": float(pynvml.nvmlDeviceGetMaxClockInfo(
                    h, pynvml.NVML_CLOCK_SM)),
                "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                "driver": pynvml.nvmlSystemGetDriverVersion()}
    except Exception:  # no pynvml or no NVML: the report says the limits are unknown
        return {}


def rotation_sets(bytes_per_set: int, minimum: int = 2) -> int:
    """How many buffer sets a timing rotates over so that together they are at least twice the
    GPU's L2 (at least ``minimum``): a kernel whose data fits in L2 and is reused every launch
    measures the cache, not the kernel."""
    l2 = device_info()["l2_bytes"] or 50 * 2 ** 20
    return max(minimum, -(-2 * l2 // max(bytes_per_set, 1)))


def _gemm_sets(m: int, n: int, k: int, out_bytes: int = 2) -> int:
    return rotation_sets(2 * (m * k + k * n) + out_bytes * m * n, minimum=3)


@lru_cache(maxsize=None)
def _device_props() -> dict:
    cp = cupy_module()
    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)


def _rel_error(got, ref) -> float:
    cp = cupy_module()
    got = got.astype(cp.float64)
    ref = ref.astype(cp.float64)
    if not bool(cp.isfinite(got).all()):
        return float("inf")
    return float(cp.linalg.norm(got - ref) / cp.linalg.norm(ref))


# ---------------------------------------------------------------------------------------------
# GEMM and its ceilings
# ---------------------------------------------------------------------------------------------

def _gemm_operands(cp, m: int, n: int, k: int, b_col: bool, seed: int):
    rs = cp.random.RandomState(seed)
    a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = rs.standard_normal((n, k) if b_col else (k, n), dtype=cp.float32).astype(cp.float16)
    return a, b


def gemm_run(cfg: GemmConfig, m: int, n: int, k: int, *, sets: int | None = None, seed: int = 0,
             time_it: bool = True, kind: str = "gemm", warmup_ms: float = WARMUP_MS) -> dict:
    """Check one GEMM configuration against an fp32 product at ``m x n x k``, then time it
    (after ``warmup_ms`` of warm-up launches). ``cfg`` may be any GEMM that answers as
    :class:`GemmConfig` does (a learner's, :class:`.learner_gemm.LearnerGemm`); ``kind`` names
    it in the record."""
    cp = cupy_module()
    cfg.check_shape(m, n, k)
    sets = sets or _gemm_sets(m, n, k, 4 if cfg.out_f32 else 2)
    kern = compile_kernel(cfg.source(), cfg.kernel_name)
    grid = cfg.grid(m, n, device_info()["multiprocessors"])
    out_dtype = cp.float32 if cfg.out_f32 else cp.float16
    bufs = []
    for s in range(sets):
        a, b = _gemm_operands(cp, m, n, k, cfg.b_col, seed + s)
        bufs.append((a, b, cp.empty((m, n), dtype=out_dtype)))
    # Split-K's workspace and tile counters: one set serves every launch (they run in order).
    scratch = tuple(cp.zeros(count, dtype=dtype) for count, dtype in cfg.scratch(m, n))

    def call(i: int) -> None:
        a, b, c = bufs[i]
        _launch(kern, grid, (cfg.threads,),
                (a, b, c, np.int32(m), np.int32(n), np.int32(k), *scratch), cfg.smem_bytes)

    a, b, c = bufs[0]
    c.fill(cp.nan)
    call(0)
    cp.cuda.Device().synchronize()
    b_kn = b.T if cfg.b_col else b
    ref32 = cp.matmul(a.astype(cp.float32), b_kn.astype(cp.float32))
    rec = {"kernel": kind, "config": cfg.label, "variant": cfg.variant, "m": m, "n": n, "k": k,
           "params": cfg.as_dict(), "smem_bytes": cfg.smem_bytes, "grid": grid[0], "sets": sets,
           "rel_error_vs_fp32": _rel_error(c, ref32)}
    if not cfg.out_f32:
        rec["rel_error_vs_cublas_f16"] = _rel_error(c, cp.matmul(a, b_kn))
    tol = GEMM_TOL_F32 if cfg.out_f32 else GEMM_TOL_F16
    rec["tolerance"] = tol
    rec["correct"] = rec["rel_error_vs_fp32"] <= tol
    if scratch:   # split-K: every tile counter back at zero for the next launch
        rec["counters_left"] = int(cp.count_nonzero(scratch[1]))
        rec["correct"] = rec["correct"] and rec["counters_left"] == 0
    del ref32
    if time_it:
        t = time_gpu(call, sets=sets, warmup_ms=warmup_ms)
        rec.update(t.as_dict())
        rec["tflops"] = 2.0 * m * n * k / (t.median_ms * 1e-3) / 1e12
    return rec


def peer_run(kernel, m: int, n: int, k: int, *, sets: int | None = None, seed: int = 0,
             warmup_ms: float = WARMUP_MS) -> dict:
    """CUTLASS's GEMM (a :class:`.cutlass_peer.PeerKernel`): checked and timed as ``gemm_run``
    checks and times ours, on the same operands."""
    cp = cupy_module()
    cfg = kernel.cfg
    cfg.check_shape(m, n, k)
    sets = sets or _gemm_sets(m, n, k)
    bufs = []
    for s in range(sets):
        a, b = _gemm_operands(cp, m, n, k, cfg.b_col, seed + s)
        bufs.append((a, b, cp.empty((m, n), dtype=cp.float16)))

    def call(i: int) -> None:
        a, b, c = bufs[i]
        kernel(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, cp.cuda.get_current_stream().ptr)

    a, b, c = bufs[0]
    c.fill(cp.nan)
    call(0)
    cp.cuda.Device().synchronize()
    ref32 = cp.matmul(a.astype(cp.float32), (b.T if cfg.b_col else b).astype(cp.float32))
    rec = {"kernel": "cutlass", "config": cfg.label, "variant": cfg.variant, "m": m, "n": n,
           "k": k, "params": cfg.as_dict(), "smem_bytes": kernel.smem_bytes,
           "threads": kernel.threads, "rel_error_vs_fp32": _rel_error(c, ref32),
           "tolerance": GEMM_TOL_F16}
    rec["correct"] = rec["rel_error_vs_fp32"] <= GEMM_TOL_F16
    del ref32
    t = time_gpu(call, sets=sets, warmup_ms=warmup_ms)
    rec.update(t.as_dict())
    rec["tflops"] = 2.0 * m * n * k / (t.median_ms * 1e-3) / 1e12
    return rec


def peer_kernels(configs=None, log=print) -> tuple[list, dict]:
    """CUTLASS's GEMM built for each configuration (:func:`.cutlass_peer.build`): the loaded
    kernels, and what the peer is built from (``measured: False`` and why, if nothing built)."""
    import time as _time

    from . import cutlass_peer

    configs = list(configs or cutlass_peer.PEER_SWEEP)
    why = cutlass_peer.problem()
    if why:
        return [], {"measured": False, "reason": why}
    info = cutlass_peer.describe()
    t0 = _time.perf_counter()
    built = cutlass_peer.build(configs)
    info["build_s"] = _time.perf_counter() - t0
    info["build_failed"] = {f"{cfg.label} ({cfg.variant})": lib for cfg, lib in built.items()
                            if isinstance(lib, str)}
    kernels = [cutlass_peer.PeerKernel(cfg, lib) for cfg, lib in built.items()
               if not isinstance(lib, str)]
    if not kernels:
        return [], {"measured": False, **info, "reason": "no CUTLASS configuration built: "
                    + next(iter(info["build_failed"].values()), "nothing to build")}
    log(f"CUTLASS {info['cutlass_version']} peer: {len(kernels)} configurations built in "
        f"{info['build_s']:.0f} s ({len(info['build_failed'])} failed)")
    return kernels, {"measured": True, **info}


def record_of(name: str, size: int, job) -> dict:
    """``job()``'s record, or, if it raises, a record of the error (``config``, ``m``,
    ``error``), so one failing kernel does not end a run."""
    try:
        return job()
    except Exception as exc:  # keep measuring; record why
        return {"config": name, "m": size, "error": f"{type(exc).__name__}: {exc}"}


def in_rounds(jobs, rounds: int, log=print, order: str = "balanced") -> list[dict]:
    """Run every job (``(name, size, callable returning a record)``) once per round, round
    after round, so that slow drift of the clock or temperature over a run falls on every
    kernel alike. ``order`` (``timing.ROUND_ORDERS``): ``balanced`` runs round r in the r-th
    order of ``timing.balanced_orders``, so that over a whole number of its cycles every job
    takes every position and follows every other job equally often; ``rotate`` starts round r
    at job r (mod their number) and keeps the cyclic order, so each job always follows the
    same one. Each
    record gets its ``round`` and ``position``. A job that raises becomes a record with the
    error (:func:`record_of`), and the others go on."""
    if order not in ROUND_ORDERS:
        raise ValueError(f"order {order!r}: one of {', '.join(ROUND_ORDERS)}")
    out = []
    jobs = list(jobs)
    n = len(jobs)
    orders = (balanced_orders(n) if order == "balanced"
              else [list(range(r, n)) + list(range(r)) for r in range(n)] or [[]])
    for r in range(rounds):
        for pos, j in enumerate(orders[r % len(orders)]):
            name, size, job = jobs[j]
            rec = record_of(name, size, job)
            rec["round"] = r
            rec["position"] = pos
            out.append(rec)
            log(rec)
    return out


def merge_rounds(records: list[dict]) -> list[dict]:
    """One record per kernel, configuration, variant and size: the first round's record with
    ``tflops`` the median over rounds (``tflops_rounds`` lists them), ``correct`` only if every
    round was correct."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        if "error" in rec:
            continue
        key = (rec.get("kernel"), rec.get("config"), rec.get("variant"), rec["m"])
        groups.setdefault(key, []).append(rec)
    merged = []
    for recs in groups.values():
        first = dict(recs[0])
        rates = [r["tflops"] for r in recs]
        first["tflops_rounds"] = rates
        first["tflops"] = statistics.median(rates)
        first["correct"] = all(r.get("correct", True) for r in recs)
        spreads = [r["spread"] for r in recs if r.get("spread") is not None]
        if spreads:   # each round's own spread; the figure is as noisy as its typical round
            first["spread_rounds"] = spreads
            first["spread"] = statistics.median(spreads)
            first["noisy"] = first["spread"] > NOISY_SPREAD
            first["min_ms"] = min(r["min_ms"] for r in recs)
            first["median_ms"] = statistics.median(r["median_ms"] for r in recs)
        if len(rates) > 1:
            first["rounds_spread"] = (max(rates) - min(rates)) / first["tflops"]
        for key in ("nvml_sm_clock_mhz", "nvml_power_w", "nvml_power_capped",
                    "nvml_thermal_slowdown"):
            vals = [r[key] for r in recs if r.get(key) is not None]
            if vals:
                first[key] = statistics.median(vals)
        first.pop("round", None)
        first.pop("position", None)
        merged.append(first)
    return merged


def best_by(records: list[dict], kernel: str) -> list[dict]:
    """The fastest correct record of ``kernel`` per size and variant."""
    best: dict[tuple, dict] = {}
    for r in records:
        if r.get("kernel") != kernel or not r.get("correct"):
            continue
        key = (r["m"], r["variant"])
        if r["tflops"] > best.get(key, {}).get("tflops", 0):
            best[key] = r
    return list(best.values())


def _load_cublas():
    """libcublas, as loaded by CuPy (same soname) or from CUDA's usual places; None if absent."""
    import ctypes
    import glob
    import os

    names = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    try:
        import nvidia.cublas
        names += sorted(glob.glob(os.path.join(list(nvidia.cublas.__path__)[0], "lib",
                                               "libcublas.so*")))
    except ImportError:
        pass
    names += sorted(glob.glob("/usr/local/cuda/lib64/libcublas.so*"))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@lru_cache(maxsize=None)
def _graph_capturable_gemm(cp):
    """cuBLAS's fp16 GEMM (fp32 compute, fp16 C) on row-major operands, ``gemm(a, b, c)``, on
    the current stream: cublasGemmEx, the call ``cupy.matmul`` makes, but through its own handle
    and ctypes, since CuPy refuses its cuBLAS calls inside a CUDA graph capture. None where
    libcublas cannot be loaded or the handle not made."""
    import ctypes

    lib = _load_cublas()
    if lib is None:
        return None
    handle = ctypes.c_void_p()
    if lib.cublasCreate_v2(ctypes.byref(handle)) != 0:
        return None
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    lib.cublasSetStream_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cublasGemmEx.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int, ctypes.c_int]
    f16, compute_32f, default_algo = 2, 68, -1   # CUDA_R_16F, CUBLAS_COMPUTE_32F, GEMM_DEFAULT

    def gemm(a, b, c, _keep=(lib, handle, one, zero)) -> None:
        m, k = a.shape
        n = b.shape[1]
        lib.cublasSetStream_v2(handle, cp.cuda.get_current_stream().ptr)
        # Row-major C = A B is column-major C^T = B^T A^T.
        status = lib.cublasGemmEx(handle, 0, 0, n, m, k, ctypes.byref(one), b.data.ptr, f16, n,
                                  a.data.ptr, f16, k, ctypes.byref(zero), c.data.ptr, f16, n,
                                  compute_32f, default_algo)
        if status != 0:
            raise RuntimeError(f"cublasGemmEx returned status {status}")
    return gemm


def cublas_run(m: int, n: int, k: int, *, b_col: bool = False, sets: int | None = None,
               warmup_ms: float = WARMUP_MS) -> dict:
    """cuBLAS's fp16 GEMM (fp16 out), same rotation as ours: cublasGemmEx as ``cupy.matmul``
    calls it, but callable inside a CUDA graph (checked against ``cupy.matmul`` first), or
    ``cupy.matmul`` itself (B column-major, or where that check fails)."""
    cp = cupy_module()
    sets = sets or _gemm_sets(m, n, k)
    bufs = []
    for s in range(sets):
        a, b = _gemm_operands(cp, m, n, k, b_col, 100 + s)
        bufs.append((a, b.T if b_col else b, cp.empty((m, n), dtype=cp.float16)))
    gemm = None if b_col else _graph_capturable_gemm(cp)
    how = "cupy.matmul"
    if gemm is not None:
        a, b, c = bufs[0]
        try:
            gemm(a, b, c)
            if _rel_error(c, cp.matmul(a, b)) <= 1e-3:
                how = "cublasGemmEx"
        except Exception:  # fall back to cupy.matmul
            pass

    def call(i: int) -> None:
        a, b, c = bufs[i]
        if how == "cublasGemmEx":
            gemm(a, b, c)
        else:
            cp.matmul(a, b, out=c)

    cp.cuda.Device().synchronize()
    t = time_gpu(call, sets=sets, warmup_ms=warmup_ms)
    rec = {"kernel": "cublas", "variant": f"{how} fp16, B {'col' if b_col else 'row'}-major",
           "m": m, "n": n, "k": k, "sets": sets, **t.as_dict()}
    rec["tflops"] = 2.0 * m * n * k / (t.median_ms * 1e-3) / 1e12
    return rec


def mma_peak_run(chains_options=(4, 8, 12), threads_options=(128, 256),
                 blocks_per_sm_options=(2, 4, 8), iters: int = 4096, vary: bool = False) -> dict:
    """Register-only mma.sync.m16n8k16 f16->f32 rate: the best over a few launch shapes.

    Each trial also reports the SM clock its last launch ran at (from the kernel's own clock64
    and globaltimer readings), since the ceiling moves with it. ``vary``: the operands change
    from one mma to the next and hold random normal f16 values, as a GEMM's do (the tensor
    core's power, and so the clock under the board's power limit, depends on the data); else
    each lane repeats one small positive value.
    """
    cp = cupy_module()
    sms = device_info()["multiprocessors"]
    rng = np.random.default_rng(7)
    if vary:
        seed = cp.asarray(rng.standard_normal(384).astype(np.float16).view(np.uint32))
    else:
        seed = cp.asarray(rng.integers(0x3000, 0x3C00, 192, dtype=np.uint32)
                          * np.uint32(0x10001))   # small positive f16 pairs
    trials = []
    for chains in chains_options:
        kern = compile_kernel(mma_peak_source(chains, vary), "mma_peak")
        for threads in threads_options:
            for per_sm in blocks_per_sm_options:
                blocks = sms * per_sm
                out = cp.empty(blocks * threads, dtype=cp.float32)
                clocks = cp.zeros(4 * blocks, dtype=cp.uint64)   # per block: cycles, ns

                def call(_: int, kern=kern, blocks=blocks, threads=threads, out=out,
                         clocks=clocks) -> None:
                    kern((blocks,), (threads,), (seed, out, np.int32(iters), clocks))

                t = time_gpu(call, min_reps=10, target_ms=150.0)
                flops = blocks * (threads // 32) * iters * chains * 2 * 16 * 8 * 16
                trials.append({"chains": chains, "threads": threads, "blocks": blocks,
                               "iters": iters, **t.as_dict(),
                               "tflops": flops / (t.median_ms * 1e-3) / 1e12,
                               "sm_clock_mhz": _sm_clock_mhz(cp.asnumpy(clocks))})
    best = max(trials, key=lambda r: r["tflops"])
    return {"kernel": "mma_peak", "vary": vary, "tflops": best["tflops"], "best": best,
            "trials": trials}


def _sm_clock_mhz(clocks: np.ndarray) -> float | None:
    """Median over blocks of SM cycles per microsecond, from mma_peak's ``clocks`` output."""
    per_block = clocks.astype(np.float64).reshape(-1, 4)
    cycles = per_block[:, 1] - per_block[:, 0]
    ns = per_block[:, 3] - per_block[:, 2]
    ok = ns > 0
    return float(np.median(cycles[ok] / ns[ok] * 1e3)) if ok.any() else None


def fixed_cost_fit(ks, ms) -> dict:
    """Least-squares ``t(K) = fixed + per_k * K`` over GEMM times ``ms`` at depths ``ks`` (same
    M and N): ``fixed`` is what a block tile costs whatever its K (filling the ring before the
    first mma, the epilogue, the launch); ``share`` its part of the time at each K of ``ks``."""
    k = np.asarray(ks, dtype=np.float64)
    t = np.asarray(ms, dtype=np.float64)
    per_k, fixed = np.polyfit(k, t, 1)
    resid = t - (fixed + per_k * k)
    return {"ks": [int(x) for x in ks], "ms": [float(x) for x in ms], "fixed_ms": float(fixed),
            "per_k_ms": float(per_k), "max_residual_ms": float(np.abs(resid).max()),
            "share": [float(fixed / tt) for tt in ms]}


def fixed_cost_run(cfg: GemmConfig, m: int, n: int, ks=(256, 512, 1024, 2048, 4096)) -> dict:
    """``cfg`` at ``m x n`` and each depth of ``ks``, checked and timed, and
    :func:`fixed_cost_fit` over the times: the share of the prologue and epilogue."""
    recs = [gemm_run(cfg, m, n, k, sets=2) for k in ks]
    fit = fixed_cost_fit(ks, [r["median_ms"] for r in recs])
    return {"kernel": "gemm", "config": cfg.label, "variant": cfg.variant, "m": m, "n": n,
            "correct": all(r["correct"] for r in recs), **fit}


# ---------------------------------------------------------------------------------------------
# Transpose and its ceilings
# ---------------------------------------------------------------------------------------------

def transpose_run(cfg: TransposeConfig, rows: int, cols: int, *, sets: int | None = None,
                  time_it: bool = True) -> dict:
    """Check one transpose configuration bit for bit against ``a.T``, then time it."""
    cp = cupy_module()
    cfg.check_shape(rows, cols)
    sets = sets or rotation_sets(2 * rows * cols * 2)
    kern = compile_kernel(cfg.source(), cfg.kernel_name)
    bufs = []
    for s in range(sets):
        a = cp.random.RandomState(200 + s).randint(0, 1 << 16, (rows, cols), dtype=cp.int32)
        bufs.append((a.astype(cp.uint16), cp.empty((cols, rows), dtype=cp.uint16)))
        del a

    def call(i: int) -> None:
        src, dst = bufs[i]
        _launch(kern, cfg.grid(rows, cols), (cfg.threads,),
                (src, dst, np.int32(rows), np.int32(cols)), cfg.smem_bytes)

    src, dst = bufs[0]
    dst.fill(0xFFFF)
    call(0)
    cp.cuda.Device().synchronize()
    mismatches = int((dst != src.T).sum())
    rec = {"kernel": "transpose", "config": cfg.label, "rows": rows, "cols": cols, "sets": sets,
           "params": cfg.as_dict(), "mismatches": mismatches, "correct": mismatches == 0}
    if time_it:
        t = time_gpu(call, sets=sets)
        rec.update(t.as_dict())
        rec["tbps"] = 2 * rows * cols * 2 / (t.median_ms * 1e-3) / 1e12
    return rec


def copy_run(nbytes: int, *, sets: int | None = None) -> dict:
    """Device-to-device cudaMemcpy bandwidth, bytes read + written."""
    cp = cupy_module()
    sets = sets or rotation_sets(2 * nbytes)
    rt = cp.cuda.runtime
    bufs = [(cp.ones(nbytes // 4, dtype=cp.uint32), cp.empty(nbytes // 4, dtype=cp.uint32))
            for _ in range(sets)]

    def call(i: int) -> None:
        src, dst = bufs[i]
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)

    t = time_gpu(call, sets=sets)
    return {"kernel": "d2d_copy", "bytes": nbytes, **t.as_dict(),
            "tbps": 2 * nbytes / (t.median_ms * 1e-3) / 1e12}


def cupy_transpose_run(rows: int, cols: int, *, sets: int | None = None) -> dict:
    """CuPy's transposing copy (``cupy.copyto(out, a.T)``, what ``ascontiguousarray(a.T)``
    runs, into a buffer allocated beforehand) on fp16, bytes read + written."""
    cp = cupy_module()
    sets = sets or rotation_sets(2 * rows * cols * 2)
    bufs = [cp.random.RandomState(300 + s).standard_normal((rows, cols), dtype=cp.float32)
            .astype(cp.float16) for s in range(sets)]
    outs = [cp.empty((cols, rows), dtype=cp.float16) for _ in range(sets)]

    def call(i: int) -> None:
        cp.copyto(outs[i], bufs[i].T)

    t = time_gpu(call, sets=sets)
    return {"kernel": "cupy_transpose", "rows": rows, "cols": cols, **t.as_dict(),
            "tbps": 2 * rows * cols * 2 / (t.median_ms * 1e-3) / 1e12}
