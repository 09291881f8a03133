#!/bin/bash
# check_device_bytes.sh DRIFT LIMIT SCENE...: the CUDA backend's memory plan (drift check; the plan
# replays the device vectors' own sizing rule, src/memsizes.h) holds each scene in at most LIMIT
# bytes a particle on a GPU (issue 55: 250 B in float storage, for every material). Exit 77 where
# drift was built without the CUDA backend (check prints no CUDA plan).
drift=$1 limit=$2
shift 2
fail() { echo "check_device_bytes.sh: $*"; exit 1; }
for scene in "$@"; do
  out=$("$drift" check "$scene" 2>&1) || fail "$scene: drift check failed: $out"
  line=$(printf '%s\n' "$out" | grep '^memory plan, cuda backend:')
  [ -n "$line" ] || { echo "check_device_bytes.sh: no CUDA backend in this build: skipped"; exit 77; }
  per=$(printf '%s\n' "$line" | sed -n 's/.*each of [0-9]* GPU(s) [0-9.]* MiB (\([0-9]*\) B a particle).*/\1/p')
  [ -n "$per" ] || fail "$scene: no 'B a particle' in: $line"
  echo "$(basename "$scene"): $per B a particle on a GPU (limit $limit)"
  [ "$per" -le "$limit" ] || fail "$scene: the plan needs $per B a particle on a GPU, more than $limit: $line"
done
