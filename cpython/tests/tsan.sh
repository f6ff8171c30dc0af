#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh (CPYREF_TSAN=1): CPython's tests on a
# ThreadSanitizer build of 3.13t, counting the reports TSan does NOT suppress.
# Needs OUT (build-cpython313).
#   CPYREF_TSAN_TREE=patched-tsan (default) | unpatched-tsan
#   CPYREF_TSAN_TESTS="test_buffer_device ..."   the regrtest modules
#   CPYREF_TSAN_REPEAT=N, CPYREF_TSAN_MATCH=PATTERN   see below
#   CPYREF_TSAN_SUPP=all (default) | cpython
#       all:     CPython's Tools/tsan/suppressions_free_threading.txt plus
#                cpython/tsan-suppressions.txt (the known 3.13.5 races that
#                reproduce without the series, each entry saying so)
#       cpython: CPython's file only (how the known races were found, and how
#                the unpatched comparison is run)
# Exit status 0 only when every module passes and no report is left
# unsuppressed; the reports are in $OUT/tsan-$TREE/report.*, the
# suppressions that matched (TSan's print_suppressions) in its log.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
TREE="${CPYREF_TSAN_TREE:-patched-tsan}"
TESTS="${CPYREF_TSAN_TESTS:-test_buffer_device test_memoryview test_buffer}"
D="$OUT/tsan-$TREE"
rm -rf "$D"; mkdir -p "$D"
# TSAN_OPTIONS takes one suppressions file: CPython's, then ours.
SUPP="$D/suppressions.txt"
cat "$OUT/$TREE/Tools/tsan/suppressions_free_threading.txt" >"$SUPP" || exit 1
case "${CPYREF_TSAN_SUPP:-all}" in
  all) { echo; echo "## devbuf: cpython/tsan-suppressions.txt"; cat "$HERE/../tsan-suppressions.txt"; } >>"$SUPP" || exit 1 ;;
  cpython) ;;
  *) echo "tsan.sh: CPYREF_TSAN_SUPP must be all or cpython, not '${CPYREF_TSAN_SUPP}'" >&2; exit 2 ;;
esac
# Reports go to files and do not change the exit status (exitcode=0): the
# count decides.  print_suppressions lists, per suppression, how often it
# matched.
# CPYREF_TSAN_REPEAT=N runs the tests in N fresh processes: a race on the
# first use of something (interning a new string) happens at most once per
# process, and whether two threads meet there is timing.
# CPYREF_TSAN_MATCH narrows each run to matching test names (regrtest -m).
rc=0
match=(); [ -z "${CPYREF_TSAN_MATCH:-}" ] || match=(-m "$CPYREF_TSAN_MATCH")
for i in $(seq "${CPYREF_TSAN_REPEAT:-1}"); do
  # shellcheck disable=SC2086 # word-split the test list on purpose
  (cd "$OUT/$TREE" && PYTHON_GIL=0 \
    TSAN_OPTIONS="halt_on_error=0 exitcode=0 print_suppressions=1 log_path=$D/report suppressions=$SUPP" \
    ./python -m test --timeout 1800 "${match[@]}" $TESTS >"$D/tests.$i.log" 2>&1) || rc=$?
  [ "$i" = 1 ] || echo -n "run $i: "
  grep -E "^(Total duration|Total tests|Result):" "$D/tests.$i.log" | tr '\n' ' '; echo
done
cp "$D/tests.1.log" "$D/tests.log"
n=$(cat "$D"/report.* 2>/dev/null | grep -c 'WARNING: ThreadSanitizer')
used=$(cat "$D"/report.* 2>/dev/null | sed -n '/ThreadSanitizer: Matched/,/^$/p' | grep -E '^ *[0-9]+ ' |
  awk '{n[$2] += $1; p[$2]++} END {for (k in n) printf "  %s: %d reports in %d processes\n", k, n[k], p[k]}' | sort)
[ -z "$used" ] || { echo "suppressions matched:"; echo "$used"; }
if [ "$rc" != 0 ]; then
  echo "tsan.sh: $TREE: the tests failed (rc=$rc, $D/tests.*.log)"; exit 1
fi
if [ "$n" != 0 ]; then
  cat "$D"/report.* | grep -A25 -m3 'WARNING: ThreadSanitizer' | head -80
  cat "$D"/report.* | grep '^SUMMARY: ThreadSanitizer' | sort | uniq -c
  echo "tsan.sh: $TREE: $n unsuppressed ThreadSanitizer reports ($D/report.*)"; exit 1
fi
echo "tsan.sh: $TREE: $TESTS pass, 0 unsuppressed ThreadSanitizer reports"
