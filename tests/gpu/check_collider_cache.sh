#!/usr/bin/env bash
# check_collider_cache.sh DRIFT COMPARE_FRAMES SCENE FRAMES
#
# The collider cache of the CUDA grid update (gpu/colliders.cu, k_cc_fill). SCENE (a mesh
# collider without keyframes whose sequence changes frame during the run: Crawling in Snow) runs
# FRAMES frames in deterministic mode (parallel.deterministic: the P2G sums are exact, so a run
# repeats bitwise) two ways, compared by particle id at every frame: the cache as it runs
# (refilled when the mesh frame changes or the mapping is rebuilt) against DRIFT_COLLIDER_CACHE=2
# (a test hook: refilled at every step, samples that cannot be stale, through the same
# arithmetic): every position and velocity bitwise the same, or a refill was missed.
# Exit 77 (skipped) where no GPU is usable.
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
for c in 1 2; do
  if ! env $([ "$c" = 2 ] && echo DRIFT_COLLIDER_CACHE=2) "$drift" run "$det" --backend cuda --gpus 1 \
    --frames "$frames" --quiet --out "$work/c$c" >"$work/c$c.log" 2>&1; then
    echo "FAIL: the run with the cache refilled $([ "$c" = 2 ] && echo 'at every step' || echo 'on change') failed:"
    tail -5 "$work/c$c.log"
    exit 1
  fi
done
for ((f = 1; f <= frames; ++f)); do
  at=$(printf 'frame_%05d.h5' "$f")
  if ! "$compare" "$work/c1/$at" "$work/c2/$at" 0 0; then
    echo "FAIL: the cache refilled on change and at every step differ at frame $f: a refill was missed"
    exit 1
  fi
done
echo "collider cache: every frame bitwise the same refilled on change and at every step"
