#!/bin/bash
# check_peak_resume.sh DRIFT_EXE SCENE MPIEXEC OUT: a resume on two ranks holds the host memory
# the plan gives, as a fresh run does: the checkpoint streams through bounded buffers, each rank
# keeping the rows it owns, never a slice of the particles or its own whole. SCENE with a
# checkpoint every frame runs one frame on 2 ranks into OUT, then resumes there on 2 ranks for one
# more; the resume's counted host peak must be within 5% of the plan (check_peak.sh), and it must
# have resumed.
drift=$1
scene=$2
mpiexec=$3
out=$4
here=$(dirname "$0")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$out"
mkdir -p "$out" || exit 1
sed 's/"output": {/"output": { "checkpoint_every": 1,/' "$scene" >"$out/scene.json"
grep -q '"checkpoint_every": 1' "$out/scene.json" || { echo "check_peak_resume.sh: $scene has no output block"; exit 1; }
"$mpiexec" -n 2 --oversubscribe "$drift" run "$out/scene.json" --backend cpu --frames 1 --out "$out/run" --force \
  >"$out/first.log" 2>&1 || { tail -n 5 "$out/first.log"; echo "check_peak_resume.sh: the first run failed"; exit 1; }
grep "memory: host peak" "$out/first.log"
exec bash "$here/check_peak.sh" 5 -- bash -c "'$mpiexec' -n 2 --oversubscribe '$drift' run '$out/scene.json' \
  --backend cpu --frames 2 --out '$out/run' --resume 2>&1 | tee '$out/resume.log'; grep -q '^resuming from' '$out/resume.log'"
