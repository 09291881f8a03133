#!/bin/bash
# archive-base.sh [COMMIT] [DIR]: A's tree for the device A/B scripts (device_ab.sh BASE=DIR,
# device_weak.sh, device_island_ranks.sh): COMMIT (default main) unpacked into DIR (default
# .abbase, which .git/info/exclude should list, and which the device tool's carry must name),
# with DIR/COMMIT naming the commit, so that the scripts' tables say which tree A was (a folder
# unpacked by hand records no commit).
set -euo pipefail
commit=${1:-main} dir=${2:-.abbase}
cd "$(git rev-parse --show-toplevel)"
rev=$(git rev-parse --short "$commit^{commit}")
rm -rf "$dir"
mkdir -p "$dir"
git archive "$rev" | tar -x -C "$dir"
git log -1 --format='%h %s' "$rev" >"$dir/COMMIT"
echo "$dir: $(cat "$dir/COMMIT")"
