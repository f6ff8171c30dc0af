#!/bin/sh
# The dtype-namespace checks on a namespace with one mistake: the check that
# covers it fails with its reason (others may fail too: the format engine
# refuses what the layout checks refuse), the namespace itself passes, and
# the run ends with its summary.
#
#   dtype.sh CONFORMANCE PLUGIN CHECK PATTERN
bin=$1 plugin=$2 check=$3 want=$4
out=$(DEVBUF_PLUGINS=$plugin "$bin" --timeout 30 --dtype --payload t dtbug 2>/dev/null)
rc=$?
echo "$out"
fail() { echo "dtype.sh: $*"; exit 1; }
[ "$rc" -eq 1 ] || fail "exit status $rc, want 1"
echo "$out" | grep -Eq "^FAIL $check: $want" || fail "no FAIL line for $check matching: $want"
echo "$out" | grep -q '^PASS dtype_namespace' || fail "dtype_namespace should pass"
echo "$out" | tail -n 1 | grep -Eq '^[0-9]+ passed, [1-9][0-9]* failed, 0 skipped$' || fail "summary"
