# lib.sh - what the shell tests of drift's command line share; sourced, not run:
#   . "$(dirname "$0")/../lib.sh"
#
#   lib_usage N USAGE ARGS...  fewer than N arguments: USAGE on stderr, exit 2
#   lib_abs PATH               PATH made absolute (its folder must exist)
#   lib_setup NAME             the environment every run needs (one OpenMP thread, mpirun as
#                              root), a temporary folder $tmp (drift-NAME.XXXXXX) entered and
#                              removed at exit, with the tmpfs mounted at $mounted and the
#                              background process $bg, where the test set them
#   fail TEXT                  records a failure (counted in $failures) and says it
#   run LABEL STATUS CMD...    runs CMD (output in LABEL.log, at most $run_timeout s, default
#                              120) and checks its exit status; with backend=cuda, a machine
#                              without a GPU skips the test (exit 77)
#   one_line LABEL LOG TEXT    LOG's drift error is exactly one line and contains TEXT
#   expect_refused LABEL LIMIT OUT PATTERN CMD...
#                              CMD under an address space of LIMIT bytes (prlimit --as) is
#                              refused at once: exit status 4 (out of memory), one line on
#                              stderr matching PATTERN (grep), OUT not created, in under 10 s;
#                              the line in $refused, the seconds in $refused_secs
#   lib_finish NAME            the summary line; exits 1 after a failure, else 0

lib_usage() {
  local n=$1 usage=$2
  shift 2
  if [ $# -lt "$n" ]; then
    echo "usage: $usage" >&2
    exit 2
  fi
}

lib_abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

failures=0
tmp=""
mounted=""
bg=""

lib_cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null && wait "$bg" 2>/dev/null
  [ -n "$mounted" ] && umount "$mounted" 2>/dev/null
  [ -n "$tmp" ] && cd / && rm -rf "$tmp"
}

lib_setup() {
  export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/drift-$1.XXXXXX") || exit 1
  trap lib_cleanup EXIT
  cd "$tmp" || exit 1
}

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

sanitizer_report='WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error: '
run() {
  local label=$1 want=$2
  shift 2
  timeout "${run_timeout:-120}" "$@" >"$label.log" 2>&1
  local rc=$?
  if [ "${backend:-cpu}" = cuda ] && grep -q "no CUDA device is visible" "$label.log"; then
    echo "skipped: no GPU"
    exit 77
  fi
  if [ "$rc" -ne "$want" ]; then
    fail "$label: exit status $rc, expected $want; output:"
    # a sanitizer's report whole (its stacks are what says where), else the output's tail
    if grep -qE "$sanitizer_report" "$label.log"; then
      awk -v re="$sanitizer_report" '$0 ~ re { p = 1 } p' "$label.log" | head -n 150
    else
      tail -n 15 "$label.log"
    fi
  fi
  return 0
}

one_line() {
  local label=$1 log=$2 text=$3 lines
  lines=$(grep -c '^drift: ' "$log")
  [ "$lines" -eq 1 ] || fail "$label: $lines lines start with 'drift: ', expected 1: $(grep '^drift: ' "$log")"
  grep '^drift: ' "$log" | grep -qF -- "$text" || fail "$label: the message does not say '$text': $(grep '^drift: ' "$log")"
}

expect_refused() {
  local label=$1 limit=$2 out=$3 pattern=$4 rc t0 t1
  shift 4
  t0=$(date +%s.%N)
  refused=$(prlimit --as="$limit" "$@" 2>&1 >/dev/null)
  rc=$?
  t1=$(date +%s.%N)
  refused_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  echo "$refused"
  [ $rc -eq 4 ] || fail "$label: exit status $rc, expected 4 (out of memory)"
  [ "$(printf '%s\n' "$refused" | wc -l)" -eq 1 ] || fail "$label: expected one line on stderr"
  printf '%s' "$refused" | grep -q -- "$pattern" || fail "$label: the message does not match '$pattern'"
  [ -e "$out" ] && fail "$label: $out was created"
  awk -v s="$refused_secs" 'BEGIN { exit !(s < 10) }' || fail "$label: the refusal took $refused_secs s"
}

lib_finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$1: $failures failure(s)"
    exit 1
  fi
  echo "$1: all checks passed"
  exit 0
}
