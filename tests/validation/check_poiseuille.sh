#!/usr/bin/env bash
# check_poiseuille.sh - the CTest test validation_poiseuille (docs/validation.md, "Poiseuille flow").
#
#   check_poiseuille.sh DRIFT CHECK_POISEUILLE SCENE OUT [BACKEND]
#
# Runs SCENE (tests/validation/poiseuille.json: 16 cells across the channel) to its end on BACKEND
# (default cpu; cuda exits 77 where no GPU is visible) and checks its last frame's velocity profile with check_poiseuille: the peak and the
# shape within 5 % of u(s) = rho g s (W - s) / (2 mu), walls at x = 2 dx and 18 dx (the last node
# layers the sticky x faces hold at zero), in the column's middle y = 0.05 to 0.07 m.
# Exit 0 pass, 1 fail, 77 skipped.
set -euo pipefail
drift=$1 check=$2 scene=$3 out=$4 backend=${5:-cpu}
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
if ! "$drift" run "$scene" --backend "$backend" --out "$out/frames" >"$out/run.log" 2>&1; then
  grep -q "no CUDA device is visible" "$out/run.log" && { echo "skipped: no GPU"; exit 77; }
  tail -n 5 "$out/run.log"
  echo "FAIL: drift run $scene"
  exit 1
fi
tail -n 2 "$out/run.log" | head -n 1
last=$(ls "$out/frames"/frame_*.h5 | sort | tail -n 1)
"$check" "$last" 0.002 0.016 1000 1.4 9.81 0.05 0.07 0.05
echo "validation_poiseuille: $(($(date +%s) - start)) s"
