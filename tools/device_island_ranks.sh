#!/bin/bash
# Ranks that drive islands, A against B, in one call of the device tool (issue #8): builds A (a
# commit, unpacked in BASE) and B (this tree) side by side, runs B's island and rank tests, then
# weak_2 with each rank an island of 2 members on a GPU of its own (rank 0: DRIFT_DEVICES=0,0;
# rank 1: 1,1; on a 4-GPU machine, ISLANDS="0,1 2,3" gives islands of distinct GPUs), A B A B,
# one line per run: ms per frame and rebuild-mappings per frame.
#
#   here:        tools/archive-base.sh main .abbase
#   on the GPUs: tools/device_island_ranks.sh          (carry .device and .abbase)
#
# env: BASE     folder holding A's tree (default .abbase)
#      TESTS    ctest -R regex run on B first (default "island|ranks|emigrate"; empty: none)
#      ISLANDS  the two ranks' DRIFT_DEVICES (default "0,0 1,1")
#      FRAMES   frames of each run (default 30)
#      SCENE    the scene (default jobs/bench/weak_2.json; jobs/bench/weak_4.json on islands of 2
#               distinct GPUs is weak scaling's 3.1M particles per GPU)
#      B_ALT    environment settings (VAR=VALUE, space-separated), one more run of B for each,
#               e.g. "DRIFT_STEP_AHEAD=off DRIFT_CUDA_AWARE_MPI=off"
#      OUT      the output folder (default: the device tool's $OUT, else ./ab-out)
# Exit status: 0, or 1 when a build fails (then nothing runs).
set -uo pipefail
tests=${TESTS-island|ranks|emigrate}
read -r d0 d1 <<<"${ISLANDS:-0,0 1,1}"
frames=${FRAMES:-30}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
export PACK=0
device_ab_start device_island_ranks "$tests" 4
# run NAME BUILD: SCENE, one rank per island, one line from its CSV
run() {
  local name=$1 build=$2
  local args=(bench "${SCENE:-jobs/bench/weak_2.json}" --backend cuda --gpus 2 --frames "$frames" --profile-frames 0 --csv "$out/$name.csv")
  mpirun --bind-to none -n 1 -x "DRIFT_DEVICES=$d0" "$root/$build/drift" "${args[@]}" : \
    -n 1 -x "DRIFT_DEVICES=$d1" "$root/$build/drift" "${args[@]}" >"$out/$name.log" 2>&1
  python3 - "$name" "$out/$name.csv" <<'PY' || echo "$name: failed: $(tail -2 "$out/$name.log")"
import csv, sys
for r in csv.DictReader(open(sys.argv[2])):
    print(f"{sys.argv[1]:<10} {float(r['ms_per_frame']):9.3f} ms/frame {float(r['rebuilds_per_frame']):6.2f} rebuilds/frame")
PY
}
for r in 1 2; do
  run "a_$r" build-a
  run "b_$r" build-b
done
each_alt b_alt run build-b
echo "a: $(base_name "${BASE:-.abbase}"); b: this tree; islands: rank 0 $d0, rank 1 $d1"
grep -h "ranks: 2" "$out/b_1.log" | tail -1 | cut -c1-150
PACK=1 pack_out
