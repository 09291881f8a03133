#!/bin/bash
# An island's kernels member by member under ncu, against one GPU's, at a chosen frame (issue #4:
# where a member's step differs from a quarter of one GPU's). The scene first runs to frame F at
# full speed on G GPUs and writes a checkpoint there; then it resumes from that checkpoint under
# ncu for one frame, on G GPUs and on one. The resume splits the particles again (by count along
# the longest axis, as a run's start does), so the members are those of a split made at frame F,
# not the frame-0 split of a run that went on. The island uses the events barrier under ncu
# (parallel.island_barrier): ncu serializes the kernels, which the spin barrier's waiting kernels
# would not survive. The kernels are the same.
# FROM0=1 profiles the members of the run's own split (made at frame 0) instead: each run starts at
# frame 0 under ncu and goes on to frame F + 1, ncu skipping the launches before frame F (SKIP,
# default F x the scene's steps a frame x the members, for KERNELS k_p2g: one a step and member;
# a scene without a fixed time step, or other KERNELS, need SKIP). ONE_GPU=1 runs the island's
# members on GPU 0 (DRIFT_DEVICES=0,0,...): ncu serializes the kernels, so each member's figures
# are its own work, on a machine of one GPU.
#
#   on the GPUs: tools/device_ncu_island.sh [G] [F]    (default 4 GPUs, frame 30; carry .device)
#   one GPU, the frame-0 split at frame 3: FROM0=1 ONE_GPU=1 KERNELS=k_p2g COUNT=8 tools/device_ncu_island.sh 4 3
#
# env: SCENE   the scene (default jobs/bench/sand_blocks_l46x16.json)
#      KERNELS ncu's kernel-name regex (default k_p2g|k_grid|k_g2p)
#      SKIP    launches of those kernels skipped after the resume (default 24: its set-up), or with
#              FROM0 from the start (default above)
#      FROM0   1: from frame 0 (the run's own split), no checkpoint (above)
#      ONE_GPU 1: the members on GPU 0 (above)
#      COUNT   kernels profiled on G GPUs (default 48; one GPU: COUNT / G)
#      METRICS ncu's metrics (default: duration, instructions, L2 reduction sectors, DRAM bytes)
#      NCU     the profiler (default ncu); empty: the same runs without it (a dry run)
#      BACKEND cuda (default) or cpu (a dry run on a machine without a GPU, NCU empty)
#      OUT     the output folder (default: the device tool's $OUT, else ./ab-out); logs packed into
#              logs.tgz at the end where OUT is the device tool's (device_env.sh's pack_out)
# Prints, per run, kernel and member (a context and stream), the launches profiled and the median
# of each metric. Exit status: 0, or 1 when the build or a run fails.
set -uo pipefail
g=${1:-4}
frame=${2:-30}
scene=${SCENE:-jobs/bench/sand_blocks_l46x16.json}
kernels=${KERNELS:-k_p2g|k_grid|k_g2p}
skip=${SKIP:-}
count=${COUNT:-48}
from0=${FROM0:-0}
one=${ONE_GPU:-0}
metrics=${METRICS:-gpu__time_duration.sum,smsp__inst_executed.sum,lts__t_sectors_op_red.sum,dram__bytes_read.sum,dram__bytes_write.sum}
ncu=${NCU-ncu}
backend=${BACKEND:-cuda}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
device_work ncu_island
sc=$work/scene.json
devs=()
if [ "$one" = 1 ]; then
  list=0
  for ((i = 1; i < g; ++i)); do list=$list,0; done
  devs=(DRIFT_DEVICES=$list)
fi
if [ "$from0" = 1 ]; then
  # the scene as it is, the events barrier; SKIP from its fixed time step
  checkpoint_scene "$scene" "$sc" "$work/run" 100000000 events || exit 1
  if [ -z "$skip" ]; then
    spf=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["time"]; print(round(1 / (t["fps"] * t["dt"])) if "dt" in t else "")' "$sc")
    if [ -z "$spf" ] || [ "$kernels" != k_p2g ]; then
      echo "FROM0: set SKIP (the scene has no fixed time step, or KERNELS is not k_p2g)"
      exit 1
    fi
  fi
else
  [ -n "$skip" ] || skip=24
  # the scene with a checkpoint at frame F, the events barrier
  checkpoint_scene "$scene" "$sc" "$work/run" "$frame" events || exit 1
  rm -rf "$work/run"
  if ! env ${devs[@]+"${devs[@]}"} "$root/build-b/drift" run "$sc" --frames "$frame" --backend "$backend" --gpus "$g" \
    --quiet >"$work/run.log" 2>&1; then
    echo "the run to frame $frame failed: $(tail -2 "$work/run.log")"
    PACK=1 pack_out
    exit 1
  fi
fi
rc=0
for n in "$g" 1; do
  c=$count
  [ "$n" = 1 ] && c=$(((count + g - 1) / g))
  sk=$skip
  [ "$from0" = 1 ] && [ -z "$sk" ] && sk=$((frame * spf * n))
  if [ "$from0" = 1 ]; then
    rm -rf "$work/run"
    cmd=("$root/build-b/drift" run "$sc" --frames $((frame + 1)))
  else
    cmd=("$root/build-b/drift" run "$sc" --resume --frames $((frame + 1)))
  fi
  prof=()
  [ -n "$ncu" ] && prof=("$ncu" --csv --metrics "$metrics" --kernel-name "regex:$kernels" --launch-skip "$sk" --launch-count "$c"
    --log-file "$work/ncu_g$n.csv")
  e=()
  [ "$n" != 1 ] && e=(${devs[@]+"${devs[@]}"})
  if ! env ${e[@]+"${e[@]}"} ${prof[@]+"${prof[@]}"} "${cmd[@]}" --backend "$backend" --gpus "$n" --quiet \
    >"$work/resume_g$n.log" 2>&1; then
    echo "the frame on $n GPU(s) failed: $(tail -2 "$work/resume_g$n.log")"
    rc=1
  fi
done
rm -rf "$work/run"
python3 - "$work" "$root/tools" <<'EOF'
import collections, sys
sys.path.insert(0, sys.argv[2])
from ncu_csv import tables
for name, rows in tables(sys.argv[1] + "/ncu_g*.csv"):
    print(name)
    if rows is None:
        print("   no kernel profiled")
        continue
    runs = collections.defaultdict(lambda: collections.defaultdict(list))  # (kernel, member) -> metric -> values
    units = {}
    # a member is a context and stream: the members' contexts (one a GPU) and streams (ONE_GPU) are
    # made in the members' order
    ids = sorted({(int(r["Context"]), int(r.get("Stream") or 0)) for r in rows})
    for r in rows:
        m = ids.index((int(r["Context"]), int(r.get("Stream") or 0)))
        k = (r["Kernel Name"].split("(")[0].replace("void ", ""), m)
        runs[k][r["Metric Name"]].append(float(r["Metric Value"].replace(",", "")))
        units[r["Metric Name"]] = r["Metric Unit"]
    for (kern, mem), m in sorted(runs.items()):
        cols = []
        for name, v in m.items():
            v.sort()
            cols.append("%s %.4g %s" % (name.rsplit(".", 1)[0], v[len(v) // 2], units[name]))
        print("   %-22s member %-3s %3d x median: %s" % (kern, mem, len(next(iter(m.values()))), ", ".join(cols)))
EOF
PACK=1 pack_out
exit $rc
