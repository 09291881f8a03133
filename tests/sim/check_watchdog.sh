#!/usr/bin/env bash
# check_watchdog.sh - a rank that stops answering ends the job with the watchdog's status
# (mpi/watchdog.h).
#
#   check_watchdog.sh DRIFT_EXE COMPARE_EXE SCENE MPIEXEC PROBE_EXE
#
# SCENE (tests/sim/resume_dam_break.json, run for 100 frames) on 2 ranks with
# parallel.watchdog_s 3 and a checkpoint every frame. Once frame 1 is logged and a checkpoint is
# on the disk, rank 1 is stopped (SIGSTOP), as a hung GPU or a lost node would leave it. Then:
# mpirun exits with status 10 (DR_ESTALLED) within the limit + 12 s; rank 0 says in one line that
# it waited the limit (which it gives: 3 s, raised on a loaded machine) for rank 1, and in which
# phase and step. Every published frame reads back whole (COMPARE_EXE,
# the file against itself), only temporary files may be left beside them, and the run resumes
# from its newest checkpoint (what a requeued batch job does). The stopped rank is ended
# (SIGCONT, SIGKILL) so that nothing lingers. Then a rank stopped as it comes to create a frame's
# file (DRIFT_TEST_HOOK=stopfile): the others wait inside HDF5's collective calls, a region the
# watchdog's thread times (mpi/watchdog.h); the same ending, naming the region. Last, the region
# alone (PROBE_EXE): rank 0 blocks in MPI_Barrier, which nothing polls, and only the watchdog's
# thread can end the job.
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 5 "$0 DRIFT_EXE COMPARE_EXE SCENE MPIEXEC PROBE_EXE" "$@"
drift=$1
compare=$2
scene=$3
mpiexec=$4
probe=$5
lib_setup watchdog
sed -e 's/"parallel": {/"parallel": { "watchdog_s": 3,/' -e 's/"checkpoint_every": 3/"checkpoint_every": 1/' \
  "$scene" >scene.json

stopped=""
end_stopped() {
  if [ -n "$stopped" ]; then
    kill -CONT "$stopped" 2>/dev/null
    kill -KILL "$stopped" 2>/dev/null
  fi
}
trap 'end_stopped; lib_cleanup' EXIT

# rank_pid R: the pid of the drift process of rank R among mpirun's descendants
rank_pid() {
  local env
  for env in /proc/[0-9]*/environ; do
    local pid=${env#/proc/}
    pid=${pid%/environ}
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${2:-drift}" ] || continue
    tr '\0' '\n' <"$env" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" || continue
    tr '\0' '\n' <"$env" 2>/dev/null | grep -qx "DRIFT_WATCHDOG_TEST=$$" && echo "$pid" && return
  done
}

# stopped_end COMM LOG WHAT: waits (60 s at most) for rank 1 of the job in the background ($bg),
# whose processes are named COMM, to stop itself, then for the job to end; rc: its exit status, s:
# the ms from the stop to the end. WHAT names the stop in a failure.
stopped_end() {
  local pid
  stopped=""
  for _ in $(seq 600); do
    pid=$(rank_pid 1 "$1")
    if [ -n "$pid" ] && grep -q '^State:[[:space:]]*T' "/proc/$pid/status" 2>/dev/null; then
      stopped=$pid
      break
    fi
    sleep 0.1
  done
  [ -n "$stopped" ] || fail "rank 1 did not stop $3 within 60 s: $(tail -n 3 "$2")"
  local start
  start=$(date +%s%N)
  wait "$bg"
  rc=$?
  s=$((($(date +%s%N) - start) / 1000000))
  end_stopped
  stopped=""
}

# ended LOG PATTERN WHAT: the job of LOG ended as the watchdog ends it ($rc, $s: stopped_end's or
# the caller's): exit status 10, and one line from rank 0 that matches PATTERN, gives the exit
# status and the limit it waited for: the scene's 3 s or more (the watchdog raises it to 4 times
# the longest frame, and a region's or the writer's wait to 4 times its longest, so that a loaded
# machine does not trip it), waited to the second (waits poll four times a second, the writer's
# once), and the job over within the limit + 12 s of the stop (the roll call, 2 s, and MPI_Abort;
# 10 s of slack for a loaded machine). WHAT names the stop in the messages.
ended() {
  echo "mpirun exited with $rc, $s ms after rank 1 stopped$3"
  [ "$rc" -eq 10 ] || fail "mpirun's exit status $rc, expected 10: $(tail -n 8 "$1")"
  line=$(grep '^drift: rank 0 waited' "$1")
  echo "$line"
  local limit waited
  waited=$(echo "$line" | sed -n 's/^drift: rank 0 waited \([0-9]*\) s (limit \([0-9.]*\) s) .*/\1/p')
  limit=$(echo "$line" | sed -n 's/^drift: rank 0 waited \([0-9]*\) s (limit \([0-9.]*\) s) .*/\2/p')
  echo "limit ${limit:-?} s, waited ${waited:-?} s, ended after $s ms"
  awk -v w="${waited:--1}" -v l="${limit:--1}" 'BEGIN { exit !(l >= 3 && w >= l - 0.5 && w <= l + 2) }' ||
    fail "rank 0 waited ${waited:-?} s$3 for a limit of ${limit:-?} s: expected the limit, at least 3 s"
  awk -v ms="$s" -v l="${limit:-0}" 'BEGIN { exit !(ms < 1000 * (l + 12)) }' ||
    fail "the job ended $s ms after rank 1 stopped$3, expected under the limit (${limit:-?} s) + 12 s"
  [ "$(grep -c '^drift: rank 0 waited' "$1")" -eq 1 ] || fail "expected one line from rank 0: $(grep '^drift:' "$1")"
  echo "$line" | grep -q "$2" || fail "the line does not name rank 1, the phase and the step$3: $line"
  echo "$line" | grep -q "exit status 10" || fail "the line does not give the exit status: $line"
}

DRIFT_WATCHDOG_TEST=$$ "$mpiexec" --oversubscribe -x DRIFT_WATCHDOG_TEST -n 2 "$drift" run scene.json --frames 100 \
  --out W >run.log 2>&1 &
bg=$!
for _ in $(seq 600); do grep -q '^frame 1/100' run.log && break; sleep 0.1; done
grep -q '^frame 1/100' run.log || fail "no frame 1 within 60 s: $(tail -n 3 run.log)"
# a checkpoint on the disk first (the frame's line comes before its frame and checkpoint are
# written), so that the restart below has one to resume from
for _ in $(seq 600); do ls W/checkpoint_*.h5 >/dev/null 2>&1 && break; sleep 0.1; done
ls W/checkpoint_*.h5 >/dev/null 2>&1 || fail "no checkpoint within 60 s of frame 1: $(tail -n 3 run.log)"
stopped=$(rank_pid 1)
[ -n "$stopped" ] || fail "rank 1's process not found"
kill -STOP "$stopped"
start=$(date +%s%N)
wait "$bg"
rc=$?
bg=""
s=$((($(date +%s%N) - start) / 1000000))
end_stopped
ended run.log "for rank 1 in the [a-z' -]*.* (frame [0-9]*, step [0-9]*): it stopped answering" ""
for f in W/frame_*.h5; do
  out=$("$compare" "$f" "$f" 0 0 2>&1) || fail "$f does not read back whole: $out"
done
echo "left in W: $(ls -A W | tr '\n' ' ')"
others=$(ls -A W | grep -v -e '^frame_[0-9]*\.h5$' -e '^checkpoint_[0-9]*\.h5$' -e '^frames\.xdmf$' \
  -e '^frames_vertices\.bin$' -e '^\.[a-z_0-9.]*\.tmp$' -e '^\.drift\.lock$')
[ -z "$others" ] || fail "unexpected files in W: $others"
# the restart a batch job makes: from the newest checkpoint, one frame further
last=$(ls W | sed -n 's/^checkpoint_0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -n 1)
if [ -n "$last" ]; then
  run restart 0 "$drift" run scene.json --out W --resume --frames $((last + 1))
  grep -q "^resuming from W/checkpoint_" restart.log || fail "the restart did not resume: $(head -n 3 restart.log)"
else
  fail "no checkpoint was written before rank 1 stopped"
fi

# A rank stopped as it comes to create frame 2's file (DRIFT_TEST_HOOK=stopfile:1:2): rank 0 waits
# for it inside HDF5's collective calls, which cannot be polled; the watchdog's thread times that
# region and ends the job the same way, naming rank 1 and the region. Frame 1 stays whole, and no
# file of frame 2 is published.
DRIFT_WATCHDOG_TEST=$$ DRIFT_TEST_HOOK=stopfile:1:2 "$mpiexec" --oversubscribe -x DRIFT_WATCHDOG_TEST -x DRIFT_TEST_HOOK \
  -n 2 "$drift" run scene.json --frames 4 --out F >file.log 2>&1 &
bg=$!
stopped_end drift file.log "at frame 2's file"
ended file.log "for rank 1 in the frame's file, created by all ranks together (frame [0-9]*, step [0-9]*): it stopped answering" \
  " at frame 2's file"
for f in F/frame_00000.h5 F/frame_00001.h5; do
  out=$("$compare" "$f" "$f" 0 0 2>&1) || fail "$f does not read back whole: $out"
done
[ ! -e F/frame_00002.h5 ] || fail "frame 2 was published though rank 1 never wrote its part"
others=$(ls -A F | grep -v -e '^frame_0000[01]\.h5$' -e '^checkpoint_00001\.h5$' -e '^frames\.xdmf$' \
  -e '^frames_vertices\.bin$' -e '^\.[a-z_0-9.]*\.tmp$' -e '^\.drift\.lock$')
[ -z "$others" ] || fail "unexpected files in F: $others"

# The region alone: rank 1 of watchdog_probe stops itself, rank 0 blocks in MPI_Barrier inside a
# region with a limit of 2 s.
DRIFT_WATCHDOG_TEST=$$ "$mpiexec" --oversubscribe -x DRIFT_WATCHDOG_TEST -n 2 "$probe" 2 >probe.log 2>&1 &
bg=$!
stopped_end watchdog_probe probe.log "in the probe"
line=$(grep '^drift: rank 0 waited' probe.log)
echo "probe: mpirun exited with $rc, $s ms after rank 1 stopped: $line"
[ "$rc" -eq 10 ] || fail "the probe's exit status $rc, expected 10: $(tail -n 8 probe.log)"
echo "$line" | grep -q "^drift: rank 0 waited [23] s (limit 2.0 s) for rank 1 in the probe's barrier (frame 1, step 1): it stopped answering" ||
  fail "the probe's line does not name rank 1 and the region after 2 s: $line"
awk -v ms="$s" 'BEGIN { exit !(ms < 14000) }' || fail "the probe ended $s ms after rank 1 stopped, expected under 2 s + 12 s"

lib_finish check_watchdog.sh
