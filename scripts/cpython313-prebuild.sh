#!/usr/bin/env bash
# cpython313-prebuild.sh: build CPython 3.13 variants into the cache ahead of
# the stage that needs them (scripts/cpython313.sh; nothing to do when they
# are cached). The test command runs it last in its second lane, so that on a
# cold run the patched trees of the CPython reference (the longest builds
# there are) are made while the first lane is still testing, rather than
# after it. Each entry is built under its lock: when the reference reaches a
# tree that is being built here it waits for it, then finds it done. The
# reference needs patched-ft-tsan last, so it is built here first.
#
#   scripts/cpython313-prebuild.sh [VARIANT...]   default: patched-ft-tsan patched-ft patched
#
# Last line: "cpython313-prebuild: N passed, M failed".
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/cpython313.sh
. "$ROOT/scripts/cpython313.sh"
PASSED=0 FAILED=0
finish() { echo "cpython313-prebuild: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
if cpy313_source; then
  PASSED=$((PASSED + 1)); echo "PASS: python3.13 source $CPY313_VER"
else
  FAILED=$((FAILED + 1)); echo "FAIL: fetch python3.13 source"; finish
fi
for v in "${@:-patched-ft-tsan patched-ft patched}"; do
  for w in $v; do
    t=$(date +%s)
    if cpy313_make "$w" build; then
      PASSED=$((PASSED + 1)); echo "PASS: $w ($(( $(date +%s) - t ))s; $(cpy313_dir "$w"))"
    else
      FAILED=$((FAILED + 1)); echo "FAIL: $w"
    fi
  done
done
finish
