#!/bin/bash
# Checkpoints written from the backend's copy (held: the default where the memory plan has room)
# against fetched from the live particles while the steps wait (DRIFT_CKPT_HOLD=0), on a GPU
# machine in one call of the device tool: builds build-b unless it is there, then runs each scene
# given with its frames written every frame and a checkpoint every EVERY frames, ROUNDS times
# each way (held first, then live, in turn), and prints one line a run and a table last (logs
# under $OUT/ckpt). docs/performance.md's decisions table carries the figures.
#
#   here:        tools/pack-device-deps.sh .device      (once; carried as .device)
#   on the GPU:  tools/device_ckpt.sh jobs/bench/sand_blocks_l46.json jobs/bench/sand_blocks_l46x16.json
#
# env: DEPS    what pack-device-deps.sh packed (default .device)
#      FRAMES  frames of each run (default 12)
#      EVERY   frames between checkpoints (default 2)
#      ROUNDS  runs of each way (default 2)
#      DIR     the runs' output folder (default /tmp/drift-ckpt, on the disk)
#      BACKEND drift run's --backend (default cuda; cpu tries the script on a machine without a GPU)
set -uo pipefail
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
export PACK=0
device_build_b
work=$out/ckpt
mkdir -p "$work"
frames=${FRAMES:-12}
every=${EVERY:-2}
rounds=${ROUNDS:-2}
dir=${DIR:-/tmp/drift-ckpt}
table=$work/table.md
printf '| scene | checkpoints | round | run s | stepping s | waiting s | writer s | checkpoints started ms |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n' >"$table"
for scene in "$@"; do
  name=$(basename "$scene" .json)
  python3 - "$scene" "$work/$name.json" "$frames" "$dir" "$every" <<'EOF' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))
s["time"]["frames"] = int(sys.argv[3])
s.setdefault("output", {}).update({"dir": sys.argv[4], "every": 1, "checkpoint_every": int(sys.argv[5]), "checkpoint_keep": 1})
json.dump(s, open(sys.argv[2], "w"), indent=1)
EOF
  for round in $(seq 1 "$rounds"); do
    for hold in 1 0; do
      way=$([ "$hold" = 1 ] && echo held || echo live)
      log=$work/$name-$way-$round.log
      rm -rf "$dir"
      t1=$(date +%s.%N)
      DRIFT_CKPT_HOLD=$hold DRIFT_TRACE=1 build-b/drift run "$work/$name.json" --backend "${BACKEND:-cuda}" >"$log" 2>&1
      rc=$?
      t2=$(date +%s.%N)
      wall=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.2f", b - a}')
      # from the run's last line: seconds stepping, waiting (capturing and waiting for the writer)
      # and the writer's busy seconds; and the main thread's ms in the checkpoints' starts (the
      # trace's "checkpoint N: ... : T ms": the copy's gather where held, the fetches where live)
      fig=$(sed -n 's/.* in \([0-9.]*\) s (\([0-9.]*\) s stepping, \([0-9.]*\) s capturing.* wrote for \([0-9.]*\) s.*/\2 | \3 | \4/p' "$log")
      ck=$(awk '/checkpoint [0-9]+: .* ms$/ {s += $(NF - 1)} END {printf "%.1f", s}' "$log")
      echo "$name $way round $round: exit $rc, $wall s"
      [ "$rc" = 0 ] || tail -5 "$log"
      echo "| $name | $way | $round | $wall | ${fig:--|-|-} | $ck |" >>"$table"
    done
  done
done
rm -rf "$dir"
cat "$table"
