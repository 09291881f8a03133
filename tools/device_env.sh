# shellcheck shell=bash
# device_env.sh - sourced by the tools/device_*.sh scripts on a GPU machine: where the packed
# dependencies are (DEPS, default .device: tools/pack-device-deps.sh packed it on a development
# machine and the device tool carried it), the environment that drift and mpirun need there, the
# output folder (OUT: the device tool's, else ./ab-out), and device_build DIR [CUDA_FLAGS].
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=$(cd "$root" && realpath -m "${DEPS:-.device}")
out=${OUT:-$root/ab-out}
mkdir -p "$out"
for d in phdf5 cjson; do
  if [ ! -d "$deps/$d" ]; then
    echo "$(basename "$0"): $deps/$d missing: run tools/pack-device-deps.sh on a development machine and carry it" >&2
    exit 1
  fi
done
export LD_LIBRARY_PATH="$deps/phdf5/lib:$deps/cjson/lib:$deps/png/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# device_build DIR [CUDA_FLAGS [TARGET]]: a Release build of the tree (of SRC where set, else this one) in DIR (logs DIR's name
# .cmake.log and .build.log under $out), with half the machine's cores so that two builds can run side by side; with TARGET,
# that target alone with every core (a script that needs drift only: a minute less of the device's time).
device_build() {
  local name
  name=$(basename "$1")
  # a build folder configured from another source tree (A from .abbase in one call, from this tree
  # in the next) is started afresh: CMake refuses to reuse it
  if [ -f "$1/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$(cd "${SRC:-$root}" && pwd)" "$1/CMakeCache.txt"; then
    rm -rf "$1"
  fi
  cmake -S "${SRC:-$root}" -B "$1" -DCMAKE_BUILD_TYPE=Release -DHDF5_ROOT="$deps/phdf5" -DCJSON_ROOT="$deps/cjson" \
    -DPNG_ROOT="$deps/png" -DZLIB_ROOT="$deps/png" "-DCMAKE_CUDA_FLAGS=${2:-}" >"$out/$name.cmake.log" 2>&1 &&
    if [ -n "${3:-}" ]; then cmake --build "$1" --target "$3" -j "$(nproc)"; else
      cmake --build "$1" -j "$(($(nproc) / 2 > 1 ? $(nproc) / 2 : 1))"; fi >"$out/$name.build.log" 2>&1 ||
    { echo "$(basename "$0"): build of $name failed (logs: $out/$name.*.log):" >&2; tail -20 "$out/$name.cmake.log" "$out/$name.build.log" >&2 2>/dev/null; return 1; }
}

# device_build_b: build-b from this tree unless it is there already (the ncu scripts, which may
# follow an A/B script in the same call); exits 1 (logs packed) when the build fails.
device_build_b() {
  [ -x "$root/build-b/drift" ] || device_build "$root/build-b" "" || { PACK=1 pack_out; exit 1; }
}

# device_work NAME: the start of the ncu and stamps scripts: in the tree's root, the logs left
# unpacked until the script packs them, build-b built unless it is there, and work=$out/NAME made.
device_work() {
  cd "$root" || exit 1
  export PACK=0
  device_build_b
  work=$out/$1
  mkdir -p "$work"
}

# checkpoint_scene SRC DEST RUNDIR FRAME [BARRIER]: SRC's scene written to DEST with its frames in
# RUNDIR (only at its last frame; its other output keys kept) and a checkpoint at frame FRAME (kept alone), so that a run
# stopped there resumes under a profiler for one frame (device_ncu_ranks.sh,
# device_ncu_island.sh); BARRIER sets parallel.island_barrier.
checkpoint_scene() {
  python3 - "$@" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
s.setdefault("output", {}).update({"dir": sys.argv[3], "every": s["time"]["frames"], "checkpoint_every": int(sys.argv[4]), "checkpoint_keep": 1})
if len(sys.argv) > 5:
    s.setdefault("parallel", {})["island_barrier"] = sys.argv[5]
json.dump(s, open(sys.argv[2], "w"), indent=1)
EOF
}

# device_build_pair A_SRC B_FLAGS: build-a from A_SRC (empty: this tree) and build-b from this tree
# with B_FLAGS, side by side; 1 if either fails.
device_build_pair() {
  local pa pb ok=1
  SRC=$1 device_build "$root/build-a" "" &
  pa=$!
  device_build "$root/build-b" "$2" &
  pb=$!
  wait $pa || ok=0
  wait $pb || ok=0
  [ $ok = 1 ]
}

# device_ab_start NAME TESTS JOBS: the start of an A/B script (device_weak.sh, device_island_ranks.sh):
# the GPUs listed, A (BASE, default .abbase) and B (this tree) built side by side, then B's ctest -R
# TESTS (none where empty) with JOBS jobs, one line each; exits 1 (logs packed) when a build fails.
device_ab_start() {
  local name=$1 tests=$2 jobs=$3 t0
  nvidia-smi -L
  t0=$SECONDS
  device_build_pair "$root/${BASE:-.abbase}" "" || { PACK=1 pack_out; exit 1; }
  echo "$name: both builds in $((SECONDS - t0)) s"
  [ -n "$tests" ] || return 0
  t0=$SECONDS
  ctest --test-dir "$root/build-b" -R "$tests" --output-on-failure -j "$jobs" >"$out/tests-b.log" 2>&1
  echo "$name: B's tests (-R '$tests'): exit $? in $((SECONDS - t0)) s, $(grep 'tests passed' "$out/tests-b.log")"
  grep -E "\*\*\*Failed|Timeout" "$out/tests-b.log"
  return 0
}

# each_alt PREFIX FUNC ARGS...: for each VAR=VALUE of B_ALT (space-separated), FUNC PREFIXi ARGS...
# run with that setting exported (i = 1, 2, ...), then a line naming it: B's runs with another
# value of a setting (device_weak.sh, device_island_ranks.sh).
each_alt() {
  local prefix=$1 fn=$2 i=0 alt
  shift 2
  for alt in ${B_ALT:-}; do
    i=$((i + 1))
    # shellcheck disable=SC2163
    (export "$alt" && "$fn" "$prefix$i" "$@")
    echo "$prefix$i: $alt"
  done
}

# pack_out: everything under $out (frames and earlier packs excepted) into $out/logs.tgz (logs-2.tgz,
# ... where a script before it in the same call packed), the other files removed, where OUT is set
# (the device tool returns at most 8 files); PACK=0 keeps them as they are.
pack_out() {
  [ -n "${OUT:-}" ] && [ "${PACK:-1}" = 1 ] || return 0
  local tmp name=logs.tgz k=1
  while [ -e "$out/$name" ]; do
    k=$((k + 1))
    name=logs-$k.tgz
  done
  tmp=$(mktemp /tmp/logs.XXXXXX.tgz) || return 0
  tar czf "$tmp" -C "$out" --exclude='*.h5' --exclude='logs*.tgz' . &&
    find "$out" -mindepth 1 -depth ! -name 'logs*.tgz' -delete && mv "$tmp" "$out/$name"
}

# base_name DIR: how the tables name A's tree: DIR and the commit archive-base.sh wrote into it.
base_name() {
  if [ -f "$root/$1/COMMIT" ]; then echo "the tree in $1 ($(cut -c1-60 "$root/$1/COMMIT"))"
  else echo "the tree in $1 (commit not recorded: unpack it with tools/archive-base.sh)"; fi
}
