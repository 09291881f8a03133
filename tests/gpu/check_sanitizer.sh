#!/usr/bin/env bash
# check_sanitizer.sh DRIFT SCENE
#
# The CUDA backend under compute-sanitizer (STYLE.md, "Habits"): SCENE (sanitizer.json: three
# materials, APIC and ASFLIP, a collider, a rebuild-mapping; one frame of about 40 steps) runs
# through `drift run --backend cuda` under
#   memcheck   adaptive steps (the graph loop); fixed steps (fused G2P2G) for 2 frames with
#              DRIFT_TEST_HOOK stopping the device loop part-way into frame 2 (exit 9: the
#              queued steps drain, the checkpoint is downloaded); deterministic mode (int64 sums);
#   racecheck  adaptive and fixed steps (shared-memory hazards in P2G, G2P, G2P2G).
# Any error the tool reports fails the test (its ERROR / RACECHECK summary, and
# --error-exitcode); racecheck's warnings are printed, not counted. One GPU only: the island's spin barrier between two streams may not be
# co-scheduled under the tools. Exit 77 (skipped) without a GPU or without compute-sanitizer (on
# PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin).
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 DRIFT SCENE" >&2
  exit 2
fi
drift=$1 scene=$2
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
cs=$(command -v compute-sanitizer || true)
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [ -z "$cs" ] && [ -n "$d" ] && [ -x "$d/bin/compute-sanitizer" ] && cs=$d/bin/compute-sanitizer
done
if [ -z "$cs" ]; then
  echo "no compute-sanitizer on PATH or in /usr/local/cuda/bin: skipped"
  exit 77
fi
echo "$cs: $("$cs" --version | tail -n 1)"
work=$(mktemp -d "${TMPDIR:-/tmp}/drift-sanitizer.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
cp "$scene" adaptive.json
sed 's/"cfl": 0.5/"dt": 5e-4/' "$scene" >fixed.json
sed 's/"parallel": {/"parallel": { "deterministic": true,/' "$scene" >det.json
export OMP_NUM_THREADS=2

failures=0
# check LABEL TOOL WANT SCENE [ARGS...]: drift run SCENE under TOOL, exit status WANT, no error reported.
check() {
  local label=$1 tool=$2 want=$3 sc=$4 rc start
  shift 4
  start=$(date +%s)
  timeout 300 "$cs" --tool "$tool" --error-exitcode 99 "$drift" run "$sc" --backend cuda --out "$label" "$@" \
    >"$label.log" 2>&1
  rc=$?
  if grep -q 'no CUDA device is visible' "$label.log"; then
    echo "no CUDA device: skipped"
    exit 77
  fi
  local summary
  summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$label.log" | tail -n 1)
  echo "$label ($tool): exit $rc in $(($(date +%s) - start)) s; ${summary:-no summary}"
  if [ "$rc" -ne "$want" ] || [ -z "$summary" ] || echo "$summary" | grep -Eq 'ERROR SUMMARY: [1-9]|\([1-9][0-9]* error'; then
    echo "FAIL: $label: exit status $rc (expected $want), summary '${summary}'; the tool's report:"
    grep -E '^=========' "$label.log" | head -n 60
    tail -n 5 "$label.log"
    failures=$((failures + 1))
  fi
}

check memcheck_adaptive memcheck 0 adaptive.json
# 40 steps per frame: the hook raises SIGTERM before step 61, 20 steps into frame 2
DRIFT_TEST_HOOK=signal:0:61 check memcheck_fixed_signal memcheck 9 fixed.json --frames 2
grep -q '^drift: stopped by SIGTERM at frame 1 + 20 step(s)' memcheck_fixed_signal.log || {
  echo "FAIL: memcheck_fixed_signal: not stopped at frame 1 + 20 steps: $(grep '^drift:' memcheck_fixed_signal.log)"
  failures=$((failures + 1))
}
check memcheck_det memcheck 0 det.json
check racecheck_adaptive racecheck 0 adaptive.json
check racecheck_fixed racecheck 0 fixed.json

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
