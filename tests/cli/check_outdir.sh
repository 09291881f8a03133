#!/usr/bin/env bash
# check_outdir.sh - the output folder holds one run at a time and one run's output (src/outdir.c).
#
#   check_outdir.sh DRIFT_EXE [MPIEXEC]
#
# 1. Two runs at once into one folder: the second is refused at once (exit 2, one line naming the
#    folder and the first run's host and pid) and writes nothing; with MPIEXEC, the same on 2 ranks
#    (every rank exits, one line).
# 2. A stale lock (the lock file of a process that is gone) is taken over with one line.
# 3. A run into a folder that holds another scene's output is refused (exit 2, nothing changed);
#    --force removes drift's files there (and only those) and runs; --resume still continues.
# 4. One file of drift's (a frame) is enough to refuse; a temporary file of an interrupted write
#    alone is not.
set -u
. "$(dirname "$0")/../lib.sh"

lib_usage 1 "$0 DRIFT_EXE [MPIEXEC]" "$@"
drift=$(lib_abs "$1")
mpiexec=${2:-}
lib_setup outdir

# scene FILE FRAMES EVERY E: a box of jelly, 216 particles, about 10 substeps a frame.
scene() {
  cat >"$1" <<EOF
{
  "domain": {"min": [0, 0, 0], "max": [1, 1, 1], "dx": 0.1},
  "time": {"frames": $2, "fps": 24, "cfl": 0.5},
  "materials": {"jelly": {"model": "fixed_corotated", "density": 1000, "youngs_modulus": $4, "poisson_ratio": 0.3}},
  "bodies": [{"shape": "box", "min": [0.2, 0.2, 0.2], "max": [0.5, 0.5, 0.5], "material": "jelly"}],
  "output": {"every": $3, "checkpoint_every": 1}
}
EOF
}
scene long.json 1000000 1000000 1e5
scene a.json 4 1 1e5
scene b.json 2 1 2e5

# refused LABEL LOG STATUS TEXT: the run exited STATUS with exactly one 'drift: ' line containing TEXT.
refused() {
  local label=$1 log=$2 status=$3 text=$4 rc=$5
  [ "$rc" -eq "$status" ] || fail "$label: exit status $rc, expected $status: $(cat "$log")"
  [ "$(grep -c '^drift: ' "$log")" -eq 1 ] || fail "$label: not exactly one 'drift: ' line: $(cat "$log")"
  grep '^drift: ' "$log" | grep -qF -- "$text" || fail "$label: the message does not say '$text': $(cat "$log")"
}

# 1. Two runs at once.
"$drift" run long.json --out L >long.log 2>&1 &
bg=$!
for _ in $(seq 300); do grep -q '^drift .* particles' long.log && break; sleep 0.1; done
[ -f L/.drift.lock ] || fail "the running run holds no L/.drift.lock: $(ls -A L 2>&1)"
before=$(ls -A L | sort | tr '\n' ' ')
timeout 60 "$drift" run a.json --out L >second.log 2>&1
rc=$?
refused "second run" second.log 2 "output folder L is in use by another run (host $(hostname), pid $bg," $rc
grep -q "^host $(hostname) pid $bg started " L/.drift.lock || fail "the lock file does not name the first run: $(cat L/.drift.lock)"
if [ -n "$mpiexec" ]; then
  timeout 120 "$mpiexec" --oversubscribe -n 2 "$drift" run a.json --out L >second2.log 2>&1
  rc=$?
  refused "second run on 2 ranks" second2.log 2 "output folder L is in use by another run" $rc
fi
# the first run goes on, unharmed: stopped by a signal it writes its checkpoint (exit 9)
kill -TERM "$bg"
wait "$bg"
rc=$?
bg=""
[ "$rc" -eq 9 ] || fail "the first run: exit status $rc after SIGTERM, expected 9: $(tail -n 3 long.log)"
[ ! -e L/.drift.lock ] || fail "the lock file is left after the run ended"
case "$(ls -A L | sort | tr '\n' ' ')" in
"$before"*) ;;
*) [ -n "$(ls L/checkpoint_*.h5 2>/dev/null)" ] || fail "the first run's folder: $(ls -A L)" ;;
esac
[ ! -e L/frame_00001.h5 ] || fail "the refused run wrote L/frame_00001.h5"

# 2. A stale lock: a process that is gone.
mkdir -p S
sleep 0 &
dead=$!
wait "$dead"
echo "host $(hostname) pid $dead started 2000-01-01T00:00:00Z" >S/.drift.lock
timeout 60 "$drift" run a.json --out S >stale.log 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "stale lock: exit status $rc: $(cat stale.log)"
grep -q "^output folder S: taking over the lock of a run that ended (host $(hostname), pid $dead, started 2000-01-01T00:00:00Z)$" stale.log ||
  fail "stale lock: no 'taking over' line: $(head -n 3 stale.log)"
[ -f S/frame_00004.h5 ] && [ ! -e S/.drift.lock ] || fail "stale lock: the run's frames or a lock left: $(ls -A S)"

# 3. Another scene into S (a.json's 4 frames and checkpoints there), then --force, then --resume.
echo keep >S/notes.txt
before=$(ls -lA --time-style=+%s.%N S | sort)
timeout 60 "$drift" run b.json --out S >other.log 2>&1
rc=$?
refused "another scene" other.log 2 "output folder S holds another run's output (checkpoint_00003.h5 and more): --resume continues it, --force deletes it first" $rc
[ "$(ls -lA --time-style=+%s.%N S | sort)" = "$before" ] || fail "another scene: the refused run changed S"
timeout 60 "$drift" run b.json --out S --force >force.log 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "--force: exit status $rc: $(cat force.log)"
grep -q "^--force: removed [0-9]* file(s) of an earlier run from S/$" force.log || fail "--force: no 'removed' line"
[ "$(ls S | tr '\n' ' ')" = "checkpoint_00001.h5 checkpoint_00002.h5 frame_00000.h5 frame_00001.h5 frame_00002.h5 frames.xdmf frames_vertices.bin notes.txt " ] ||
  fail "--force: S holds $(ls S | tr '\n' ' ')"
timeout 60 "$drift" run b.json --out S --resume --frames 3 >resume.log 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ -f S/frame_00003.h5 ] || fail "--resume into the folder: exit status $rc: $(tail -n 3 resume.log)"

# 4. One file of drift's is another run's output too; what an interrupted write leaves is not.
mkdir -p O T
cp S/frame_00000.h5 O/
timeout 60 "$drift" run b.json --out O >one.log 2>&1
rc=$?
refused "one frame" one.log 2 "output folder O holds another run's output (frame_00000.h5): --resume continues it" $rc
[ "$(ls -A O)" = frame_00000.h5 ] || fail "one frame: the refused run changed O: $(ls -A O)"
echo partial >T/.frame_00000.tmp
timeout 60 "$drift" run b.json --out T >tmp.log 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ -f T/frame_00002.h5 ] || fail "a temporary file alone: exit status $rc: $(tail -n 3 tmp.log)"

lib_finish check_outdir.sh
