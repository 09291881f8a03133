#!/usr/bin/env bash
# check_rebuild_move.sh DRIFT COMPARE_FRAMES SCENE FRAMES OVERRIDES MIN_MOVES [COUNTS]
#
# The particles' move of a rebuild-mapping by k_move (gpu/backend_cuda.cu: old packets staged in
# shared memory; DRIFT_MOVE_STAGED, default 1) against k_scatter (DRIFT_MOVE_STAGED=0): SCENE with
# OVERRIDES (a JSON object merged into it, e.g. deterministic mode) runs FRAMES frames both ways
# on each GPU count of COUNTS (default "1 2"; the same GPU several times where the machine has
# fewer), and every frame of the two runs is bitwise the same: the same particles land in the same
# packets and lanes, and with deterministic mode in OVERRIDES (exact P2G sums) a run repeats
# bitwise, so any difference is the move's. The run with the switch on must have moved by k_move
# at least MIN_MOVES times (its DRIFT_TRACE lines), and the other never, so that the path is known
# to have run. Exit 77 (skipped) where no GPU is usable.
set -u
if [ $# -lt 6 ]; then
  echo "usage: $0 DRIFT COMPARE_FRAMES SCENE FRAMES OVERRIDES MIN_MOVES [COUNTS]" >&2
  exit 2
fi
drift=$1 compare=$2 scene=$3 frames=$4 overrides=$5 min_moves=$6 counts=${7:-"1 2"}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/drift-move.XXXXXX") || exit 1
# the scene with its overrides, beside the original (a mesh or source file is relative to it)
det=$(dirname "$scene")/.rebuild_move_$$.json
trap 'rm -rf "$work" "$det"' EXIT
python3 - "$scene" "$det" "$overrides" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v
merge(s, json.loads(sys.argv[3]))
json.dump(s, open(sys.argv[2], "w"))
PY
fail=0
for n in $counts; do
  env=()
  if [ "$n" -gt "$ngpu" ]; then
    list=0
    for ((i = 1; i < n; ++i)); do list="$list,0"; done
    env=(DRIFT_DEVICES=$list)
  fi
  for mv in 0 1; do
    if ! env "${env[@]}" DRIFT_MOVE_STAGED=$mv DRIFT_TRACE=1 timeout 300 "$drift" run "$det" --backend cuda --gpus "$n" \
      --frames "$frames" --out "$work/g$n-m$mv" >"$work/g$n-m$mv.log" 2>&1; then
      tail -5 "$work/g$n-m$mv.log"
      echo "FAIL: the run on $n GPU(s) with DRIFT_MOVE_STAGED=$mv failed"
      exit 1
    fi
  done
  moved=$(grep -c "moved by k_move" "$work/g$n-m1.log")
  alone=$(grep -c "moved by k_move" "$work/g$n-m0.log")
  rebuilds=$(grep -o "[0-9]* rebuilds" "$work/g$n-m1.log" | tail -1)
  echo "== $n GPU(s): $rebuilds; moves by k_move: $moved (DRIFT_MOVE_STAGED=1), $alone (=0)"
  if [ "$moved" -lt "$min_moves" ] || [ "$alone" -ne 0 ]; then
    echo "FAIL: expected at least $min_moves moves by k_move with the switch on and none with it off"
    fail=1
  fi
  for ((f = 1; f <= frames; ++f)); do
    at=$(printf 'frame_%05d.h5' "$f")
    "$compare" "$work/g$n-m0/$at" "$work/g$n-m1/$at" 0 0 >"$work/cmp.txt" || {
      cat "$work/cmp.txt"
      echo "FAIL: $n GPU(s), frame $f: k_move's and k_scatter's moves differ"
      fail=1
      break
    }
  done
  [ $fail -eq 0 ] && tail -1 "$work/cmp.txt"
done
[ $fail -eq 0 ] && echo "PASS" || echo "FAIL"
exit $fail
