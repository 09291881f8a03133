#!/bin/bash
# The measurements that need several GPUs of one host (issues #4, #8, #10), on a machine of the
# device tool's kinds nvidia-h100-x2 / nvidia-h200-x2 (or x4), in as few calls as fit the tool's
# 10 minutes a call. Each step writes its logs under $OUT; a summary is printed last.
#
#   here:        tools/pack-device-deps.sh .device                      (carried as .device)
#   on the GPU:  tools/device_multi.sh build tests        (first call: about 5 minutes on 4 x H200)
#                tools/device_multi.sh build island scenes ranks
#                                   (second call, about 5 minutes; the build is kept on a warm machine)
# Under the device tool ($OUT set) every log and CSV ends up in $OUT/logs.tgz (the tool returns 8
# files at most); PACK=0 leaves them as they are.
#
# Steps, in the order given:
#   build   a Release build in build-multi (kept between calls on a warm machine; rebuilt only
#           where the tree changed); the GPUs and their links (nvidia-smi) into gpus.txt.
#   tests   `ctest -L gpu`: with 2 GPUs present the island's tests (check_island.sh), the
#           restarts between 1 and 2 GPUs (check_signal.sh) and the ranks' tests run on distinct
#           GPUs instead of one GPU standing in for several.
#   island  `drift bench --gpus 1,2,G` on the Sand Blocks family (the multi-GPU efficiency
#           e = t1 / (n tn), issue #4), then the paper's two alternatives (--island-barrier
#           events, --island-reduce p2p_atomics) on l = 12 and 16 x l = 46 on G GPUs, and the
#           largest case with CUDA_MODULE_LOADING=EAGER; with B_ALT (VAR=VALUE, space-separated:
#           device_env.sh's each_alt), the family once more on 1, 2 and G GPUs with each setting,
#           e.g. B_ALT=DRIFT_BARRIER_TIMEOUT=30, before the alternatives.
#   scenes  issue #9: Fountain and Crawling in Snow (both steps) on 1, 2 and G GPUs.
#   ranks   issue #8 on one host: the dam break on 2 ranks x 1 GPU against 1 rank x 2 GPUs
#           (compare_frames by particle id at the last frame), the same Sand Blocks l = 46 timed
#           both ways, and weak scaling from 1 to 2 ranks of 1 GPU (jobs/bench/weak_1.json,
#           weak_2.json, weak_4.json where there are 4 GPUs: 3.1M particles per GPU), and the
#           2-rank runs again with --steps-ahead off (each step's G2P queued after the ranks' vote).
#   trace   DRIFT_TRACE=1 runs of l = 12 on G GPUs (10 frames), of 16 x l = 46 on 1 and G GPUs and
#           of weak_2 (2 ranks, 60 frames),
#           each summed by tools/trace_summary.py, whole (trace_*.summary.txt), over its last
#           third (trace_*.last_third.txt) and frame by frame (trace_*.frames.txt).
# env: FRAMES (bench frames; default each scene's own), ISLAND_ALTS (0: island without the alternatives),
#      TESTS_LIMIT, BENCH_LIMIT (seconds), JOBS (ctest -j), DEPS and OUT (tools/device_env.sh).
set -uo pipefail
[ $# -gt 0 ] || { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
# shellcheck source=tools/device_env.sh
. "$(dirname "$0")/device_env.sh"
cd "$root" || exit 1
b=$root/build-multi
drift=$b/drift
frames=()
[ -n "${FRAMES:-}" ] && frames=(--frames "$FRAMES")
summary=()
note() { summary+=("$*"); echo "device_multi: $*"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
G=$((ngpu >= 4 ? 4 : ngpu))
glist=1,$G
[ "$G" -ge 4 ] && glist=1,2,$G
# Every step runs under a limit of its own (seconds), so that a hang (a barrier that never opens on
# real GPUs, say) leaves the other steps their time and the logs come back.
lim() { timeout -k 10 "$1" "${@:2}"; }

for step in "$@"; do
  t0=$SECONDS
  case "$step" in
    build)
      device_build "$b" "" || exit 1
      { nvidia-smi -L; nvidia-smi topo -m; } >"$out/gpus.txt" 2>&1
      note "build: $((SECONDS - t0)) s; $ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs)"
      ;;
    tests)
      lim "${TESTS_LIMIT:-420}" ctest --test-dir "$b" -L gpu -j "${JOBS:-4}" --output-on-failure >"$out/tests.log" 2>&1 ||
        note "tests: ctest ended with status $? (124: past TESTS_LIMIT)"
      note "tests: $(grep -E '% tests passed' "$out/tests.log" | tail -1) in $((SECONDS - t0)) s"
      grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|Not Run)' "$out/tests.log" | while read -r l; do note "  failed: $l"; done
      ;;
    island)
      [ "$ngpu" -ge 2 ] || { note "island: skipped, $ngpu GPU(s)"; continue; }
      # island_run NAME: the family on 1, 2 and G GPUs into NAME.csv and NAME.log (a line where it fails)
      island_run() {
        lim "${BENCH_LIMIT:-240}" "$drift" bench --backend cuda --gpus "$glist" "${frames[@]}" --profile-frames 0 \
          --csv "$out/$1.csv" >"$out/$1.log" 2>&1 || echo "$1: drift bench failed: $(tail -1 "$out/$1.log")"
      }
      while read -r l; do note "$l"; done < <(island_run island)
      # the same family with each B_ALT setting (island_alt1.csv, ...)
      while read -r l; do note "$l"; done < <(each_alt island_alt island_run)
      # the paper's two alternatives on the smallest and the largest case, on G GPUs (their 1-GPU
      # times are the rows above); ISLAND_ALTS=0 skips them and the eager run
      [ "${ISLAND_ALTS:-1}" = 1 ] || { note "island: $((SECONDS - t0)) s (ISLAND_ALTS=0)"; continue; }
      for alt in "--island-barrier events" "--island-reduce p2p_atomics"; do
        tag=$(echo "$alt" | awk '{print $2}')
        # shellcheck disable=SC2086
        lim "${BENCH_LIMIT:-240}" "$drift" bench jobs/bench/sand_blocks_l12.json jobs/bench/sand_blocks_l46x16.json --backend cuda \
          --gpus "$G" $alt "${frames[@]}" --profile-frames 0 --csv "$out/island_$tag.csv" >"$out/island_$tag.log" 2>&1 ||
          note "island $alt: drift bench failed: $(tail -1 "$out/island_$tag.log")"
      done
      # every kernel loaded when the GPUs are set up, not at its first launch (CUDA's lazy loading)
      CUDA_MODULE_LOADING=EAGER lim "${BENCH_LIMIT:-240}" "$drift" bench jobs/bench/sand_blocks_l46x16.json --backend cuda \
        --gpus "$G" "${frames[@]}" --profile-frames 0 --csv "$out/island_eager.csv" >"$out/island_eager.log" 2>&1 ||
        note "island eager: drift bench failed: $(tail -1 "$out/island_eager.log")"
      note "island: $((SECONDS - t0)) s"
      ;;
    scenes)
      # issue #9: the paper's other two scenes on 1, 2 and G GPUs (fps of 1/60 s frames, steps per rebuild-mapping)
      lim "${BENCH_LIMIT:-240}" "$drift" bench jobs/bench/fountain.json jobs/bench/crawling_snow.json \
        jobs/bench/crawling_snow_paper_dt.json --backend cuda --gpus "$glist" "${frames[@]}" --profile-frames 0 \
        --csv "$out/scenes.csv" >"$out/scenes.log" 2>&1 || note "scenes: drift bench failed: $(tail -1 "$out/scenes.log")"
      note "scenes: $((SECONDS - t0)) s"
      ;;
    ranks)
      [ "$ngpu" -ge 2 ] || { note "ranks: skipped, $ngpu GPU(s)"; continue; }
      rm -rf "$out/r2x1" "$out/r1x2"
      lim 150 mpirun -n 2 --oversubscribe "$drift" run jobs/scenes/dam_break.json --backend cuda --gpus 1 --frames 4 --quiet \
        --out "$out/r2x1" >"$out/ranks_run.log" 2>&1 &&
        lim 150 "$drift" run jobs/scenes/dam_break.json --backend cuda --gpus 2 --frames 4 --quiet --out "$out/r1x2" \
          >>"$out/ranks_run.log" 2>&1 &&
        note "ranks: 2 x 1 against 1 x 2, $("$b/tests/sim/compare_frames" "$out/r2x1/frame_00004.h5" \
          "$out/r1x2/frame_00004.h5" 1e-3 2e-2 | tail -1)" ||
        note "ranks: the dam break runs failed: $(tail -2 "$out/ranks_run.log" | xargs)"
      lim 150 "$drift" bench jobs/bench/sand_blocks_l46.json --backend cuda --gpus 2 "${frames[@]}" --profile-frames 0 \
        --csv "$out/ranks_1x2.csv" >"$out/ranks_1x2.log" 2>&1
      lim 150 mpirun -n 2 --oversubscribe "$drift" bench jobs/bench/sand_blocks_l46.json --backend cuda --gpus 1 \
        "${frames[@]}" --profile-frames 0 --csv "$out/ranks_2x1.csv" >"$out/ranks_2x1.log" 2>&1
      lim 150 mpirun -n 1 "$drift" bench jobs/bench/weak_1.json --backend cuda --gpus 1 "${frames[@]}" --profile-frames 0 \
        --csv "$out/weak_1.csv" >"$out/weak_1.log" 2>&1
      lim 150 mpirun -n 2 --oversubscribe "$drift" bench jobs/bench/weak_2.json --backend cuda --gpus 1 "${frames[@]}" \
        --profile-frames 0 --csv "$out/weak_2.csv" >"$out/weak_2.log" 2>&1
      [ "$ngpu" -ge 4 ] && lim 150 mpirun -n 4 --oversubscribe "$drift" bench jobs/bench/weak_4.json --backend cuda --gpus 1 \
        "${frames[@]}" --profile-frames 0 --csv "$out/weak_4.csv" >"$out/weak_4.log" 2>&1
      # the same with each step's G2P queued only after the ranks' vote (--steps-ahead's default,
      # auto, is on where each rank has GPUs of its own)
      lim 150 mpirun -n 2 --oversubscribe "$drift" bench jobs/bench/sand_blocks_l46.json --backend cuda --steps-ahead off \
        --gpus 1 "${frames[@]}" --profile-frames 0 --csv "$out/ranks_2x1_noahead.csv" >"$out/ranks_2x1_noahead.log" 2>&1
      lim 150 mpirun -n 2 --oversubscribe "$drift" bench jobs/bench/weak_2.json --backend cuda --gpus 1 --steps-ahead off \
        "${frames[@]}" --profile-frames 0 --csv "$out/weak_2_noahead.csv" >"$out/weak_2_noahead.log" 2>&1
      note "ranks: $((SECONDS - t0)) s"
      ;;
    trace)
      # DRIFT_TRACE=1 (log.h) of the cases whose efficiency is furthest from the targets: l = 12 on
      # G GPUs, and weak scaling's 2 ranks; each log summed by tools/trace_summary.py
      [ "$ngpu" -ge 2 ] || { note "trace: skipped, $ngpu GPU(s)"; continue; }
      DRIFT_TRACE=1 lim 120 "$drift" bench jobs/bench/sand_blocks_l12.json --backend cuda --gpus "$G" --frames 10 \
        --profile-frames 0 >"$out/trace_l12_g$G.out" 2>"$out/trace_l12_g$G.log"
      # 16 x l = 46 (12.5M particles) on G GPUs and on 1: the island's large case, whose loss
      # against 1 GPU is in its rebuild-mappings and reductions (TRACE_L46X16=0 skips it)
      if [ "${TRACE_L46X16:-1}" = 1 ]; then
        for g in 1 "$G"; do
          DRIFT_TRACE=1 lim 120 "$drift" bench jobs/bench/sand_blocks_l46x16.json --backend cuda --gpus "$g" \
            "${frames[@]}" --profile-frames 0 >"$out/trace_l46x16_g$g.out" 2>"$out/trace_l46x16_g$g.log"
        done
      fi
      # weak_2 whole (its first 10 frames step as fast as one rank; the loss is later, where the
      # sand reaches the cut), summed whole and over its last third
      DRIFT_TRACE=1 lim 150 mpirun -n 2 --oversubscribe "$drift" bench jobs/bench/weak_2.json --backend cuda --gpus 1 \
        --profile-frames 0 >"$out/trace_weak_2.out" 2>"$out/trace_weak_2.log"
      for l in "$out"/trace_*.log; do
        python3 "$root/tools/trace_summary.py" "$l" >"${l%.log}.summary.txt" 2>&1
        python3 "$root/tools/trace_summary.py" --tail 0.33 "$l" >"${l%.log}.last_third.txt" 2>&1
        python3 "$root/tools/trace_summary.py" --frames "$l" >"${l%.log}.frames.txt" 2>&1
      done
      note "trace: $((SECONDS - t0)) s"
      ;;
    *)
      echo "device_multi: unknown step '$step' (build, tests, island, scenes, ranks, trace)" >&2
      exit 2
      ;;
  esac
done

# The benchmarks' rows, from their CSVs (columns by name).
python3 - "$out" <<'EOF'
import csv, glob, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    for r in csv.DictReader(open(path)):
        rows.append((os.path.basename(path)[:-4], r))
if rows:
    print(f"{'run':<24}{'case':<22}{'gpus':>5}{'ms/frame':>10}{'particle-steps/s':>18}{'e':>7}  island")
for run, r in rows:
    e = f"{100 * float(r['efficiency']):.1f}%" if r.get("efficiency") else "-"
    isl = "/".join(x for x in (r.get("island_barrier", ""), r.get("island_reduce", "")) if x) or "-"
    d = r.get("device", "")
    gpus = d.split(" x ")[0] if " x " in d else "1"  # "2 x NVIDIA H100 ..." on an island
    print(f"{run:<24}{r['case']:<22}{gpus!s:>5}{float(r['ms_per_frame']):>10.2f}"
          f"{float(r['particle_steps_per_s']):>18.4g}{e:>7}  {isl}")
EOF
for l in "${summary[@]}"; do echo "$l"; done
pack_out
