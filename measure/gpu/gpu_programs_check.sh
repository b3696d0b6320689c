#!/usr/bin/env bash
# Whole programs on the GPU server, installed as an instructor would:
#   bash measure/gpu/gpu_programs_check.sh OUT_DIR [EXTRA_DIR]
# Runs measure/benchmarks/bench_programs.py (every test program with `ptxlab run` and as a `%%cuda`
# cell, on the GPU and on the CPU model, side by side) into OUT_DIR/programs, the same for every
# .cu of EXTRA_DIR (programs kept outside the repository) into OUT_DIR/extra, and the tests of
# whole programs and pasted sources into OUT_DIR/pytest.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:?usage: gpu_programs_check.sh OUT_DIR [EXTRA_DIR]}"
EXTRA="${2:-}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  command -v nvcc && nvcc --version | tail -n 2
  "$PY" -c "import cupy; print('cupy', cupy.__version__)"
} > "$OUT/machine.txt" 2>&1
if ! "$PY" -c "import IPython" 2>/dev/null; then
  # IPython for the %%cuda cells, from the wheels carried in .whl/ (no package index there)
  wheels=()
  for w in ipython ipython_pygments_lexers traitlets jedi parso prompt_toolkit matplotlib_inline \
           pexpect ptyprocess stack_data executing pure_eval asttokens wcwidth; do
    wheels+=($(ls .whl/${w}-*.whl 2>/dev/null | tail -n 1))
  done
  "$PY" -m pip install -q --no-index --no-deps "${wheels[@]}" >>"$OUT/machine.txt" 2>&1
fi
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT/machine.txt" 2>&1
"$PY" measure/benchmarks/bench_programs.py --out "$OUT/programs" 2>&1 | tail -n 40
if [[ -n "$EXTRA" ]]; then
  "$PY" measure/benchmarks/bench_programs.py --dir "$EXTRA" --out "$OUT/extra" 2>&1 | tail -n 20
fi
PTXLAB_PROGRAM_OUTPUTS="$OUT/programs/outputs-gpu.json" "$PY" -m pytest -q -p no:cacheprovider tests/run/test_run_programs.py tests/run/test_pasted_sources.py \
  tests/run/test_program_hints.py tests/run/test_gpu_backend.py > "$OUT/pytest.txt" 2>&1
tail -n 15 "$OUT/pytest.txt"
