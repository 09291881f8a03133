#!/bin/bash
# check_huge.sh DRIFT SCENE: drift check of a scene of about 10^12 particles answers in under a
# second with the count the box's cells give: ((max - min) / dx)^3 x ppc, computed here from the
# scene's numbers (0.8 m across at dx 0.16 mm, 8 a cell), and prints the memory plan.
drift=$1 scene=$2
fail() { echo "check_huge.sh: $*"; exit 1; }
expect=$(awk 'BEGIN { n = (0.9 - 0.1) / 0.00016; printf "%.0f", n * n * n * 8 }')
t0=$(date +%s.%N)
out=$("$drift" check "$scene" 2>&1)
rc=$?
t1=$(date +%s.%N)
echo "$out"
[ $rc -eq 0 ] || fail "exit status $rc"
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
awk -v s="$secs" 'BEGIN { exit !(s < 1.0) }' || fail "drift check took $secs s, expected under 1 s"
printf '%s\n' "$out" | grep -q "^total: $expect particles$" || fail "no line 'total: $expect particles'"
printf '%s\n' "$out" | grep -q "^memory plan, cpu backend: host [0-9.]* MiB at its peak" || fail "no memory plan"
echo "check_huge.sh: $expect particles in $secs s"
