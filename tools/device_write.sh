#!/bin/bash
# The write path on a GPU machine, in one call of the device tool: builds build-b (and build-a
# from BASE's tree, unless there), runs the GPU tests of the write path (TESTS), then
# `drift bench --write` on the scenes given, into the machine's disk and into /dev/shm (memory),
# on one rank and on RANKS ranks sharing the node, for each build (A first, then B, then B with
# each B_ALT setting), printing each run's row as it ends (a call cut off by its limit still shows
# the runs it finished) and the tables last; the logs packed into $OUT/logs.tgz at the end (PACK=0:
# left under $OUT/write).
#
#   here:        tools/pack-device-deps.sh .device      (once; carried as .device)
#                tools/archive-base.sh COMMIT .abbase   (A's tree, where BASE=.abbase; carried)
#   on the GPU:  tools/device_write.sh jobs/bench/sand_blocks_l46.json jobs/bench/sand_blocks_l46x16.json
#
# env: DEPS    what pack-device-deps.sh packed (default .device)
#      BASE    A's tree (tools/archive-base.sh), measured before B; unset: B alone
#      B_ALT   space-separated VAR=VALUE settings, each a further run of B with it exported (several
#              joined by commas: VAR=VALUE,VAR2=VALUE2, one run with both)
#      TESTS   ctest -R regex run on B first (default the write path's; "-L LABEL": by label;
#              empty: none)
#      FRAMES  frames of each case (default 20)
#      RANKS   ranks of the shared-file run (default 2; 0: none)
#      BINDS   space-separated mpirun --bind-to values, each a shared-file run of its own (default
#              none, as jobs/drift.sbatch launches: Open MPI binds 1 or 2 ranks to a core each
#              otherwise, and the writer thread shares that core with the steps); e.g. "core none"
#      ONE     0: no one-rank runs (default 1)
#      PREFIX  put before each run's label (default none: a second call in the same $OUT names its own)
#      DISK    a folder on the disk (default /tmp/drift-write)
#      ROUNDS  rounds of every run (default 1), each round's runs in the same order (A's, B's, B_ALT's;
#              one rank, then RANKS ranks), labelled rK-; with more than one, a last table gives each
#              case's medians over the rounds and the ranks' writers together against one rank's
#              (tools/write_rounds.py): one round's ratio moves by a fifth with the machine's noise
set -uo pipefail
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
pack=${PACK:-1}
export PACK=0
if [ -n "${BASE:-}" ]; then
  [ -x build-a/drift ] && [ -x build-b/drift ] || device_build_pair "$root/$BASE" "" || exit 1
  echo "A: $(base_name "$BASE")"
else
  device_build_b
fi
work=$out/write
mkdir -p "$work"
tests=${TESTS-test_backend_ops|writer_|test_totals|test_preview|signal_cuda|pvpython}
frames=${FRAMES:-20}
ranks=${RANKS:-2}
disk=${DISK:-/tmp/drift-write}
if [ -n "$tests" ]; then
  sel=(-R "$tests")
  [ "${tests#-L }" != "$tests" ] && sel=(-L "${tests#-L }") # TESTS="-L gpu": by label
  ctest --test-dir build-b "${sel[@]}" --output-on-failure -j 4 >"$work/tests.log" 2>&1
  echo "tests (${sel[*]}): exit $?, $(grep 'tests passed' "$work/tests.log")"
  grep -E "Failed|\*\*\*" "$work/tests.log" | head -20
fi
# rows_of OUT: the rows of a bench --write output's table of frames written, on one line
rows_of() { sed -n '/^frames written/,$p' "$1" | awk 'NR > 2' | tr '\n' ' '; }
# bench_into LABEL BUILD DIR [RUNNER...]: the scenes, written into DIR (emptied before and after)
bench_into() {
  local label=${PREFIX:-}$round$1 build=$2 dir=$3
  shift 3
  rm -rf "$dir" && mkdir -p "$dir"
  "$@" "$build/drift" bench "${scenes[@]}" --backend cuda --frames "$frames" --profile-frames 0 --write "$dir" \
    >"$work/$label.out" 2>"$work/$label.log"
  local rc=$?
  echo "$label: exit $rc, $(rows_of "$work/$label.out" | tr -s ' ')"
  rm -rf "$dir"
}
# variant LABEL BUILD: every place and rank count for one build
variant() {
  if [ "${ONE:-1}" != 0 ]; then
    bench_into "$1-disk" "$2" "$disk"
    bench_into "$1-shm" "$2" /dev/shm/drift-write
  fi
  if [ "$ranks" -gt 1 ]; then
    local b
    for b in ${BINDS:-none}; do
      bench_into "$1-disk-$ranks-$b" "$2" "$disk" mpirun --oversubscribe --bind-to "$b" -n "$ranks"
      bench_into "$1-shm-$ranks-$b" "$2" /dev/shm/drift-write mpirun --oversubscribe --bind-to "$b" -n "$ranks"
    done
  fi
}
scenes=("$@")
rounds=${ROUNDS:-1}
round=
for ((k = 1; k <= rounds; ++k)); do
  [ "$rounds" -gt 1 ] && round=r$k-
  [ -n "${BASE:-}" ] && variant a build-a
  variant b build-b
  i=0
  for alt in ${B_ALT:-}; do
    i=$((i + 1))
    IFS=, read -ra kv <<<"$alt" # VAR=VALUE,VAR2=VALUE2: several settings in one run
    # shellcheck disable=SC2163
    (export "${kv[@]}" && variant "b$i" build-b)
    [ "$k" = 1 ] && echo "b$i: $alt"
  done
done
for f in "$work"/*.out; do
  printf '%-22s ' "$(basename "$f" .out)"
  rows_of "$f"
  echo
done
[ "$rounds" -gt 1 ] && python3 "$root/tools/write_rounds.py" "$work"
PACK=$pack pack_out
exit 0
