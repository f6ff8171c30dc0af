#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: devbuf built against a PATCHED
# interpreter (devbuf_buffer.h then uses the native Py_buffer, checked by its
# static assertions) and its pytest suite run there; on the free-threaded
# build with the GIL off (PYTHON_GIL=0, and importing devbuf must not turn it
# back on).  Third-party packages: requirements-ft.txt's wheels (cp313 or
# cp313t: NumPy among them, built by NumPy against the STOCK 3.13 headers,
# so loading it into the patched interpreter is part of the old-binary
# test), installed with --target beside the tree (site-HASH) by pip bootstrapped from
# its wheel (scripts/python-ft.sh's recipe; no venv, no ssl of our own
# needed: the host .venv's pip downloads).  Needs OUT and ROOT.
#   CPYREF_DEVBUF_TREE=patched (default) | patched-t
set -eu
OUT="${OUT:?}"; ROOT="${ROOT:?}"
TREE="${CPYREF_DEVBUF_TREE:-patched}"
PY="$OUT/$TREE/python"
HOSTPY="$ROOT/.venv/bin/python"
PIP_VERSION=25.0.1
ABI=cp313; [ "$TREE" = patched ] || ABI=cp313t
GIL=(); [ "$TREE" = patched ] || GIL=(PYTHON_GIL=0)

# ---- the packages, cached by requirements + ABI ----------------------------
# Kept beside the interpreter's tree: in the cache (scripts/cpython313.sh)
# when $OUT/$TREE links there, so a fresh clone reuses it.
want="$( (cat "$ROOT/requirements-ft.txt"; echo "$ABI $PIP_VERSION") | sha256sum | cut -c1-16)"
SITE="$(dirname "$(readlink -f "$OUT/$TREE")")/site-$want"
if [ "$(cat "$SITE/.devbuf-stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$SITE"; mkdir -p "$OUT/wheels-$ABI"
  # The host pip (3.11) downloads wheels for the target ABI: no source
  # builds, no network access from the 3.13 interpreter.
  "$HOSTPY" -m pip download -q --disable-pip-version-check --only-binary=:all: \
    --python-version 3.13 --implementation cp --abi "$ABI" --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -d "$OUT/wheels-$ABI" -r "$ROOT/requirements-ft.txt" "pip==$PIP_VERSION" >"$OUT/pip-$TREE.log" 2>&1 ||
    { echo "devbuf.sh: downloading $ABI wheels failed:"; tail -20 "$OUT/pip-$TREE.log"; exit 1; }
  whl="$(ls "$OUT/wheels-$ABI"/pip-"$PIP_VERSION"-*.whl | head -1)"
  env "${GIL[@]}" "$PY" "$whl/pip" install -q --disable-pip-version-check --no-index --no-compile \
    --find-links "$OUT/wheels-$ABI" --only-binary=:all: --target "$SITE" \
    -r "$ROOT/requirements-ft.txt" >>"$OUT/pip-$TREE.log" 2>&1 ||
    { echo "devbuf.sh: installing $ABI wheels failed:"; tail -20 "$OUT/pip-$TREE.log"; exit 1; }
  echo "$want" >"$SITE/.devbuf-stamp"
fi

# ---- devbuf_buffer.h in native mode, and devbuf built ----------------------
# The build tree keeps pyconfig.h outside Include/; FindPython wants one dir.
INC="$OUT/$TREE-include"
rm -rf "$INC"; mkdir -p "$INC"
cp -r "$OUT/$TREE/Include/." "$INC/"; cp "$OUT/$TREE/pyconfig.h" "$INC/"
# First in a translation unit after Python.h, under strict ISO C11 and C++17
# with warnings as errors (the backport mode is checked the same way by the
# main suite: ctest python_header_pedantic).
H="$OUT/hdr-$TREE"
printf '#include <Python.h>\n#include "devbuf_buffer.h"\nint devbuf_header_check = DEVBUFPY_NATIVE_BUFFER_EXTENSION;\n' >"$H.c"
cp "$H.c" "$H.cpp"
HI=(-I"$INC" -I"$ROOT/bindings/python/include")
cc -std=c11 -Wall -Wextra -Werror -pedantic "${HI[@]}" -c "$H.c" -o "$H.o"
c++ -std=c++17 -Wall -Wextra -Werror -pedantic "${HI[@]}" -c "$H.cpp" -o "$H.o"
printf '#include <Python.h>\n#include "devbuf_buffer.h"\n#if !DEVBUFPY_NATIVE_BUFFER_EXTENSION\n#error not native\n#endif\n' | cc -std=c11 -E "${HI[@]}" -x c - >/dev/null
echo "devbuf_buffer.h: native mode clean under C11 and C++17 -pedantic -Werror ($TREE)"
B="$OUT/devbuf-$TREE"
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEVBUF_BUILD_TESTS=ON -DDEVBUF_BUILD_PYTHON=ON \
  -DPython3_EXECUTABLE="$PY" -DPython3_INCLUDE_DIR="$INC" >"$B.cmake.log" 2>&1 ||
  { echo "devbuf.sh: cmake against $TREE failed:"; tail -30 "$B.cmake.log"; exit 1; }
cmake --build "$B" -j"${CPYREF_JOBS:-2}" --target devbuf_python devbuf_pyplugin devbuf_consumer \
  devbuf_capi_consumer devbuf_broken devbuf-info >"$B.log" 2>&1 ||
  { echo "devbuf.sh: devbuf does not build against $TREE:"; grep -E 'error|Error' "$B.log" | head -20; exit 1; }

# ---- the suite --------------------------------------------------------------
cd "$ROOT"
PP="$B/python:$B/python_tests:$SITE"
if [ "$TREE" != patched ]; then
  # The GIL must stay off by itself: no PYTHON_GIL here, warnings are errors.
  env -u PYTHON_GIL PYTHONPATH="$PP" "$PY" -W error -c '
import sys, devbuf, devbuf._devbuf, numpy
import devbuf_consumer, devbuf_capi_consumer, devbuf_broken, devbuf.check
assert not sys._is_gil_enabled(), "importing devbuf or numpy enabled the GIL"
print("devbuf + numpy", numpy.__version__, "imported; GIL still off")'
fi
rc=0
env "${GIL[@]}" DEVBUF_BUILD_DIR="$B" PYTHONPATH="$B/python:$SITE" "$PY" -m pytest -q -p no:cacheprovider \
  tests/python --ignore-glob='*/test_thirdparty_*' \
  >"$OUT/pytest-$TREE.log" 2>&1 || rc=$?
tail -3 "$OUT/pytest-$TREE.log"
[ "$rc" = 0 ] || grep -E '^(FAILED|ERROR)' "$OUT/pytest-$TREE.log" | head -30
exit "$rc"
