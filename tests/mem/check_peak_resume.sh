#!/bin/bash
# check_peak_resume.sh DRIFT_EXE SCENE MPIEXEC OUT [BACKEND]: a run on two ranks, and its resume
# on two, hold the host memory the plan gives: the migration's reserve, the frames' and the
# checkpoint's chunks; the checkpoint streams through bounded buffers, each rank keeping the rows
# it owns, never a slice of the particles or its own whole. SCENE with a checkpoint every frame
# runs one frame on 2 ranks into OUT, then resumes there on 2 ranks for one more; each run's
# counted host peak must be within 5% of the plan (check_peak.sh), and the second must have
# resumed. BACKEND: cpu (the default) or cuda (both ranks on the first GPU; exit 77, skipped,
# without one).
drift=$1
scene=$2
mpiexec=$3
out=$4
backend=${5:-cpu}
here=$(dirname "$0")
if [ "$backend" = cuda ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 1 ]; then
  echo "no GPU: skipped"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$out"
mkdir -p "$out" || exit 1
sed 's/"output": {/"output": { "checkpoint_every": 1,/' "$scene" >"$out/scene.json"
grep -q '"checkpoint_every": 1' "$out/scene.json" || { echo "check_peak_resume.sh: $scene has no output block"; exit 1; }
bash "$here/check_peak.sh" 5 -- "$mpiexec" -n 2 --oversubscribe "$drift" run "$out/scene.json" --backend "$backend" \
  --frames 1 --out "$out/run" --force || { echo "check_peak_resume.sh: the first run"; exit 1; }
exec bash "$here/check_peak.sh" 5 -- bash -c "'$mpiexec' -n 2 --oversubscribe '$drift' run '$out/scene.json' \
  --backend '$backend' --frames 2 --out '$out/run' --resume 2>&1 | tee '$out/resume.log'; grep -q '^resuming from' '$out/resume.log'"
