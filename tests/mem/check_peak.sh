#!/bin/bash
# check_peak.sh TOLERANCE_PERCENT -- COMMAND...: runs a drift run COMMAND (stdout and stderr
# together) and passes where it exits 0 and its line "memory: host peak X MiB counted, plan Y MiB
# (Z%)" holds a counted peak within TOLERANCE_PERCENT of the plan, recomputed here from X and Y.
tol=$1
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^trace' | tail -5
[ $rc -eq 0 ] || { echo "check_peak.sh: exit status $rc"; exit 1; }
line=$(printf '%s\n' "$out" | grep "memory: host peak" | head -1)
[ -n "$line" ] || { echo "check_peak.sh: no 'memory: host peak' line"; exit 1; }
peak=$(printf '%s' "$line" | sed -n 's/.*host peak \([0-9.]*\) MiB counted, plan \([0-9.]*\) MiB.*/\1/p')
plan=$(printf '%s' "$line" | sed -n 's/.*host peak \([0-9.]*\) MiB counted, plan \([0-9.]*\) MiB.*/\2/p')
awk -v p="$peak" -v q="$plan" -v t="$tol" 'BEGIN { d = 100 * (p / q - 1); printf "check_peak.sh: counted %s MiB, plan %s MiB: %+.2f%%\n", p, q, d; exit !(d <= t && d >= -t) }' ||
  { echo "check_peak.sh: the counted peak is not within $tol% of the plan"; exit 1; }
