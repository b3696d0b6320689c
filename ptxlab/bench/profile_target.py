"""A program for Nsight Compute to profile: launch one capstone GEMM configuration a few times.

``python -m ptxlab.bench.profile_target SIZE KEY=VALUE ...`` (keys of GemmConfig), e.g.
``ncu --launch-skip 2 --launch-count 1 python -m ptxlab.bench.profile_target 4096 bk=64 stages=3``.
"""
from __future__ import annotations

import sys

from .kernels import GemmConfig


def main(argv: list[str]) -> int:
    size = int(argv[0])
    fields = GemmConfig().as_dict()
    params = {}
    for item in argv[1:]:
        key, value = item.split("=", 1)
        params[key] = type(fields[key])(int(value)) if key in fields else value
    from .runs import gemm_run

    rec = gemm_run(GemmConfig(**params), size, size, size, sets=1, time_it=False)
    print({k: rec[k] for k in ("config", "variant", "rel_error_vs_fp32", "correct")})
    return 0 if rec["correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
