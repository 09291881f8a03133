#!/usr/bin/env bash
# check_validation.sh - the CTest test validation_coarse (docs/validation.md, "The test").
#
#   check_validation.sh DRIFT DRIFT_FRONT JOBS_VALIDATION_DIR OUT
#
# Runs jobs/validation/coarse/column_a1.json to its end (the deposit at rest) and
# jobs/validation/coarse/dam_break.json for its first 30 frames (T = t sqrt(2g/a) = 0 to 3) on the
# CPU backend, measures both with drift_front, and checks with compare.py --check that the column's
# runout and final height lie within 2 cells + 10% of Lube et al. (2005)'s laws and the dam break's
# front within 2 cells + 10% (RMS over the laboratory points) of Martin & Moyce (1952)'s.
# Exit 0 pass, 1 fail, 77 skipped (no python3).
set -euo pipefail
drift=$1 front=$2 jobs=$3 out=$4
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
run() { # CASE SCENE [ARGS...]
  local case=$1 scene=$2
  shift 2
  if ! "$drift" run "$jobs/coarse/$scene" --backend cpu --out "$out/$case" "$@" >"$out/$case.log" 2>&1; then
    tail -n 5 "$out/$case.log"
    echo "FAIL: drift run $scene"
    exit 1
  fi
  tail -n 2 "$out/$case.log" | head -n 1
  "$front" "$out/$case" >"$out/$case.csv"
}
run column_a1 column_a1.json
run dam_break dam_break.json --frames 30
python3 "$jobs/compare.py" --scale coarse --dir "$out" --check
echo "validation_coarse: $(($(date +%s) - start)) s"
