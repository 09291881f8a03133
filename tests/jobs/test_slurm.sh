#!/usr/bin/env bash
# test_slurm.sh - jobs/drift.sbatch and jobs/scaling.sh against a real Slurm on this machine.
#
#   test_slurm.sh DRIFT_EXE SOURCE_DIR
#
# Starts a private one-node Slurm cluster on localhost, as root, in a temporary folder: munged
# (its own key and socket), slurmctld and slurmd (slurm.conf written here: this host with the
# CPUs and memory `slurmd -C` reports, one partition, select/cons_tres, proctrack/linuxproc,
# task/none, no cgroups, no accounting database; free ports). All three run in the foreground
# as children of this script, and a trap cancels the jobs, stops them and removes the folder.
# Then:
#   1. sbatch --wait jobs/drift.sbatch on tests/sim/bench_one_box.json (2 frames, cpu backend;
#      srun --mpi=pmix starts drift, Debian's Open MPI under Debian's Slurm): exit status 0,
#      JobState COMPLETED, frames 0-2 complete (h5dump -H: 4096 particles), no .tmp left;
#   2. the same script on a missing scene: exit status 2 and the message in the job's output;
#   3. jobs/scaling.sh --nodes 1 --mode strong through Slurm: scaling.csv (header, one row,
#      efficiency 1) and scaling.png (a PNG);
#   4. jobs/scaling.sh --nodes "1 2" --mode weak --local (mpirun, 2 ranks) on tests/jobs/weak_{n}.json:
#      two rows with 4096 and 8192 particles, and the PNG; then --nodes 1 on tests/jobs/weak_{n*2}.json
#      (the pattern for nodes of several GPUs): one row, 1 node of 8192 particles.
#   5. A long job stopped as a time limit stops it: once drift.sbatch runs the dam break of
#      tests/sim/resume_dam_break.json (6 frames), `scancel --signal=USR1 --batch` sends what
#      --signal=B:USR1@120 sends before the limit; the script passes it on, drift writes a
#      checkpoint and exits 9, the script requeues the job, the job starts again (Restarts=1),
#      resumes and completes: exit status 0, JobState COMPLETED, frames 0-6 complete (12480
#      particles each), no .tmp left;
#   6. the same with DRIFT_MAX_RESTARTS=0: no requeue, the job ends with exit code 9 and the
#      checkpoint is there.
# slurm.conf sets AuthInfo cred_expire=5, which is also how long a requeued job waits before it
# may start again (120 s by default).
# Exits 77 (skipped) where it cannot run: not root, or Slurm, munge, h5dump or matplotlib
# missing (setup.sh test installs slurm-wlm, munge and python3-matplotlib). Every wait has a
# time limit; the whole test takes about 90 s.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 DRIFT_EXE SOURCE_DIR" >&2
  exit 2
fi
drift=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root (the test starts its own munged, slurmctld and slurmd)"
for t in munged slurmctld slurmd sbatch squeue scontrol scancel sinfo h5dump mpirun; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || skip "$t not installed (Debian: slurm-wlm munge hdf5-tools openmpi-bin)"
done
export PATH=$PATH:/usr/sbin
python=""
for p in "${PYTHON:-python3}" /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import matplotlib' >/dev/null 2>&1; then python=$p; break; fi
done
[ -n "$python" ] || skip "no python3 with matplotlib (Debian: python3-matplotlib)"
export PYTHON=$python

# Nothing of a surrounding Slurm job (CI may itself run under Slurm) leaks into ours.
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(SBATCH_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/drift-slurm.XXXXXX") || exit 1
chmod 711 "$tmp" # munged wants the folders above its socket searchable
pids=()
cleanup() {
  [ -n "${bg:-}" ] && kill "$bg" 2>/dev/null
  if [ -f "$tmp/slurm.conf" ]; then
    ids=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "$ids" ]; then
      timeout 10 scancel $ids 2>/dev/null
      for _ in $(seq 20); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
  fi
  # Our daemons, by the ids we started: slurmd, slurmctld, munged (reverse order).
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# bg_wait CMD...: runs CMD and returns its status, in the background so that a signal to this
# script runs the trap at once rather than after CMD.
bg=""
bg_wait() {
  "$@" &
  bg=$!
  wait "$bg"
}

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show_logs() {
  for f in "$tmp"/log/*.log; do echo "--- $f (last lines):"; tail -n 15 "$f"; done
}
die() {
  echo "FAIL: $*"
  show_logs
  exit 1
}

# Two free TCP ports (slurmctld, slurmd) next to each other.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctl_port=""
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 20000))
  if port_free "$p" && port_free $((p + 1)); then ctl_port=$p; break; fi
done
[ -n "$ctl_port" ] || die "no free ports"
d_port=$((ctl_port + 1))

mkdir -p "$tmp/munge" "$tmp/log" "$tmp/state" "$tmp/spool" "$tmp/work"
chmod 700 "$tmp/munge"

# munge: a fresh key, a private socket.
head -c 1024 /dev/urandom >"$tmp/munge/munge.key" && chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed" \
  2>>"$tmp/log/munged.log" &
pids+=($!)
for _ in $(seq 50); do [ -S "$tmp/munge/munge.socket" ] && break; sleep 0.2; done
[ -S "$tmp/munge/munge.socket" ] || die "munged did not start"

# slurm.conf: this host as the only node, with what slurmd detects (CPUs, sockets, memory).
host=$(hostname -s)
node=$(timeout 20 slurmd -C 2>/dev/null | head -n 1)
case "$node" in "NodeName=$host "*) ;; *) die "slurmd -C printed '$node', not a NodeName=$host line" ;; esac
cat >"$tmp/slurm.conf" <<EOF
# A private one-node cluster for tests/jobs/test_slurm.sh.
ClusterName=drifttest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also the wait of a requeued job before it may start again (default 120 s)
AuthInfo=socket=$tmp/munge/munge.socket,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
# No cgroups: processes tracked by parent id, no binding, no job accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$tmp/log/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
# drift.sbatch asks for --mpi=pmix itself; the default is left plain.
MpiDefault=none
ReturnToService=2
# Finished jobs stay visible to scontrol for 10 minutes (there is no sacct database).
MinJobAge=600
SchedulerParameters=sched_interval=1
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -f "$SLURM_CONF" >>"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >>"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)

state=""
for _ in $(seq 60); do
  state=$(timeout 5 sinfo -h -n "$host" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || die "the node did not come up idle within 30 s (sinfo: '$state')"
echo "slurm up: $host idle (slurmctld port $ctl_port, slurmd port $d_port)"

cd "$tmp/work" || exit 1
sb=(--gpus-per-node=0 --cpus-per-task=1 --time=00:03:00)
export DRIFT_BIN=$drift

# 1. A run of 2 frames through sbatch --wait.
frames=$tmp/work/frames
bg_wait timeout 60 sbatch --parsable --wait "${sb[@]}" --output="$tmp/work/run.out" "$src/jobs/drift.sbatch" \
  "$src/tests/sim/bench_one_box.json" "$frames" --frames 2 --backend cpu >"$tmp/work/run.id"
rc=$?
job=$(cut -d';' -f1 "$tmp/work/run.id")
echo "--- job $job (drift.sbatch, exit status $rc):"
cat "$tmp/work/run.out"
[ "$rc" -eq 0 ] || fail "drift.sbatch: sbatch --wait exit status $rc, expected 0"
info=$(timeout 10 scontrol show job "$job" 2>&1)
echo "$info" | grep -q "JobState=COMPLETED" || fail "drift.sbatch: job $job is not COMPLETED: $(echo "$info" | grep -o 'JobState=[A-Z_]*')"
echo "$info" | grep -q " ExitCode=0:0" || fail "drift.sbatch: job $job exit code $(echo "$info" | grep -o ' ExitCode=[0-9:]*')"
grep -q "1 node(s) ($host), 1 rank per node, 1 OpenMP thread(s) per rank" "$tmp/work/run.out" ||
  fail "drift.sbatch: no line saying 1 node, 1 rank, 1 thread"
grep -q "^done: 2 frames" "$tmp/work/run.out" || fail "drift.sbatch: drift did not report 2 frames done"
for f in 0 1 2; do
  h5=$frames/frame_0000$f.h5
  if [ ! -f "$h5" ]; then
    fail "drift.sbatch: $h5 missing"
    continue
  fi
  hdr=$(timeout 30 h5dump -H "$h5" 2>&1)
  echo "$hdr" | grep -A3 'DATASET "id"' | grep -q 'SIMPLE { ( 4096 ) / ( 4096 ) }' ||
    fail "drift.sbatch: $h5: /particles/id is not 4096 particles"
  echo "$hdr" | grep -q 'ATTRIBUTE "n_particles"' || fail "drift.sbatch: $h5 has no n_particles attribute"
done
[ -f "$frames/frames.xdmf" ] || fail "drift.sbatch: no frames.xdmf"
[ -z "$(find "$frames" -name '*.tmp*')" ] || fail "drift.sbatch: temporary files left: $(ls "$frames")"

# 2. A missing scene: exit status 2, the message in the job's output.
bg_wait timeout 30 sbatch --wait "${sb[@]}" --output="$tmp/work/bad.out" "$src/jobs/drift.sbatch" \
  "$tmp/work/no-such-scene.json" >/dev/null
rc=$?
[ "$rc" -eq 2 ] || fail "drift.sbatch, missing scene: exit status $rc, expected 2"
grep -q "scene $tmp/work/no-such-scene.json: no such readable file" "$tmp/work/bad.out" ||
  fail "drift.sbatch, missing scene: no message in the job's output: $(cat "$tmp/work/bad.out")"

# check_table CSV PNG LABEL ROWS: scaling.csv has the header and ROWS rows ("nodes,ranks,particles"
# each, efficiency 1 in the first), the PNG starts with the PNG signature.
check_table() {
  local csv=$1 png=$2 label=$3 rows=$4
  echo "--- $csv:"
  cat "$csv" 2>/dev/null
  [ -f "$csv" ] || { fail "$label: $csv missing"; return; }
  head -n 1 "$csv" | grep -q '^nodes,ranks,particles,ms_per_frame,particle_steps_per_s,efficiency,case,scene,backend,device,frames,steps,seconds,steps_per_s,rebuilds_per_frame,rebuild_pct,p2g_pct,grid_pct,g2p_pct,mode,deterministic_cost,fps,steps_per_rebuild,paper_fps,island_barrier,island_reduce,profile_from,rebuild_us,p2g_us,grid_us,g2p_us,rank_kb_per_step,mpi_wait_pct,vote_wait_pct,migrated,rebalances$' ||
    fail "$label: header is $(head -n 1 "$csv")"
  local got
  got=$(awk -F, 'NR > 1 { printf "%s,%s,%s;", $1, $2, $3 }' "$csv")
  [ "$got" = "$rows" ] || fail "$label: rows (nodes,ranks,particles) are '$got', expected '$rows'"
  awk -F, 'NR > 1 && !($4 > 0 && $5 > 0 && $6 > 0 && NF == 36) { bad = 1 } NR == 2 && $6 != "1.0000" { bad = 1 }
           END { exit bad }' "$csv" || fail "$label: a row has a non-positive time, rate or efficiency, or the first efficiency is not 1"
  # the ranks' exchange (the bench CSV's last columns): empty on one rank; on several, kB a step and
  # the largest rank's host share waiting on MPI as numbers, the device's at the vote empty on the
  # CPU backend (else a share), the particles migrated and the rebalances as counts
  awk -F, 'NR > 1 && $2 == 1 && !($32 == "" && $33 == "" && $34 == "" && $35 == "" && $36 == "") { bad = 1 }
           NR > 1 && $2 > 1 && !($32 != "" && $32 >= 0 && $33 != "" && $33 >= 0 && $33 <= 100 &&
                                 ($34 == "" || ($34 > 0 && $34 <= 100)) && $35 ~ /^[0-9]+$/ && $36 ~ /^[0-9]+$/) { bad = 1 }
           END { exit bad }' "$csv" || fail "$label: the ranks' columns (rank_kb_per_step .. rebalances) do not fit the rows' ranks"
  if [ ! -s "$png" ]; then
    fail "$label: $png missing or empty"
  elif [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" != 89504e470d0a1a0a ]; then
    fail "$label: $png is not a PNG"
  elif ! "$python" -c 'import sys, matplotlib.image as m; a = m.imread(sys.argv[1]); sys.exit(not (a.shape[0] > 100 and a.shape[1] > 100))' "$png"; then
    fail "$label: $png does not read back as an image of at least 100 x 100"
  fi
}

# 3. A strong-scaling series through Slurm (one node here).
bg_wait timeout 100 bash "$src/jobs/scaling.sh" --nodes 1 --mode strong --scene "$src/tests/sim/bench_one_box.json" --frames 1 \
  --backend cpu --out "$tmp/work/strong" --sbatch-args "${sb[*]}" --timeout 80
rc=$?
[ "$rc" -eq 0 ] || { fail "scaling.sh (Slurm): exit status $rc"; cat "$tmp/work/strong/n1/job.out" 2>/dev/null; }
check_table "$tmp/work/strong/scaling.csv" "$tmp/work/strong/scaling.png" "scaling.sh (Slurm)" "1,1,4096;"

# 4. A weak-scaling series on 1 and 2 ranks with mpirun here.
bg_wait timeout 100 bash "$src/jobs/scaling.sh" --nodes "1 2" --mode weak --scene "$src/tests/jobs/weak_{n}.json" --frames 1 \
  --backend cpu --out "$tmp/work/weak" --local --timeout 80
rc=$?
[ "$rc" -eq 0 ] || { fail "scaling.sh --local: exit status $rc"; cat "$tmp/work/weak"/n*/job.out 2>/dev/null; }
check_table "$tmp/work/weak/scaling.csv" "$tmp/work/weak/scaling.png" "scaling.sh --local" "1,1,4096;2,2,8192;"
bg_wait timeout 100 bash "$src/jobs/scaling.sh" --nodes 1 --mode weak --scene "$src/tests/jobs/weak_{n*2}.json" --frames 1 \
  --backend cpu --out "$tmp/work/weak2" --local --timeout 80
rc=$?
[ "$rc" -eq 0 ] || { fail "scaling.sh --local, weak_{n*2}: exit status $rc"; cat "$tmp/work/weak2"/n*/job.out 2>/dev/null; }
check_table "$tmp/work/weak2/scaling.csv" "$tmp/work/weak2/scaling.png" "scaling.sh --local, weak_{n*2}" "1,1,8192;"

# frames_complete DIR LABEL N: DIR holds frames 0-6 of N particles each and no temporary file.
frames_complete() {
  local dir=$1 label=$2 n=$3
  for f in 0 1 2 3 4 5 6; do
    h5=$dir/frame_0000$f.h5
    if [ ! -f "$h5" ]; then
      fail "$label: $h5 missing"
      continue
    fi
    timeout 30 h5dump -H "$h5" 2>&1 | grep -A3 'DATASET "id"' | grep -q "SIMPLE { ( $n ) / ( $n ) }" ||
      fail "$label: $h5: /particles/id is not $n particles"
  done
  [ -z "$(find "$dir" -name '*.tmp*')" ] || fail "$label: temporary files left: $(ls -A "$dir")"
}

# signal_job NAME DIR SBATCH_ARGS...: submits drift.sbatch on the dam break with sbatch --wait in
# the background, and once drift has finished frame 1, sends the batch shell SIGUSR1 as
# --signal=B:USR1 would. Sets job and rc (sbatch --wait's status).
signal_job() {
  local name=$1 dir=$2
  shift 2
  rm -f "$tmp/work/$name.out" "$tmp/work/$name.id"
  timeout 150 sbatch --parsable --wait "${sb[@]}" "$@" --output="$tmp/work/$name.out" "$src/jobs/drift.sbatch" \
    "$src/tests/sim/resume_dam_break.json" "$dir" --backend cpu >"$tmp/work/$name.id" &
  bg=$!
  local started=0
  for _ in $(seq 600); do
    grep -q '^frame 1/6' "$tmp/work/$name.out" 2>/dev/null && started=1 && break
    sleep 0.1
  done
  job=$(cut -d';' -f1 "$tmp/work/$name.id")
  [ -z "$job" ] && job=$(timeout 10 squeue -h -o %i -n drift | head -n 1)
  if [ "$started" = 1 ] && [ -n "$job" ]; then
    timeout 10 scancel --signal=USR1 --batch "$job" || fail "$name: scancel --signal=USR1 --batch $job failed"
  else
    fail "$name: drift did not reach frame 1 within 60 s (job '$job')"
  fi
  wait "$bg"
  rc=$?
  bg=""
  [ -z "$job" ] && job=$(cut -d';' -f1 "$tmp/work/$name.id")
  echo "--- job $job ($name, sbatch --wait exit status $rc):"
  grep -v '^ranks:' "$tmp/work/$name.out"
}

# 5. Stopped by the signal, checkpoint, requeue, resume, complete.
signal_job requeue "$tmp/work/requeue"
[ "$rc" -eq 0 ] || fail "requeue: sbatch --wait exit status $rc, expected 0"
info=$(timeout 10 scontrol show job "$job" 2>&1)
echo "$info" | grep -q "JobState=COMPLETED" || fail "requeue: job $job is not COMPLETED: $(echo "$info" | grep -o 'JobState=[A-Z_]*')"
echo "$info" | grep -q "Restarts=1 " || fail "requeue: job $job $(echo "$info" | grep -o 'Restarts=[0-9]*'), expected Restarts=1"
echo "$info" | grep -q " ExitCode=0:0" || fail "requeue: job $job exit code $(echo "$info" | grep -o ' ExitCode=[0-9:]*')"
out=$tmp/work/requeue.out
grep -q "got SIGUSR1: passing SIGUSR1 on" "$out" || fail "requeue: the script did not pass SIGUSR1 on"
grep -q "^drift: stopped by SIGUSR1 at frame " "$out" || fail "requeue: drift did not stop with a checkpoint"
grep -q "requeueing job $job (restart 1 of at most 10)" "$out" || fail "requeue: the script did not requeue"
grep -q "continuing with --resume (restart 1)" "$out" || fail "requeue: the second start did not add --resume"
grep -q "^resuming from $tmp/work/requeue/checkpoint_0000[0-9].h5: frame " "$out" || fail "requeue: drift did not resume"
grep -q "^done: 6 frames" "$out" || fail "requeue: drift did not finish 6 frames"
frames_complete "$tmp/work/requeue" requeue 12480

# 6. The same with no restart allowed: exit code 9, the checkpoint kept.
signal_job norequeue "$tmp/work/norequeue" --export=ALL,DRIFT_MAX_RESTARTS=0
[ "$rc" -eq 9 ] || fail "no requeue: sbatch --wait exit status $rc, expected 9"
info=$(timeout 10 scontrol show job "$job" 2>&1)
echo "$info" | grep -q " ExitCode=9:0" || fail "no requeue: job $job exit code $(echo "$info" | grep -o ' ExitCode=[0-9:]*'), expected 9:0"
echo "$info" | grep -q "Restarts=0 " || fail "no requeue: job $job was requeued: $(echo "$info" | grep -o 'Restarts=[0-9]*')"
grep -q "the restart limit DRIFT_MAX_RESTARTS=0 is reached" "$tmp/work/norequeue.out" || fail "no requeue: no line about the restart limit"
compgen -G "$tmp/work/norequeue/checkpoint_*.h5" >/dev/null || fail "no requeue: no checkpoint in $tmp/work/norequeue"

[ "$failures" -eq 0 ] || show_logs
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
