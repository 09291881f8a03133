#!/bin/bash
# check_island.sh DRIFT COMPARE_FRAMES SCENE XTOL VTOL [COUNTS [FLAG...]]
#
# The multi-GPU island against one GPU (issue 4): the scene runs with --backend cuda on 1 GPU,
# then on each GPU count of COUNTS (default "2 4"), and the last frame of every island run
# agrees with the 1-GPU run particle by particle (compare_frames: the same ids, positions within
# XTOL m, velocities within VTOL relative). The island only changes the order of the P2G sums of
# shared blocks (float rounding), so the tolerances are those of two 1-GPU runs of a chaotic
# flow. Each island run repeats once (the barrier and the double buffering must not race: a
# repeated run agrees as well).
#
# Where the machine has fewer GPUs than a count, the island runs on DRIFT_DEVICES=0,0,... (the
# same GPU several times: every code path of the island, peer reads and spin-lock barrier
# included, runs, only not across NVLink). Exit 77 (skipped) without a GPU.
#
# FLAGs go to the island runs: --island-barrier events and --island-reduce p2p_atomics run the
# paper's alternatives (gpu/island_barrier.cu), whose island must agree likewise
# (and which the island's log line must name).
set -u
drift=$1 compare=$2 scene=$3 xtol=$4 vtol=$5 counts=${6:-"2 4"}
shift $(($# < 6 ? $# : 6))
flags=("$@")
barrier=spin reduce=double_buffer
for ((i = 0; i + 1 < ${#flags[@]}; ++i)); do
  case "${flags[i]}" in
    --island-barrier) barrier=${flags[i + 1]} ;;
    --island-reduce) reduce=${flags[i + 1]} ;;
  esac
done
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
frames=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['time']['frames'])" "$scene")
last=$(printf 'frame_%05d.h5' "$frames")

run() { # run NAME GPUS [FLAG...]
  local name=$1 gpus=$2 env=()
  shift 2
  if [ "$gpus" -gt "$ngpu" ]; then
    local list=0
    for ((i = 1; i < gpus; ++i)); do list="$list,0"; done
    env=(DRIFT_DEVICES=$list)
  fi
  echo "== $name: $gpus GPU(s) ${env[*]:-} $*"
  if ! env "${env[@]}" timeout 300 "$drift" run "$scene" --backend cuda --gpus "$gpus" --out "$work/$name" "$@" \
    >"$work/$name.log" 2>&1; then
    cat "$work/$name.log"
    echo "FAIL: the run on $gpus GPU(s) failed"
    exit 1
  fi
  if [ "$gpus" -gt 1 ] && ! grep "cuda island: $gpus GPUs" "$work/$name.log" | grep -q "barrier $barrier, reduction $reduce"; then
    cat "$work/$name.log"
    echo "FAIL: no island of $gpus GPUs with barrier $barrier, reduction $reduce in the log"
    exit 1
  fi
  grep -E "cuda (island|backend)" "$work/$name.log" || true
}

run one 1
fail=0
for n in $counts; do
  for rep in a b; do
    run "island${n}$rep" "$n" ${flags[@]+"${flags[@]}"}
    echo "-- $n GPUs ($rep) against 1 GPU, $last"
    "$compare" "$work/one/$last" "$work/island${n}$rep/$last" "$xtol" "$vtol" || fail=1
  done
done
[ $fail -eq 0 ] && echo "PASS" || echo "FAIL"
exit $fail
