# Sourced by the capstone sweep scripts: run_header DIR TITLE writes DIR/RUN.md, a run's first
# lines as a report (when it started, the GPU as nvidia-smi gives it, nvcc, CuPy, the command in
# $COMMAND), and prints it. Needs $PY.
run_header() {
  local gpu nvcc_version cupy
  gpu=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit,temperature.gpu \
        --format=csv,noheader 2>/dev/null | head -n 1)
  nvcc_version=$(nvcc --version 2>/dev/null | tail -n 2 | paste -sd ' ' -)
  cupy=$("$PY" -c 'import cupy; print(cupy.__version__)' 2>/dev/null)
  mkdir -p "$1"
  {
    echo "# $2"
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| started (UTC) | $(date -u '+%Y-%m-%d %H:%M:%S') |"
    echo "| GPU, as \`nvidia-smi\` gave it (name, driver, highest SM clock, SM clock then, power limit, temperature in °C) | ${gpu:-no nvidia-smi} |"
    echo "| nvcc | ${nvcc_version:-no nvcc} |"
    echo "| CuPy | ${cupy:-not importable} |"
    echo "| command | \`${COMMAND% }\` |"
  } >"$1/RUN.md"
  cat "$1/RUN.md"
}
