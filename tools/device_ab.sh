#!/bin/bash
# A/B of this tree against another (a commit, BASE) on a GPU machine, in one call of the device
# tool (a build, B's tests and alternating benchmarks, so that device time goes on measuring and
# not on starting machines).
#
# Builds A (BASE's tree, else this tree as it is) and B (this tree, with the extra CUDA flags
# given, "" for none) side by side. Runs the gpu tests matching TESTS on B, which must pass before
# any of B's figures mean anything. Then runs `drift bench` with the arguments given on A and on B
# in turn, ROUNDS times each (A B A B ...: both builds see the same machine, clocks and
# neighbours), and prints one line per run and scene.
#
#   here:              tools/pack-device-deps.sh .device          (once; carried as .device)
#                      tools/archive-base.sh main .abbase          (A's tree; carried as .abbase)
#   on the GPU:        BASE=.abbase tools/device_ab.sh "" jobs/bench/sand_blocks_l46.json \
#                          jobs/bench/sand_blocks_l12.json --frames 30 --profile-frames 0
#
# env: DEPS   what pack-device-deps.sh packed (default .device)
#      TESTS  ctest -R regex run on B (default test_cuda_vs_cpu; "-L LABEL": by label; empty: no tests)
#      JOBS   ctest -j (default 2)
#      ROUNDS runs of each build (default 2)
#      BASE   a folder holding another tree (tools/archive-base.sh COMMIT .abbase, carried): A is built
#             from it instead of this tree, so that B (this tree, flags may be "") is measured against
#             a commit
#      C_ENV  a third variant c: B's build run with this environment (e.g. "DRIFT_STEP_AHEAD=off")
#      ALTS   more variants of B's build, one per ';'-separated environment (after C_ENV's), named d, e,
#             ... in order, e.g. ALTS="DRIFT_MIGRATE_MARGIN=2; DRIFT_PINNED_MAX_MB=64 DRIFT_CUDA_AWARE_MPI=off"
#             (each round runs a, b, then every variant, so that all see the same machine)
#      RUNNER what runs drift bench (default nothing: drift itself; "mpirun -n 2 --oversubscribe" for
#             ranks: drift bench writes the CSV on rank 0)
#      OUT    folder for the build and test logs and the CSVs (default: the device tool's $OUT,
#             else ./ab-out)
# Exit status: 0, or 1 when a build or B's tests fail (then nothing is benchmarked).
set -uo pipefail
flags=${1?usage: device_ab.sh "B_CUDA_FLAGS" [drift bench arguments ...]}
shift
tests=${TESTS-test_cuda_vs_cpu}
rounds=${ROUNDS:-2}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1

t0=$SECONDS
if [ -n "${AB_BUILT:-}" ] && [ -x "$root/build-a/drift" ] && [ -x "$root/build-b/drift" ]; then
  echo "device_ab: AB_BUILT: using build-a and build-b as they are"
else
device_build_pair "${BASE:+$root/$BASE}" "$flags" || exit 1
echo "device_ab: both builds in $((SECONDS - t0)) s"
fi

if [ -n "$tests" ]; then
  t0=$SECONDS
  sel=(-R "$tests")
  [ "${tests#-L }" != "$tests" ] && sel=(-L "${tests#-L }") # TESTS="-L gpu": by label
  if ! ctest --test-dir "$root/build-b" "${sel[@]}" --output-on-failure -j "${JOBS:-2}" >"$out/tests-b.log" 2>&1; then
    echo "device_ab: B's tests ($tests) failed:" >&2
    grep -E "tests passed|Failed|\*\*\*" "$out/tests-b.log" >&2
    exit 1
  fi
  echo "device_ab: B passes ctest -R '$tests' ($(grep -Eo '[0-9]+ tests? passed|[0-9]+% tests passed[^\n]*' "$out/tests-b.log" | tail -1), $((SECONDS - t0)) s)"
  grep -Ei "worst|max \|" "$out/tests-b.log" | head -40 >"$out/tests-b.figures.txt"
fi

# the environment of each variant after a and b: c (C_ENV), then d, e, ... (ALTS)
alt_env=()
[ -n "${C_ENV:-}" ] && alt_env+=("$C_ENV")
IFS=';' read -ra alts <<<"${ALTS:-}"
for e in "${alts[@]}"; do
  e=$(echo "$e" | xargs)
  [ -n "$e" ] && alt_env+=("$e")
done
names=(c d e f g h i j)
[ -z "${C_ENV:-}" ] && names=("${names[@]:1}")
[ ${#alt_env[@]} -le ${#names[@]} ] || { echo "device_ab: at most ${#names[@]} variants in C_ENV and ALTS" >&2; exit 2; }
variants="a b"
alt_list=""
for k in "${!alt_env[@]}"; do
  variants+=" ${names[k]}"
  alt_list+="${names[k]}=${alt_env[k]};"
done
for r in $(seq 1 "$rounds"); do
  for v in $variants; do
    bv=$v venv=()
    for k in "${!alt_env[@]}"; do
      [ "$v" = "${names[k]}" ] && { bv=b; read -ra venv <<<"${alt_env[k]}"; }
    done
    # shellcheck disable=SC2086
    env "${venv[@]}" ${RUNNER:-} "$root/build-$bv/drift" bench "$@" --csv "$out/bench-$v-$r.csv" >"$out/bench-$v-$r.log" 2>&1 ||
      { echo "device_ab: bench on build $v (round $r) failed: $(tail -1 "$out/bench-$v-$r.log")" >&2; }
  done
done

# One line per run and scene, from the CSVs (columns by name).
a_name=${BASE:+$(base_name "$BASE")}
[ -n "${AB_BUILT:-}" ] && a_name="build-a as an earlier call built it${a_name:+ ($a_name)}"
python3 - "$out" "$rounds" "$flags" "$a_name" "$alt_list" <<'EOF'
import csv, os, sys
out, rounds, flags, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
alts = [a.split("=", 1) for a in sys.argv[5].split(";") if a]
print(f"{'build':<6}{'round':>6}  {'case':<24}{'device':<20}{'ms/frame':>10}{'particle-steps/s':>18}{'steps/s':>10}"
      f"{'fps':>8}{'e':>8}{'rebuilds':>9}")
for r in range(1, rounds + 1):
    for v in ["a", "b"] + [name for name, _ in alts]:
        path = os.path.join(out, f"bench-{v}-{r}.csv")
        if not os.path.exists(path):
            print(f"{v:<6}{r:>6}  (no CSV)")
            continue
        for row in csv.DictReader(open(path)):
            eff = row.get("efficiency") or "-"
            print(f"{v:<6}{r:>6}  {row['case']:<24}{row['device'][:19]:<20}{float(row['ms_per_frame']):>10.3f}"
                  f"{float(row['particle_steps_per_s']):>18.4g}{float(row['steps_per_s']):>10.0f}{float(row['fps']):>8.1f}"
                  f"{eff:>8}{float(row.get('rebuilds_per_frame') or 'nan'):>9.2f}")
print(f"a: {base if base else 'the tree as it is'}; b: this tree, CMAKE_CUDA_FLAGS={flags}"
      + "".join(f"; {name}: b run with {env}" for name, env in alts))
EOF
pack_out
