# stage.sh: sourced by scripts/test.sh. Runs each stage of the test command,
# times it, keeps its output and prints a summary table at the end.
#
#   stage NAME CMD ARGS...          run CMD; a failure marks the stage FAIL and
#                                   the run goes on
#   stage --fatal NAME CMD ARGS...  a failure ends the run here (with the
#                                   summary): later stages need what it built
#   stage_skip NAME REASON          record a stage that did not run, and why
#   stage_lane FUNCTION             run FUNCTION (a shell function whose
#                                   stages say `stage` as usual) in the
#                                   background, alongside the stages that
#                                   follow: a second lane, for the machine's
#                                   second core
#   stage_lane_wait                 wait for the lane; print each of its
#                                   stages' output and result
#   stage_summary                   the table, the total, the closing lines;
#                                   returns the run's exit status
#
# A lane's stages write their output to their logs only (two lanes on one
# console would interleave); stage_lane_wait prints each log whole when the
# lane is done, and the table marks those stages with "*". A stage in a lane
# must not need what a later stage of the other lane builds, nor write where
# the other lane reads.
#
# Each stage's output goes to the console and to $STAGE_LOGS/NN-name.log; the
# counts column is read from that log: a script's own closing line
# ("NAME: N passed, M failed"), else the sum of pytest's and ctest's closing
# lines, else empty.

STAGE_LOGS="${STAGE_LOGS:-$ROOT/build/test-logs}"
STAGE_T0=$(date +%s)
STAGE_NAMES=() STAGE_RESULTS=() STAGE_COUNTS=() STAGE_SECONDS=()
STAGE_STATUS=0
STAGE_LANE=""      # inside a lane: the file its stages' records go to
STAGE_LANE_PID=""  # in the main shell: the running lane
STAGE_LANE_REC=""
mkdir -p "$STAGE_LOGS"

# The counts of a stage's log (see above).
stage_counts() {
  awk '
    /^[A-Za-z0-9_.-]+: [0-9]+ passed, [0-9]+ failed$/ { own = $2 " passed, " $4 " failed" }
    /tests passed, [0-9]+ tests? failed out of [0-9]+/ {
      f = 0; for (i = 3; i <= NF; i++) if ($i == "failed" && $(i + 1) == "out") f = $(i - 2); t = $NF
      cp += t - f; cf += f; any = 1 }
    / in [0-9.]+s/ && /[0-9]+ (passed|failed|skipped|errors?)/ {
      line = $0; gsub(/=/, "", line)
      n = split(line, w, /[ ,]+/)
      for (i = 2; i <= n; i++) {
        if (w[i - 1] !~ /^[0-9]+$/) continue
        if (w[i] == "passed") pp += w[i - 1]
        else if (w[i] == "failed") pf += w[i - 1]
        else if (w[i] == "skipped") ps += w[i - 1]
        else if (w[i] ~ /^errors?$/) pe += w[i - 1]
      }
      any = 1 }
    END {
      if (own != "") {
        # A script with checks of its own: those, and the tests inside them.
        if (pp + pf + cp + cf) own = own " checks; " (pp + cp) " tests passed"
        print own; exit }
      if (!any) exit
      out = (pp + cp) " passed, " (pf + cf) " failed"
      if (pe) out = out ", " pe " errors"
      if (ps) out = out ", " ps " skipped"
      print out }' "$1"
}

stage() {
  local fatal=0
  if [ "$1" = --fatal ]; then fatal=1; shift; fi
  local name="$1"; shift
  local n t0 rc log result counts secs
  n="$(printf '%02d' $(( ${#STAGE_NAMES[@]} + 1 )))"
  [ -z "$STAGE_LANE" ] || n="L$(( $(wc -l <"$STAGE_LANE") + 1 ))"
  log="$STAGE_LOGS/$n-$(tr -c 'A-Za-z0-9.\n' '-' <<<"$name" | cut -c1-60).log"
  if [ -n "$STAGE_LANE" ]; then
    # In a lane: the log only; the main shell shows it when the lane ends.
    t0=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$log" >>"$STAGE_LANE"
    return 0
  fi
  printf '\n==== %s ====\n' "$name"
  t0=$(date +%s)
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - t0 ))
  counts="$(stage_counts "$log")"
  if [ "$rc" = 0 ]; then result=ok; else result=FAIL; STAGE_STATUS=1; fi
  STAGE_NAMES+=("$name") STAGE_RESULTS+=("$result") STAGE_COUNTS+=("$counts") STAGE_SECONDS+=("$secs")
  printf '==== %s: %s%s, %d s (run total %d s) ====\n' "$name" "$result" "${counts:+ ($counts)}" \
    "$secs" "$(( $(date +%s) - STAGE_T0 ))"
  if [ "$rc" != 0 ] && [ "$fatal" = 1 ]; then
    echo "(stage '$name' failed; the stages after it need what it builds: stopping here)"
    stage_summary
    exit 1
  fi
  return 0
}

stage_lane() {
  local fn="$1"
  STAGE_LANE_REC="$STAGE_LOGS/lane.records"
  : >"$STAGE_LANE_REC"
  printf '\n==== a second lane starts: %s (its stages run alongside the next ones; their output follows when it ends) ====\n' "$fn"
  ( STAGE_LANE="$STAGE_LANE_REC"; "$fn" ) </dev/null &
  STAGE_LANE_PID=$!
  STAGE_LANE_USED=1
}

stage_lane_wait() {
  [ -n "$STAGE_LANE_PID" ] || return 0
  local t0 name rc secs log counts result
  t0=$(date +%s)
  wait "$STAGE_LANE_PID"
  STAGE_LANE_PID=""
  printf '\n==== the second lane ended (waited %d s for it) ====\n' "$(( $(date +%s) - t0 ))"
  while IFS=$'\t' read -r name rc secs log; do
    printf '\n==== %s (ran alongside) ====\n' "$name"
    cat "$log"
    counts="$(stage_counts "$log")"
    if [ "$rc" = 0 ]; then result=ok
    elif [[ "$rc" == skip:* ]]; then result=skipped counts="${rc#skip:}"
    else result=FAIL; STAGE_STATUS=1; fi
    STAGE_NAMES+=("* $name") STAGE_RESULTS+=("$result") STAGE_COUNTS+=("$counts") STAGE_SECONDS+=("$secs")
    printf '==== %s: %s%s, %d s (ran alongside) ====\n' "$name" "$result" "${counts:+ ($counts)}" "$secs"
  done <"$STAGE_LANE_REC"
}

stage_skip() {
  if [ -n "$STAGE_LANE" ]; then
    printf '%s\t%s\t0\t%s\n' "$1" "skip:$2" /dev/null >>"$STAGE_LANE"
    return 0
  fi
  printf '\n==== %s: skipped (%s) ====\n' "$1" "$2"
  STAGE_NAMES+=("$1") STAGE_RESULTS+=("skipped") STAGE_COUNTS+=("$2") STAGE_SECONDS+=(0)
}

stage_summary() {
  stage_lane_wait  # (a --fatal stage's early summary still counts the lane)
  local i total=$(( $(date +%s) - STAGE_T0 )) np=0 nf=0 ns=0
  printf '\n==== summary ====\n'
  printf '%-4s %-58s %-7s %-34s %7s\n' '#' stage result counts seconds
  for i in "${!STAGE_NAMES[@]}"; do
    printf '%-4s %-58s %-7s %-34s %7s\n' "$((i + 1))" "${STAGE_NAMES[$i]:0:58}" "${STAGE_RESULTS[$i]}" \
      "${STAGE_COUNTS[$i]}" "${STAGE_SECONDS[$i]}"
    case "${STAGE_RESULTS[$i]}" in ok) np=$((np + 1)) ;; FAIL) nf=$((nf + 1)) ;; *) ns=$((ns + 1)) ;; esac
  done
  printf '%-4s %-58s %-7s %-34s %7s\n' '' total '' "$((total / 60)) min $((total % 60)) s" "$total"
  [ -z "${STAGE_LANE_USED:-}" ] || echo "(* ran in the second lane, alongside the others: the total is wall-clock time, not the sum)"
  echo "(stage logs: $STAGE_LOGS)"
  echo "test stages: $np passed, $nf failed, $ns skipped"
  if [ "$STAGE_STATUS" = 0 ]; then echo "all test suites passed"; else echo "SOME TESTS FAILED"; fi
  return "$STAGE_STATUS"
}
