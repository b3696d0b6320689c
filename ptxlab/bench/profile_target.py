"""A program for Nsight Compute to profile: launch one GEMM configuration once.

``python -m ptxlab.bench.profile_target SIZE KEY=VALUE ...`` (keys of GemmConfig), e.g.
``ncu --kernel-name gemm_f16 --launch-count 1 python -m ptxlab.bench.profile_target 4096 bk=64``;
``--peer SIZE KEY=VALUE ...`` (keys of ``cutlass_peer.PeerConfig``) launches CUTLASS's GEMM
instead, before anything else runs on the GPU, so that its first launch is the one profiled;
``--cublas SIZE`` runs cuBLAS's fp16 GEMM (``cupy.matmul``).
"""
from __future__ import annotations

import sys

from .kernels import GemmConfig


def config_params(cls, items: list[str]) -> dict:
    """``KEY=VALUE`` items as the keyword arguments of ``cls`` (a GEMM or CUTLASS
    configuration): integer values, each converted to the field's type; an unknown key ends
    the program naming the known ones."""
    fields = cls().as_dict()
    params = {}
    for item in items:
        key, value = item.split("=", 1)
        if key not in fields:
            raise SystemExit(f"unknown parameter {key!r} of {cls.__name__} "
                             f"(known: {', '.join(fields)})")
        params[key] = type(fields[key])(int(value))
    return params


def _peer(size: int, items: list[str]) -> int:
    from . import cutlass_peer
    from .runs import _gemm_operands, cupy_module

    cfg = cutlass_peer.PeerConfig(**config_params(cutlass_peer.PeerConfig, items))
    lib = cutlass_peer.build([cfg])[cfg]
    if isinstance(lib, str):
        print(f"CUTLASS peer {cfg.label}: {lib}", file=sys.stderr)
        return 2
    kernel = cutlass_peer.PeerKernel(cfg, lib)
    cp = cupy_module()
    a, b = _gemm_operands(cp, size, size, size, cfg.b_col, 0)
    c = cp.empty((size, size), dtype=cp.float16)
    kernel(a.data.ptr, b.data.ptr, c.data.ptr, size, size, size,
           cp.cuda.get_current_stream().ptr)
    cp.cuda.Device().synchronize()
    print({"config": cfg.label, "variant": cfg.variant})
    return 0


def _cublas(size: int) -> int:
    """cuBLAS's fp16 GEMM (``cupy.matmul``), twice: its first call picks the kernel."""
    from .runs import _gemm_operands, cupy_module

    cp = cupy_module()
    a, b = _gemm_operands(cp, size, size, size, False, 0)
    for _ in range(2):
        cp.matmul(a, b)
    cp.cuda.Device().synchronize()
    print({"cublas": size})
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--peer":
        return _peer(int(argv[1]), argv[2:])
    if argv and argv[0] == "--cublas":
        return _cublas(int(argv[1]))
    size = int(argv[0])
    from .runs import gemm_run

    rec = gemm_run(GemmConfig(**config_params(GemmConfig, argv[1:])), size, size, size, sets=1,
                   time_it=False)
    print({k: rec[k] for k in ("config", "variant", "rel_error_vs_fp32", "correct")})
    return 0 if rec["correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
