#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: build oldabi.c and oldstatic.c
# against the UNPATCHED headers (stable ABI 3.11 on the default build; the
# free-threaded build has no limited API, so a plain 3.13t extension there)
# and newabi.c against the PATCHED ones, then run test_device_ext.py in the
# patched interpreter.  Needs OUT (build-cpython313).
#   CPYREF_ABI_TREE=patched (default) | patched-t | patched-tsan
# Each patched tree is paired with the unpatched tree of the same build.
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:?}"
TREE="${CPYREF_ABI_TREE:-patched}"
case "$TREE" in
  patched) OLD=unpatched ;;
  *) OLD=unpatched-t ;;   # patched-t, patched-tsan: the free-threaded headers
esac
CF=(-shared -fPIC -O1 -g -Wall)
[ "$TREE" != patched-tsan ] || CF+=(-fsanitize=thread)
D="$OUT/abi-test-$TREE"
mkdir -p "$D"
SUF="$("$OUT/$TREE/python" -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))')"
OLDSUF="$SUF"
[ "$OLD" != unpatched ] || OLDSUF=.abi3.so
rm -f "$D"/*.so
gcc "${CF[@]}" -I"$OUT/$OLD/Include" -I"$OUT/$OLD" "$HERE/oldabi.c" -o "$D/oldabi$OLDSUF"
gcc "${CF[@]}" -I"$OUT/$OLD/Include" -I"$OUT/$OLD" "$HERE/oldstatic.c" -o "$D/oldstatic$SUF"
gcc "${CF[@]}" -I"$OUT/$TREE/Include" -I"$OUT/$TREE" "$HERE/newabi.c" -o "$D/newabi$SUF"
GIL=()
[ "$OLD" = unpatched ] || GIL=(PYTHON_GIL=0)
cd "$D" && env "${GIL[@]}" PYTHONPATH="$D" "$OUT/$TREE/python" "$HERE/test_device_ext.py" -v 2>&1 | tail -25
exit "${PIPESTATUS[0]}"
