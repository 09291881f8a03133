#!/bin/sh
# Runs a command under xvfb-run -a, again (at most 3 times) only when the X server itself could
# not be reached ("bad X server connection": Xvfb lost a start-up race on a loaded machine);
# any other failure, the checks' own included, fails at once.
# usage: xvfb_retry.sh XVFB_RUN COMMAND [ARGS...]
xvfb=$1; shift
log=$(mktemp)
for try in 1 2 3; do
  "$xvfb" -a "$@" >"$log" 2>&1; rc=$?
  cat "$log"
  if [ $rc -eq 0 ] || ! grep -q "bad X server connection" "$log"; then rm -f "$log"; exit $rc; fi
  echo "xvfb_retry: the X server was not reachable (try $try of 3)"
  sleep 2
done
rm -f "$log"
exit $rc
