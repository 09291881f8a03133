#!/usr/bin/env bash
# check_compact.sh - parallel.storage "compact" through the drift command line.
#
#   check_compact.sh DRIFT_EXE COMPARE_EXE DIFF_EXE SCENE
#
# SCENE: tests/sim/resume_dam_break.json (water, adaptive steps, a checkpoint every 3 frames, 6
# frames), in deterministic mode. Its float run (F) against the same scene in compact storage (A),
# frame by frame by particle id (DIFF_EXE, tools/drift_diff): at frame 0 the positions' rounding
# alone, uniform in steps of q = 2^-23 m (dx 0.02 m: q = 5.96e-6 cells, the power of two in
# (dx 2^-18, dx 2^-17]), whose rms over three axes is q / 2 = 2.98e-6 cells (within 10%; 3.05e-6
# measured); then the measured error (docs/validation.md, Compact storage: at frame 6 rms 8.1e-5
# cells, at most 3.5e-4, energies within 4.6e-6; F (in the frames' fields) within 7.6e-6 rms and
# 5.3e-5 at most) held within about 5x (5e-4, 2e-3, 2e-5; 4e-5 and 2.5e-4); and not the same (the
# rounding acts). F's bounds see the frames' F at the frame's time: a record keeps F as the last
# P2G left it and a frame shows it advanced by the last G2P's C (physics/compact.h), without
# which the frames' F stand 1.1e-4 to 2.0e-4 rms (1.3e-3 to 2.3e-3 at most) from float storage's.
# A resume from compact storage's checkpoint at frame 3 gives A's frames 4-6 bitwise
# (COMPARE_EXE with tolerance 0) and its substeps: the round trip of a checkpoint's state is
# idempotent. Two ranks (the water crosses the cut into rank 1, which starts empty) against one:
# bitwise (deterministic mode's sums do not depend on the ranks; each rank's P2G makes the update
# of F that the last G2P's C and dt give, for particles that arrived too). The cuda backend's
# compact frames against the cpu backend's by the same bounds, and its two ranks against its one
# bitwise (where a GPU is visible).
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 4 "$0 DRIFT_EXE COMPARE_EXE DIFF_EXE SCENE" "$@"
drift=$1
compare=$2
diff_exe=$3
scene=$4

lib_setup compact
sed 's/"parallel": {/"parallel": { "deterministic": true,/; s/"output": {/"output": { "fields": ["position", "velocity", "id", "material", "owner", "F"],/' \
  "$scene" >float.json
grep -q '"F"' float.json || fail "float.json: no F in output.fields"
sed 's/"parallel": {/"parallel": { "storage": "compact",/' float.json >compact.json
grep -q '"storage": "compact"' compact.json || fail "compact.json: no storage key"

steps() { sed -n 's/^done: [0-9]* frames, \([0-9]*\) substeps.*/\1/p' "$1"; }

run float 0 "$drift" run float.json --out F
run straight 0 "$drift" run compact.json --out A
want_steps=$(steps straight.log)
[ -n "$want_steps" ] || fail "the compact run printed no done line"

# 1. compact against float, by the documented error
if ! "$diff_exe" F A >diff.csv 2>diff.err; then
  fail "drift_diff F A: $(cat diff.err)"
fi
cat diff.csv
rows=$(awk -F, 'NR > 1' diff.csv | wc -l)
[ "$rows" -eq 7 ] || fail "drift_diff compared $rows frames, expected 7 (0-6)"
awk -F, 'NR > 1 {
  if ($1 == 0 && ($4 < 2.68e-6 || $4 > 3.28e-6)) { printf "frame 0: positions rms %g cells, expected 2.98e-6 (q / 2)\n", $4; bad = 1 }
  if ($4 > 5e-4 || $5 > 2e-3) { printf "frame %d: positions rms %g cells, at most %g (bounds 5e-4, 2e-3)\n", $1, $4, $5; bad = 1 }
  ek = ($7 > $8 ? $7 : $8); if (ek > 1e-9 && ($7 - $8 > 2e-5 * ek || $8 - $7 > 2e-5 * ek)) { printf "frame %d: kinetic energy %g against %g\n", $1, $8, $7; bad = 1 }
  ep = ($9 > $10 ? $9 : $10); if ($9 - $10 > 2e-5 * ep || $10 - $9 > 2e-5 * ep) { printf "frame %d: potential energy %g against %g\n", $1, $10, $9; bad = 1 }
  if ($11 == "" || $11 > 4e-5 || $12 > 2.5e-4) { printf "frame %d: F rms %s, at most %s (bounds 4e-5, 2.5e-4)\n", $1, $11, $12; bad = 1 }
  last = $4
} END { if (!(last > 1e-5)) { print "frame 6: compact storage equals float storage (no rounding?)"; bad = 1 } exit bad }' diff.csv >bounds.txt ||
  fail "compact against float: $(cat bounds.txt)"

# 2. a resume from compact storage's checkpoint: bitwise
run first3 0 "$drift" run compact.json --out B --frames 3
[ -f B/checkpoint_00003.h5 ] || fail "no B/checkpoint_00003.h5 after 3 frames"
run resume 0 "$drift" run compact.json --out B --resume
for f in 4 5 6; do
  name=$(printf 'frame_%05d.h5' "$f")
  out=$("$compare" "A/$name" "B/$name" 0 0) || fail "compact storage resumed at frame 3: B/$name is not bitwise A's: $out"
done
[ "$(steps resume.log)" = "$want_steps" ] || fail "resume: $(steps resume.log) substeps, the straight run $want_steps"

# 3. two ranks against one, bitwise
run two 0 mpirun --oversubscribe -n 2 "$drift" run compact.json --out T
for f in 1 2 3 4 5 6; do
  name=$(printf 'frame_%05d.h5' "$f")
  out=$("$compare" "A/$name" "T/$name" 0 0) || fail "compact storage on two ranks: T/$name is not bitwise one rank's: $out"
done

# 4. the cuda backend's compact packets against the cpu backend's, by the bounds of section 1 (where
#    no GPU is visible the cuda backend says so in one line: exit 2)
"$drift" run compact.json --backend cuda --out C >cuda.log 2>&1
rc=$?
if grep -q "no CUDA device is visible" cuda.log; then
  [ "$rc" -eq 2 ] || fail "cuda backend without a GPU: exit $rc, expected 2"
else
  [ "$rc" -eq 0 ] || fail "cuda backend: exit $rc: $(tail -3 cuda.log)"
  if ! "$diff_exe" A C >cdiff.csv 2>cdiff.err; then
    fail "drift_diff A C: $(cat cdiff.err)"
  fi
  cat cdiff.csv
  awk -F, 'NR > 1 && ($4 > 5e-4 || $5 > 2e-3) { printf "frame %d: positions rms %g cells, at most %g (bounds 5e-4, 2e-3)\n", $1, $4, $5; bad = 1 }
    NR > 1 && ($11 == "" || $11 > 4e-5 || $12 > 2.5e-4) { printf "frame %d: F rms %s, at most %s (bounds 4e-5, 2.5e-4)\n", $1, $11, $12; bad = 1 }
    END { exit bad }' cdiff.csv >cbounds.txt || fail "cuda against cpu, compact storage: $(cat cbounds.txt)"
  run cuda_two 0 mpirun --oversubscribe -n 2 "$drift" run compact.json --backend cuda --out U
  for f in 1 2 3 4 5 6; do
    name=$(printf 'frame_%05d.h5' "$f")
    out=$("$compare" "C/$name" "U/$name" 0 0) || fail "cuda, compact storage on two ranks: U/$name is not bitwise one rank's: $out"
  done
fi

lib_finish "check_compact.sh"
