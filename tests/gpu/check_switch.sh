#!/usr/bin/env bash
# check_switch.sh DRIFT COMPARE_FRAMES SCENE FRAMES OVERRIDES VAR ON_LINE OFF_LINE [COUNTS]
#
# A switch of the CUDA backend that must not change a bit of the result (a measurement or test
# switch that picks another code path for the same arithmetic): SCENE with OVERRIDES (a JSON
# object merged into it, e.g. deterministic mode) runs FRAMES frames with VAR=0 and VAR=1 on each
# GPU count of COUNTS (default "1 2"; the same GPU several times where the machine has fewer), and
# every frame of the two runs is bitwise the same (with deterministic mode in OVERRIDES a run
# repeats bitwise, so any difference is the switch's). The runs are traced (DRIFT_TRACE): the run
# with VAR=1 must log ON_LINE and the other OFF_LINE (grep -F), so that each path is known to have
# run. Exit 77 (skipped) where no GPU is usable.
set -u
if [ $# -lt 8 ]; then
  echo "usage: $0 DRIFT COMPARE_FRAMES SCENE FRAMES OVERRIDES VAR ON_LINE OFF_LINE [COUNTS]" >&2
  exit 2
fi
drift=$1 compare=$2 scene=$3 frames=$4 overrides=$5 var=$6 on_line=$7 off_line=$8 counts=${9:-"1 2"}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/drift-switch.XXXXXX") || exit 1
# the scene with its overrides, beside the original (a mesh or source file is relative to it)
det=$(dirname "$scene")/.switch_$$.json
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
    if ! env "${env[@]}" "$var=$mv" DRIFT_TRACE=1 timeout 300 "$drift" run "$det" --backend cuda --gpus "$n" \
      --frames "$frames" --out "$work/g$n-m$mv" >"$work/g$n-m$mv.log" 2>&1; then
      tail -5 "$work/g$n-m$mv.log"
      echo "FAIL: the run on $n GPU(s) with $var=$mv failed"
      exit 1
    fi
  done
  # the frames' progress lines: "... rebuilds N ..." each
  r0=$(grep -o "rebuilds [0-9]*" "$work/g$n-m0.log" | awk '{s += $2} END {print s + 0}')
  r1=$(grep -o "rebuilds [0-9]*" "$work/g$n-m1.log" | awk '{s += $2} END {print s + 0}')
  echo "== $n GPU(s): $var=0 ${r0:-?} rebuilds, $var=1 ${r1:-?} rebuilds"
  if ! grep -qF -- "$on_line" "$work/g$n-m1.log" || ! grep -qF -- "$off_line" "$work/g$n-m0.log"; then
    echo "FAIL: expected '$on_line' in the log with $var=1 and '$off_line' with $var=0"
    fail=1
  fi
  for ((f = 1; f <= frames; ++f)); do
    at=$(printf 'frame_%05d.h5' "$f")
    "$compare" "$work/g$n-m0/$at" "$work/g$n-m1/$at" 0 0 >"$work/cmp.txt" || {
      cat "$work/cmp.txt"
      echo "FAIL: $n GPU(s), frame $f: $var=0 and $var=1 differ"
      fail=1
      break
    }
  done
  [ $fail -eq 0 ] && tail -1 "$work/cmp.txt"
done
[ $fail -eq 0 ] && echo "PASS" || echo "FAIL"
exit $fail
