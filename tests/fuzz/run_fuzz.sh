#!/usr/bin/env bash
# run_fuzz.sh - a short coverage-guided fuzz run of the scene loader (the CTest test scene_fuzz).
#
#   run_fuzz.sh WORK_DIR [RUNS] [SECONDS]
#
# Builds fuzz_scene (fuzz_scene.c: libFuzzer, ASan, LeakSanitizer, UBSan) with clang in
# WORK_DIR/build, then fuzzes from the seeds with the scene-key dictionary (scene.dict), one
# process, a fixed seed, at most RUNS inputs (default 1000000) and SECONDS (default 60). Seeds:
# corpus/ (a scene that uses every section and variant, and every input that once broke the
# loader, named regress_*), the example scenes (jobs/scenes, jobs/bench), tests/scene/valid.json
# and every bad scene of tests/scene/bad, taken from the tree so that they follow the format.
# Exits 0 when nothing broke, 1 on any crash, leak, UBSan finding, broken contract, slow input
# or build failure (the input is kept under WORK_DIR/artifacts/ and its name printed: rerun it
# with `WORK_DIR/build/fuzz_scene FILE`), 77 (skipped) where clang cannot build libFuzzer
# targets (Debian: apt-get install clang libclang-rt-dev).
# Longer runs by hand: WORK_DIR/build/fuzz_scene -dict=tests/fuzz/scene.dict -max_total_time=600 DIR
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 WORK_DIR [RUNS] [SECONDS]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$1
runs=${2:-1000000}
seconds=${3:-60}
cc=${DRIFT_FUZZ_CC:-clang}
mkdir -p "$work" || exit 1
work=$(cd "$work" && pwd)

# 1. A compiler that can build libFuzzer targets, or skip.
if ! command -v "$cc" >/dev/null; then
  echo "skipped: $cc not found (Debian: apt-get install clang libclang-rt-dev)"
  exit 77
fi
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' \
  >"$work/probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" >"$work/probe.log" 2>&1; then
  cat "$work/probe.log"
  echo "skipped: $cc cannot build libFuzzer targets with ASan and UBSan (Debian: apt-get install clang libclang-rt-dev)"
  exit 77
fi

# 2. Build (incremental after the first time).
if ! { cmake -S "$here" -B "$work/build" -DCMAKE_C_COMPILER="$cc" >"$work/configure.log" 2>&1 &&
       cmake --build "$work/build" >"$work/build.log" 2>&1; }; then
  tail -n 40 "$work/configure.log" "$work/build.log" 2>/dev/null
  echo "FAIL: building fuzz_scene (logs in $work)"
  exit 1
fi

# 3. Fuzz from a fresh copy of the seeds (new inputs land in the copy, not in the source tree).
rm -rf "$work/corpus" "$work/artifacts"
mkdir -p "$work/corpus" "$work/artifacts"
root=$(cd "$here/../.." && pwd)
cp "$here"/corpus/* "$root"/jobs/scenes/*.json "$root"/jobs/bench/*.json "$root"/tests/scene/valid.json "$work/corpus/"
for f in "$root"/tests/scene/bad/*.json; do cp "$f" "$work/corpus/bad_$(basename "$f")"; done
echo "fuzz_scene: $(ls "$work/corpus" | wc -l) seeds, at most $runs inputs or $seconds s, seed 1"
"$work/build/fuzz_scene" -seed=1 -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$here/scene.dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" \
  >"$work/fuzz.log" 2>&1
rc=$?
grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done |stat::)' "$work/fuzz.log"
if [ $rc -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  tail -n 60 "$work/fuzz.log"
  echo "FAIL: fuzz_scene stopped with status $rc; inputs kept:"
  ls -l "$work/artifacts"
  exit 1
fi
echo "fuzz_scene: no crash, leak or broken contract"
