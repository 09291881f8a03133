#!/bin/sh
# check_output.sh PATTERN... -- COMMAND [ARG...]: runs COMMAND (stdout and stderr together) and
# passes where it exits 0 and its output holds every PATTERN (a grep regex: a check in the trace or
# in the GPU marks that the path under test ran). Exit 77 (skipped) where COMMAND exits 77. The
# output is shown without its trace and GPU marks lines, which the patterns still see.
n=0
for a in "$@"; do
  [ "$a" = "--" ] && break
  n=$((n + 1))
done
if [ "$n" -ge "$#" ]; then
  echo "usage: check_output.sh PATTERN... -- COMMAND [ARG...]" >&2
  exit 2
fi
i=0
patterns=""
while [ "$i" -lt "$n" ]; do # the patterns, one a line, kept aside while "$@" becomes the command
  patterns="$patterns$1
"
  shift
  i=$((i + 1))
done
shift # --
out=$("$@" 2>&1)
rc=$?
echo "$out" | grep -v -e '^trace' -e '^gpu marks'
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "check_output.sh: exit status $rc"; exit 1; }
printf '%s' "$patterns" | while IFS= read -r p; do
  echo "$out" | grep -q -- "$p" || { echo "check_output.sh: no line of the output matches '$p'"; exit 1; }
done
