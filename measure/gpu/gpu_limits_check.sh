#!/usr/bin/env bash
# Issue-level check of the grader's limits on the GPU server, installed as an instructor would:
#   bash measure/gpu/gpu_limits_check.sh OUT_DIR [exploits] [hogs] [scale]
# exploits: measure/gpu/gpu_exploit_check.sh (both exploit suites, the limit tests, the cgroup and
#           GPU-sharing tests) into OUT_DIR/exploits;
# hogs:     measure/benchmarks/bench_grading_hogs.py (a class beside GPU, CPU and memory hogs) into
#           OUT_DIR/hogs;
# scale:    measure/benchmarks/bench_grading_scale.py, the class of 200 of 06_mma three times, into
#           OUT_DIR/scale.
# The course's packages come from the wheels in .whl/ where the machine has no package index.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:?usage: gpu_limits_check.sh OUT_DIR [exploits] [hogs] [scale]}"; shift
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cgroups:"; grep cgroup /proc/self/mountinfo | awk '{print $5, $(NF-2), $NF}'
  cat /proc/self/cgroup
} > "$OUT/machine.txt" 2>&1
if ! "$PY" -c "import nbgrader, nbclient, ipykernel, jupytext" 2>/dev/null; then
  # the wheels carried are the course's packages less what the machine's Python already has
  "$PY" -m pip install -q --no-index --no-deps .whl/*.whl >>"$OUT/machine.txt" 2>&1 ||
    { echo "cannot install the course's packages"; exit 2; }
fi
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT/machine.txt" 2>&1
"$PY" -m compileall -q "$("$PY" -c 'import site; print(site.getsitepackages()[0])')" >/dev/null 2>&1
export PATH="$(dirname "$(command -v "$PY")"):$PATH"
if ! command -v bwrap >/dev/null && [[ -z "${PTXLAB_BWRAP:-}" ]]; then
  deb="$(ls .whl/bubblewrap_*.deb 2>/dev/null | tail -n 1)"
  [[ -n "$deb" ]] && rm -rf .whl/bwrap-root && dpkg -x "$deb" .whl/bwrap-root &&
    export PTXLAB_BWRAP="$PWD/.whl/bwrap-root/usr/bin/bwrap"
fi
for step in "$@"; do
  case "$step" in
    exploits) bash measure/gpu/gpu_exploit_check.sh "$OUT/exploits" ;;
    hogs) "$PY" measure/benchmarks/bench_grading_hogs.py --workers "$(nproc)" --hog-s 20 \
            --sandbox bwrap --out "$OUT/hogs" 2>&1 | tail -n 40 ;;
    scale) "$PY" measure/benchmarks/bench_grading_scale.py --runs 3 --stock 0 --no-corpus \
             --workers "$(nproc)" --launch-timeout 5 --sandbox bwrap --out "$OUT/scale" 2>&1 |
             tail -n 20 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
