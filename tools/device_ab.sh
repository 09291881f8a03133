#!/bin/bash
# A/B of a build-time variant of the CUDA backend on a GPU machine, in one call of the device
# tool (a build, the variant's tests and alternating benchmarks, so that device time goes on
# measuring and not on starting machines).
#
# Builds the tree twice, side by side: A as it is, B with extra CUDA flags (a -D that
# gpu/backend_cuda.cu reads: DRIFT_P2G_GATHER, DRIFT_WARPS, P2G_MIN_BLOCKS, ...). Runs the gpu
# tests matching TESTS on B, which must pass before any of B's figures mean anything. Then runs
# `drift bench` with the arguments given on A and on B in turn, ROUNDS times each (A B A B ...:
# both builds see the same machine, clocks and neighbours), and prints one line per run and scene.
#
#   here:              tools/pack-device-deps.sh .device          (once; carried as .device)
#   on the GPU:        tools/device_ab.sh "-DDRIFT_P2G_GATHER=1" jobs/bench/sand_blocks_l46.json \
#                          jobs/bench/sand_blocks_l12.json --frames 30 --profile-frames 0
#
# env: DEPS   what pack-device-deps.sh packed (default .device)
#      TESTS  ctest -R regex run on B (default test_cuda_vs_cpu; empty: no tests)
#      ROUNDS runs of each build (default 2)
#      OUT    folder for the build and test logs and the CSVs (default: the device tool's $OUT,
#             else ./ab-out)
# Exit status: 0, or 1 when a build or B's tests fail (then nothing is benchmarked).
set -uo pipefail
flags=${1:?usage: device_ab.sh "B_CUDA_FLAGS" [drift bench arguments ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$(cd "$root" && realpath -m "${DEPS:-.device}")
tests=${TESTS-test_cuda_vs_cpu}
rounds=${ROUNDS:-2}
out=${OUT:-$root/ab-out}
mkdir -p "$out"
cd "$root" || exit 1

for d in phdf5 cjson; do
  if [ ! -d "$deps/$d" ]; then
    echo "device_ab: $deps/$d missing: run tools/pack-device-deps.sh on a development machine and carry it" >&2
    exit 1
  fi
done
export LD_LIBRARY_PATH="$deps/phdf5/lib:$deps/cjson/lib:$deps/png/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build() { # build DIR CUDA_FLAGS
  cmake -S "$root" -B "$1" -DCMAKE_BUILD_TYPE=Release -DHDF5_ROOT="$deps/phdf5" -DCJSON_ROOT="$deps/cjson" \
    -DPNG_ROOT="$deps/png" -DZLIB_ROOT="$deps/png" "-DCMAKE_CUDA_FLAGS=$2" >"$out/$(basename "$1").cmake.log" 2>&1 &&
    cmake --build "$1" -j "$(($(nproc) / 2 > 1 ? $(nproc) / 2 : 1))" >"$out/$(basename "$1").build.log" 2>&1
}
t0=$SECONDS
build "$root/build-a" "" &
pa=$!
build "$root/build-b" "$flags" &
pb=$!
ok=1
wait $pa || { echo "device_ab: build A failed (log: $out/build-a.*.log)" >&2; tail -20 "$out/build-a.build.log" >&2; ok=0; }
wait $pb || { echo "device_ab: build B ($flags) failed (log: $out/build-b.*.log)" >&2; tail -20 "$out/build-b.build.log" >&2; ok=0; }
[ $ok = 1 ] || exit 1
echo "device_ab: both builds in $((SECONDS - t0)) s"

if [ -n "$tests" ]; then
  t0=$SECONDS
  if ! ctest --test-dir "$root/build-b" -R "$tests" --output-on-failure -j 2 >"$out/tests-b.log" 2>&1; then
    echo "device_ab: B's tests ($tests) failed:" >&2
    grep -E "tests passed|Failed|\*\*\*" "$out/tests-b.log" >&2
    exit 1
  fi
  echo "device_ab: B passes ctest -R '$tests' ($(grep -Eo '[0-9]+ tests? passed|[0-9]+% tests passed[^\n]*' "$out/tests-b.log" | tail -1), $((SECONDS - t0)) s)"
  grep -Ei "worst|max \|" "$out/tests-b.log" | head -40 >"$out/tests-b.figures.txt"
fi

for r in $(seq 1 "$rounds"); do
  for v in a b; do
    "$root/build-$v/drift" bench "$@" --csv "$out/bench-$v-$r.csv" >"$out/bench-$v-$r.log" 2>&1 ||
      { echo "device_ab: bench on build $v (round $r) failed: $(tail -1 "$out/bench-$v-$r.log")" >&2; }
  done
done

# One line per run and scene, from the CSVs (columns by name).
python3 - "$out" "$rounds" "$flags" <<'EOF'
import csv, os, sys
out, rounds, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"{'build':<6}{'round':>6}  {'case':<24}{'ms/frame':>10}{'particle-steps/s':>18}{'steps/s':>10}{'fps':>8}")
for r in range(1, rounds + 1):
    for v in "ab":
        path = os.path.join(out, f"bench-{v}-{r}.csv")
        if not os.path.exists(path):
            print(f"{v:<6}{r:>6}  (no CSV)")
            continue
        for row in csv.DictReader(open(path)):
            print(f"{v:<6}{r:>6}  {row['case']:<24}{float(row['ms_per_frame']):>10.3f}"
                  f"{float(row['particle_steps_per_s']):>18.4g}{float(row['steps_per_s']):>10.0f}{float(row['fps']):>8.1f}")
print(f"a: the tree as it is; b: CMAKE_CUDA_FLAGS={flags}")
EOF
