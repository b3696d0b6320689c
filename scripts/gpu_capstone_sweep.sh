#!/usr/bin/env bash
# The capstone GEMM sweep on a machine with an sm_90 GPU, CuPy, nvcc and ncu, in one run:
#
#   1. the GEMM as last committed (.out/gemm_head.cu, when present): the same tile, measured in
#      this run, so a change is judged against it on the same GPU and clock
#   2. python -m ptxlab.bench.tune: the mma.sync ceiling, cuBLAS, every GEMM_CANDIDATES
#      configuration, CUTLASS's GEMM over its tile sweep (headers from an nvidia-cutlass wheel in
#      .whl/ when nothing else provides them), Nsight Compute profiles of the fastest of each
#
#   bash scripts/gpu_capstone_sweep.sh OUT_DIR [tune options...]
#
# Writes OUT_DIR/tune.json, OUT_DIR/head/tune.json and OUT_DIR/sweep.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu_capstone_sweep.sh OUT_DIR [tune options]}
shift
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PTXLAB_PEER_CACHE="${PTXLAB_PEER_CACHE:-/tmp/ptxlab-peer}"
PY="${PYTHON:-python3}"
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader || true
  nvcc --version | tail -n 2 || true
  "$PY" -c 'import cupy; print("CuPy", cupy.__version__)'
  if [[ -f .out/gemm_head.cu ]]; then
    rm -rf /tmp/kernels-head && cp -r kernels /tmp/kernels-head
    cp .out/gemm_head.cu /tmp/kernels-head/capstone/gemm.cu
    PTXLAB_KERNELS_DIR=/tmp/kernels-head "$PY" -m ptxlab.bench.tune --out "$OUT_DIR/head" \
      --skip peak cublas peer ncu --only "128x256x64 w2x4 s3"
  fi
  "$PY" -m ptxlab.bench.tune --out "$OUT_DIR" "$@"
} 2>&1 | tee "$OUT_DIR/sweep.log"
