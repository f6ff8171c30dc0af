#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: devbuf built against the PATCHED
# interpreter (devbuf_buffer.h then uses the native Py_buffer, checked by its
# static assertions) and its pytest suite run there. Third-party packages
# (pytest, NumPy 2.x cp311 wheel, ...) come from the project's .venv, built
# for the stock 3.11 ABI: loading them into the patched interpreter is part
# of the old-binary test. Needs OUT and ROOT.
set -eu
OUT="${OUT:?}"; ROOT="${ROOT:?}"
PY="$OUT/patched/python"
# The build tree keeps pyconfig.h outside Include/; FindPython wants one dir.
INC="$OUT/patched-include"
rm -rf "$INC"; mkdir -p "$INC"
cp -r "$OUT/patched/Include/." "$INC/"; cp "$OUT/patched/pyconfig.h" "$INC/"
# devbuf_buffer.h in native mode, first in a translation unit after
# Python.h, under strict ISO C11 and C++17 with warnings as errors (the
# backport mode is checked the same way by the main suite: ctest
# python_header_pedantic).
printf '#include <Python.h>\n#include "devbuf_buffer.h"\nint devbuf_header_check = DEVBUFPY_NATIVE_BUFFER_EXTENSION;\n' >"$OUT/hdr.c"
cp "$OUT/hdr.c" "$OUT/hdr.cpp"
HI=(-I"$INC" -I"$ROOT/bindings/python/include")
cc -std=c11 -Wall -Wextra -Werror -pedantic "${HI[@]}" -c "$OUT/hdr.c" -o "$OUT/hdr.o"
c++ -std=c++17 -Wall -Wextra -Werror -pedantic "${HI[@]}" -c "$OUT/hdr.cpp" -o "$OUT/hdr.o"
printf '#include <Python.h>\n#include "devbuf_buffer.h"\n#if !DEVBUFPY_NATIVE_BUFFER_EXTENSION\n#error not native\n#endif\n' | cc -std=c11 -E "${HI[@]}" -x c - >/dev/null
echo "devbuf_buffer.h: native mode clean under C11 and C++17 -pedantic -Werror"
B="$OUT/devbuf"
cmake -S "$ROOT" -B "$B" -DPython3_EXECUTABLE="$PY" -DPython3_INCLUDE_DIR="$INC" >"$OUT/devbuf-cmake.log" 2>&1 ||
  { echo "devbuf.sh: cmake against the patched interpreter failed:"; tail -30 "$OUT/devbuf-cmake.log"; exit 1; }
cmake --build "$B" -j"${CPYREF_JOBS:-2}" >"$OUT/devbuf-build.log" 2>&1 ||
  { echo "devbuf.sh: devbuf does not build against the patched interpreter:"; grep -E 'error|Error' "$OUT/devbuf-build.log" | head -20; exit 1; }
SP="$(readlink -f "$ROOT/.venv")/lib/python3.11/site-packages"
cd "$ROOT"
DEVBUF_BUILD_DIR="$B" PYTHONPATH="$B/python:$SP" "$PY" -m pytest -q -p no:cacheprovider tests/python 2>&1 | tail -4
exit "${PIPESTATUS[0]}"
