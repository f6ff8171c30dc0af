#!/bin/sh
# devbuf_buffer.h (the Python backport header) and devbuf_dlpack_import.h
# (the header-only DLPack route) compile after Python.h,
# first in a translation unit, under strict ISO C11 and C++17 with warnings
# as errors, and reports the mode it chose. On a stock interpreter that is
# the backport (DEVBUFPY_NATIVE_BUFFER_EXTENSION 0); the native mode is
# checked the same way against the patched CPython by cpython/tests/devbuf.sh.
#   headers_python.sh CC CXX PYTHON_INCLUDE_DIR DEVBUF_PYTHON_INCLUDE_DIR
set -u
cc=$1; cxx=$2; pyinc=$3; inc=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
printf '#include <Python.h>\n#include "devbuf_buffer.h"\n#if DEVBUFPY_NATIVE_BUFFER_EXTENSION\n#error "a stock interpreter selected the native mode"\n#endif\nint devbuf_header_check;\n' >"$tmp/t.c"
# devbuf_dlpack_import.h (the header-only DLPack route) first in its own unit,
# and after devbuf_buffer.h in the one above.
printf '#include <Python.h>\n#include "devbuf_dlpack_import.h"\nint devbuf_dlpack_header_check(PyObject *o) {\n  DevbufPy_DLPackView v;\n  if (DevbufPy_DLPackImport(o, 0, NULL, &v) < 0) return -1;\n  DevbufPy_DLPackRelease(&v);\n  return 0;\n}\n' >"$tmp/d.c"
printf '#include "devbuf_dlpack_import.h"\n' >>"$tmp/t.c"
cp "$tmp/d.c" "$tmp/d.cpp"
cp "$tmp/t.c" "$tmp/t.cpp"
fail=0
$cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/t.c" -o "$tmp/t.o" ||
  { echo "FAIL: devbuf_buffer.h under $cc -std=c11 -pedantic -Werror"; fail=1; }
$cxx -std=c++17 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/t.cpp" -o "$tmp/t.o" ||
  { echo "FAIL: devbuf_buffer.h under $cxx -std=c++17 -pedantic -Werror"; fail=1; }
$cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/d.c" -o "$tmp/d.o" ||
  { echo "FAIL: devbuf_dlpack_import.h under $cc -std=c11 -pedantic -Werror"; fail=1; }
$cxx -std=c++17 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/d.cpp" -o "$tmp/d.o" ||
  { echo "FAIL: devbuf_dlpack_import.h under $cxx -std=c++17 -pedantic -Werror"; fail=1; }
[ $fail = 0 ] && echo "devbuf_buffer.h, devbuf_dlpack_import.h: backport mode clean under C11 and C++17 -pedantic -Werror"
exit $fail
