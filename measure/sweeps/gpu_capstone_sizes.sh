#!/usr/bin/env bash
# The capstone's per-size work on a machine with an sm_90 GPU, CuPy, nvcc and ncu, one call each:
#
#   bash measure/sweeps/gpu_capstone_sizes.sh sweep OUT_DIR [tune options...]
#       python -m ptxlab.bench.tune --by-size: at 1024^3 .. 8192^3, each size's GEMM_SWEEP
#       configurations (ours, B row- and column-major), CUTLASS's tile sweep and cuBLAS in 3
#       interleaved rounds, and every TRANSPOSE_SWEEP tile beside the copy at 2048^2 .. 16384^2
#       (every kernel compiled first in 8 processes); then a short `ptxlab bench` (one round,
#       no ncu, no CUTLASS) that runs the report's code paths. Writes OUT_DIR/tune.json (every
#       record the sweep prints), OUT_DIR/RUN.md and OUT_DIR/smoke/ (its REPORT.md, report.json
#       and RUN.md). With tune options, the sweep runs with those instead of --sizes and
#       --rounds (e.g. --sizes 4096 8192 --rounds 4 --transpose-sizes --peer-only LABELS) and no
#       short bench follows.
#
#   bash measure/sweeps/gpu_capstone_sizes.sh bench OUT_DIR
#       the whole `ptxlab bench` (the report committed under reports/capstone/), with the
#       configurations GEMM_BY_SIZE and TRANSPOSE_BY_SIZE name. Writes OUT_DIR/capstone/
#       (REPORT.md, report.json with every round, RUN.md). ROUNDS=N sets the interleaved rounds
#       per size (default 5).
#
# RUN.md is the run's own first lines as a report: when it started, the GPU's clock and
# temperature then (nvidia-smi), nvcc and CuPy, the command. What the terminal shows goes to
# LOG_DIR (default /tmp/ptxlab-logs/capstone): sweep.log, smoke.log, bench.log, which are not
# reports (every figure in them is in tune.json, report.json or RUN.md) and stay out of reports/.
#
# CUTLASS's headers come from an nvidia-cutlass wheel in .whl/ where nothing else provides them.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:?usage: gpu_capstone_sizes.sh sweep|bench OUT_DIR [tune options]}
OUT_DIR=${2:?usage: gpu_capstone_sizes.sh sweep|bench OUT_DIR [tune options]}
COMMAND="${ROUNDS:+ROUNDS=$ROUNDS }bash measure/sweeps/gpu_capstone_sizes.sh $(printf '%q ' "$@")"
shift 2
LOG_DIR="${LOG_DIR:-/tmp/ptxlab-logs/capstone}"
mkdir -p "$OUT_DIR" "$LOG_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PTXLAB_PEER_CACHE="${PTXLAB_PEER_CACHE:-/tmp/ptxlab-peer}"
PY="${PYTHON:-python3}"

# shellcheck source=measure/sweeps/run_header.sh
source measure/sweeps/run_header.sh
header() { run_header "$@"; }

case "$MODE" in
  sweep)
    OPTIONS=("$@")
    [[ ${#OPTIONS[@]} -gt 0 ]] || OPTIONS=(--sizes 1024 2048 4096 8192 --rounds 3)
    {
      header "$OUT_DIR" "Capstone sweep by size"
      "$PY" -m ptxlab.bench.tune --out "$OUT_DIR" --by-size --skip peak ncu --precompile 8 \
        "${OPTIONS[@]}"
    } 2>&1 | tee "$LOG_DIR/sweep.log"
    [[ $# -eq 0 ]] || exit 0
    {
      header "$OUT_DIR/smoke" "Smoke run of the report's code paths"
      "$PY" -m ptxlab.cli bench --out "$OUT_DIR/smoke" --gemm-sizes 1024 --transpose-sizes 2048 \
        --rounds 1 --no-ncu --no-peer --notes "smoke run of the report's code paths"
    } 2>&1 | tee "$LOG_DIR/smoke.log"
    ;;
  bench)
    {
      header "$OUT_DIR/capstone" "Capstone bench run"
      "$PY" -m ptxlab.cli bench --out "$OUT_DIR/capstone" --rounds "${ROUNDS:-5}" --notes "ptxlab bench run whole on \
the H100: ours per size (GEMM_BY_SIZE: B row- and column-major, f16 and f32 out), CUTLASS's SM80 \
mma.sync GEMM (sweep, then its fastest per size and B layout), cuBLAS, the ceilings, the \
transpose per size (TRANSPOSE_BY_SIZE) beside the copy, the course's exercise-3 k-loop as a \
whole GEMM and a K sweep for the fixed cost per tile, in one run; launches under 2 ms timed \
in CUDA graphs"
    } 2>&1 | tee "$LOG_DIR/bench.log"
    ;;
  *) echo "unknown mode $MODE (sweep or bench)" >&2; exit 2 ;;
esac
