#!/bin/sh
# A plugin that crashes, aborts or hangs inside slots costs each broken check
# its FAIL line (the signal or the deadline, the check's name, the call it
# was in) and the run still ends with its summary line.
#
#   isolation.sh CONFORMANCE PLUGIN IDENTIFIER abort|segv|hang SANITIZE
#
# SANITIZE is the build's DEVBUF_SANITIZE: under AddressSanitizer a SIGSEGV
# is ASan's report and exit status 1, not a death by signal.
bin=$1 plugin=$2 id=$3 mode=$4 san=$5
out=$(DEVBUF_PLUGINS=$plugin "$bin" --timeout 3 "$id" 2>/dev/null)
rc=$?
echo "$out"
fail() { echo "isolation.sh: $*"; exit 1; }
[ "$rc" -eq 1 ] || fail "exit status $rc, want 1"
echo "$out" | tail -n 1 | grep -Eq '^[0-9]+ passed, [0-9]+ failed, 0 skipped$' ||
  fail "the last line is not the summary"
# The checks that never reach the broken slot still pass in their processes.
for c in properties error_bad_ordinal error_free; do
  echo "$out" | grep -q "^PASS $c" || fail "check $c should pass"
done
case $mode in
  abort) want='crashed: SIGABRT \(.*\), while doing line [0-9]+: devbuf_copy_h2d\('
         checks='alloc_free copy_roundtrip copy_offsets stream_ordering host_staging' ;;
  segv)  if echo "$san" | grep -q address; then
           want='its process exited with status 1 before the check ended .*, while doing line [0-9]+: devbuf_event_record\('
         else
           want='crashed: SIGSEGV \(.*\), while doing line [0-9]+: devbuf_event_record\('
         fi
         checks='events_across_streams sync_before_host_read device_info_roundtrip' ;;
  hang)  want='did not finish within 3 s \(its process was killed\), while doing line [0-9]+: devbuf_event_synchronize\('
         checks='events_across_streams sync_before_host_read error_streams_events' ;;
  *) fail "unknown mode $mode" ;;
esac
for c in $checks; do
  echo "$out" | grep -Eq "^FAIL $c: $want" || fail "no FAIL line for $c matching: $want"
done
n=$(echo "$out" | grep -c '^FAIL ')
summary_failed=$(echo "$out" | tail -n 1 | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
[ "$n" -eq "$summary_failed" ] || fail "$n FAIL lines, but the summary counts $summary_failed"
echo "isolation.sh: $mode: $n FAIL lines and the summary"
