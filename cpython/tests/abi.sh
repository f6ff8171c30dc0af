#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: build oldabi.c against the UNPATCHED
# headers (stable ABI 3.11) and newabi.c against the PATCHED ones, then run
# test_device_ext.py in the patched interpreter.  Needs OUT (build-cpython).
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
# CPYREF_ABI_TREE=patched-asan: the same against the ASan build, with the
# extensions instrumented too (their stack and heap get redzones; the old
# one is still compiled against the unpatched headers).
TREE="${CPYREF_ABI_TREE:-patched}"
CF=(-shared -fPIC -O1 -g -Wall)
[ "$TREE" != patched-asan ] || CF+=(-fsanitize=address -fno-omit-frame-pointer)
D="$OUT/abi-test-$TREE"
mkdir -p "$D"
SUF="$("$OUT/$TREE/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
gcc "${CF[@]}" -I"$OUT/unpatched/Include" -I"$OUT/unpatched" "$HERE/oldabi.c" -o "$D/oldabi.abi3.so"
gcc "${CF[@]}" -I"$OUT/unpatched/Include" -I"$OUT/unpatched" "$HERE/oldstatic.c" -o "$D/oldstatic$SUF"
gcc "${CF[@]}" -I"$OUT/$TREE/Include" -I"$OUT/$TREE" "$HERE/newabi.c" -o "$D/newabi$SUF"
cd "$D" && PYTHONPATH="$D" "$OUT/$TREE/python" "$HERE/test_device_ext.py" -v 2>&1 | tail -25
exit "${PIPESTATUS[0]}"
