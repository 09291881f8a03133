#!/bin/bash
# Kernel durations in isolation (ncu) of a rank of weak_N against one rank (weak_1) at the same
# frame (issue #8: a rank's step against one rank's, kernel by kernel). Each scene first runs to
# frame F at full speed and writes a checkpoint there; then it resumes from that checkpoint under
# ncu for one frame, so that ncu's cost a launch is paid for that frame only, and the kernels it
# profiles are those of the split steps once the sand has reached the cut (frames 30 and later in
# weak_2), not those of the first frames.
#
#   on the GPUs: tools/device_ncu_ranks.sh [N] [F]     (default 2 ranks, frame 30; carry .device)
#
# env: KERNELS ncu's kernel-name regex (default k_grid|k_g2p|k_p2g|pack_nodes|k_shared: pack_nodes
#              matches the node exchange's k_island_pack_nodes and k_island_unpack_nodes)
#      SKIP    launches of those kernels skipped after the resume (default 40: its rebuild-mapping
#              and set-up step)
#      COUNT   kernels profiled a process (default 80)
#      NCU     the profiler (default ncu); empty: the same runs without it (a dry run of the steps)
#      SCENE1, SCENEN  the scenes (default jobs/bench/weak_1.json and jobs/bench/weak_N.json)
#      BACKEND cuda (default) or cpu (a dry run on a machine without a GPU, NCU empty)
#      OUT     the output folder (default: the device tool's $OUT, else ./ab-out); logs are packed
#              into logs.tgz at the end where OUT is the device tool's (device_env.sh's pack_out)
# Prints, per run and kernel (name and grid), the launches profiled and their median duration.
# Exit status: 0, or 1 when a build or a run fails.
set -uo pipefail
n=${1:-2}
frame=${2:-30}
kernels=${KERNELS:-k_grid|k_g2p|k_p2g|pack_nodes|k_shared}
skip=${SKIP:-40}
count=${COUNT:-80}
ncu=${NCU-ncu}
backend=${BACKEND:-cuda}
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
device_work ncu_ranks
rc=0
for r in 1 "$n"; do
  src=${SCENE1:-jobs/bench/weak_1.json}
  [ "$r" = 1 ] || src=${SCENEN:-jobs/bench/weak_$r.json}
  sc=$work/weak_$r.json
  # the scene with a checkpoint at frame F, its frames into its own folder
  checkpoint_scene "$src" "$sc" "$work/run_$r" "$frame" || exit 1
  rm -rf "$work/run_$r"
  if ! mpirun -n "$r" --oversubscribe --bind-to none "$root/build-b/drift" run "$sc" --frames "$frame" --backend "$backend" \
    --gpus 1 --quiet >"$work/run_$r.log" 2>&1; then
    echo "weak_$r: the run to frame $frame failed: $(tail -2 "$work/run_$r.log")"
    rc=1
    continue
  fi
  # one frame more, resumed, under ncu; each rank writes its own CSV
  prof=""
  [ -n "$ncu" ] && prof="$ncu --csv --metrics gpu__time_duration.sum --kernel-name regex:'$kernels' --launch-skip $skip --launch-count $count --log-file $work/ncu_w${r}_r\$OMPI_COMM_WORLD_RANK.csv"
  if ! mpirun -n "$r" --oversubscribe --bind-to none sh -c "$prof $root/build-b/drift run $sc --resume --frames $((frame + 1)) --backend $backend --gpus 1 --quiet" \
    >"$work/resume_$r.log" 2>&1; then
    echo "weak_$r: the resumed frame failed: $(tail -2 "$work/resume_$r.log")"
    rc=1
  fi
done
python3 - "$work" "$root/tools" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
from ncu_csv import tables
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
for name, rows in tables(sys.argv[1] + "/ncu_w*_r*.csv"):
    print(name)
    if rows is None:
        print("   no kernel profiled")
        continue
    d = {}
    for r in rows:
        if r["Metric Name"] == "gpu__time_duration.sum":
            v = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], float("nan"))
            d.setdefault((r["Kernel Name"].split("(")[0].replace("void ", ""), r["Grid Size"]), []).append(v)
    for (k, g), v in sorted(d.items(), key=lambda x: -sum(x[1])):
        v.sort()
        print("   %-34s %-16s %3d x median %8.1f us (min %8.1f, max %8.1f)" % (k, g, len(v), v[len(v) // 2], v[0], v[-1]))
EOF
PACK=1 pack_out
exit $rc
