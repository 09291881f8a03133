#!/bin/sh
# check_island_stamps.sh TOOL LOG OTHER: tools/island_stamps.py on a log of the island's stamps
# (island_stamps.log: two members' lines from a run with the events barrier, two from the spin
# barrier's, between other lines of the log): a row per member in member order with the medians of
# the log, "-" where a member's line lacks a pair; exit 1 on a file without stamps (OTHER).
set -u
tool=$1 log=$2 other=$3
out=$(python3 "$tool" "$log")
rc=$?
echo "$out"
fail() { echo "check_island_stamps.sh: $*"; exit 1; }
[ $rc -eq 0 ] || fail "exit status $rc"
echo "$out" | sed -n 2p | grep -Eq '^ +member +device +k_begin +P2G +P2G\+wait +wait +grid +G2P +rebuild$' ||
  fail "the header"
echo "$out" | sed -n 3p | grep -Eq '^ +0 +0 +3\.1 +- +421\.3 +- +18\.9 +221\.2 +1026\.9$' || fail "member 0's row"
echo "$out" | sed -n 6p | grep -Eq '^ +3 +3 +10\.6 +422\.0 +- +1\.7 +16\.2 +221\.4 +1005\.2$' || fail "member 3's row"
! python3 "$tool" "$other" >/dev/null || fail "a file without stamps was not refused"
