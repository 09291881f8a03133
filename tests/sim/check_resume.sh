#!/usr/bin/env bash
# check_resume.sh - checkpoints and restarts through the drift command line.
#
#   check_resume.sh DRIFT_EXE COMPARE_EXE SCENE MODE
#
# SCENE is a dam break (tests/sim/resume_dam_break.json: adaptive steps, a checkpoint every 3
# frames, 6 frames, water that crosses the cut between two ranks). Every mode first runs it
# straight through on one rank (A). A resumed run must then give the same frames as A, matched
# by particle id (COMPARE_EXE: positions within 4e-6 m = 5e-6 of the domain, velocities within
# 1e-4 of the largest speed), and on one rank the same number of substeps. Only the order of
# the P2G sums differs (particles sorted afresh, other cuts), i.e. rounding: seen up to 1.1e-6 m
# and 3e-6 of the largest speed. A resume that loses the step-size controller's state (the
# first step from the backend's speed instead of the checkpoint's) is off by 1.2e-5 m and
# 1.5e-3 of the largest speed.
#   one     (label cpu) run 3 frames, resume to 6 from the output folder; a signal on one rank
#           part-way into a frame (fixed steps): exit 9, one line, resume from the file named;
#           refusals with exit 2 and one line: another scene file (and --force taking it), a
#           truncated file, a damaged file, a folder without checkpoints, a missing file, no
#           output folder to resume from, a run into B without --resume or --force; a step's
#           failure (DRIFT_TEST_HOOK) after a checkpoint: exit 8, the checkpoint whole and resumable; a
#           checkpoint write that fails (a folder in the way of its temporary name, which
#           blocks root too): exit 3, one line naming it, no new file, the older checkpoint
#           kept and still resumable.
#   ranks   (label mpi) 2 ranks -> resume on 1; 1 -> 2; 2 -> 3 with each rank reading only the
#           pieces of the file that meet its box; DRIFT_TEST_HOOK makes rank 1 alone raise
#           SIGTERM part-way into frame 4: both ranks stop with exit 9 and a checkpoint, which 2
#           ranks resume; a real `kill -TERM` to one rank's process: the same; a rank that exits
#           mid-run and a rank that fails alone end the job within the time limit (no hang).
#   emit    (label mpi) SCENE with particle sources (resume_sources.json): resumed at frame 3,
#           after a signal part-way into frame 4 and before its first step, and 2 ranks -> 1:
#           the same frames (ids and counts) as the straight run, frames.xdmf with each
#           frame's own count.
#   det     (label mpi) the scene in deterministic mode (parallel.deterministic): the frames
#           must be bitwise identical (tolerance 0) to the uninterrupted run's: resumed on 1
#           rank at frame 3; run on 2 ranks; run 3 frames on 2 ranks and resumed on 1.
#   nospace (label cpu) the output folder on a small tmpfs: the checkpoint does not fit: exit
#           3, "no room", the older checkpoint kept. Exits 77 (skipped) where tmpfs cannot be
#           mounted (not root, or a container that forbids it).
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 4 "$0 DRIFT_EXE COMPARE_EXE SCENE one|ranks|emit|det|nospace" "$@"
drift=$1
compare=$2
scene=$3
mode=$4
mpirun=(mpirun --oversubscribe)

lib_setup resume
cp "$scene" scene.json
[ "$mode" = det ] && sed -i 's/"parallel": {/"parallel": { "deterministic": true,/' scene.json

# same_frames LABEL DIR FRAMES...: DIR's frames agree with A's.
same_frames() {
  local label=$1 dir=$2
  shift 2
  for f in "$@"; do
    local name
    name=$(printf 'frame_%05d.h5' "$f")
    if ! out=$("$compare" "A/$name" "$dir/$name" 4e-6 1e-4); then
      fail "$label: $dir/$name differs from the uninterrupted run: $out"
    else
      echo "$label: $out"
    fi
  done
}

# exact_frames LABEL DIR FRAMES...: DIR's frames equal A's bit for bit (positions, velocities).
exact_frames() {
  local label=$1 dir=$2
  shift 2
  for f in "$@"; do
    local name
    name=$(printf 'frame_%05d.h5' "$f")
    if ! out=$("$compare" "A/$name" "$dir/$name" 0 0); then
      fail "$label: $dir/$name is not bitwise the uninterrupted run's: $out"
    else
      echo "$label: $out"
    fi
  done
}

# children_of PID: the ids of PID's child processes (from /proc, no procps needed).
children_of() {
  local st pid comm state ppid rest
  for st in /proc/[0-9]*/stat; do
    read -r pid comm state ppid rest <"$st" 2>/dev/null || continue
    [ "$ppid" = "$1" ] && echo "$pid"
  done
}

# steps LOG: the substeps of the "done:" line.
steps() { sed -n 's/^done: [0-9]* frames, \([0-9]*\) substeps.*/\1/p' "$1"; }

run straight 0 "$drift" run scene.json --out A
want_steps=$(steps straight.log)
[ -n "$want_steps" ] || fail "the straight run printed no done line"

case "$mode" in
one)
  # 1. 3 frames, then --resume (the output folder's newest checkpoint) to 6.
  run first3 0 "$drift" run scene.json --out B --frames 3
  [ -f B/checkpoint_00003.h5 ] || fail "no B/checkpoint_00003.h5 after 3 frames"
  run resume 0 "$drift" run scene.json --out B --resume
  grep -q "^resuming from B/checkpoint_00003.h5: frame 3," resume.log || fail "resume: no 'resuming from B/checkpoint_00003.h5' line"
  same_frames "1 rank, resumed at frame 3" B 4 5 6
  [ "$(steps resume.log)" = "$want_steps" ] || fail "resume: $(steps resume.log) substeps in all, the straight run $want_steps"
  [ "$(grep -o 'frame_0000[0-9].h5' B/frames.xdmf | sort -u | tr '\n' ' ')" = "frame_00000.h5 frame_00001.h5 frame_00002.h5 frame_00003.h5 frame_00004.h5 frame_00005.h5 frame_00006.h5 " ] ||
    fail "B/frames.xdmf does not list frames 0-6: $(grep -o 'frame_0000[0-9].h5' B/frames.xdmf | sort -u | tr '\n' ' ')"

  # 2. Fixed steps (dt 0.0008, 50 per frame): SIGTERM before step 130, part-way into frame 3.
  sed 's/"cfl": 0.5/"dt": 0.0008/' scene.json >fixed.json
  run fixed_straight 0 "$drift" run fixed.json --out AF
  run fixed_signal 9 env DRIFT_TEST_HOOK=signal:0:130 "$drift" run fixed.json --out F
  one_line "signal on one rank" fixed_signal.log "stopped by SIGTERM at frame 2 + 29 step(s)"
  grep -q "continue with: drift run fixed.json --out F --resume" fixed_signal.log || fail "signal: the message does not say how to continue"
  [ -f F/frame_00002.h5 ] && [ ! -e F/frame_00003.h5 ] || fail "signal: frames 0-2 expected, and no frame 3: $(ls F)"
  run fixed_resume 0 "$drift" run fixed.json --out F --resume F/checkpoint_00002.h5
  for f in 3 6; do
    name=$(printf 'frame_%05d.h5' "$f")
    out=$("$compare" "AF/$name" "F/$name" 4e-6 1e-4) || fail "fixed steps, resumed part-way into frame 3: $out"
    echo "fixed steps: $out"
  done
  [ "$(steps fixed_resume.log)" = "$(steps fixed_straight.log)" ] || fail "fixed steps: $(steps fixed_resume.log) substeps, straight $(steps fixed_straight.log)"
  # A step's failure part-way into frame 4 (before step 160), while checkpoint 3 may still be in
  # flight: exit 8, checkpoint 3 published whole (the run completes what is in flight), resumable.
  run fail_after 8 env DRIFT_TEST_HOOK=fail:0:160 "$drift" run fixed.json --out FA
  [ -f FA/checkpoint_00003.h5 ] || fail "a step's failure after checkpoint 3: no FA/checkpoint_00003.h5: $(ls -A FA)"
  [ -z "$(find FA -name '*.tmp')" ] || fail "a step's failure: temporary files left: $(ls -A FA)"
  run fail_resume 0 "$drift" run fixed.json --out FA --resume
  out=$("$compare" AF/frame_00006.h5 FA/frame_00006.h5 4e-6 1e-4) || fail "resumed after a step's failure: $out"

  # 3. Refusals: exit 2, one line naming the problem.
  { cat scene.json; echo; } >other.json # the same physics, another file: another hash
  run other 2 "$drift" run other.json --out B --resume B/checkpoint_00003.h5
  one_line "another scene" other.log "checkpoint B/checkpoint_00003.h5 comes from another scene file than other.json"
  cp -r B BF
  run force 0 "$drift" run other.json --out BF --resume BF/checkpoint_00003.h5 --force
  grep -q "warning: checkpoint BF/checkpoint_00003.h5 comes from another scene file" force.log || fail "--force: no warning line"
  same_frames "--force" BF 6
  cp B/checkpoint_00003.h5 cut.h5
  truncate -s $(($(stat -c %s cut.h5) / 2)) cut.h5
  run truncated 2 "$drift" run scene.json --out B --resume cut.h5
  one_line "truncated" truncated.log "checkpoint cut.h5: not a whole HDF5 file"
  cp B/checkpoint_00003.h5 flipped.h5
  size=$(stat -c %s flipped.h5)
  byte=$(od -An -tu1 -j $((size / 2)) -N1 flipped.h5 | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 255)))" | dd of=flipped.h5 bs=1 seek=$((size / 2)) conv=notrunc status=none
  run damaged 2 "$drift" run scene.json --out B --resume flipped.h5
  one_line "damaged" damaged.log "checkpoint flipped.h5: damaged"
  mkdir -p empty
  run none 2 "$drift" run scene.json --out B --resume empty
  one_line "no checkpoint" none.log "--resume: no checkpoint_NNNNN.h5 in empty"
  run missing 2 "$drift" run scene.json --out B --resume no-such.h5
  one_line "missing" missing.log "checkpoint no-such.h5: no such file"
  run no_folder 2 "$drift" run scene.json --out nowhere --resume
  one_line "no output folder" no_folder.log "--resume: nothing to resume from: the output folder nowhere does not exist"
  [ ! -e nowhere ] || fail "no output folder: --resume created it"
  run rerun 2 "$drift" run scene.json --out B
  one_line "a run into another run's output" rerun.log "output folder B holds another run's output"

  # 4. A checkpoint write that fails (a folder where its temporary file goes): exit 3, the file
  # named, no checkpoint_00006.h5, checkpoint_00003.h5 kept and resumable.
  mkdir -p W/.checkpoint_00006.h5.tmp
  run blocked 3 "$drift" run scene.json --out W
  one_line "blocked write" blocked.log "W/.checkpoint_00006.h5.tmp"
  [ ! -e W/checkpoint_00006.h5 ] || fail "blocked write: W/checkpoint_00006.h5 exists"
  [ -f W/checkpoint_00003.h5 ] || fail "blocked write: the older W/checkpoint_00003.h5 is gone"
  rmdir W/.checkpoint_00006.h5.tmp
  rm -f W/frame_0000[456].h5
  run blocked_resume 0 "$drift" run scene.json --out W --resume
  same_frames "resumed after a failed write" W 6
  ;;
ranks)
  # 1. 2 ranks, then 1.
  run two3 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out T --frames 3
  run two_to_one 0 "$drift" run scene.json --out T --resume
  grep -q "written by 2 ranks, read by 1" two_to_one.log || fail "2 -> 1: no 'written by 2 ranks, read by 1' line"
  same_frames "2 ranks -> 1" T 4 6
  # 2. 1 rank, then 2.
  run one3 0 "$drift" run scene.json --out U --frames 3
  run one_to_two 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out U --resume
  grep -q "written by 1 rank, read by 2" one_to_two.log || fail "1 -> 2: no 'written by 1 rank, read by 2' line"
  grep -q '^ranks: 2 ' one_to_two.log || fail "1 -> 2: no ranks line"
  same_frames "1 rank -> 2" U 4 6
  # 2b. 2 ranks, then 3, the file read in pieces of 500 rows (DRIFT_FRAME_CHUNK): each rank reads
  # the pieces whose particles may lie in its box, not the whole file (sim_checkpoint.c).
  mkdir -p V && cp T/checkpoint_00003.h5 V/
  run two_to_three 0 "${mpirun[@]}" -n 3 -x DRIFT_FRAME_CHUNK=500 -x DRIFT_TRACE=1 "$drift" run scene.json --out V --resume
  grep -q "written by 2 ranks, read by 3" two_to_three.log || fail "2 -> 3: no 'written by 2 ranks, read by 3' line"
  same_frames "2 ranks -> 3" V 4 6
  reads=$(sed -n 's/.*resume: rank [0-9]* owns [0-9]* particles and reads \([0-9]*\) of the \([0-9]*\) rows.*/\1 \2/p' two_to_three.log)
  echo "2 ranks -> 3, rows each rank read: $(echo "$reads" | awk '{ printf "%s of %s; ", $1, $2 }')"
  echo "$reads" | awk 'NF == 2 { k++; s += $1; n = $2; if ($1 >= $2) whole++ }
    END { exit !(k == 3 && !whole && s < 0.85 * 3 * n) }' ||
    fail "2 -> 3: the ranks read the whole file, or together more than 85% of three files: $(echo "$reads" | tr '\n' ' ')"
  # 3. Only rank 1 gets SIGTERM, before step 200 (part-way into frame 4): both stop with a checkpoint.
  run hook_signal 9 "${mpirun[@]}" -n 2 -x DRIFT_TEST_HOOK=signal:1:200 "$drift" run scene.json --out S
  one_line "SIGTERM to rank 1" hook_signal.log "stopped by SIGTERM at frame 3 + "
  [ -f S/checkpoint_00003.h5 ] || fail "SIGTERM to rank 1: no S/checkpoint_00003.h5"
  [ ! -e S/frame_00004.h5 ] || fail "SIGTERM to rank 1: frame 4 was written"
  run hook_resume 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out S --resume
  grep -q "^resuming from S/checkpoint_00003.h5: frame 3 and part of the next" hook_resume.log || fail "no 'part of the next' resume line"
  same_frames "SIGTERM to rank 1, resumed on 2" S 4 5 6
  # 4. A real signal to one rank's process, once frame 1 is done.
  # (mpirun itself in the background, so that its children are the ranks; ctest's limit applies)
  "${mpirun[@]}" -n 2 "$drift" run scene.json --out K >kill.log 2>&1 &
  mp=$!
  for _ in $(seq 200); do grep -q '^frame 1/6' kill.log && break; sleep 0.1; done
  ranks=$(children_of "$mp" | tr '\n' ' ')
  victim=$(echo "$ranks" | awk '{ print $NF }')
  if [ -z "$victim" ] || ! grep -q '^frame 1/6' kill.log; then
    fail "kill: no frame 1 or no rank process found (ranks '$ranks')"
  else
    kill -TERM "$victim"
  fi
  wait "$mp"
  rc=$?
  [ "$rc" -eq 9 ] || { fail "kill -TERM to one rank (pid $victim of $ranks): exit status $rc, expected 9"; tail -n 15 kill.log; }
  one_line "kill -TERM to one rank" kill.log "stopped by SIGTERM"
  run kill_resume 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out K --resume
  same_frames "kill -TERM to one rank, resumed on 2" K 6
  # 5. A rank that dies, and one that fails alone, end the job (timeout would give 124).
  start=$(date +%s)
  run dies 1 "${mpirun[@]}" -n 2 -x DRIFT_TEST_HOOK=exit:1:100 "$drift" run scene.json --out D
  run fails_alone 8 "${mpirun[@]}" -n 2 -x DRIFT_TEST_HOOK=fail:1:100 "$drift" run scene.json --out D --force
  grep -q "^drift: rank 1 failed alone; ending all 2 ranks" fails_alone.log || fail "fails alone: no 'ending all 2 ranks' line"
  grep -q "^drift: frame 2, step 100: DRIFT_TEST_HOOK: rank 1 fails alone" fails_alone.log || fail "fails alone: the cause is not printed"
  # A rank whose part of a rebuild-mapping fails alone: the ranks agree on it in the step after
  # (once its P2G is queued, sim.c's setup_exchange_during_p2g) and every rank stops there, each
  # with its message (an agreed stop: no MPI_Abort).
  run rebuild_alone 8 "${mpirun[@]}" -n 2 -x DRIFT_TEST_HOOK=rebuild:1:100 "$drift" run scene.json --out D --force
  grep -q "^drift: frame [0-9]*, step [0-9]*: DRIFT_TEST_HOOK: rank 1 fails alone in its rebuild-mapping before step" \
    rebuild_alone.log || fail "fails alone in a rebuild-mapping: the cause is not printed"
  grep -q "^drift: frame [0-9]*, step [0-9]*: another rank failed (status 8)" rebuild_alone.log ||
    fail "fails alone in a rebuild-mapping: rank 0 does not say that another rank failed"
  ! grep -q "failed alone; ending all" rebuild_alone.log || fail "fails alone in a rebuild-mapping: the ranks did not agree (MPI_Abort)"
  echo "a rank that dies, a rank that fails alone (in a step, in a rebuild-mapping): the job ended within $(($(date +%s) - start)) s"
  ;;
emit)
  # SCENE has particle sources (tests/sim/resume_sources.json: fixed steps, 40 per frame). The
  # sources' counts and the last frame they emitted travel in the checkpoint: a resumed run
  # emits exactly what the straight run does (same ids, same counts, frame by frame).
  # 1. 3 frames, then --resume to 6.
  run first3 0 "$drift" run scene.json --out B --frames 3
  run resume 0 "$drift" run scene.json --out B --resume
  same_frames "sources, resumed at frame 3" B 4 5 6
  [ "$(steps resume.log)" = "$want_steps" ] || fail "resume: $(steps resume.log) substeps in all, the straight run $want_steps"
  # frames.xdmf lists every frame with its own particle count (they change from frame to frame)
  counts() { grep -o 'Dimensions="[0-9]* 3"' "$1" | tr '\n' ' '; }
  [ -n "$(counts A/frames.xdmf)" ] && [ "$(counts B/frames.xdmf)" = "$(counts A/frames.xdmf)" ] ||
    fail "B/frames.xdmf counts '$(counts B/frames.xdmf)', the straight run's '$(counts A/frames.xdmf)'"
  [ "$(counts A/frames.xdmf | tr ' ' '\n' | sort -u | grep -c .)" -gt 3 ] || fail "the sources did not change the count: $(counts A/frames.xdmf)"
  # and each at the straight run's time (the frames before the resume listed again from their files)
  times() { grep -o '<Time Value="[^"]*"' "$1" | tr '\n' ' '; }
  [ -n "$(times A/frames.xdmf)" ] && [ "$(times B/frames.xdmf)" = "$(times A/frames.xdmf)" ] ||
    fail "B/frames.xdmf times '$(times B/frames.xdmf)', the straight run's '$(times A/frames.xdmf)'"
  # 2. SIGTERM before step 141, part-way into frame 4 (its emission done), and before step 121,
  # the first of frame 4 (emitted already at its start: the checkpoint must not emit it again).
  for step in 141 121; do
    run "signal_$step" 9 env DRIFT_TEST_HOOK=signal:0:$step "$drift" run scene.json --out "S$step"
    one_line "signal before step $step" "signal_$step.log" "stopped by SIGTERM at frame 3 + $((step - 121)) step(s)"
    run "signal_resume_$step" 0 "$drift" run scene.json --out "S$step" --resume
    same_frames "sources, SIGTERM before step $step" "S$step" 4 6
  done
  # 3. 2 ranks, resumed on 1 (where mpirun exists).
  if command -v mpirun >/dev/null; then
    run two3 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out T --frames 3
    run two_to_one 0 "$drift" run scene.json --out T --resume
    same_frames "sources, 2 ranks -> 1" T 4 6
  fi
  ;;
nospace)
  mkdir -p N
  if ! mount -t tmpfs -o size=3000k drift-test N 2>/dev/null; then
    echo "skipped: cannot mount a tmpfs here (not root, or not allowed)"
    exit 77
  fi
  mounted=$tmp/N
  # Frames 0 and 4 only (0.5 MiB each), a checkpoint every 3 frames (1.5 MiB), keep 1: frame 0
  # and checkpoint 3 fit in 3000 KiB, frame 4 fits beside them, checkpoint 6 does not (the old
  # one goes only after the new one is complete). No frame is due with checkpoint 6, whose own
  # check refuses it (a frame due with one counts its room: check_io_errors.sh).
  sed 's/"checkpoint_every": 3/"every": 4, "checkpoint_every": 3, "checkpoint_keep": 1/' scene.json >small.json
  run nospace 3 "$drift" run small.json --out N
  one_line "no room" nospace.log "no room for N/checkpoint_00006.h5"
  [ -f N/checkpoint_00003.h5 ] || fail "no room: the older checkpoint N/checkpoint_00003.h5 is gone"
  [ -z "$(find N -name '*.tmp')" ] || fail "no room: temporary files left: $(ls -A N)"
  [ ! -e N/checkpoint_00006.h5 ] || fail "no room: N/checkpoint_00006.h5 exists"
  # the older checkpoint reads back whole (resumed into a folder with room)
  cp -r N R
  umount N && mounted=""
  rm -f R/frame_00004.h5
  run nospace_resume 0 "$drift" run small.json --out R --resume
  name=frame_00004.h5
  out=$("$compare" "A/$name" "R/$name" 4e-6 1e-4) || fail "resumed after no room: $out"
  ;;
det)
  grep -q '"deterministic": true' scene.json || fail "det: the scene is not in deterministic mode"
  grep -q '^deterministic mode: P2G sums in 64-bit fixed point' straight.log || fail "det: no 'deterministic mode' line"
  # 1. one rank: 3 frames, resumed to 6
  run det_first3 0 "$drift" run scene.json --out B --frames 3
  run det_resume 0 "$drift" run scene.json --out B --resume
  exact_frames "deterministic, 1 rank, resumed at frame 3" B 4 5 6
  [ "$(steps det_resume.log)" = "$want_steps" ] || fail "det resume: $(steps det_resume.log) substeps, the straight run $want_steps"
  # 2. two ranks straight through, and two ranks for 3 frames then one rank to 6
  run det_two 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out C
  exact_frames "deterministic, 2 ranks" C 1 2 3 4 5 6
  run det_two3 0 "${mpirun[@]}" -n 2 "$drift" run scene.json --out D --frames 3
  run det_two_resume 0 "$drift" run scene.json --out D --resume
  exact_frames "deterministic, 2 ranks then resumed on 1" D 4 5 6
  ;;
*)
  echo "unknown mode $mode" >&2
  exit 2
  ;;
esac

lib_finish "check_resume.sh $mode"
