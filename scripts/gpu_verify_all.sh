#!/usr/bin/env bash
# Every verification that needs a GPU, in one run, writing the reports that are committed:
#
#   reports/hardware/       reference kernels vs the emulator, 1,000 random cases per form, and
#                           the tensor core's rounding on fresh inputs (tests/vectors/ rewritten)
#   reports/cpu_backend/    every kernel of the project on the CPU model vs the GPU, bit for bit
#   reports/course_gpu/     every course notebook executed top to bottom on the GPU path
#   reports/grading_gpu/    `ptxlab grade` on a class with faulting kernels, GPU path
#   + the GPU test suite (pytest -m gpu)
#
#   bash scripts/gpu_verify_all.sh [LOG_DIR]        # on a machine with a CUDA GPU and CuPy
#
# Each step's log goes to LOG_DIR (default /tmp/ptxlab-gpu); the exit status is 1 if any step
# failed. nbgrader, nbclient and ipykernel must be importable (the course's packages).
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${1:-/tmp/ptxlab-gpu}"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
failed=()

step() {
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 6 "$LOGS/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  [[ $rc == 0 ]] || failed+=("$name")
}

"$PY" -m ptxlab.cli status
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

step verify    "$PY" scripts/verify_hardware.py
step rounding  "$PY" scripts/collect_mma_rounding.py --out "$LOGS/rounding" --cases 500 \
                     --seed 4242 --report reports/hardware
step compare   "$PY" scripts/compare_backends.py --rounds 3 --out-dir reports/cpu_backend
step notebooks "$PY" scripts/course_execute_all.py --out reports/course_gpu
step grading   "$PY" scripts/gpu_grading_check.py --out reports/grading_gpu
step pytest    "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/

if ((${#failed[@]})); then
  echo "FAILED steps: ${failed[*]} (logs in $LOGS)"
  exit 1
fi
echo "every GPU verification passed (logs in $LOGS)"
