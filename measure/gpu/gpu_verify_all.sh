#!/usr/bin/env bash
# Every verification that needs a GPU, in one run, writing the reports that are committed:
#
#   reports/hardware/       reference kernels vs the emulator, 1,000 random cases per form, and
#                           the tensor core's rounding on fresh inputs (tests/vectors/ rewritten)
#   reports/hardware/SANITIZER.md  planted races under compute-sanitizer racecheck and the CPU
#                           model's detector; generic pointers as shared addresses, GPU vs CPU
#   reports/hardware/SHARED_LAYOUT.md  where shared variables sit in the .shared window, loads
#                           around them, division by zero: the GPU beside the CPU model
#   reports/hardware/VERDICTS.md  every kernel answer of the course (solutions, mutants) checked
#                           on the GPU machine and with the GPU hidden: the same verdicts
#   reports/cpu_backend/    every kernel of the project on the CPU model vs the GPU, bit for bit
#   reports/course_gpu/     every course notebook executed top to bottom on the GPU path
#   reports/grading_gpu/    `ptxlab grade` on a class with faulting kernels, GPU path, sandbox on
#                           where bubblewrap starts (PTXLAB_BWRAP names an unpacked one)
#   reports/gpu_verify/     SUMMARY.md (each step's exit status and time, the device, the date,
#                           and the GPU test suite's result: pytest -m gpu's counts and the node
#                           ids of every skip, failure and error)
#
#   bash measure/gpu/gpu_verify_all.sh [LOG_DIR]        # on a machine with a CUDA GPU and CuPy
#
# Each step's log goes to LOG_DIR (default /tmp/ptxlab-gpu), never into reports/: the reports
# above carry the figures. The exit status is 1 if any step
# failed. STEPS="verify notebooks ..." runs only the steps named (e.g. again after a change that
# touches only grading). nbgrader, nbclient and ipykernel must be importable (the course's packages).
set -uo pipefail
cd "$(dirname "$0")/../.."
LOGS="${1:-/tmp/ptxlab-gpu}"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
failed=()

step() {
  local name=$1; shift
  if [[ -n "${STEPS:-}" && " $STEPS " != *" $name "* ]]; then return 0; fi
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 6 "$LOGS/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  echo "| $name | \`$*\` | $rc | $((SECONDS - t0)) s |" >>"$SUMMARY"
  [[ $rc == 0 ]] || failed+=("$name")
}

mkdir -p reports/gpu_verify
SUMMARY=reports/gpu_verify/SUMMARY.md
# A run of every step starts the summary afresh; a run of some steps (STEPS=...) adds a section.
[[ -n "${STEPS:-}" && -f "$SUMMARY" ]] || echo "# Every GPU verification" >"$SUMMARY"
{
  echo
  echo "## $(date -u '+%Y-%m-%d %H:%M UTC')${STEPS:+: steps $STEPS}"
  echo
  echo "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'), $(nproc) CPUs. Command: \`${STEPS:+STEPS=\"$STEPS\" }bash measure/gpu/gpu_verify_all.sh\`."
  echo
  echo "| step | command | exit status | time |"
  echo "| --- | --- | ---: | ---: |"
} >>"$SUMMARY"

"$PY" -m ptxlab.cli status
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

step verify    "$PY" measure/gpu/verify_hardware.py
step rounding  "$PY" measure/gpu/collect_mma_rounding.py --out "$LOGS/rounding" --cases 500 \
                     --seed 4242 --report reports/hardware
step compare   "$PY" measure/gpu/compare_backends.py --rounds 3 --out-dir reports/cpu_backend
step notebooks "$PY" tools/course/course_execute_all.py --out reports/course_gpu
step blackwell "$PY" measure/gpu/gpu_blackwell_notebooks.py --out reports/course_gpu
step sanitizer "$PY" measure/gpu/gpu_sanitizer_check.py --out reports/hardware
step synccheck "$PY" measure/gpu/gpu_synccheck_check.py --out reports/hardware
step layout    "$PY" measure/gpu/gpu_shared_layout.py --out reports/hardware
step verdicts  "$PY" measure/gpu/gpu_verdicts_check.py --out reports/hardware
step probes    bash -c "'$PY' measure/gpu/probe_launch_config.py --out reports/hardware && \
                     '$PY' measure/gpu/probe_stmatrix_same_row.py --out reports/hardware"
step grading   "$PY" measure/gpu/gpu_grading_check.py --out reports/grading_gpu --workers 4
step pytest    "$PY" -m pytest -q -rfEs -m gpu -p no:cacheprovider tests/
if [[ -f "$LOGS/pytest.log" ]]; then
  {
    echo
    echo "pytest -m gpu: $(grep -E '[0-9]+ (passed|failed|skipped|error)' "$LOGS/pytest.log" | tail -n 1)"
    if grep -qE '^(SKIPPED|FAILED|ERROR) ' "$LOGS/pytest.log"; then
      echo
      echo "Skipped, failed or in error, as pytest named them:"
      echo
      grep -E '^(SKIPPED|FAILED|ERROR) ' "$LOGS/pytest.log" | sed -E 's/^([A-Z]+) (\[1\] )?/* \L\1\E: /'
    fi
  } >>"$SUMMARY"
fi

if ((${#failed[@]})); then
  echo "FAILED steps: ${failed[*]} (logs in $LOGS)"
  exit 1
fi
echo "every GPU verification passed (logs in $LOGS)"
