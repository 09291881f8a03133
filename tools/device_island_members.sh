#!/bin/bash
# The island's members step by step under variants, in one call of the device tool (issue #4):
# builds build-b (this tree) unless it is there, then for each VARIANT runs the scene on G GPUs
# with the stamps (DRIFT_GPU_STAMPS=1 drift bench ... --frames FRAMES) and prints its ms a frame
# and a row per member (tools/island_stamps.py: k_begin, P2G, the barrier's wait, the grid update,
# G2P, across a rebuild-mapping; median us). A VARIANT is a space-separated list of VAR=VALUE
# settings and drift bench flags; "" is the tree as it is.
#
#   on the GPUs: tools/device_island_members.sh 4 "" "--devices 3,2,1,0" "--island-barrier events" \
#                  "--island-reduce p2p_atomics"                  (carry .device)
#
# env: SCENE     the scene (default jobs/bench/sand_blocks_l46x16.json)
#      FRAMES    frames a run (default 20)
#      RESUME_AT F: the scene runs once to frame F on G GPUs with a checkpoint there (as it is,
#                without stamps), and each variant resumes from it for FRAMES frames (drift run
#                --resume: the resume splits the particles again, by count along the longest
#                axis), so that the stamps cover frames F to F + FRAMES only, e.g. the frame that
#                tools/device_ncu_island.sh G F measured
#      BACKEND   cuda (default) or cpu (a dry run of the steps on a machine without a GPU: no stamps)
#      OUT     the output folder (default: the device tool's $OUT, else ./ab-out); the runs' logs
#              packed into logs.tgz at the end where OUT is the device tool's (device_env.sh)
# Exit status: 0, or 1 when the build or a run fails.
set -uo pipefail
g=${1?usage: device_island_members.sh GPUS [VARIANT...]}
shift
[ $# -gt 0 ] || set -- ""
scene=${SCENE:-jobs/bench/sand_blocks_l46x16.json}
frames=${FRAMES:-20}
at=${RESUME_AT:-}
backend=${BACKEND:-cuda}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
device_work members
rc=0
if [ -n "$at" ]; then
  sc=$work/scene.json
  checkpoint_scene "$scene" "$sc" "$work/run" "$at" || exit 1
  rm -rf "$work/run"
  if ! "$root/build-b/drift" run "$sc" --frames "$at" --backend "$backend" --gpus "$g" --quiet >"$work/to_$at.log" 2>&1; then
    echo "the run to frame $at failed: $(tail -2 "$work/to_$at.log")"
    PACK=1 pack_out
    exit 1
  fi
  # each variant resumes from a copy: a resumed run's own checkpoints replace the run's
  ckpt=$work/ckpt.h5
  cp "$work/run/$(printf 'checkpoint_%05d.h5' "$at")" "$ckpt" || { PACK=1 pack_out; exit 1; }
  echo "ran to frame $at on $g GPU(s); each variant resumes there for $frames frame(s)"
fi
i=0
for variant in "$@"; do
  i=$((i + 1))
  envs=() flags=()
  for w in $variant; do
    case "$w" in
      -*) flags+=("$w") ;;
      *=*) envs+=("$w") ;;
      *) flags+=("$w") ;; # a flag's value
    esac
  done
  log=$work/variant_$i.log
  if [ -n "$at" ]; then
    cmd=("$root/build-b/drift" run "$sc" --resume "$ckpt" --frames $((at + frames)) --gpus "$g" --backend "$backend")
  else
    cmd=("$root/build-b/drift" bench "$scene" --gpus "$g" --frames "$frames" --backend "$backend" --profile-frames 0
      --csv "$work/variant_$i.csv")
  fi
  if ! env ${envs[@]+"${envs[@]}"} DRIFT_GPU_STAMPS=1 "${cmd[@]}" ${flags[@]+"${flags[@]}"} >"$log" 2>&1; then
    echo "variant $i ('$variant') failed: $(tail -2 "$log")"
    rc=1
    continue
  fi
  if [ -n "$at" ]; then
    echo "variant $i: '${variant:-as it is}': frames $at to $((at + frames)) resumed"
  else
    echo "variant $i: '${variant:-as it is}': $(tail -1 "$work/variant_$i.csv" | cut -d, -f9) ms a frame"
  fi
  python3 "$root/tools/island_stamps.py" "$log" | tail -n +2
done
rm -rf "$work/run" "$work/ckpt.h5"
PACK=1 pack_out
exit $rc
