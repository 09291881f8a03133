#!/bin/bash
# The island's members step by step under variants, in one call of the device tool (issue #4):
# builds build-b (this tree) unless it is there, then for each VARIANT runs the scene on G GPUs
# with the stamps (DRIFT_GPU_STAMPS=1 drift bench ... --frames FRAMES) and prints its ms a frame
# and a row per member (tools/island_stamps.py: k_begin, P2G, the barrier's wait, the grid update,
# G2P, across a rebuild-mapping; median us). A VARIANT is a space-separated list of VAR=VALUE
# settings and drift bench flags; "" is the tree as it is.
#
#   on the GPUs: tools/device_island_members.sh 4 "" "DRIFT_P2G_SPREAD=0" "DRIFT_DEVICES=3,2,1,0" \
#                  "--island-barrier events"                      (carry .device)
#
# env: SCENE   the scene (default jobs/bench/sand_blocks_l46x16.json)
#      FRAMES  frames a run (default 20)
#      OUT     the output folder (default: the device tool's $OUT, else ./ab-out); the runs' logs
#              packed into logs.tgz at the end where OUT is the device tool's (device_env.sh)
# Exit status: 0, or 1 when the build or a run fails.
set -uo pipefail
g=${1?usage: device_island_members.sh GPUS [VARIANT...]}
shift
[ $# -gt 0 ] || set -- ""
scene=${SCENE:-jobs/bench/sand_blocks_l46x16.json}
frames=${FRAMES:-20}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
export PACK=0
device_build_b
rc=0
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
  log=$out/members_$i.log
  if ! env ${envs[@]+"${envs[@]}"} DRIFT_GPU_STAMPS=1 "$root/build-b/drift" bench "$scene" --gpus "$g" --frames "$frames" \
    --backend cuda --profile-frames 0 --csv "$out/members_$i.csv" ${flags[@]+"${flags[@]}"} >"$log" 2>&1; then
    echo "variant $i ('$variant') failed: $(tail -2 "$log")"
    rc=1
    continue
  fi
  echo "variant $i: '${variant:-as it is}': $(tail -1 "$out/members_$i.csv" | cut -d, -f9) ms a frame"
  python3 "$root/tools/island_stamps.py" "$log" | tail -n +2
done
PACK=1 pack_out
exit $rc
