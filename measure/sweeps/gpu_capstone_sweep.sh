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
# Writes OUT_DIR/tune.json (every record the sweep prints, the ncu profiles) and OUT_DIR/RUN.md
# (when it started, the GPU's clock and temperature then, nvcc, CuPy, the command). What the
# terminal shows goes to LOG_DIR/sweep.log (default /tmp/ptxlab-logs/capstone), not a report: every
# figure in it is in tune.json or RUN.md, and it stays out of reports/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${1:?usage: gpu_capstone_sweep.sh OUT_DIR [tune options]}
COMMAND="bash measure/sweeps/gpu_capstone_sweep.sh $(printf '%q ' "$@")"
shift
LOG_DIR="${LOG_DIR:-/tmp/ptxlab-logs/capstone}"
mkdir -p "$OUT_DIR" "$LOG_DIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PTXLAB_PEER_CACHE="${PTXLAB_PEER_CACHE:-/tmp/ptxlab-peer}"
PY="${PYTHON:-python3}"
# shellcheck source=measure/sweeps/run_header.sh
source measure/sweeps/run_header.sh
run_header "$OUT_DIR" "Capstone sweep" >/dev/null
{
  cat "$OUT_DIR/RUN.md"
  "$PY" -m ptxlab.bench.tune --out "$OUT_DIR" "$@"
} 2>&1 | tee "$LOG_DIR/sweep.log"
