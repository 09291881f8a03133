#!/bin/bash
# check_refusal.sh DRIFT SCENE OUT LIMIT_BYTES: drift run of a scene whose memory plan exceeds the
# address space that prlimit --as allows is refused before anything is sampled, allocated or
# written: exit status 4, one line naming host memory, the plan, the free bytes and RLIMIT_AS, a
# count of particles that would fit (fewer than the scene's, more than none), no output folder, and
# at once (sampling 134M particles would take minutes here). drift check under the same limit
# warns and exits 0.
drift=$1 scene=$2 out=$3 limit=$4
rm -rf "$out"
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
fail() { echo "check_refusal.sh: $*"; exit 1; } # the first failure ends the test
command -v prlimit > /dev/null || { echo "prlimit (util-linux) is missing: skipped"; exit 77; }
expect_refused "the run under $limit B" "$limit" "$out" \
  "^drift: $scene: the run does not fit in host memory: its plan needs [0-9.]* GiB .* and [0-9.]* GiB are free (RLIMIT_AS (ulimit -v)); about [0-9]* particles would fit" \
  "$drift" run "$scene" --out "$out" --backend cpu
err=$refused
fit=$(printf '%s' "$err" | sed -n 's/.*about \([0-9]*\) particles would fit.*/\1/p')
[ "$fit" -gt 0 ] && [ "$fit" -lt 134217728 ] || fail "about $fit particles would fit: expected between 0 and the scene's 134217728"
chk=$(prlimit --as="$limit" "$drift" check "$scene" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "drift check exited $rc under the limit, expected 0 (a warning)"
printf '%s\n' "$chk" | grep -q "^warning: the cpu backend's plan .* does not fit in this host's free memory .*RLIMIT_AS.*; about [0-9]* particles would fit$" ||
  fail "drift check gave no warning: $chk"
[ -e "$out" ] && fail "$out was created by check"
# The bound itself: a scene whose plan needs a fifth more than is free is refused too. The free
# bytes are the limit less the process's address space when it plans (O, read off the refusal
# above); a smaller scene (2.1M particles, so that MemAvailable does not bind first) is refused
# under O + 0.1 GiB to read its plan's need X, then must be refused under O + 0.8 X.
gib_of() { printf '%s' "$1" | sed -n "s/.*$2 \([0-9.]*\) GiB.*/\1/p"; }
small=$(dirname "$out")/refusal_small.json
sed 's/"dx": 0.003125/"dx": 0.0125/' "$scene" > "$small"
free1=$(gib_of "$err" "and")
over=$(awk -v l="$limit" -v f="$free1" 'BEGIN { printf "%.0f", l - f * 1073741824 }')
err2=$(prlimit --as="$(awk -v o="$over" 'BEGIN { printf "%.0f", o + 0.1 * 1073741824 }')" "$drift" run "$small" --out "$out" --backend cpu 2>&1 > /dev/null)
[ $? -eq 4 ] || fail "the small scene under O + 0.1 GiB: not refused: $err2"
need=$(gib_of "$err2" "plan needs")
[ -n "$need" ] && awk -v x="$need" 'BEGIN { exit !(x > 0.2) }' || fail "the small scene's plan: '$need' GiB ($err2)"
err3=$(timeout 60 prlimit --as="$(awk -v o="$over" -v x="$need" 'BEGIN { printf "%.0f", o + 0.8 * x * 1073741824 }')" "$drift" run "$small" --out "$out" --backend cpu 2>&1 > /dev/null)
rc=$?
[ $rc -eq 4 ] || fail "a plan of $need GiB with about $(awk -v x="$need" 'BEGIN { print 0.8 * x }') GiB free: exit status $rc, expected 4 (refused): $err3"
free3=$(gib_of "$err3" "and")
awk -v x="$need" -v f="$free3" 'BEGIN { exit !(f > 0.7 * x && f < 0.9 * x) }' ||
  fail "the bound: $free3 GiB free against a plan of $need GiB (expected about 0.8 of it): $err3"
[ -e "$out" ] && fail "$out was created by the refused small scene"
echo "check_refusal.sh: refused with exit 4 in $refused_secs s; $fit particles would fit"
exit 0
