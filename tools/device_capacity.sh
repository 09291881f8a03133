#!/usr/bin/env bash
# device_capacity.sh SCENE... - on a GPU machine: build-b's drift from this tree (unless built), then for
# each scene its memory plan (drift check), and a run of FRAMES frames (default 1) with the GPU's
# used memory sampled every 0.2 s by nvidia-smi (context included), the host's peak resident set
# (/usr/bin/time) and drift's counted peaks against its plan; a compact table last, logs under $OUT.
# DRIFT_GPU_STAMPS=1 logs every device allocation's growth into the run's log. CAP_DIR: the folder the
# frames go to (default /tmp; /dev/shm where the disk cannot hold them).
set -uo pipefail
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
[ -x build-b/drift ] || device_build "$root/build-b" "" drift || exit 1
frames=${FRAMES:-1}
cap=${CAP_DIR:-/tmp}
rows=()
for scene in "$@"; do
  name=$(basename "$scene" .json)
  build-b/drift check "$scene" >"$out/$name.check.log" 2>&1
  rm -rf "$cap/cap-$name"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/$name.smi.log" 2>/dev/null &
  smi=$!
  t0=$(date +%s.%N)
  /usr/bin/time -v build-b/drift run "$scene" --backend cuda --frames "$frames" --out "$cap/cap-$name" \
    >"$out/$name.run.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  rm -rf "$cap/cap-$name"
  base=$(sort -n "$out/$name.smi.log" | head -1)
  peak=$(sort -n "$out/$name.smi.log" | tail -1)
  rss=$(awk '/Maximum resident set size/ {print $6}' "$out/$name.run.log")
  n=$(awk '/^total:/ {print $2}' "$out/$name.check.log")
  plan=$(grep -o 'each of 1 GPU(s) [0-9.]* MiB ([0-9]* B a particle)' "$out/$name.check.log" | head -1)
  counted=$(grep -o 'device 0 peak [0-9.]* MiB counted, plan [0-9.]* MiB ([-+0-9.]*%)' "$out/$name.run.log" | head -1)
  pss=$(grep -o '[0-9.]*e+[0-9]* particle-steps/s' "$out/$name.run.log" | tail -1)
  rows+=("$name | $n | rc $rc | $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s | smi ${base}->${peak} MiB | rss ${rss} KiB | $plan | $counted | $pss")
done
echo "scene | particles | exit | wall | nvidia-smi used (MiB) | host peak RSS | check's plan | counted against plan | rate"
printf '%s\n' "${rows[@]}"
