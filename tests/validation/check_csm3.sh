#!/usr/bin/env bash
# check_csm3.sh - the CTest test validation_csm3 (docs/validation.md, "Elastic beam").
#
#   check_csm3.sh DRIFT DRIFT_PROBE JOBS_VALIDATION_DIR OUT FRAMES [BACKEND]
#
# Runs the first FRAMES frames of jobs/validation/coarse/beam_csm3.json (Turek & Hron's CSM3, 4
# cells across the beam) on BACKEND (default cpu), follows point A with drift_probe and checks
# with csm3.py --check that the first swing of the tip (its lowest point and its time, ux and uy)
# lies within csm3.py's tolerances of Turek & Hron's figures.
# Exit 0 pass, 1 fail, 77 skipped (no python3, or the cuda backend without a usable GPU).
set -euo pipefail
drift=$1 probe=$2 jobs=$3 out=$4 frames=$5 backend=${6:-cpu}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
if ! "$drift" run "$jobs/coarse/beam_csm3.json" --backend "$backend" --frames "$frames" --out "$out/beam" \
    >"$out/beam.log" 2>&1; then
  grep -q "no CUDA device is visible" "$out/beam.log" && { echo "skipped: no GPU"; exit 77; }
  tail -n 5 "$out/beam.log"
  echo "FAIL: drift run beam_csm3.json"
  exit 1
fi
tail -n 2 "$out/beam.log" | head -n 1
# Point A = (0.6, 0.2) m at the slab's mid-plane, z = 2.5 dx = 0.0125 m (make_scenes.py).
"$probe" "$out/beam" 0.6 0.2 0.0125 >"$out/beam.csv"
python3 "$jobs/csm3.py" "$out/beam.csv" --check
echo "validation_csm3: $(($(date +%s) - start)) s"
