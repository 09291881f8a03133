#!/usr/bin/env bash
# check_unstable.sh - a run that blows up names the body and material of the particle that broke.
#
#   check_unstable.sh [-w WARNING] OUT_DIR BODY SHAPE MATERIAL [LAUNCHER...] -- DRIFT_EXE run SCENE ARGS...
#
# Runs the command (under LAUNCHER, e.g. mpirun -n 2) and checks: exit status 7 (DR_EPHYSICS), a
# last line "drift: frame F, step S: particle ID (bodies[BODY] (SHAPE), material MATERIAL) reached a
# non-finite state ...", with -w a line matching WARNING (a grep regex) before it, an id whose body bits (id >> 48, src/particles.h) are BODY, the same frame
# and step in every rank's line, and no frame file after frame 0 in OUT_DIR. Exit 77 when the cuda backend was asked for and no GPU is visible.
set -u
warning=""
if [ "${1:-}" = "-w" ]; then
  warning=$2
  shift 2
fi
out_dir=$1 body=$2 shape=$3 material=$4
shift 4
cmd=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
shift
rm -rf "$out_dir"
out=$(timeout 120 "${cmd[@]+"${cmd[@]}"}" "$@" --out "$out_dir" 2>&1)
rc=$?
echo "$out"
if echo "$out" | grep -q 'no CUDA device is visible'; then exit 77; fi
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -eq 7 ] || fail "exit status $rc, expected 7"
[ -z "$warning" ] || echo "$out" | grep -q -- "$warning" || fail "no line matching '$warning'"
line=$(echo "$out" | grep -E "^drift: frame 1, step [0-9]+: particle [0-9]+ \(bodies\[$body\] \($shape\), material $material\) reached a non-finite state" | head -n 1)
[ -n "$line" ] || fail "no message naming bodies[$body] ($shape) and material $material"
id=$(echo "$line" | sed -E 's/.*: particle ([0-9]+) .*/\1/')
# the body bits of the id: bash arithmetic is 64-bit signed, ids stay below 2^63
[ $((id >> 48)) -eq "$body" ] || fail "particle id $id belongs to body $((id >> 48)), not $body"
# on several ranks every rank's line names the same frame and step
places=$(echo "$out" | grep -E '^drift: frame [0-9]+, step [0-9]+:' | sed -E 's/^(drift: frame [0-9]+, step [0-9]+):.*/\1/' | sort -u)
[ "$(echo "$places" | wc -l)" -eq 1 ] || fail "the ranks name different steps: $(echo $places)"
[ ! -e "$out_dir/frame_00001.h5" ] || fail "frame 1 was written after the failure"
echo "ok: $line"
