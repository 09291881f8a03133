#!/bin/bash
# Weak scaling, A against B, in one call of the device tool (issue #8): builds A (a commit,
# unpacked in BASE) and B (this tree) side by side, runs the named tests on B, then runs weak_1
# once and weak_N on A and B in turn, ROUNDS times each (A B A B: both see the same machine),
# and prints one line per run: ms per frame and rebuild-mappings per frame. With TRACE=1, B's
# weak_N and weak_1 run once more under DRIFT_TRACE, summed frame by frame
# (tools/trace_summary.py --frames) into trace_weak_N.frames.txt and trace_weak_1.frames.txt.
#
#   here:        tools/archive-base.sh main .abbase
#   on the GPUs: tools/device_weak.sh 2          (carry .device and .abbase)
#
# N: ranks, one GPU each (2 or 4; jobs/bench/weak_N.json).
# env: BASE    folder holding A's tree (default .abbase)
#      TESTS   ctest -R regex run on B first (default the rank tests; empty: none)
#      ROUNDS  runs of weak_N on each build (default 2)
#      EXTRA   more weak_M scenes to run once on A and B, e.g. "2" on a 4-GPU machine
#      B_ALT   environment settings (VAR=VALUE, space-separated), one more run of B's weak_N for
#              each, e.g. "DRIFT_STEP_AHEAD=off DRIFT_MIGRATE_MARGIN=2"
#      TRACE   1: the traced runs of B
#      MARKS   N: B's weak_N once more under DRIFT_GPU_MARKS=N (each rank's stream timeline between
#              backend entries, summed by pair, and every N steps above 1) into marks_weak_N.txt,
#              the run's largest pairs printed
#      MPI_ARGS more mpirun options for every run, e.g. "--mca btl_vader_single_copy_mechanism cma"
#      OUT     the output folder (default: the device tool's $OUT, else ./ab-out); logs are
#              packed into logs.tgz at the end (device_env.sh's pack_out)
# Exit status: 0, or 1 when a build fails (then nothing runs).
set -uo pipefail
n=${1?usage: device_weak.sh NRANKS}
rounds=${ROUNDS:-2}
tests=${TESTS-emigrate_cuda|ranks_2|determinism_ranks}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
export PACK=0
device_ab_start device_weak "$tests" 2

# run NAME BUILD RANKS SCENE: one bench, one line (ms/frame and rebuild-mappings/frame from its CSV)
run() {
  local name=$1 build=$2 ranks=$3 scene=$4
  # shellcheck disable=SC2086
  mpirun -n "$ranks" --oversubscribe ${MPI_ARGS:-} "$root/$build/drift" bench "$scene" --backend cuda --gpus 1 --profile-frames 0 \
    --csv "$out/$name.csv" >"$out/$name.log" 2>&1
  python3 - "$name" "$out/$name.csv" <<'EOF' || echo "$name: failed: $(tail -2 "$out/$name.log")"
import csv, sys
for r in csv.DictReader(open(sys.argv[2])):
    print(f"{sys.argv[1]:<18} {float(r['ms_per_frame']):9.3f} ms/frame {float(r['rebuilds_per_frame']):6.2f} rebuilds/frame")
EOF
}
run weak_1_b build-b 1 jobs/bench/weak_1.json
for r in $(seq 1 "$rounds"); do
  run "weak_${n}_a_$r" build-a "$n" "jobs/bench/weak_$n.json"
  run "weak_${n}_b_$r" build-b "$n" "jobs/bench/weak_$n.json"
done
each_alt "weak_${n}_b_alt" run build-b "$n" "jobs/bench/weak_$n.json"
for m in ${EXTRA:-}; do
  run "weak_${m}_a" build-a "$m" "jobs/bench/weak_$m.json"
  run "weak_${m}_b" build-b "$m" "jobs/bench/weak_$m.json"
done
echo "a: $(base_name "${BASE:-.abbase}"); b: this tree"
grep -h "load balance" "$out/weak_${n}_b_1.log" | cut -c1-200
if [ "${TRACE:-0}" = 1 ]; then
  # shellcheck disable=SC2086
  DRIFT_TRACE=1 mpirun -n "$n" --oversubscribe ${MPI_ARGS:-} "$root/build-b/drift" bench "jobs/bench/weak_$n.json" --backend cuda --gpus 1 \
    --profile-frames 0 >"$out/trace_weak_$n.out" 2>"$out/trace_weak_$n.log"
  DRIFT_TRACE=1 "$root/build-b/drift" bench jobs/bench/weak_1.json --backend cuda --gpus 1 --profile-frames 0 \
    >"$out/trace_weak_1.out" 2>"$out/trace_weak_1.log"
  for t in "$n" 1; do python3 "$root/tools/trace_summary.py" --frames "$out/trace_weak_$t.log" >"$out/trace_weak_$t.frames.txt" 2>&1; done
fi
if [ "${MARKS:-0}" != 0 ]; then
  # shellcheck disable=SC2086
  DRIFT_GPU_MARKS=$MARKS mpirun -n "$n" --oversubscribe ${MPI_ARGS:-} "$root/build-b/drift" bench "jobs/bench/weak_$n.json" --backend cuda \
    --gpus 1 --profile-frames 0 >"$out/marks_weak_$n.out" 2>"$out/marks_weak_$n.log"
  grep "gpu marks" "$out/marks_weak_$n.log" >"$out/marks_weak_$n.txt"
  grep "rank 0, device 0: the run" -A24 "$out/marks_weak_$n.txt" | cut -c30-160
fi
PACK=1 pack_out
