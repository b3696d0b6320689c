#!/usr/bin/env bash
# The capstone GEMM sweep on a machine with an sm_90 GPU, CuPy, nvcc and ncu, in one run:
#
#   python -m ptxlab.bench.tune: the mma.sync ceilings, cuBLAS, every GEMM_CANDIDATES
#   configuration, CUTLASS's GEMM over its tile sweep (headers from an nvidia-cutlass wheel in
#   .whl/ when nothing else provides them), in interleaved rounds with tune's options (--rounds;
#   --head FILE adds another version of gemm.cu, e.g. the last committed one, to the same
#   rounds), then Nsight Compute profiles of the fastest of each
#
#   bash measure/sweeps/gpu_capstone_sweep.sh OUT_DIR [tune options...]
#
# Writes OUT_DIR/tune.json and OUT_DIR/sweep.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
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
  "$PY" -m ptxlab.bench.tune --out "$OUT_DIR" "$@"
} 2>&1 | tee "$OUT_DIR/sweep.log"
