#!/usr/bin/env bash
# check_collider_cache.sh DRIFT COMPARE_FRAMES SCENE FRAMES
#
# The collider cache of the CUDA grid update (gpu/backend_cuda.cu, k_cc_fill) against the
# evaluation it replaces (DRIFT_COLLIDER_CACHE=0): SCENE (a mesh collider without keyframes whose
# sequence changes frame during the run: Crawling in Snow) run FRAMES frames both ways in
# deterministic mode (parallel.deterministic: the P2G sums are exact, so the only difference
# could come from the grid update's collider), compared by particle id at the last frame; every
# position and velocity must agree bitwise (collider_apply_cached does collider_apply's
# arithmetic on the same samples). Exit 77 (skipped) where no GPU is usable.
set -u
if [ $# -ne 4 ]; then
  echo "usage: $0 DRIFT COMPARE_FRAMES SCENE FRAMES" >&2
  exit 2
fi
drift=$1 compare=$2 scene=$3 frames=$4
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/drift-colcache.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# the scene in deterministic mode, beside the original (its mesh files are relative to it)
det=$(dirname "$scene")/.colcache_det_$$.json
trap 'rm -rf "$work" "$det"' EXIT
python3 - "$scene" "$det" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("parallel", {})["deterministic"] = True
json.dump(s, open(sys.argv[2], "w"))
PY
for c in 1 0; do
  if ! DRIFT_COLLIDER_CACHE=$c "$drift" run "$det" --backend cuda --gpus 1 --frames "$frames" --quiet \
    --out "$work/c$c" >"$work/c$c.log" 2>&1; then
    echo "FAIL: the run with DRIFT_COLLIDER_CACHE=$c failed:"
    tail -5 "$work/c$c.log"
    exit 1
  fi
done
last=$(printf 'frame_%05d.h5' "$frames")
if ! "$compare" "$work/c1/$last" "$work/c0/$last" 0 0; then
  echo "FAIL: with and without the collider cache, frame $frames differs"
  exit 1
fi
echo "collider cache: frame $frames bitwise the same with and without it"
