#!/usr/bin/env bash
# Collect, grade and hand back one assignment: the grading account's scheduled job.
#   autograder/grade-assignment.sh ASSIGNMENT [ptxlab grade options...]
# Runs in $PTXLAB_COURSE_ROOT (default: the current folder) with $PTXLAB_PYTHON (default: the
# python3 on PATH, which must have ptxlab and nbgrader). Safe to run again at any time: collect
# takes only new submissions, `ptxlab grade` grades only what changed (and continues an
# interrupted run), and feedback is regenerated for everyone graded.
# $PTXLAB_SCHEDULER (a Dask scheduler's address) grades on that cluster's workers.
# $PTXLAB_COLLECT_ARGS adds options to `nbgrader collect` (e.g. --CollectApp.check_owner=False
# where submissions are not owned by the students' accounts).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 ASSIGNMENT [ptxlab grade options...]" >&2
  exit 2
fi
assignment="$1"; shift
cd "${PTXLAB_COURSE_ROOT:-.}"
py="${PTXLAB_PYTHON:-python3}"
say() { printf '[ptxlab %s] %s\n' "$(date '+%F %T')" "$*"; }

say "collecting $assignment"
# shellcheck disable=SC2086
"$py" -m nbgrader collect "$assignment" ${PTXLAB_COLLECT_ARGS:-}
say "grading $assignment"
"$py" -m ptxlab.cli grade "$assignment" --quiet ${PTXLAB_SCHEDULER:+--scheduler "$PTXLAB_SCHEDULER"} "$@"
say "writing feedback"
"$py" -m nbgrader generate_feedback "$assignment" --force
"$py" -m nbgrader release_feedback "$assignment"
say "done: grades in grading/$assignment/grades.csv, summary in grading/$assignment/summary.md"
