#!/bin/sh
# Runs a command under xvfb-run -a on a screen of 1280x1024 at 24 bits that does not reset
# (-noreset): by default Xvfb resets when its last client leaves, and a client that connects
# again (pvpython's render window, after the reader's) can meet the server mid-reset on a loaded
# machine and fail. Runs it again (at most 3 times) only when the X server itself could not be
# reached ("bad X server connection": Xvfb lost a start-up race on a loaded machine); any other
# failure, the checks' own included, fails at once.
# usage: xvfb_retry.sh XVFB_RUN COMMAND [ARGS...]
xvfb=$1; shift
log=$(mktemp)
for try in 1 2 3; do
  "$xvfb" -a -s "-screen 0 1280x1024x24 -noreset" "$@" >"$log" 2>&1; rc=$?
  cat "$log"
  if [ $rc -eq 0 ] || ! grep -q "bad X server connection" "$log"; then rm -f "$log"; exit $rc; fi
  echo "xvfb_retry: the X server was not reachable (try $try of 3)"
  sleep 2
done
rm -f "$log"
exit $rc
