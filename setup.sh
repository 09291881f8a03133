#!/usr/bin/env bash
# setup.sh - the two commands of the README.
#   ./setup.sh        installs what is missing (Debian packages), builds drift, runs the default scene
#   ./setup.sh test   installs what is missing (with the test tools), builds drift, runs the test suite
#                     (and again under the sanitizers), and ends with one summary of every stage
# Safe to run again: it installs and rebuilds only what is missing or changed.
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-run}
case "$mode" in
  run | test) ;;
  *) echo "usage: ./setup.sh [test]" >&2; exit 2 ;;
esac

say() { printf 'setup: %s\n' "$*" >&2; }

# 1. Debian packages. Build: compilers, CMake, Open MPI, parallel HDF5, cJSON, libpng. Tests also use
#    ParaView's pvpython under Xvfb and h5py to open the frames where users open them, and a private
#    one-node Slurm (with munge) plus matplotlib for the batch jobs and the scaling driver, and
#    clang with its runtimes (libFuzzer, sanitizers) and LLVM's OpenMP (libomp, whose Archer tool
#    serves ThreadSanitizer) for the scene loader's fuzz test and the threads' race check.
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libcjson-dev libpng-dev hdf5-tools)
[ "$mode" = test ] && pkgs+=(paraview python3-paraview xvfb xauth slurm-wlm munge python3-matplotlib python3-h5py clang libclang-rt-dev libomp-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    say "these Debian packages are missing and you are not root (no sudo): ${missing[*]}"; exit 1
  fi
  say "installing missing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present: ${pkgs[*]}"
fi

# 2. The CUDA toolkit (nvcc, CUB) compiles gpu/ everywhere, GPU or not.
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi
if ! command -v nvcc >/dev/null; then
  say "nvcc not found: install the CUDA toolkit (12 or newer) and put its bin/ on PATH"; exit 1
fi

# 3. build_tree DIR CMAKE_ARGS...: configures DIR where it has no cache yet (the log:
#    DIR/setup-configure.log), then builds it with one job a core (DIR/setup-build.log); on failure
#    prints the log's errors and names the log in stage_log (tests/stages.sh).
jobs=$(nproc)
build_targets=() # what build_tree builds: every target where empty
build_tree() {
  local dir=$1
  shift
  mkdir -p "$dir"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    say "configuring in ./$dir ($*)"
    cmake -S . -B "$dir" "$@" >"$dir/setup-configure.log" 2>&1 ||
      { tail -n 30 "$dir/setup-configure.log" >&2; say "configure failed; full log: $dir/setup-configure.log"
        stage_log=$dir/setup-configure.log; return 1; }
  fi
  say "building ./$dir with $jobs jobs${build_targets:+ (${build_targets[*]})}"
  cmake --build "$dir" -j "$jobs" ${build_targets:+--target "${build_targets[@]}"} >"$dir/setup-build.log" 2>&1 ||
    { grep -E -A3 "error" "$dir/setup-build.log" | head -n 40 >&2; say "build failed; full log: $dir/setup-build.log"
      stage_log=$dir/setup-build.log; return 1; }
}

if [ "$mode" = run ]; then
  build_tree build -DCMAKE_BUILD_TYPE=Release || exit 1
  say "running the default scene (jobs/scenes/default.json) into ./frames"
  ./build/drift check jobs/scenes/default.json
  exec ./build/drift run jobs/scenes/default.json --out frames
fi

# 4. The test suite, in six stages (tests/stages.sh): the Release build in ./build (CUDA
#    architecture 90), its tests, the AddressSanitizer build in ./build-asan and its tests, the
#    ThreadSanitizer build in ./build-tsan and its tests. A stage that fails does not stop the next
#    ones (the sanitizers' stages need the Release build to have passed); the one summary of every
#    stage, with the failed tests by name, comes last, and the exit status is 1 where any stage
#    failed. ctest -j with one job a core: each test's PROCESSORS
#    (its OpenMP threads times its MPI ranks, tests/CMakeLists.txt) keeps the tests running at
#    once within the cores. --timeout: the limit of the tests that set none (all short; the long
#    ones have their own, tests/CMakeLists.txt).
. tests/stages.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest_args=(--output-on-failure --no-tests=error -j "$jobs" --timeout 900)
stage_run build build_tree build -DCMAKE_BUILD_TYPE=Release
if stage_passed build; then
  say "running the test suite (ctest; GPU tests are skipped where no GPU is present)"
  stage_ctest tests build/setup-ctest.log --test-dir build "${ctest_args[@]}"
else
  stage_skip tests "the build failed"
fi

# 5. The cpu and mpi tests again, built with AddressSanitizer (LeakSanitizer included) and
#    UBSan in ./build-asan (DRIFT_SANITIZE=ON: the host C code is instrumented, the CUDA code
#    is not; src/sanitize.c holds the runtime's options and the Open MPI leak suppressions).
#    Any finding fails its test. About 17 minutes on 2 cores, build included (3 of them). Left out:
#    - gpu, paraview, slurm (labels): the CUDA code is not instrumented and there is no GPU
#      here; ParaView and Slurm run drift's frames and scripts, not more of drift's C code.
#    - test_threads, test_bounce, test_sand_pile, test_colliders, test_friction, test_snow,
#      test_momentum: the longest simulations (3 to 105 s in Release, 1 to 4 minutes each
#      under the sanitizers); the shorter ones left in run the same CPU backend steps
#      (test_freefall, test_frames, test_asflip, cli_run_default).
#    - test_ranks_2, test_ranks_4 (about 2 minutes each here): the exchange
#      between ranks, migration and the balance still run in cli_two_ranks,
#      cli_unstable*_two_ranks, test_checkpoint_mpi and test_preview_2.
#    - resume_one_rank, resume_ranks, resume_no_room (1.5 to 3 minutes each): dozens of drift
#      runs; writing and reading checkpoints on 1 to 3 ranks runs in test_checkpoint_mpi.
#    - resume_deterministic, test_determinism, bench_cli (50 to 100 s each under ASan): resuming
#      runs in resume_sources, the fixed-point sums in test_determinism_ranks_2 and _3, and the
#      bench's simulations are those of cli_run_default.
#    - scene_errors: 346 starts of drift, each an MPI start-up (about 2 s under ASan); the
#      loader's error paths run under ASan and UBSan in scene_fuzz (label fuzz, above), which
#      starts from every bad scene, and in test_scene.
#    - validation_csm3 (about a minute in Release): 15,000 steps of an elastic beam; the fixed
#      corotated stress and the frame reader run under the sanitizers in test_fields and
#      test_frames, colliders in test_mesh_colliders.
#    - memplan_refusal, memplan_meshes: they run drift under a 2 GiB address space (prlimit
#      --as), where AddressSanitizer cannot reserve its shadow memory; the plan and its refusal
#      are plain arithmetic and file reads, which memplan_check_huge, bench_check_crawling_snow
#      and test_memplan_counts run under ASan.
#    - memplan_peak_snow (292,864 particles, about 2 minutes under ASan): the counted allocator
#      runs under the sanitizers in memplan_peak_sand, _water, _elastic and _two_ranks.
asan_skip='^(test_threads|test_bounce|test_sand_pile|test_colliders|test_friction|test_snow|test_momentum'
asan_skip+='|test_ranks_2|test_ranks_4|resume_one_rank|resume_ranks|resume_no_room|scene_errors'
asan_skip+='|resume_deterministic|test_determinism|bench_cli|validation_csm3'
asan_skip+='|memplan_refusal|memplan_meshes|memplan_peak_snow)$'
if stage_passed build; then
  stage_run "asan build" build_tree build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRIFT_SANITIZE=ON
else
  stage_skip "asan build" "the build failed"
fi
if stage_passed "asan build"; then
  say "running the cpu and mpi tests under AddressSanitizer and UBSan (the longest left out: setup.sh says which and why)"
  stage_ctest "asan tests" build-asan/setup-ctest.log --test-dir build-asan "${ctest_args[@]}" -L 'cpu|mpi' -E "$asan_skip"
else
  stage_skip "asan tests" "the ASan build did not pass"
fi

# 6. The threads beside the steps under ThreadSanitizer, built with clang in ./build-tsan
#    (DRIFT_TSAN=ON: LLVM's libomp with its Archer tool, so that OpenMP's barriers and tasks are
#    seen; the host C code instrumented, not CUDA's, nor Open MPI and HDF5, whose races are not
#    drift's). Any data race or lock-order inversion fails its test. Only the executables of these
#    tests are built (about 1.5 minutes), and only the tests of the writer's thread, its fetches,
#    totals, allocation ahead and team, with signals and failures meeting frames in flight, and
#    the checkpoints' chunks (about 3 minutes on 2 cores); build_targets are the executables that
#    tsan_tests run:
tsan_tests='^(test_writer|writer_same|writer_chunks|writer_full|writer_signal|writer_rows|cli_signal_hint'
tsan_tests+='|test_preview_2|test_ckpt_stream_ranks_2|test_ckpt_chunks|trace_frames)$'
if stage_passed build; then
  build_targets=(drift test_writer compare_frames same_h5 test_preview test_ckpt_stream test_ckpt_chunks)
  CC=clang stage_run "tsan build" build_tree build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRIFT_TSAN=ON
  build_targets=()
else
  stage_skip "tsan build" "the build failed"
fi
if stage_passed "tsan build"; then
  say "running the tests of the writer's threads under ThreadSanitizer"
  stage_ctest "tsan tests" build-tsan/setup-ctest.log --test-dir build-tsan "${ctest_args[@]}" -R "$tsan_tests"
else
  stage_skip "tsan tests" "the TSan build did not pass"
fi

rc=0
stages_summary || rc=$?
exit $rc
