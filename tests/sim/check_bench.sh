#!/usr/bin/env bash
# check_bench.sh - `drift bench` as users meet it, on the CPU backend (no GPU needed).
#
#   check_bench.sh DRIFT_EXE SCENE_A PARTICLES_A SCENE_B PARTICLES_B
#
# (--deterministic: also float and deterministic rows of one scene with the cost of the latter;
# the last CSV columns fps, steps_per_rebuild and paper_fps, the latter for a case named fountain;
# island_barrier and island_reduce, empty on the cpu, and --island-barrier/--island-reduce errors.)
# Benchmarks the two small scenes for 2 frames with --csv: exit status 0, one table row per
# scene on stdout, and a CSV with the header and one row per scene, in order, with the right
# backend, frames and particle count (and no FILE.tmp left behind). Then the errors: a bad flag,
# a missing value, a bad backend, a bad frame count and a missing scene (also after a good one:
# nothing may run) exit with status 2 and one line on stderr starting "drift: "; without scene
# arguments the default scenes (jobs/bench/) are found and read before anything runs, so an
# unwritable --csv path fails at once with status 3. Then --write: the frames written as drift run
# writes them and the write table's row. Prints every failure, exits 1 if any.
set -u

if [ $# -ne 5 ]; then
  echo "usage: $0 DRIFT_EXE SCENE_A PARTICLES_A SCENE_B PARTICLES_B" >&2
  exit 2
fi
drift=$1 scene_a=$2 count_a=$3 scene_b=$4 count_b=$5

# drift starts MPI as a singleton; let Open MPI run as root in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/drift-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# A run on two scenes, with the CSV.
csv="$tmp/bench.csv"
"$drift" bench "$scene_a" "$scene_b" --backend cpu --frames 2 --profile-frames 1 --csv "$csv" \
  >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
echo "--- drift bench stdout:"
cat "$tmp/stdout"
echo "--- stderr:"
cat "$tmp/stderr"
echo "--- $csv:"
cat "$csv" 2>/dev/null
echo "---"
[ "$rc" -eq 0 ] || fail "bench: exit status $rc, expected 0"
name_a=$(basename "$scene_a" .json)
name_b=$(basename "$scene_b" .json)
[ "$(grep -c '^case  *backend  *device  *particles' "$tmp/stdout")" -eq 1 ] || fail "bench: no table header on stdout"
grep -Eq "^$name_a +cpu +cpu \([0-9]+ threads?\) +$count_a +2 " "$tmp/stdout" || fail "bench: no table row for $name_a"
grep -Eq "^$name_b +cpu +cpu \([0-9]+ threads?\) +$count_b +2 " "$tmp/stdout" || fail "bench: no table row for $name_b"
[ "$(wc -l <"$tmp/stdout")" -eq 3 ] || fail "bench: stdout is not a header and two rows"
if [ ! -f "$csv" ]; then
  fail "bench: $csv was not written"
else
  [ ! -e "$csv.tmp" ] || fail "bench: $csv.tmp was left behind"
  head -n 1 "$csv" | grep -q '^case,scene,backend,device,particles,frames,steps,seconds,ms_per_frame,particle_steps_per_s,steps_per_s,rebuilds_per_frame,efficiency,rebuild_pct,p2g_pct,grid_pct,g2p_pct,mode,deterministic_cost,fps,steps_per_rebuild,paper_fps,island_barrier,island_reduce,profile_from,rebuild_us,p2g_us,grid_us,g2p_us,rank_kb_per_step,mpi_wait_pct,vote_wait_pct,migrated,rebalances$' ||
    fail "bench: CSV header is $(head -n 1 "$csv")"
  [ "$(wc -l <"$csv")" -eq 3 ] || fail "bench: CSV has $(wc -l <"$csv") lines, expected a header and 2 rows"
  # Row: case, scene, backend, device, particles, frames, steps (36 a frame), seconds, then numbers
  # from them: ms a frame = 1000 seconds / frames, particle-steps/s = particles x steps / seconds,
  # steps/s = steps / seconds (within 0.1%: seconds has 6 decimals; the particle counts are
  # constant); the last three: fps = 1000 / ms_per_frame (rounding), steps per rebuild-mapping =
  # steps / (rebuilds_per_frame x frames; empty without a rebuild), and the paper's fps, empty for
  # these cases; then the profiled run: its start (0 frames before it) and each phase's us per step,
  # whose shares are the *_pct columns (to their rounding); then the ranks' exchange, empty on one
  # rank.
  awk -F, -v a="$name_a" -v na="$count_a" -v b="$name_b" -v nb="$count_b" '
    function tail_ok() {
      rates = $8 > 0 && ($9 * $6 / (1000 * $8) - 1)^2 < 1e-6 && ($10 * $8 / ($5 * $7) - 1)^2 < 1e-6 && ($11 * $8 / $7 - 1)^2 < 1e-6
      spr = $12 > 0 ? ($21 * $12 * $6 / $7 - 1)^2 < 1e-6 : $21 == ""
      us = $26 + $27 + $28 + $29
      shares = us > 0 && ($27 / us * 100 - $15)^2 < 0.02 && ($29 / us * 100 - $17)^2 < 0.02
      ranks = $30 == "" && $31 == "" && $32 == "" && $33 == "" && $34 == ""
      return NF == 34 && ranks && rates && $20 > 0 && ($20 * $9 / 1000 - 1)^2 < 1e-6 && spr && $22 == "" && $23 == "" && $24 == "" &&
             $25 == "0" && $27 > 0 && $29 > 0 && shares
    }
    NR == 2 { ok_a = $1 == a && $3 == "cpu" && $5 == na && $6 == 2 && $7 == 72 && $9 > 0 && $10 > 0 && $18 == "float" && $19 == "" && tail_ok() }
    NR == 3 { ok_b = $1 == b && $3 == "cpu" && $5 == nb && $6 == 2 && $7 == 72 && $9 > 0 && $10 > 0 && $18 == "float" && $19 == "" && tail_ok() }
    END { exit !(ok_a && ok_b) }' "$csv" || fail "bench: CSV rows do not hold $name_a ($count_a particles) and $name_b ($count_b particles), cpu, 2 frames, 72 steps, ms_per_frame, particle_steps_per_s and steps_per_s from particles, steps and seconds, fps = 1000 / ms_per_frame, steps_per_rebuild = steps / rebuilds, no paper_fps"
fi

# --deterministic: the scene in float mode, then in deterministic mode with its cost (the ratio of
# the times per frame) in the table and the CSV.
dcsv="$tmp/det.csv"
"$drift" bench "$scene_a" --backend cpu --frames 1 --profile-frames 0 --deterministic --csv "$dcsv" \
  >"$tmp/det.stdout" 2>"$tmp/det.stderr" || fail "bench --deterministic: exit status $?: $(cat "$tmp/det.stderr")"
cat "$tmp/det.stdout"
grep -Eq ' float +- +-$' "$tmp/det.stdout" || fail "bench --deterministic: no float row in the table"
grep -Eq ' det +[0-9.]+x +-$' "$tmp/det.stdout" || fail "bench --deterministic: no deterministic row with its cost in the table"
awk -F, -v a="$name_a" -v na="$count_a" '
  NR == 2 { ok1 = $1 == a && $5 == na && $18 == "float" && $19 == "" }
  NR == 3 { ok2 = $1 == a && $5 == na && $18 == "deterministic" && $19 > 0 && $19 == $19 + 0 }
  END { exit !(ok1 && ok2 && NR == 3) }' "$dcsv" || fail "bench --deterministic: CSV is not a float row and a deterministic row with its cost: $(cat "$dcsv")"

# --profile-from: the profiled run simulates frame 1 unprofiled and profiles frame 2; its CSV says
# so (profile_from 1) and has the phase times, and the log names the frames.
fcsv="$tmp/from.csv"
"$drift" bench "$scene_a" --backend cpu --frames 1 --profile-frames 1 --profile-from 1 --csv "$fcsv" \
  >"$tmp/from.stdout" 2>"$tmp/from.stderr" || fail "bench --profile-from: exit status $?: $(cat "$tmp/from.stderr")"
grep -q "bench $name_a: profiled frames 2-2, per step: rebuild" "$tmp/from.stderr" ||
  fail "bench --profile-from 1: the log does not name the profiled frames 2-2: $(cat "$tmp/from.stderr")"
awk -F, 'NR == 2 { ok = NF == 34 && $25 == "1" && $27 > 0 && $29 > 0 && $15 > 0 } END { exit !(ok && NR == 2) }' "$fcsv" ||
  fail "bench --profile-from 1: CSV row has no profile_from 1 with phase times: $(cat "$fcsv")"
# without profiling, the profiled run's columns stay empty
awk -F, 'NR == 2 { ok = NF == 34 && $25 == "" && $26 == "" && $29 == "" } END { exit !ok }' "$dcsv" ||
  fail "bench --profile-frames 0: CSV row has profiled-run columns: $(sed -n 2p "$dcsv")"

# The paper's own fps beside drift's for the cases it reports so (by case name): a scene named
# fountain.json shows 55.9 in the table's "paper" column and the CSV's paper_fps.
cp "$scene_a" "$tmp/fountain.json"
pcsv="$tmp/paper.csv"
"$drift" bench "$tmp/fountain.json" --backend cpu --frames 1 --profile-frames 0 --csv "$pcsv" \
  >"$tmp/paper.stdout" 2>"$tmp/paper.stderr" || fail "bench fountain.json: exit status $?: $(cat "$tmp/paper.stderr")"
cat "$tmp/paper.stdout"
grep -Eq '^fountain +cpu .* 55\.9 ' "$tmp/paper.stdout" || fail "bench: no paper fps 55.9 in the table row of fountain"
awk -F, 'NR == 2 { ok = $1 == "fountain" && $22 == "55.9" } END { exit !(ok && NR == 2) }' "$pcsv" ||
  fail "bench: CSV of fountain.json has no paper_fps 55.9: $(cat "$pcsv")"

# expect_error LABEL STATUS TEXT ARGS...: drift ARGS must exit with STATUS, print exactly one line
# on stderr, starting "drift: " and containing TEXT, and print nothing on stdout.
expect_error() {
  local label=$1 status=$2 text=$3
  shift 3
  "$drift" "$@" >"$tmp/e.stdout" 2>"$tmp/e.stderr"
  local rc=$?
  local err
  err=$(cat "$tmp/e.stderr")
  [ "$rc" -eq "$status" ] || fail "$label: exit status $rc, expected $status (stderr: $err)"
  if [ "$(wc -l <"$tmp/e.stderr")" -ne 1 ] || [ -n "$(tail -c 1 "$tmp/e.stderr")" ]; then
    fail "$label: stderr is not exactly one line: $err"
  fi
  case "$err" in "drift: "*"$text"*) ;; *) fail "$label: message does not start with 'drift: ' and contain '$text': $err" ;; esac
  [ ! -s "$tmp/e.stdout" ] || fail "$label: something was printed on stdout: $(cat "$tmp/e.stdout")"
}

missing="$tmp/no-such-scene.json"
expect_error "bad flag" 2 "unknown option '--fast'" bench "$scene_a" --fast
expect_error "missing value" 2 "--csv needs a value" bench "$scene_a" --csv
expect_error "bad backend" 2 "--backend: 'opencl' is not one of auto, cpu, cuda" bench "$scene_a" --backend opencl
expect_error "bad frames" 2 "--frames: '0' is not" bench "$scene_a" --frames 0
expect_error "bad profile frames" 2 "--profile-frames: 'x' is not" bench "$scene_a" --profile-frames x
expect_error "bad profile start" 2 "--profile-from: '-1' is not" bench "$scene_a" --profile-from -1
expect_error "profile start, nothing profiled" 2 "--profile-from 3: there is no profiled run" bench "$scene_a" \
  --profile-from 3 --profile-frames 0
expect_error "bad island barrier" 2 "--island-barrier: 'mutex' is not one of spin, events" bench "$scene_a" --island-barrier mutex
expect_error "bad island reduction" 2 "--island-reduce: 'x' is not one of double_buffer, p2p_atomics" bench "$scene_a" --island-reduce x
expect_error "bad gpu list" 2 "--gpus: '1,,2' is not a comma-separated list" bench "$scene_a" --gpus 1,,2
expect_error "too many gpus" 2 "--gpus: '16' is not a comma-separated list of GPU counts from 1 to 8" bench "$scene_a" --gpus 16
expect_error "run: bad gpus" 2 "--gpus: '0' is not a number of GPUs from 1 to 8" run "$scene_a" --gpus 0
expect_error "run: bad island barrier" 2 "--island-barrier: 'x' is not one of spin, events" run "$scene_a" --island-barrier x
expect_error "run: island reduction without value" 2 "--island-reduce needs a value" run "$scene_a" --island-reduce
expect_error "missing scene" 2 "$missing: cannot read" bench "$missing" --backend cpu
expect_error "missing scene after a good one" 2 "$missing: cannot read" bench "$scene_a" "$missing" --backend cpu
expect_error "default scenes, unwritable csv" 3 "cannot write $tmp/no/such/folder/out.csv.tmp" \
  bench --backend cpu --csv "$tmp/no/such/folder/out.csv"

# --write DIR: the case run once more with its frames written into DIR/CASE/, as drift run writes
# them (frames 0-2, whole, listed in frames.xdmf, no temporary file), beside the filesystem's own
# speed (its test files removed); one row of the write table with the frame count, a frame's size
# (the files' mean) and the ratios.
wdir="$tmp/written"
"$drift" bench "$scene_a" --backend cpu --frames 2 --profile-frames 0 --write "$wdir" >"$tmp/wout" 2>"$tmp/werr"
rc=$?
[ "$rc" -eq 0 ] || { fail "bench --write: exit status $rc"; cat "$tmp/werr"; }
case_name=$(basename "$scene_a" .json)
for f in 0 1 2; do
  [ -s "$wdir/$case_name/frame_0000$f.h5" ] || fail "bench --write: $wdir/$case_name/frame_0000$f.h5 missing"
done
listed=$(grep -o 'frame_[0-9]*\.h5' "$wdir/$case_name/frames.xdmf" 2>/dev/null | sort -u | tr '\n' ' ')
[ "$listed" = "frame_00000.h5 frame_00001.h5 frame_00002.h5 " ] || fail "bench --write: frames.xdmf lists '$listed'"
left=$(find "$wdir" -name '*.tmp' -o -name '.fs_speed_*' | head -3)
[ -z "$left" ] || fail "bench --write left behind: $left"
row=$(awk -v c="$case_name" '/^frames written/ { t = 1 } t && $1 == c' "$tmp/wout")
if [ -z "$row" ]; then
  fail "bench --write: no row for $case_name in the write table"; cat "$tmp/wout"
else
  set -- $row
  mean=$(stat -c %s "$wdir/$case_name"/frame_0000[012].h5 | awk '{ s += $1 } END { printf "%.1f", s / NR / 1048576 }')
  [ "$2" = 2 ] || fail "bench --write: frames column '$2', expected 2"
  [ "$3" = "$mean" ] || fail "bench --write: MiB a frame '$3', the files' mean is $mean"
  awk -v w="$5" -v s="$4" -v r="$6" 'BEGIN { exit !(w > 0 && s > 0 && (r - w / s) ^ 2 < 0.0001) }' ||
    fail "bench --write: write/step '$6' is not write '$5' over step '$4'"
  awk -v g="$7" -v f="$8" -v p="$9" 'BEGIN { sub("%", "", p); exit !(g > 0 && f > 0 && (p - 100 * g / f) ^ 2 < 1) }' ||
    fail "bench --write: writer/fs '$9' is not writer '$7' over fs '$8'"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
