#!/bin/sh
# tsan_planted.sh PROGRAM: run the planted-race program (test_tsan_planted.c)
# and pass only if ThreadSanitizer reported the data race inside libdevbuf's
# devbuf_tsan_planted_race and made the program fail. A TSan stage that
# prints nothing here would pass real races too.
log="${TMPDIR:-/tmp}/tsan_planted.$$.log"
TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}halt_on_error=0:exitcode=66" "$@" >"$log" 2>&1
rc=$?
cat "$log"
ok=1
if [ "$rc" -eq 0 ]; then echo "tsan_planted: FAIL: the racy program exited 0 (TSan did not fail it)"; ok=0; fi
if ! grep -q 'WARNING: ThreadSanitizer: data race' "$log"; then
  echo "tsan_planted: FAIL: no 'WARNING: ThreadSanitizer: data race' report"; ok=0
fi
if ! grep -q 'devbuf_tsan_planted_race' "$log"; then
  echo "tsan_planted: FAIL: the report does not name devbuf_tsan_planted_race (libdevbuf)"; ok=0
fi
rm -f "$log"
if [ "$ok" = 1 ]; then
  echo "tsan_planted: the planted race in libdevbuf was reported (exit $rc): this stage can fail"
  exit 0
fi
exit 1
