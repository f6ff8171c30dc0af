#!/bin/sh
# devbuf_buffer.h (the Python backport header) compiles after Python.h,
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
cp "$tmp/t.c" "$tmp/t.cpp"
fail=0
$cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/t.c" -o "$tmp/t.o" ||
  { echo "FAIL: devbuf_buffer.h under $cc -std=c11 -pedantic -Werror"; fail=1; }
$cxx -std=c++17 -Wall -Wextra -Werror -pedantic -I"$pyinc" -I"$inc" -c "$tmp/t.cpp" -o "$tmp/t.o" ||
  { echo "FAIL: devbuf_buffer.h under $cxx -std=c++17 -pedantic -Werror"; fail=1; }
[ $fail = 0 ] && echo "devbuf_buffer.h: backport mode clean under C11 and C++17 -pedantic -Werror"
exit $fail
