#!/usr/bin/env bash
# The capstone's per-size work on a machine with an sm_90 GPU, CuPy, nvcc and ncu, one call each:
#
#   bash measure/sweeps/gpu_capstone_sizes.sh sweep OUT_DIR [tune options...]
#       python -m ptxlab.bench.tune --by-size: at 1024^3 .. 8192^3, each size's GEMM_SWEEP
#       configurations (ours, B row- and column-major), CUTLASS's tile sweep and cuBLAS in 3
#       interleaved rounds, and every TRANSPOSE_SWEEP tile beside the copy at 2048^2 .. 16384^2
#       (every kernel compiled first in 8 processes); then a short `ptxlab bench` (one round,
#       no ncu, no CUTLASS) that runs the report's code paths. Writes OUT_DIR/tune.json,
#       OUT_DIR/sweep.log, OUT_DIR/smoke/ and OUT_DIR/smoke.log. With tune options, the sweep
#       runs with those instead of --sizes and --rounds (e.g. --sizes 4096 8192 --rounds 4
#       --transpose-sizes --peer-only LABELS) and no short bench follows.
#
#   bash measure/sweeps/gpu_capstone_sizes.sh bench OUT_DIR
#       the whole `ptxlab bench` (the report committed under reports/capstone/), with the
#       configurations GEMM_BY_SIZE and TRANSPOSE_BY_SIZE name. Writes OUT_DIR/capstone/ and
#       OUT_DIR/bench.log. ROUNDS=N sets the interleaved rounds per size (default 5).
#
# CUTLASS's headers come from an nvidia-cutlass wheel in .whl/ where nothing else provides them.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:?usage: gpu_capstone_sizes.sh sweep|bench OUT_DIR [tune options]}
OUT_DIR=${2:?usage: gpu_capstone_sizes.sh sweep|bench OUT_DIR [tune options]}
shift 2
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PTXLAB_PEER_CACHE="${PTXLAB_PEER_CACHE:-/tmp/ptxlab-peer}"
PY="${PYTHON:-python3}"

header() {
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv,noheader || true
  nvcc --version | tail -n 2 || true
  "$PY" -c 'import cupy; print("CuPy", cupy.__version__)'
}

case "$MODE" in
  sweep)
    OPTIONS=("$@")
    [[ ${#OPTIONS[@]} -gt 0 ]] || OPTIONS=(--sizes 1024 2048 4096 8192 --rounds 3)
    {
      header
      "$PY" -m ptxlab.bench.tune --out "$OUT_DIR" --by-size --skip peak ncu --precompile 8 \
        "${OPTIONS[@]}"
    } 2>&1 | tee "$OUT_DIR/sweep.log"
    [[ $# -eq 0 ]] || exit 0
    {
      header
      "$PY" -m ptxlab.cli bench --out "$OUT_DIR/smoke" --gemm-sizes 1024 --transpose-sizes 2048 \
        --rounds 1 --no-ncu --no-peer --notes "smoke run of the report's code paths"
    } 2>&1 | tee "$OUT_DIR/smoke.log"
    ;;
  bench)
    {
      header
      "$PY" -m ptxlab.cli bench --out "$OUT_DIR/capstone" --rounds "${ROUNDS:-5}" --notes "ptxlab bench run whole on \
the H100: ours per size (GEMM_BY_SIZE: B row- and column-major, f16 and f32 out), CUTLASS's SM80 \
mma.sync GEMM (sweep, then its fastest per size and B layout), cuBLAS, the ceilings, the \
transpose per size (TRANSPOSE_BY_SIZE) beside the copy, the course's exercise-3 k-loop as a \
whole GEMM and a K sweep for the fixed cost per tile, in one run; launches under 2 ms timed \
in CUDA graphs"
    } 2>&1 | tee "$OUT_DIR/bench.log"
    ;;
  *) echo "unknown mode $MODE (sweep or bench)" >&2; exit 2 ;;
esac
