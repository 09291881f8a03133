#!/usr/bin/env bash
# check_writer.sh - frames and checkpoints written behind the compute (src/writer.h), through the
# drift command line.
#
#   check_writer.sh DRIFT_EXE COMPARE_EXE SAME_EXE SCENE MODE [BACKEND]
#
# SCENE is a dam break (tests/sim/resume_dam_break.json: 6 frames, a checkpoint every 3), run in
# deterministic mode (parallel.deterministic) so that two runs give bitwise the same particles.
#   same    (BACKEND cpu or cuda; 1 rank, and 2 where mpirun exists) every frame and checkpoint
#           written by the writer's thread equals, value for value and attribute for attribute
#           (SAME_EXE, tests/sim/same_h5.c), the one written in the main thread between the steps (DRIFT_WRITER_INLINE=1:
#           the path without MPI_THREAD_MULTIPLE); frames.xdmf the same.
#   chunks  (BACKEND cpu or cuda) the frames and checkpoints written 1000 particles at a time
#           (DRIFT_FRAME_CHUNK: 13 chunks of the 12,480 particles; the writer's team 3 threads,
#           DRIFT_WRITER_TEAM), with the derived fields J and
#           stress and a preview, equal value for value to those written in one chunk (checkpoints:
#           every dataset and attribute, the rows' checksum included), their previews byte for
#           byte; each frame's totals the same as printed, to 5 digits (the chunks' sums added in
#           order); on 2 ranks (where mpirun exists) the frames, checkpoints and previews the same
#           again. The checkpoints are written from the backend's copy (hold_rows, behind the steps)
#           and, with DRIFT_CKPT_HOLD=0, from the live particles while the steps wait: both the same
#           (1 and 2 ranks). With cuda, the frame's snapshot in pinned host memory (DRIFT_SNAPSHOT_HOST=on,
#           staged 1000 rows at a time) against the device's: the same frames, previews and
#           checkpoints (float and compact storage, an island of two on one GPU, 2 ranks).
#   full    (cpu) the output folder on a small tmpfs that fills at frame 4: exit 3, one line
#           naming N/frame_00004.h5 and the reason, "No space left on device"; frames 0-3 whole and equal to a run with room;
#           no frame 4 or later, no temporary file; frames.xdmf lists frames 0-3 only; the same
#           with a writer's team of two, whose copies go through mappings of the files in memory. Exits 77
#           (skipped) where tmpfs cannot be mounted (not root, or a container that forbids it).
#   rows    (cpu) a rank's rows of frame 3 fail in the writer's job (DRIFT_TEST_HOOK rows) while
#           frame 4 is begun behind it (two frames in flight; the trace shows frame 4's file
#           begun and its job run), with previews: exit 3, one line naming N/frame_00003.h5;
#           frames 0-2 and their previews whole and equal to a run without the failure; no frame
#           or preview 3 or later, no temporary file;
#           frames.xdmf lists frames 0-2 only. On 1 rank, and on 2 (rank 1's rows, rank 1 naming
#           the cause and rank 0 another rank's failure) where mpirun exists.
#   signal  (cpu) SIGTERM (DRIFT_TEST_HOOK) at the first step after frame 3, while frame 3 is
#           being written: exit 9, frame 3 and checkpoint 3 whole (equal to the straight run's),
#           and the run resumed from it ends with the straight run's frame 6, bitwise particle
#           by particle (COMPARE_EXE, tolerance 0: a resume sorts the rows afresh).
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 5 "$0 DRIFT_EXE COMPARE_EXE SAME_EXE SCENE same|chunks|full|rows|signal [cpu|cuda]" "$@"
drift=$1
compare=$2
same_h5=$3
scene=$4
mode=$5
backend=${6:-cpu}
unset DRIFT_WRITER_INLINE
run_timeout=300 # run's limit per command

lib_setup writer
# at 100 frames a second, a quarter of the scene's steps (the writing is what is tested; the water
# still moves between frames)
sed -e 's/"parallel": {/"parallel": { "deterministic": true,/' -e "s/\"backend\": \"cpu\"/\"backend\": \"$backend\"/" \
  -e 's/"fps": 25,/"fps": 100,/' "$scene" >scene.json
grep -q '"fps": 100,' scene.json || { echo "check_writer.sh: $scene has no \"fps\": 25" >&2; exit 1; }

# same_files LABEL A B NAME...: each file NAME of folder A equals B's (same_h5: every dataset's
# values and every attribute, bitwise).
same_files() {
  local label=$1 a=$2 b=$3
  shift 3
  for name in "$@"; do
    if [ ! -f "$a/$name" ] || [ ! -f "$b/$name" ]; then
      fail "$label: $a/$name or $b/$name is missing"
      continue
    fi
    local out
    out=$("$same_h5" "$a/$name" "$b/$name" 2>&1) || fail "$label: $a/$name and $b/$name differ: $out"
  done
}

frames06="frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5 frame_00004.h5 frame_00005.h5 frame_00006.h5"

case $mode in
same)
  run threaded 0 "$drift" run scene.json --out T
  grep -q "behind the steps" threaded.log || fail "threaded: the run did not write behind the steps: $(tail -n 2 threaded.log)"
  DRIFT_WRITER_INLINE=1 run inline 0 "$drift" run scene.json --out I
  grep -q "behind the steps" inline.log && fail "inline: DRIFT_WRITER_INLINE=1 still wrote behind the steps"
  same_files "threaded against inline" T I $frames06 checkpoint_00003.h5 checkpoint_00006.h5
  cmp -s T/frames.xdmf I/frames.xdmf || fail "frames.xdmf differs: $(diff T/frames.xdmf I/frames.xdmf | head -n 5)"
  if command -v mpirun >/dev/null; then
    run threaded2 0 mpirun --oversubscribe -n 2 "$drift" run scene.json --out T2
    DRIFT_WRITER_INLINE=1 run inline2 0 mpirun --oversubscribe -x DRIFT_WRITER_INLINE -n 2 "$drift" run scene.json --out I2
    same_files "2 ranks, threaded against inline" T2 I2 $frames06 checkpoint_00003.h5 checkpoint_00006.h5
  fi
  ;;
chunks)
  sed -e 's/"checkpoint_every": 3/"checkpoint_every": 3, "preview": true, "preview_size": 96, "fields": ["position", "velocity", "id", "material", "owner", "J", "stress"]/' \
    scene.json >chunks.json
  run whole 0 "$drift" run chunks.json --out W
  DRIFT_TRACE=1 DRIFT_FRAME_CHUNK=1000 DRIFT_WRITER_TEAM=3 run chunked 0 "$drift" run chunks.json --out C
  grep -q "writer: frame .* in chunks of 1000" chunked.log || fail "chunked: no frame written in chunks of 1000: $(grep -m1 'writer: frame' chunked.log)"
  grep -q "^trace.*checkpoint 3: 12480 particles held by the backend, written behind the steps in chunks of 1000" \
    chunked.log || fail "chunked: checkpoint 3 not held and written in chunks of 1000: $(grep -m1 'checkpoint 3:' chunked.log)"
  same_files "chunks of 1000 against one" W C $frames06 checkpoint_00003.h5 checkpoint_00006.h5
  DRIFT_TRACE=1 DRIFT_FRAME_CHUNK=1000 DRIFT_CKPT_HOLD=0 run live 0 "$drift" run chunks.json --out L
  grep -q "^trace.*checkpoint 3: 12480 particles fetched in chunks of 1000" live.log ||
    fail "live: checkpoint 3 not fetched in chunks of 1000: $(grep -m1 'checkpoint 3:' live.log)"
  same_files "checkpoints fetched live against held" W L checkpoint_00003.h5 checkpoint_00006.h5
  for f in 0 1 2 3 4 5 6; do
    cmp -s "W/frame_0000$f.png" "C/frame_0000$f.png" || fail "chunks: preview frame_0000$f.png differs"
  done
  for f in 0 3 6; do
    a=$(grep "^frame $f totals" whole.log | head -n 1) b=$(grep "^frame $f totals" chunked.log | head -n 1)
    [ -n "$a" ] && [ -n "$b" ] || fail "chunks: no totals line of frame $f"
    out=$(awk -v a="$a" -v b="$b" 'BEGIN {
      na = split(a, x, /[ (),]+/); split(b, y, /[ (),]+/); bad = 0
      for (i = 1; i <= na; ++i) if (x[i] ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) {
        d = x[i] - y[i]; s = (x[i] < 0 ? -x[i] : x[i]) + 1e-30
        if ((d < 0 ? -d : d) > 1e-5 * s + 1e-300) bad = 1 }
      if (bad) print "differ" }')
    [ -z "$out" ] || fail "chunks: frame $f totals differ: '$a' against '$b'"
  done
  if command -v mpirun >/dev/null; then
    run whole2 0 mpirun --oversubscribe -n 2 "$drift" run chunks.json --out W2
    DRIFT_FRAME_CHUNK=1000 run chunked2 0 mpirun --oversubscribe -x DRIFT_FRAME_CHUNK -n 2 "$drift" run chunks.json --out C2
    same_files "2 ranks, chunks of 1000 against one" W2 C2 $frames06 checkpoint_00003.h5 checkpoint_00006.h5
    DRIFT_FRAME_CHUNK=1000 DRIFT_CKPT_HOLD=0 run live2 0 mpirun --oversubscribe -x DRIFT_FRAME_CHUNK -x DRIFT_CKPT_HOLD \
      -n 2 "$drift" run chunks.json --out L2
    same_files "2 ranks, checkpoints fetched live against held" W2 L2 checkpoint_00003.h5 checkpoint_00006.h5
    for f in 0 3 6; do
      cmp -s "W2/frame_0000$f.png" "C2/frame_0000$f.png" || fail "chunks, 2 ranks: preview frame_0000$f.png differs"
    done
  fi
  if [ "$backend" = cuda ]; then
    # the frame's snapshot in pinned host memory (--snapshot-host on: where a GPU has no room for it),
    # staged 1000 rows at a time, against the device's: the frames, previews and checkpoints the same;
    # in float and compact storage (a frame's F advanced as the device snapshot's), on one GPU, an
    # island of two on the one GPU, and 2 ranks
    DRIFT_TRACE=1 DRIFT_FRAME_CHUNK=1000 DRIFT_SNAPSHOT_HOST=on run host 0 "$drift" run chunks.json --out H
    grep -q "snapshot: 12480 rows into pinned host memory, 1000 at a time" host.log ||
      fail "host: the snapshot did not go to the host 1000 rows at a time: $(grep -m1 'snapshot' host.log)"
    same_files "the snapshot on the host against the device's" W H $frames06 checkpoint_00003.h5 checkpoint_00006.h5
    for f in 0 3 6; do
      cmp -s "W/frame_0000$f.png" "H/frame_0000$f.png" || fail "host snapshot: preview frame_0000$f.png differs"
    done
    sed 's/"parallel": {/"parallel": { "storage": "compact",/' chunks.json >compact.json
    run cdev 0 "$drift" run compact.json --out CD
    DRIFT_FRAME_CHUNK=1000 DRIFT_SNAPSHOT_HOST=on run chost 0 "$drift" run compact.json --out CH
    same_files "compact storage, the snapshot on the host against the device's" CD CH $frames06 checkpoint_00003.h5
    DRIFT_DEVICES=0,0 run idev 0 "$drift" run chunks.json --out ID
    DRIFT_DEVICES=0,0 DRIFT_FRAME_CHUNK=1000 DRIFT_SNAPSHOT_HOST=on run ihost 0 "$drift" run chunks.json --out IH
    same_files "an island of two, the snapshot on the host against the device's" ID IH $frames06 checkpoint_00003.h5
    if command -v mpirun >/dev/null; then
      DRIFT_FRAME_CHUNK=1000 DRIFT_SNAPSHOT_HOST=on run host2 0 mpirun --oversubscribe -x DRIFT_FRAME_CHUNK \
        -x DRIFT_SNAPSHOT_HOST -n 2 "$drift" run chunks.json --out H2
      same_files "2 ranks, the snapshot on the host against the device's" W2 H2 $frames06 checkpoint_00003.h5
    fi
  fi
  ;;
rows)
  sed 's/"checkpoint_every": 3/"checkpoint_every": 0, "preview": true, "preview_size": 64/' scene.json >nockpt.json
  run room 0 "$drift" run nockpt.json --out A
  # rows_failed LABEL DIR REF: the run in DIR stopped on frame 3, frame 4 begun behind it and
  # gone; frames 0-2 those of the run without the failure in REF
  rows_failed() {
    local label=$1 dir=$2 ref=$3
    if [ "$label" = rows ]; then
      one_line "$label" "$label.log" "$dir/frame_00003.h5: DRIFT_TEST_HOOK: rank 0's rows fail"
    else # each rank's line: the cause on rank 1's, rank 0's says another rank failed
      grep -q "^drift: writing $dir/frame_00003.h5: DRIFT_TEST_HOOK: rank 1's rows fail" "$label.log" ||
        fail "$label: rank 1's cause is not printed"
      grep -q "^drift: another rank failed (status 3)" "$label.log" || fail "$label: rank 0 does not say another rank failed"
    fi
    grep -q "main: frame 4: " "$label.log" || fail "$label: frame 4 was not begun while frame 3 was in flight"
    grep -q "writer: frame 4 of " "$label.log" || fail "$label: frame 4's job did not run"
    same_files "$label: the frames before" "$ref" "$dir" frame_00000.h5 frame_00001.h5 frame_00002.h5
    for f in 3 4 5 6; do
      [ ! -e "$dir/frame_0000$f.h5" ] || fail "$label: $dir/frame_0000$f.h5 exists"
      [ ! -e "$dir/frame_0000$f.png" ] || fail "$label: $dir/frame_0000$f.png exists (its frame is not)"
    done
    for f in 0 1 2; do
      cmp -s "$ref/frame_0000$f.png" "$dir/frame_0000$f.png" || fail "$label: preview frame_0000$f.png differs or is missing"
    done
    [ -z "$(find "$dir" -name '*.tmp')" ] || fail "$label: temporary files left: $(ls -A "$dir")"
    local listed
    listed=$(grep -o 'frame_0000[0-9].h5' "$dir/frames.xdmf" | sort -u | tr '\n' ' ')
    [ "$listed" = "frame_00000.h5 frame_00001.h5 frame_00002.h5 " ] ||
      fail "$label: frames.xdmf lists '$listed', expected frames 0-2"
  }
  DRIFT_TRACE=1 DRIFT_TEST_HOOK=rows:0:3 run rows 3 "$drift" run nockpt.json --out R
  rows_failed rows R A
  if command -v mpirun >/dev/null; then
    run room2 0 mpirun --oversubscribe -n 2 "$drift" run nockpt.json --out A2
    run rows2 3 mpirun --oversubscribe -n 2 -x DRIFT_TRACE=1 -x DRIFT_TEST_HOOK=rows:1:3 "$drift" run nockpt.json --out R2
    rows_failed rows2 R2 A2
  fi
  ;;
full)
  run room 0 "$drift" run scene.json --out A
  size=$(stat -c %s A/frame_00000.h5)
  mkdir -p N
  # room for frames 0-3 and a little, not for frame 4 (no checkpoints: they would fill it first)
  kib=$(((4 * size + size / 2) / 1024))
  if ! mount -t tmpfs -o "size=${kib}k" drift-test N 2>/dev/null; then
    echo "skipped: cannot mount a tmpfs here (not root, or not allowed)"
    exit 77
  fi
  mounted=$tmp/N
  sed 's/"checkpoint_every": 3/"checkpoint_every": 0/' scene.json >nockpt.json
  run full 3 "$drift" run nockpt.json --out N
  one_line full full.log "N/frame_00004.h5: No space left on device"
  same_files "full: the frames before" A N frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5
  for f in 4 5 6; do
    [ ! -e "N/frame_0000$f.h5" ] || fail "full: N/frame_0000$f.h5 exists"
  done
  [ -z "$(find N -name '*.tmp')" ] || fail "full: temporary files left: $(ls -A N)"
  listed=$(grep -o 'frame_0000[0-9].h5' N/frames.xdmf | sort -u | tr '\n' ' ')
  [ "$listed" = "frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5 " ] ||
    fail "full: frames.xdmf lists '$listed', expected frames 0-3"
  # the same with a writer's team of two, whose copies go through mappings of the files in memory:
  # the frames before equal to the run with room, frame 4 named, nothing left of it
  rm -rf N/*
  DRIFT_WRITER_TEAM=2 run full_team 3 "$drift" run nockpt.json --out N
  one_line full_team full_team.log "N/frame_00004.h5: No space left on device"
  same_files "full, a team of two: the frames before" A N frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5
  [ ! -e N/frame_00004.h5 ] || fail "full, a team of two: N/frame_00004.h5 exists"
  [ -z "$(find N -name '*.tmp')" ] || fail "full, a team of two: temporary files left: $(ls -A N)"
  ;;
signal)
  run straight 0 "$drift" run scene.json --out A
  # the first step of frame 4 follows frame 3's snapshot: frame 3 is in flight when it comes
  steps3=$(grep "^frame [1-3]/6 " straight.log | sed 's/.*substeps \([0-9]*\).*/\1/' | awk '{s += $1} END {print s}')
  DRIFT_TEST_HOOK="signal:0:$((steps3 + 1))" run signal 9 "$drift" run scene.json --out S
  grep -q "checkpoint_00003.h5" signal.log || fail "signal: no checkpoint 3 named: $(tail -n 3 signal.log)"
  same_files "signal: the frame in flight" A S frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5
  [ -z "$(find S -name '*.tmp')" ] || fail "signal: temporary files left: $(ls -A S)"
  run resume 0 "$drift" run scene.json --out S --resume
  out=$("$compare" A/frame_00006.h5 S/frame_00006.h5 0 0) || fail "signal: resumed: frame 6 differs from the straight run's: $out"
  ;;
*)
  echo "unknown mode $mode" >&2
  exit 2
  ;;
esac

lib_finish "check_writer.sh $mode"
