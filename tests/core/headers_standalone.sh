#!/bin/sh
# Every public header compiles on its own, first in a translation unit, under
# strict ISO C11 and C++17 with warnings as errors: a plugin author's
# `cc -std=c11` must not meet POSIX-only calls or GNU extensions.
#   headers_standalone.sh CC CXX INCLUDE_DIR...
set -u
cc=$1; cxx=$2; shift 2
incs=""; for d in "$@"; do incs="$incs -I$d"; done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0; n=0
for d in "$@"; do
  for h in "$d"/devbuf/*.h; do
    name=devbuf/$(basename "$h")
    printf '#include "%s"\nint devbuf_header_check;\n' "$name" > "$tmp/t.c"
    cp "$tmp/t.c" "$tmp/t.cpp"
    if ! $cc -std=c11 -Wall -Wextra -Werror -pedantic $incs -c "$tmp/t.c" -o "$tmp/t.o"; then
      echo "FAIL: $name under $cc -std=c11 -Wall -Wextra -Werror -pedantic"; fail=1
    fi
    if ! $cxx -std=c++17 -Wall -Wextra -Werror -pedantic $incs -c "$tmp/t.cpp" -o "$tmp/t.o"; then
      echo "FAIL: $name under $cxx -std=c++17 -Wall -Wextra -Werror -pedantic"; fail=1
    fi
    n=$((n + 1))
  done
done
echo "$n public headers checked alone as C11 and C++17"
[ "$n" -gt 0 ] || { echo "FAIL: no headers found"; exit 1; }
exit $fail
