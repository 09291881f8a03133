#!/bin/sh
# check_two_ranks.sh BACKEND MPIEXEC DRIFT SCENE OUT_DIR [PARTICLES]: `drift run` on 2 ranks.
#   cpu:  2 frames of SCENE; the ranks line of each frame without the device's wait at the vote
#         (a CPU backend has none), and frame 2 holding PARTICLES particles (h5dump).
#   cuda: 3 frames of SCENE (Sand Blocks l = 12: 36 fixed substeps a frame, 55,296 particles) on
#         the CUDA backend; every frame's ranks line gives the device's share of the frame spent
#         waiting at the vote's gate, above 0 and below 100%, and the run ends whole. Exit 77
#         (skipped) without a GPU.
set -u
backend=$1 mpiexec=$2 drift=$3 scene=$4 out_dir=$5
if [ "$backend" = "cuda" ]; then
  nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo 'no GPU: skipped'; exit 77; }
  frames=3
else
  frames=2
fi
out=$("$mpiexec" -n 2 --oversubscribe "$drift" run "$scene" --backend "$backend" --frames $frames --out "$out_dir" --force 2>&1)
rc=$?
echo "$out"
fail() { echo "check_two_ranks.sh: $*"; exit 1; }
[ $rc -eq 0 ] || fail "exit status $rc"
if [ "$backend" = "cuda" ]; then
  [ "$(echo "$out" | grep -c '^ranks: 2 .*  device at the vote [0-9.]*%  shared blocks')" -eq 3 ] ||
    fail "not 3 ranks lines with the device's wait at the vote"
  ! echo "$out" | grep -q 'device at the vote [1-9][0-9][0-9][0-9.]*%' || fail "a wait at the vote of 100% or more"
  echo "$out" | grep -q '^done: 3 frames, 108 substeps, .* 55296 particles' || fail "no line 'done: 3 frames, 108 substeps, ... 55296 particles'"
else
  particles=$6
  echo "$out" | grep -q '^ranks: 2 ' || fail "no line 'ranks: 2 ...'"
  ! echo "$out" | grep -q 'device at the vote' || fail "a device's wait at the vote on the cpu backend"
  h5dump -H -d /particles/id "$out_dir/frame_00002.h5" | grep -q "SIMPLE { ( $particles )" ||
    fail "frame 2 does not hold $particles particles"
fi
