#!/usr/bin/env bash
# check_validation.sh - the CTest tests validation_coarse and validation_columns (docs/validation.md,
# "The tests").
#
#   check_validation.sh DRIFT DRIFT_FRONT JOBS_VALIDATION_DIR OUT [CASE...]
#
# Runs each CASE of the coarse scale (default: column_a1 and the three dam breaks) on the CPU
# backend: a column (coarse/CASE.json) to its end, the deposit at rest; a dam break for its first
# 30 frames (T = t sqrt(2g/a) = 0 to 3). Measures each with drift_front and checks with compare.py
# --check that each column's runout and final height lie within 2 cells + 10% of Lube et al.
# (2005)'s laws, the inviscid and the water dam break's front no further behind Martin & Moyce
# (1952)'s than 2 cells + 10% and not ahead of Ritter's, water's within a cell of the inviscid
# front and the glycerine-like liquid's a cell or more behind it from T = 1 on, the lag growing.
# Exit 0 pass, 1 fail, 77 skipped (no python3).
set -euo pipefail
drift=$1 front=$2 jobs=$3 out=$4
shift 4
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(column_a1 dam_break dam_break_water dam_break_glycerine)
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
for c in "${cases[@]}"; do
  case "$c" in
    dam_break*) run "$c" "$c.json" --frames 30 ;;
    column_*) run "$c" "$c.json" ;;
    *) echo "check_validation.sh: unknown case '$c'"; exit 2 ;;
  esac
done
python3 "$jobs/compare.py" --scale coarse --dir "$out" --check
echo "${cases[*]}: $(($(date +%s) - start)) s"
