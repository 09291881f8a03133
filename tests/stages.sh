# tests/stages.sh - the stages of `./setup.sh test` and their one summary (bash, sourced).
# Every stage records whether it passed, its wall time and, for a ctest stage, its counts and the
# names of its failed tests, whatever the stages before it did; stages_summary prints one table of
# every stage, last, so that a failure of the first stage is not scrolled away by the next ones.
#   stage_run NAME CMD...              a stage that passes where CMD exits 0 (a build); a CMD
#                                      that fails may name its log in stage_log
#   stage_ctest NAME LOG CTEST_ARGS... ctest CTEST_ARGS..., its output shown and kept in LOG; passes
#                                      where ctest exits 0 (every test passed or skipped)
#   stage_skip NAME WHY                a stage not run, and why
#   stage_passed NAME                  status 0 where stage NAME ran and passed
#   stages_summary                     the table; status 1 where any stage failed or was not run

stage_name=() stage_result=() stage_counts=() stage_secs=() stage_notes=() stage_log=""

# stage_record NAME RESULT COUNTS SECONDS NOTES (NOTES: lines printed under the stage's row)
stage_record() {
  stage_name+=("$1") stage_result+=("$2") stage_counts+=("$3") stage_secs+=("$4") stage_notes+=("$5")
}

stage_run() {
  local name=$1 start=$SECONDS rc=0
  shift
  stage_log=""
  "$@" || rc=$?
  if [ $rc -eq 0 ]; then
    stage_record "$name" passed "" $((SECONDS - start)) ""
  else
    stage_record "$name" FAILED "" $((SECONDS - start)) "exit status $rc${stage_log:+; log: $stage_log}"
  fi
  stage_log=""
}

# The counts come from ctest's closing lines:
#   94% tests passed, 2 tests failed out of 86
#   The following tests did not run:
#   	 30 - test_physics_device (Skipped)
#   The following tests FAILED:
#   	 12 - test_sand_pile (Timeout)
stage_ctest() {
  local name=$1 log=$2 start=$SECONDS rc=0
  shift 2
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  local secs=$((SECONDS - start)) total failed skipped notes
  total=$(sed -n 's/^[0-9]*% tests passed, [0-9]* tests\{0,1\} failed out of \([0-9]*\)$/\1/p' "$log" | tail -n 1)
  failed=$(sed -n 's/^[0-9]*% tests passed, \([0-9]*\) tests\{0,1\} failed out of [0-9]*$/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n '/^The following tests did not run:/,/^$/p' "$log" | grep -c -E '^[[:space:]]*[0-9]+ - .* \((Skipped|Disabled)\)$' || true)
  notes=$(sed -n '/^The following tests FAILED:/,/^$/p' "$log" |
          sed -n 's/^[[:space:]]*[0-9]* - \(.*\)$/failed: \1/p')
  if [ -z "$total" ]; then
    if grep -q "^No tests were found" "$log"; then notes="no test matched"; else notes="no ctest summary"; fi
    notes+=" (ctest exit status $rc; log: $log)"
    stage_record "$name" FAILED "" "$secs" "$notes"
    return
  fi
  local counts="$((total - failed - skipped)) passed, $failed failed, $skipped skipped of $total"
  if [ $rc -eq 0 ] && [ "$failed" -eq 0 ]; then
    stage_record "$name" passed "$counts" "$secs" ""
  else
    [ -n "$notes" ] || notes="ctest exit status $rc"
    stage_record "$name" FAILED "$counts" "$secs" "$notes"$'\n'"log: $log"
  fi
}

stage_skip() {
  stage_record "$1" "not run" "" 0 "$2"
}

stage_passed() {
  local i
  for i in "${!stage_name[@]}"; do
    [ "${stage_name[$i]}" = "$1" ] && [ "${stage_result[$i]}" = passed ] && return 0
  done
  return 1
}

# 3723 -> 1h02m03s, 75 -> 1m15s, 9 -> 9s
stage_time() {
  local s=$1
  if [ "$s" -ge 3600 ]; then printf '%dh%02dm%02ds' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
  elif [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60))
  else printf '%ds' "$s"; fi
}

stages_summary() {
  local i line failed=() not_run=() total=0
  printf '\nsetup: summary\n'
  printf '  %-12s %-8s %-8s %s\n' stage result time tests
  for i in "${!stage_name[@]}"; do
    total=$((total + stage_secs[i]))
    line=$(printf '  %-12s %-8s %-8s %s' "${stage_name[$i]}" "${stage_result[$i]}" "$(stage_time "${stage_secs[$i]}")" \
      "${stage_counts[$i]}")
    printf '%s\n' "${line%"${line##*[! ]}"}"
    if [ -n "${stage_notes[$i]}" ]; then
      while IFS= read -r line; do printf '  %-12s   %s\n' "" "$line"; done <<<"${stage_notes[$i]}"
    fi
    case "${stage_result[$i]}" in
      passed) ;;
      "not run") not_run+=("${stage_name[$i]}") ;;
      *) failed+=("${stage_name[$i]}") ;;
    esac
  done
  if [ ${#failed[@]} -eq 0 ] && [ ${#not_run[@]} -eq 0 ]; then
    printf 'setup: every stage passed (%s)\n' "$(stage_time $total)"
    return 0
  fi
  local list=""
  [ ${#failed[@]} -eq 0 ] || list=$(printf '%s, ' "${failed[@]}")
  line="setup: FAILED: ${list%, }"
  if [ ${#not_run[@]} -gt 0 ]; then
    list=$(printf '%s, ' "${not_run[@]}")
    line+="; not run: ${list%, }"
  fi
  printf '%s (%s)\n' "$line" "$(stage_time $total)"
  return 1
}
