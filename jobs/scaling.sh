#!/usr/bin/env bash
# scaling.sh - a scaling study: `drift bench` on a series of node counts, one table, one plot.
#
#   jobs/scaling.sh --nodes "1 2 4" --mode weak|strong --scene SCENE [--frames N]
#                   [--backend cpu|cuda|auto] [--out DIR] [--local] [--profile-frames K]
#                   [--sbatch-args "ARGS"] [--timeout SECONDS]
#
# With Slurm (the default) it submits one job per node count: jobs/drift.sbatch with
# DRIFT_COMMAND=bench, i.e. `srun drift bench SCENE --frames N --csv DIR/nN/bench.csv` on that
# many nodes (one rank per node, all of the node's GPUs), all at once; waits for them
# (`sbatch --wait`); then gathers their CSVs into DIR/scaling.csv and draws DIR/scaling.png with
# jobs/plot_scaling.py (python3 + matplotlib). With --local it runs the same series here, one
# after another, with `mpirun -n N --oversubscribe` (ranks = node count) instead of submitting.
#
#   --nodes "1 2 4"   node counts (ranks with --local), space- or comma-separated.
#   --mode strong     the same scene on every node count: --scene names one file.
#                     efficiency = n0 t0 / (n tn) (n0: the smallest count, t: ms per frame).
#   --mode weak       the scene grows with the node count: --scene is a pattern with {n}, the
#                     node count, e.g. jobs/bench/weak_{n}.json, or {n*K}, K times it: nodes of
#                     4 GPUs with a copy of the Sand Blocks scene per GPU (3.1M particles each)
#                     take jobs/bench/weak_{n*4}.json. efficiency = t0 / tn.
#   --frames N        frames per run (default: each scene's time.frames).
#   --backend B       drift's --backend (default: the scene's parallel.backend).
#   --out DIR         results (default scaling/MODE-YYYYmmdd-HHMMSS); DIR/nN/ holds each run's
#                     bench.csv and log. Under Slurm it must be on a filesystem the nodes share.
#   --profile-frames K  drift bench's profiled run (phase shares); default 0 (skipped).
#   --sbatch-args "A" extra sbatch options for every job, e.g. "--partition=gpu --time=2:00:00"
#                     or, on CPU-only nodes, "--gpus-per-node=0 --cpus-per-task=32".
#   --timeout S       give up (and scancel what is left) after S seconds; default none with
#                     Slurm, where jobs may queue for long.
# Environment: DRIFT_BIN (the binary; default build/drift of the repository holding this
# script; it must be reachable from every node), PYTHON (a python3 with matplotlib), and drift.sbatch's variables.
# Exit status: 0 when every run and the table succeeded; 1 when a run failed (the table holds the
# others); 2 bad arguments; 3 no matplotlib (scaling.csv is still written).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'scaling.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }
usage() { sed -n "2,6p" "${BASH_SOURCE[0]}" | sed "s/^# \{0,1\}//"; exit "$1"; }

nodes_list="" mode="" scene="" frames="" backend="" out="" local=0 profile=0 sbatch_args="" timeout_s=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes | --mode | --scene | --frames | --backend | --out | --profile-frames | --sbatch-args | --timeout)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --nodes) nodes_list=${2//,/ } ;;
        --mode) mode=$2 ;;
        --scene) scene=$2 ;;
        --frames) frames=$2 ;;
        --backend) backend=$2 ;;
        --out) out=$2 ;;
        --profile-frames) profile=$2 ;;
        --sbatch-args) sbatch_args=$2 ;;
        --timeout) timeout_s=$2 ;;
      esac
      shift 2 ;;
    --local) local=1; shift ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# Arguments.
[ -n "$nodes_list" ] || die "--nodes is required, e.g. --nodes \"1 2 4\""
for n in $nodes_list; do
  case "$n" in '' | *[!0-9]* | 0*) die "--nodes: '$n' is not a whole number >= 1" ;; esac
done
# shellcheck disable=SC2086  # one line per count
nodes_list=$(printf '%s\n' $nodes_list | sort -n -u | tr '\n' ' ')
case "$mode" in weak | strong) ;; '') die "--mode is required: weak or strong" ;; *) die "--mode: '$mode' is not weak or strong" ;; esac
[ -n "$scene" ] || die "--scene is required"
if [ "$mode" = weak ]; then
  case "$scene" in *"{n}"* | *"{n*"[1-9]*"}"*) ;; *) die "--mode weak: the scene must grow with the node count; give a pattern with {n} or {n*K}, e.g. jobs/bench/weak_{n}.json" ;; esac
else
  case "$scene" in *"{n}"* | *"{n*"*) die "--mode strong: one scene for every node count, not a pattern with {n}" ;; esac
fi
if [ -n "$frames" ]; then case "$frames" in *[!0-9]* | 0*) die "--frames: '$frames' is not a whole number >= 1" ;; esac; fi
case "$profile" in '' | *[!0-9]*) die "--profile-frames: '$profile' is not a whole number >= 0" ;; esac
case "$backend" in '' | cpu | cuda | auto) ;; *) die "--backend: '$backend' is not cpu, cuda or auto" ;; esac
if [ -n "$timeout_s" ]; then case "$timeout_s" in *[!0-9]* | 0*) die "--timeout: '$timeout_s' is not a whole number of seconds" ;; esac; fi
[ -n "$out" ] || out=scaling/$mode-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

# The scene for n nodes: {n} replaced by n, each {n*K} by n times K.
scene_for() {
  local s=${scene//\{n\}/$1} k
  while [[ $s =~ \{n\*([1-9][0-9]*)\} ]]; do
    k=${BASH_REMATCH[1]}
    s=${s//"{n*$k}"/$(($1 * k))}
  done
  printf '%s' "$s"
}
for n in $nodes_list; do
  s=$(scene_for "$n")
  [ -f "$s" ] && [ -r "$s" ] || die "scene for $n node(s): $s: no such readable file"
done

# The python that draws: PYTHON, else the first python3 that has matplotlib (a pyenv or venv
# python3 often lacks it where Debian's /usr/bin/python3 has it).
python=${PYTHON:-}
if [ -z "$python" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import matplotlib' >/dev/null 2>&1; then python=$p; break; fi
  done
  if [ -z "$python" ]; then
    python=python3
    say "warning: no python3 with matplotlib found: scaling.png will be missing (Debian: apt-get install python3-matplotlib)"
  fi
fi
command -v "$python" >/dev/null 2>&1 || die "$python not found: it is needed for scaling.csv"

# The binary: DRIFT_BIN, else the build beside this script's jobs/ folder (drift.sbatch's own
# default, build/ of the submit folder, holds only when you run this from the repository).
if [ -z "${DRIFT_BIN:-}" ] && [ -x "$here/../build/drift" ]; then
  DRIFT_BIN=$(cd "$here/../build" && pwd)/drift
  export DRIFT_BIN
fi

bench_args=(--profile-frames "$profile")
[ -n "$frames" ] && bench_args+=(--frames "$frames")
[ -n "$backend" ] && bench_args+=(--backend "$backend")

# deadline: the time after which we give up (0: never).
deadline=0
[ -n "$timeout_s" ] && deadline=$(($(date +%s) + timeout_s))

say "$mode scaling on node counts: $nodes_list($([ $local = 1 ] && echo "local mpirun" || echo Slurm)); results in $out"
failed=0
pids=() ns=()
# On INT or TERM: cancel the submitted jobs (their ids are in DIR/nN/jobid) or stop the local run.
cancel() {
  local ids
  ids=$(cat "$out"/n*/jobid 2>/dev/null | cut -d';' -f1 | tr '\n' ' ')
  if [ "$local" = 0 ] && [ -n "${ids// /}" ]; then
    say "cancelling jobs $ids"
    # shellcheck disable=SC2086  # one argument per job id
    scancel $ids 2>/dev/null
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
}
trap 'cancel; exit 130' INT TERM
if [ "$local" = 1 ]; then
  for n in $nodes_list; do
    mkdir -p "$out/n$n"
    s=$(scene_for "$n")
    say "$n rank(s): drift bench $s ${bench_args[*]}"
    left=0
    if [ "$deadline" -gt 0 ]; then
      left=$((deadline - $(date +%s)))
      [ "$left" -gt 0 ] || { say "--timeout reached before the run on $n rank(s)"; failed=1; break; }
    fi
    run=(bash "$here/drift.sbatch" "$s" "$out/n$n" "${bench_args[@]}")
    [ "$left" -gt 0 ] && run=(timeout -k 10 "$left" "${run[@]}")
    DRIFT_LOCAL=1 DRIFT_COMMAND=bench NRANKS=$n OVERSUBSCRIBE=1 "${run[@]}" >"$out/n$n/job.out" 2>&1 &
    pids=($!)
    wait "${pids[0]}"
    rc=$?
    pids=()
    if [ "$rc" -ne 0 ]; then
      say "the run on $n rank(s) failed (exit status $rc): $out/n$n/job.out"
      tail -n 5 "$out/n$n/job.out" >&2
      failed=1
    fi
  done
else
  command -v sbatch >/dev/null 2>&1 || die "sbatch not found: run where Slurm is, or use --local"
  # One sbatch --wait per node count, in the background: each returns the job's exit status.
  # --parsable prints the job id at submission, so that an interrupted study can scancel them.
  for n in $nodes_list; do
    mkdir -p "$out/n$n"
    rm -f "$out/n$n/bench.csv" "$out/n$n/jobid"
    s=$(cd "$(dirname "$(scene_for "$n")")" && pwd)/$(basename "$(scene_for "$n")")
    # shellcheck disable=SC2086  # sbatch_args is split on spaces on purpose
    sbatch --parsable --wait --nodes="$n" --job-name="drift-$mode-$n" --export=ALL,DRIFT_COMMAND=bench \
      --output="$out/n$n/job.out" $sbatch_args \
      "$here/drift.sbatch" "$s" "$out/n$n" "${bench_args[@]}" >"$out/n$n/jobid" 2>"$out/n$n/sbatch.err" &
    pids+=($!) ns+=("$n")
  done
  sleep 1
  say "submitted: $(for n in "${ns[@]}"; do printf '%s node(s) job %s; ' "$n" "$(cut -d';' -f1 "$out/n$n/jobid" 2>/dev/null)"; done)waiting"
  for i in "${!pids[@]}"; do
    n=${ns[$i]}
    while kill -0 "${pids[$i]}" 2>/dev/null; do
      if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
        say "--timeout reached"
        cancel
        failed=1
        break 2
      fi
      sleep 2
    done
    wait "${pids[$i]}"
    rc=$?
    if [ "$rc" -ne 0 ]; then
      say "the job on $n node(s) failed (exit status $rc): $out/n$n/job.out $(cat "$out/n$n/sbatch.err" 2>/dev/null)"
      tail -n 5 "$out/n$n/job.out" >&2 2>/dev/null
      failed=1
    fi
  done
fi
trap - INT TERM

# The table and the plot, from the runs that produced a CSV.
runs=()
for n in $nodes_list; do
  [ -f "$out/n$n/bench.csv" ] && runs+=("$n:$n:$out/n$n/bench.csv")
done
[ ${#runs[@]} -gt 0 ] || { say "no run produced a CSV"; exit 1; }
where=$([ "$local" = 1 ] && echo "mpirun on $(hostname -s)" || echo Slurm)
"$python" "$here/plot_scaling.py" --mode "$mode" --out "$out" --xlabel "$([ "$local" = 1 ] && echo ranks || echo nodes)" \
  --title "drift $mode scaling: $(basename "$scene")${backend:+, $backend backend} ($where)" "${runs[@]}"
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
column -s, -t <"$out/scaling.csv" 2>/dev/null | cut -c1-120 >&2 || cat "$out/scaling.csv" >&2
exit "$failed"
