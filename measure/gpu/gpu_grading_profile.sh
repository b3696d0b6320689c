#!/usr/bin/env bash
# Where the grading server's time goes: the class of 06_mma graded with 16 and with 24 workers
# (the class alone, no corpus), the machine's CPU by kind of process during each, and a
# sampling profile (py-spy --gil, when installed: the Python code that held the interpreter) of
# every Python process of a third run. STEPS picks the parts (default "w16 w24 profile"; "w1"
# grades 16 submissions with one worker, the cost of a submission on an idle machine).
#
#   bash measure/gpu/gpu_grading_profile.sh OUT_DIR [SOLUTIONS]     # on the GPU server
#
# Writes OUT_DIR/w1/, OUT_DIR/w16/, OUT_DIR/w24/ and OUT_DIR/profiled/ (each scale.json and
# SCALE.md with the step and CPU tables), OUT_DIR/profile.txt.gz (py-spy's collapsed stacks) and
# OUT_DIR/profile_summary.txt. What the terminal shows, each step's start time included, goes to
# LOG_DIR/run.log (default /tmp/ptxlab-logs/grading-profile), not into reports/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:?usage: gpu_grading_profile.sh OUT_DIR [SOLUTIONS]}"
SOL="${2:-150}"
STEPS="${STEPS:-w16 w24 profile}"
has() { [[ " $STEPS " == *" $1 "* ]]; }
LOG_DIR="${LOG_DIR:-/tmp/ptxlab-logs/grading-profile}"
mkdir -p "$OUT" "$LOG_DIR"
PY="${PYTHON:-python3}"
bench() {   # workers, out dir, extra args
  "$PY" measure/benchmarks/bench_grading_scale.py --runs 1 --stock 0 --no-corpus --sandbox bwrap \
    --launch-timeout 5 --solutions "$SOL" --blank 50 --workers "$1" --out "$2" "${@:3}"
}
{
  if has w1; then
    echo "== $(date -u +%FT%TZ) 1 worker, 16 submissions"
    SOL_SAVED=$SOL; SOL=12
    bench 1 "$OUT/w1" --blank 4 | grep -A12 '^Where a sub\|^CPU'
    SOL=$SOL_SAVED
  fi
  for w in 16 24; do
    has "w$w" || continue
    echo "== $(date -u +%FT%TZ) $w workers"
    bench "$w" "$OUT/w$w" | grep -A12 '^Where a sub\|^CPU'
  done
  if has profile && command -v py-spy >/dev/null; then
    echo "== $(date -u +%FT%TZ) 16 workers under py-spy (20 samples/s, every subprocess)"
    py-spy record --gil --subprocesses --nonblocking --rate 20 --format raw --output "$OUT/profile.txt" \
      -- "$PY" measure/benchmarks/bench_grading_scale.py --runs 1 --stock 0 --no-corpus --sandbox bwrap \
         --launch-timeout 5 --solutions 100 --blank 0 --workers 16 --out "$OUT/profiled" \
      2>&1 | grep -E '^run|^CPU|^  ' | tail -12
    (cd measure/benchmarks && "$PY" profile_summary.py "$OUT/profile.txt" --top 30) > "$OUT/profile_summary.txt"
    gzip -f "$OUT/profile.txt"
  fi
  echo "== $(date -u +%FT%TZ) done"
} 2>&1 | tee "$LOG_DIR/run.log"
