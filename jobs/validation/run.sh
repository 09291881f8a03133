#!/usr/bin/env bash
# run.sh - the validation runs of docs/validation.md: granular column collapses at several aspect
# ratios against Lube et al. (2005), Martin & Moyce (1952)'s dam break, and Turek & Hron (2006)'s
# elastic beam (CSM3).
#
#   jobs/validation/run.sh [--backend cpu|cuda] [--scale coarse|paper] [--out DIR] [--only PATTERN]
#                          [--drop-frames]
#
# Runs every scene of the scale listed in jobs/validation/cases.csv (written, with the scenes, by
# make_scenes.py) with build/drift, measures each run's frames with build/drift_front (front and
# height at the wall, one CSV row per frame: DIR/CASE.csv; the beam: build/drift_probe, the
# displacement of its tip, point A) and compares them with the published figures (compare.py):
# DIR/columns.csv, DIR/CASE_front.csv (each dam break), DIR/beam_csm3_cycles.csv, DIR/summary.md, and with
# matplotlib, DIR/columns.png and DIR/dam_break.png. DIR/timing.csv has each run's wall time.
# The columns come with each of the sand's cone fits, column_aA (the default, "compression") and
# column_aA_ps ("plane_strain"), and for a <= 2 with the laboratory's gate (column_aA_ps_gate) or
# side walls (column_aA_ps_walls), and column_aA_lube ("plane_strain" at the 29.5 deg quoted for
# Lube et al.'s fine quartz sand, with a real sand's stiffness, 10 MPa).
# Defaults: --backend cpu, --scale coarse, --out validation-SCALE-BACKEND. --only runs the cases
# whose name matches a shell pattern (column_a1, 'column_*_ps', 'column_a[48]*') and compares what
# DIR holds. DRIFT_BIN, DRIFT_FRONT_BIN and DRIFT_PROBE_BIN
# name other binaries (default: build/drift, build/drift_front and build/drift_probe of this
# checkout). Frames stay in DIR/CASE/ unless --drop-frames (the paper scale writes about 2 GB of
# them). On the CPU backend, OMP_NUM_THREADS applies as for drift run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backend=cpu scale=coarse out='' only='' drop=0
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=${2:?}; shift 2 ;;
    --scale) scale=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --drop-frames) drop=1; shift ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$backend" in cpu | cuda) ;; *) echo "run.sh: --backend cpu or cuda, not '$backend'" >&2; exit 2 ;; esac
case "$scale" in coarse | paper) ;; *) echo "run.sh: --scale coarse or paper, not '$scale'" >&2; exit 2 ;; esac
out=${out:-validation-$scale-$backend}
drift=${DRIFT_BIN:-$root/build/drift}
front=${DRIFT_FRONT_BIN:-$root/build/drift_front}
probe=${DRIFT_PROBE_BIN:-$root/build/drift_probe}
for b in "$drift" "$front" "$probe"; do
  [ -x "$b" ] || { echo "run.sh: $b not found: build first (cmake --build build)" >&2; exit 2; }
done
# The case CASE of SCALE is to run: --only's pattern (none: every case) matches its name.
wanted() {
  [ "$1" = "$scale" ] || return 1
  [ -n "$only" ] || return 0
  # shellcheck disable=SC2254 # $only is a pattern on purpose
  case "$2" in $only) return 0 ;; *) return 1 ;; esac
}
any=0
while IFS=, read -r s case _; do
  if wanted "$s" "$case"; then any=1; fi
done <"$here/cases.csv"
[ "$any" = 1 ] || { echo "run.sh: no case matching '${only:-*}' at scale $scale in $here/cases.csv" >&2; exit 2; }
mkdir -p "$out"
[ -f "$out/timing.csv" ] || echo "case,backend,scale,particles,wall_s" >"$out/timing.csv"

while IFS=, read -r s case kind scene _ _ _ _ dx; do
  wanted "$s" "$case" || continue
  echo "run.sh: $case ($scene, $backend)" >&2
  t0=$(date +%s.%N)
  log="$out/$case.log"
  if ! "$drift" run "$here/$scene" --backend "$backend" --out "$out/$case" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "run.sh: $case failed; log in $log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  tail -n 2 "$log" | head -n 1 >&2
  n=$(sed -n 's/^done: .* \([0-9][0-9]*\) particles in .*/\1/p' "$log" | tail -n 1)
  awk -v c="$case" -v b="$backend" -v s="$scale" -v n="${n:-?}" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%s,%s,%s,%s,%.1f\n", c, b, s, n, t1 - t0 }' >>"$out/timing.csv"
  if [ "$kind" = beam ]; then
    # Point A, the beam's tip on its axis, at the slab's mid-plane (make_scenes.py: z = 2.5 dx).
    "$probe" "$out/$case" 0.6 0.2 "$(awk -v d="$dx" 'BEGIN { printf "%.9g", 2.5 * d }')" >"$out/$case.csv"
  else
    "$front" "$out/$case" >"$out/$case.csv"
  fi
  [ "$drop" = 0 ] || rm -rf "${out:?}/$case"
done <"$here/cases.csv"

# The comparison wants python3; the plots want matplotlib, which a python3 first on PATH (a
# virtualenv, pyenv) may lack while the system's has it: PYTHON names one.
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import matplotlib' 2>/dev/null; then py=$c; break; fi
  done
fi
"${py:-python3}" "$here/compare.py" --scale "$scale" --dir "$out"
