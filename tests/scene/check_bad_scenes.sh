#!/usr/bin/env bash
# check_bad_scenes.sh - drift rejects every bad scene with one clear line, and accepts good ones.
#
#   check_bad_scenes.sh DRIFT_EXE BAD_DIR [GOOD_SCENE_OR_DIR...]
#
# For each BAD_DIR/*.json, listed in BAD_DIR/EXPECT as "FILE TEXT" (TEXT: what the message must
# contain, at least the key path), both `drift check FILE` and `drift run FILE --out TMP/out` must:
# exit with status 2 (bad input), print exactly one line on stderr, starting "drift: " and naming
# the file and TEXT, and leave TMP/out uncreated. Also checks a missing file and a directory
# given as the scene. Each GOOD_SCENE (a file, or every *.json in a folder) must pass
# `drift check` with status 0. Prints every failure, exits 1 if there was any.
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 DRIFT_EXE BAD_DIR [GOOD_SCENE_OR_DIR...]" >&2
  exit 2
fi
drift=$1
bad_dir=$2
shift 2

# drift may start MPI as a singleton; let Open MPI run as root in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/drift-bad-scenes.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_rejected DIR LABEL SCENE TEXT ARGS...: runs drift ARGS (which may mention DIR/out) in
# the scratch folder DIR; drift must reject SCENE. Prints a FAIL line per broken promise.
expect_rejected() {
  local dir=$1 label=$2 scene=$3 text=$4
  shift 4
  mkdir -p "$dir"
  rm -rf "$dir/out"
  "$drift" "$@" >"$dir/stdout" 2>"$dir/stderr"
  local rc=$?
  local err lines
  err=$(cat "$dir/stderr")
  lines=$(wc -l <"$dir/stderr")
  if [ "$rc" -ne 2 ]; then
    echo "FAIL: $label: exit status $rc, expected 2 (stderr: $err)"
  fi
  # exactly one line: one newline, and it ends the output
  if [ "$lines" -ne 1 ] || [ -n "$(tail -c 1 "$dir/stderr")" ]; then
    echo "FAIL: $label: stderr is not exactly one line ($lines newlines): $err"
  fi
  case "$err" in
    "drift: "*) ;;
    *) echo "FAIL: $label: message does not start with 'drift: ': $err" ;;
  esac
  case "$err" in
    *"$scene"*) ;;
    *) echo "FAIL: $label: message does not name the file $scene: $err" ;;
  esac
  case "$err" in
    *"$text"*) ;;
    *) echo "FAIL: $label: message does not contain '$text': $err" ;;
  esac
  if [ -e "$dir/out" ]; then
    echo "FAIL: $label: $dir/out was created for a bad scene"
  fi
}

expect_file="$bad_dir/EXPECT"
if [ ! -f "$expect_file" ]; then
  echo "FAIL: $expect_file is missing"
  exit 1
fi

# Every scene in the folder has an entry, and every entry a scene.
for scene in "$bad_dir"/*.json; do
  name=$(basename "$scene")
  if ! awk -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$expect_file"; then
    fail "$name has no line in EXPECT"
  fi
done

# Each scene in a background job (starting MPI in `run` takes a while), at most 8 at a time.
checked=0
while read -r name text; do
  case "$name" in "" | "#"*) continue ;; esac
  scene="$bad_dir/$name"
  if [ ! -f "$scene" ]; then
    fail "EXPECT names $name, which is not in $bad_dir"
    continue
  fi
  if [ -z "$text" ]; then
    fail "EXPECT gives no text for $name"
    continue
  fi
  checked=$((checked + 1))
  d="$tmp/$checked"
  {
    expect_rejected "$d" "check $name" "$scene" "$text" check "$scene"
    expect_rejected "$d" "run $name" "$scene" "$text" run "$scene" --out "$d/out"
  } >"$d.log" 2>&1 &
  if [ $((checked % 8)) -eq 0 ]; then wait; fi
done <"$expect_file"

# A file that is not there, and a folder given as the scene.
missing="$tmp/no-such-scene.json"
expect_rejected "$tmp/m" "check (missing file)" "$missing" "cannot read" check "$missing" >"$tmp/m1.log"
expect_rejected "$tmp/m" "run (missing file)" "$missing" "cannot read" run "$missing" --out "$tmp/m/out" >"$tmp/m2.log"
mkdir -p "$tmp/a-folder.json"
expect_rejected "$tmp/m" "check (a folder)" "$tmp/a-folder.json" "cannot read" check "$tmp/a-folder.json" >"$tmp/m3.log"
wait
checked=$((2 * checked + 3))
while read -r line; do
  echo "$line"
  failures=$((failures + 1))
done < <(cat "$tmp"/*.log | grep '^FAIL')

# Good scenes pass `drift check`.
good=0
scenes=()
for arg in "$@"; do
  if [ -d "$arg" ]; then
    for scene in "$arg"/*.json; do
      [ -e "$scene" ] && scenes+=("$scene")
    done
  else
    scenes+=("$arg")
  fi
done
for scene in "${scenes[@]+"${scenes[@]}"}"; do
  "$drift" check "$scene" >"$tmp/good.stdout" 2>"$tmp/good.stderr"
  rc=$?
  good=$((good + 1))
  if [ "$rc" -ne 0 ]; then
    fail "check $scene (a valid scene): exit status $rc, expected 0: $(cat "$tmp/good.stderr")"
  fi
done

echo "$checked rejections and $good valid scenes checked, $failures failure(s)"
[ "$failures" -eq 0 ]
