#!/bin/sh
# check_refused.sh STATUS MESSAGE -- COMMAND [ARG...]: a command that drift must refuse. Passes where
# COMMAND exits with STATUS and its output (stdout and stderr together) is exactly MESSAGE: one
# line naming what was wrong and what would be valid, nothing else.
if [ $# -lt 4 ] || [ "$3" != "--" ]; then
  echo "usage: check_refused.sh STATUS MESSAGE -- COMMAND [ARG...]" >&2
  exit 2
fi
status=$1 message=$2
shift 3
out=$("$@" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq "$status" ] || { echo "check_refused.sh: exit status $rc, expected $status"; exit 1; }
[ "$out" = "$message" ] || { echo "check_refused.sh: expected exactly: $message"; exit 1; }
