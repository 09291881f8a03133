#!/bin/sh
# check_packet_drift.sh TOOL SCENE DRIFT CYLINDERS: tools/packet_drift.py --scene on SCENE
# (sand_blocks_l46x16's sixteen boxes) at 4 cells a side (16 x 4^3 x 8 = 8,192 particles), a frame
# each step (fps = 1 / dt): drift runs it on the CPU backend, 3 frames of exactly 1 substep each,
# frames 0-3 written; a scene with a cylinder (CYLINDERS) is refused (exit 1).
set -u
tool=$1 scene=$2 drift=$3 cylinders=$4
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "check_packet_drift.sh: $*"; exit 1; }
python3 "$tool" --scene "$scene" 4 "$d/f" 3 > "$d/s.json" || fail "packet_drift.py --scene failed"
out=$("$drift" run "$d/s.json" --backend cpu 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "drift run: exit status $rc"
echo "$out" | grep -Eq '^done: 3 frames, 3 substeps, [0-9]+ rebuilds, 8192 particles' ||
  fail "no line 'done: 3 frames, 3 substeps, ... 8192 particles'"
[ -f "$d/f/frame_00003.h5" ] && [ ! -e "$d/f/frame_00004.h5" ] || fail "not frames 0-3 exactly"
err=$(python3 "$tool" --scene "$cylinders" 4 "$d/g" 3 2>&1 >/dev/null; echo rc $?)
echo "$err" | grep -q 'a body of shape cylinder (boxes only)' || fail "the cylinder's message: $err"
echo "$err" | grep -qx 'rc 1' || fail "the cylinder's scene: not exit status 1"
