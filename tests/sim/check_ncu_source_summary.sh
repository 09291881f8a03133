#!/bin/sh
# check_ncu_source_summary.sh TOOL CSV: tools/ncu_source_summary.py on a source page in ncu's CSV
# form (ncu_source_page.csv: two files, SASS rows that must not count): the shares by file and the
# lines in order of stall samples, worked out by hand; a file that is no such page is refused.
set -u
tool=$1 csv=$2
out=$(python3 "$tool" "$csv" 2)
rc=$?
echo "$out"
fail() { echo "check_ncu_source_summary.sh: $*"; exit 1; }
[ $rc -eq 0 ] || fail "exit status $rc"
echo "$out" | grep -qx 'stall samples 200, warp instructions 24000' || fail "the totals"
echo "$out" | grep -Eq '^  p2g.cuh +samples  75.0%  instructions  50.0%$' || fail "p2g.cuh's shares"
echo "$out" | sed -n 4p | grep -q 'p2g.cuh:10 ' || fail "line 4 is not p2g.cuh:10"
echo "$out" | sed -n 5p | grep -q 'svd.h:53 ' || fail "line 5 is not svd.h:53"
! python3 "$tool" "$tool" 2>/dev/null || fail "a file that is no source page was not refused"
