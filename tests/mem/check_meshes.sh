#!/bin/bash
# check_meshes.sh DRIFT SCENE OUT LIMIT_BYTES: a scene of mesh colliders (SCENE: Crawling in Snow, the
# crawler's 121 level sets, 2.6 GB) is planned without building its level sets: drift check
# answers at once (building them takes about a minute on two cores) with their sizes and a host
# plan that holds them; drift run under an address space (prlimit --as LIMIT_BYTES) smaller than
# that plan is refused before anything is built, sampled or written: exit 4, one line naming host
# memory, no OUT, at once.
drift=$1 scene=$2 out=$3 limit=$4
rm -rf "$out"
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
fail() { echo "check_meshes.sh: $*"; exit 1; } # the first failure ends the test
command -v prlimit > /dev/null || { echo "prlimit (util-linux) is missing: skipped"; exit 77; }
t0=$(date +%s.%N)
chk=$("$drift" check "$scene" 2>&1)
rc=$?
t1=$(date +%s.%N)
printf '%s\n' "$chk" | grep -E "^mesh|^memory plan"
[ $rc -eq 0 ] || fail "drift check exited $rc: $chk"
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "drift check took $secs s: it built the level sets"
ls_mib=$(printf '%s\n' "$chk" | sed -n 's/^mesh level sets: 121, \([0-9.]*\) MiB (brick tables.*/\1/p')
[ -n "$ls_mib" ] || fail "no line 'mesh level sets: 121, X MiB (brick tables ...)'"
host_mib=$(printf '%s\n' "$chk" | sed -n 's/^memory plan, cpu backend: host \([0-9.]*\) MiB at its peak.*/\1/p')
[ -n "$host_mib" ] && awk -v h="$host_mib" -v l="$ls_mib" 'BEGIN { exit !(l > 1000 && h > l) }' ||
  fail "the cpu backend's host plan ($host_mib MiB) does not hold the level sets ($ls_mib MiB)"
expect_refused "the run under $limit B" "$limit" "$out" \
  "^drift: $scene: the run does not fit in host memory: its plan needs [0-9.]* GiB .*RLIMIT_AS" \
  "$drift" run "$scene" --out "$out" --backend cpu
echo "check_meshes.sh: level sets $ls_mib MiB in a host plan of $host_mib MiB; refused with exit 4 in $refused_secs s"
