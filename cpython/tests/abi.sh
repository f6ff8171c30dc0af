#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: build oldabi.c against the UNPATCHED
# headers (stable ABI 3.11) and newabi.c against the PATCHED ones, then run
# test_device_ext.py in the patched interpreter.  Needs OUT (build-cpython).
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
D="$OUT/abi-test"
mkdir -p "$D"
gcc -shared -fPIC -O1 -g -Wall -I"$OUT/unpatched/Include" -I"$OUT/unpatched" \
  "$HERE/oldabi.c" -o "$D/oldabi.abi3.so"
gcc -shared -fPIC -O1 -g -Wall -I"$OUT/unpatched/Include" -I"$OUT/unpatched" \
  "$HERE/oldstatic.c" -o "$D/oldstatic$("$OUT/patched/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
gcc -shared -fPIC -O1 -g -Wall -I"$OUT/patched/Include" -I"$OUT/patched" \
  "$HERE/newabi.c" -o "$D/newabi$("$OUT/patched/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
cd "$D" && PYTHONPATH="$D" "$OUT/patched/python" "$HERE/test_device_ext.py" -v 2>&1 | tail -25
exit "${PIPESTATUS[0]}"
