#!/usr/bin/env bash
# check_signal_hint.sh - a run stopped by a signal says how to continue, and that command, pasted
# as it is, continues it; and a signal to mpirun itself stops the job with a checkpoint.
#
#   check_signal_hint.sh DRIFT_EXE [MPIEXEC]
#
# 1. A scene path and an output folder with a space and a quote, --frames, --backend and a
#    setting's option (--migrate-margin=1): DRIFT_TEST_HOOK raises SIGTERM part-way into frame 2;
#    exit 9, one line ending "continue with: COMMAND"; COMMAND, run by the shell as printed (the
#    drift of the build put first on PATH), resumes from the checkpoint and finishes (--frames
#    carried: frame 3 is the last).
# 2. With MPIEXEC: SIGUSR1 to mpirun itself once frame 1 is done: the checkpoint is written and
#    mpirun exits 9; SIGTERM and SIGINT: the checkpoint is written (mpirun's own status is 1).
# 3. With MPIEXEC: jobs/drift.sbatch (no Slurm, 2 ranks) given SIGTERM, or a Ctrl-C (SIGINT to
#    its process group): exit 9 and a checkpoint.
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 1 "$0 DRIFT_EXE [MPIEXEC]" "$@"
drift=$(lib_abs "$1")
mpiexec=${2:-}
lib_setup hint
mkdir bin
ln -s "$drift" bin/drift

mkdir -p "my scenes"
cat >"my scenes/jelly box.json" <<'EOF'
{
  "domain": {"min": [0, 0, 0], "max": [1, 1, 1], "dx": 0.1},
  "time": {"frames": 100, "fps": 24, "dt": 0.002},
  "materials": {"jelly": {"model": "fixed_corotated", "density": 1000, "youngs_modulus": 1e5, "poisson_ratio": 0.3}},
  "bodies": [{"shape": "box", "min": [0.2, 0.2, 0.2], "max": [0.5, 0.5, 0.5], "material": "jelly"}]
}
EOF

# 1. The hint, executed as printed. 21 steps a frame: step 30 is part-way into frame 2.
out="it's out"
DRIFT_TEST_HOOK=signal:0:30 timeout 60 "$drift" run "my scenes/jelly box.json" --frames 3 --backend cpu \
  --migrate-margin=1 --out "$out" >signal.log 2>&1
rc=$?
[ "$rc" -eq 9 ] || fail "signal: exit status $rc, expected 9: $(cat signal.log)"
hint=$(sed -n 's/^drift: stopped by SIGTERM .*; continue with: //p' signal.log)
want="drift run 'my scenes/jelly box.json' --out 'it'\\''s out' --resume --frames 3 --backend cpu --migrate-margin=1"
[ "$hint" = "$want" ] || fail "the hint is '$hint', expected '$want'"
if [ -n "$hint" ]; then
  PATH="$tmp/bin:$PATH" timeout 60 bash -c "$hint" >resume.log 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || fail "the hint, run as printed: exit status $rc: $(tail -n 3 resume.log)"
  grep -q "^resuming from $out/checkpoint_00001.h5: frame 1 and part of the next" resume.log ||
    fail "the hint did not resume from the checkpoint: $(head -n 3 resume.log)"
  [ -f "$out/frame_00003.h5" ] && [ ! -e "$out/frame_00004.h5" ] || fail "the hint's run: frames $(ls "$out" | tr '\n' ' ')"
fi

# 2. Signals to mpirun itself (Open MPI): SIGUSR1 is forwarded to every rank, which stop with a
# checkpoint, and mpirun exits with their status 9. SIGTERM and SIGINT mpirun handles itself: it
# forwards SIGTERM to the ranks, which still write the checkpoint, but reports the job as aborted
# with its own status 1 (orterun's abort path), whatever the ranks return (docs/running.md).
if [ -n "$mpiexec" ]; then
  for sig in USR1 TERM INT; do
    # frames enough that the run is still going when the signal comes (a frame takes milliseconds).
    # --quiet: on SIGTERM or SIGINT mpirun sends the ranks SIGCONT, sleeps odls_base_sigkill_timeout
    # (1 s), sends SIGTERM, sleeps again, then SIGKILL, and reads none of their output meanwhile; a
    # second of progress lines (about 160 frames here) fills rank 0's stderr pipe, which then blocks
    # in write() and never reaches the checkpoint before the SIGKILL (docs/running.md).
    "$mpiexec" --oversubscribe -n 2 "$drift" run "my scenes/jelly box.json" --out "M$sig" --frames 100000 --quiet \
      >"mpirun_$sig.log" 2>&1 &
    mp=$!
    for _ in $(seq 300); do [ -e "M$sig/frame_00001.h5" ] && break; sleep 0.1; done
    kill "-$sig" "$mp"
    wait "$mp"
    rc=$?
    want=9
    [ "$sig" != USR1 ] && want=1
    [ "$rc" -eq "$want" ] || fail "SIG$sig to mpirun: exit status $rc, expected $want: $(tail -n 5 "mpirun_$sig.log")"
    got=$sig
    [ "$sig" = INT ] && got=TERM # what mpirun sends the ranks
    grep -q "^drift: stopped by SIG$got at frame " "mpirun_$sig.log" || fail "SIG$sig to mpirun: no 'stopped by SIG$got' line"
    [ -n "$(ls "M$sig"/checkpoint_*.h5 2>/dev/null)" ] || fail "SIG$sig to mpirun: no checkpoint in M$sig: $(ls "M$sig")"
  done
fi

# 3. Where the status can be 9 however the signal comes: jobs/drift.sbatch (no Slurm: mpirun -n 2
# here) passes SIGTERM, SIGINT and SIGHUP on as SIGUSR1. SIGTERM to the script, and a terminal's
# Ctrl-C (SIGINT to the script's whole process group, mpirun included: the script runs it in a
# session of its own so that only the script gets it): exit 9 and a checkpoint. setsid makes the
# group, env --default-signal undoes the SIGINT that bash ignores in background commands.
sbatch=$(dirname "$0")/../../jobs/drift.sbatch
if [ -n "$mpiexec" ]; then
  for how in TERM ctrl-c; do
    DRIFT_BIN=$drift NRANKS=2 OVERSUBSCRIBE=1 setsid env --default-signal=INT bash "$sbatch" "my scenes/jelly box.json" \
      "J$how" --frames 100000 >"sbatch_$how.log" 2>&1 &
    sp=$!
    for _ in $(seq 300); do grep -q '^frame 1/100000' "sbatch_$how.log" && break; sleep 0.1; done
    if [ "$how" = TERM ]; then kill -TERM "$sp"; else kill -INT -- "-$sp"; fi
    wait "$sp"
    rc=$?
    [ "$rc" -eq 9 ] || fail "drift.sbatch, $how: exit status $rc, expected 9: $(tail -n 5 "sbatch_$how.log")"
    grep -q "^drift: stopped by SIGUSR1 at frame " "sbatch_$how.log" || fail "drift.sbatch, $how: no 'stopped by SIGUSR1' line"
    [ -n "$(ls "J$how"/checkpoint_*.h5 2>/dev/null)" ] || fail "drift.sbatch, $how: no checkpoint in J$how"
  done
fi

lib_finish check_signal_hint.sh
