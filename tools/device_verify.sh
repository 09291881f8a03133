#!/bin/bash
# One call of the device tool that verifies a tree on a GPU machine: A (BASE's tree) and B (this
# tree) built side by side, B's GPU tests (ctest -L gpu), the memory plan against B's counted and
# measured device memory (MEMPLAN_SCENE), a stepping A/B on RANKS ranks (AB_SCENE), and B's frames
# written (WRITE_SCENE) into the disk; the summary last, the logs under $OUT/verify.
#
#   here:        tools/pack-device-deps.sh .device; tools/archive-base.sh COMMIT .abbase
#   on the GPU:  BASE=.abbase tools/device_verify.sh
#
# env: BASE (default .abbase), GPU_TIMEOUT (ctest's per-test limit, default 300), GPU_JOBS (4),
#      AB_SCENE (jobs/bench/sand_blocks_l46.json), RANKS (2), MEMPLAN_SCENE
#      (jobs/bench/sand_blocks_l46.json), WRITE_SCENE (jobs/bench/sand_blocks_l46.json)
set -uo pipefail
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
export PACK=0
work=$out/verify
mkdir -p "$work"
t0=$SECONDS
device_build_pair "$root/${BASE:-.abbase}" "" || exit 1
echo "builds: $((SECONDS - t0)) s; A: $(base_name "${BASE:-.abbase}")"
t0=$SECONDS
ctest --test-dir build-b -L gpu -j "${GPU_JOBS:-4}" --timeout "${GPU_TIMEOUT:-300}" >"$work/gpu.log" 2>&1
echo "gpu tests: exit $? in $((SECONDS - t0)) s: $(grep 'tests passed' "$work/gpu.log")"
grep -E '\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception|Not Run' "$work/gpu.log" | head -20
grep -E 'memplan_cuda|test_memplan_cuda' "$work/gpu.log" | head -3
ms=${MEMPLAN_SCENE:-jobs/bench/sand_blocks_l46.json}
build-b/drift check "$ms" >"$work/check.log" 2>&1
build-b/drift run "$ms" --backend cuda --frames 2 --out /tmp/verify-run --force >"$work/run.log" 2>&1
echo "memory plan ($ms): $(grep -E '^memory plan, cuda' "$work/check.log")"
echo "run's device line: $(grep -E '^cuda backend: device' "$work/run.log")"
echo "memory counted: $(grep -E '^memory' "$work/run.log" | tr '\n' ' ')"
rm -rf /tmp/verify-run
ab=${AB_SCENE:-jobs/bench/sand_blocks_l46.json}
for round in 1 2; do
  for b in a b; do
    mpirun --oversubscribe -n "${RANKS:-2}" "build-$b/drift" bench "$ab" --backend cuda --frames 20 --profile-frames 0 \
      >"$work/ab-$b-$round.out" 2>"$work/ab-$b-$round.log"
    echo "stepping $b round $round, ${RANKS:-2} ranks: $(awk '$1 ~ /sand|weak|fountain|crawl/ {print $7 " ms/frame"}' "$work/ab-$b-$round.out")"
  done
done
ws=${WRITE_SCENE:-jobs/bench/sand_blocks_l46.json}
rm -rf /tmp/verify-write && mkdir -p /tmp/verify-write
build-b/drift bench "$ws" --backend cuda --frames 20 --profile-frames 0 --write /tmp/verify-write >"$work/write.out" 2>"$work/write.log"
echo "write (B, disk): $(sed -n '/^frames written/,$p' "$work/write.out" | tail -1)"
rm -rf /tmp/verify-write
