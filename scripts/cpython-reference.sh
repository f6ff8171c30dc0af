#!/usr/bin/env bash
# cpython-reference.sh: build Debian's CPython 3.13 (trixie's python3.13
# source) four times from the same source: the default build and the
# free-threaded build (--disable-gil), each unpatched and with the device-
# extension series in cpython/patches-3.13/; then run CPython's buffer-related
# tests, the series' own tests and devbuf's suite on both patched interpreters.
# (The 3.11 series, cpython/patches/, stays in history and in
# docs/cpython-reference.md's decision log; it is not rebuilt here.)
#
#   scripts/cpython-reference.sh            fetch (once), build (cached), test
#   CPYREF_TESTS="test_buffer" ...           a smaller CPython test set
#   CPYREF_JOBS=2                           make -j (default 2)
#   CPYREF_BENCH=1                          also time/count patched vs unpatched
#   CPYREF_VARIANTS="patched patched-t"     build only these trees, no tests
#   CPYREF_TSAN=1                           also build the patched 3.13t with
#                                           ThreadSanitizer and run the
#                                           threaded buffer tests on it
#
# The source comes from `apt-get source python3.13` (trixie) through a
# PRIVATE apt configuration (scripts/debian-source.sh): the machine's apt
# sources and lists are never touched. No root needed.
#
# Trees (build-cpython313/, git-ignored):  unpatched  patched  (default build)
#                                          unpatched-t patched-t (--disable-gil)
# Each is rebuilt only when its stamp (configure flags + series) changes.
# The unpatched trees are only configured unless CPYREF_BENCH=1 asks for the
# comparison: the tests need their headers (the old-ABI extensions are
# compiled against them), not their interpreters.
# Last line, always: "cpython-reference: N passed, M failed".
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${CPYREF_DIR:-$ROOT/build-cpython313}"
JOBS="${CPYREF_JOBS:-2}"
SERIES="$ROOT/cpython/patches-3.13"
TESTS="${CPYREF_TESTS:-test_buffer test_buffer_device test_memoryview test_struct test_bytes test_array test_picklebuffer test_pickle test_capi test_sys test_free_threading}"
# Same flags for every build: plain ./configure, no PGO, no LTO.
CONFIGURE_FLAGS=(--without-ensurepip --with-system-expat)
# Debian's security backports make Modules/pyexpat.c include internal
# headers: build it as a core module (as scripts/python-ft.sh does).
SETUP_LOCAL=$'*shared*\npyexpat pyexpat.c -DPy_BUILD_CORE_MODULE -lexpat'
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
finish() { echo "cpython-reference: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
mkdir -p "$OUT"

# ---- 1. the source, from Debian's archive, through a private apt config ----
# shellcheck source=scripts/debian-source.sh
. "$ROOT/scripts/debian-source.sh"
fetch_source() { debian_source python3.13 trixie "$OUT"; }

# ---- 2. one build tree per variant -----------------------------------------
flags_for() { # $1 = variant: its configure flags, one per line
  printf '%s\n' "${CONFIGURE_FLAGS[@]}"
  case "$1" in *-t) echo --disable-gil ;; esac
  case "$1" in *-tsan) printf '%s\n' --disable-gil --with-thread-sanitizer ;; esac
}
env_for() { # $1 = variant: the compiler environment (TSan: gcc, see python-ft.sh)
  case "$1" in *-tsan) printf '%s\n' CC=gcc CXX=g++ LDFLAGS=-fsanitize=thread ;; *) echo DEVBUF_CPYREF=1 ;; esac
}
stamp_for() { # what a tree was built from: flags, Setup.local, the series
  local v="$1"
  { flags_for "$v"; env_for "$v"; echo "$SETUP_LOCAL"
    case "$v" in patched*) cat "$SERIES"/*.patch ;; esac; } | sha256sum | cut -c1-16
}
# $1 = variant, $2 = configure-only (1) or full build (0)
build_variant() {
  local v="$1" conf_only="${2:-0}" src tree stamp want
  src="$(ls -d "$OUT"/src/python3.13-*/ | head -1)"
  tree="$OUT/$v"
  stamp="$tree/.devbuf-stamp"
  want="$(stamp_for "$v")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    if [ -x "$tree/python" ] || [ "$conf_only" = 1 ]; then
      echo "== $v: cached ($want)"; return 0
    fi
  else
    echo "== $v: fresh tree from $src"
    rm -rf "$tree"
    # Debian's own patches are applied by dpkg-source -x already (3.0 quilt).
    cp -a "$src" "$tree"
    if [[ "$v" == patched* ]]; then
      local p
      for p in "$SERIES"/*.patch; do
        echo "   applying $(basename "$p")"
        patch -d "$tree" -p1 --no-backup-if-mismatch <"$p" >"$tree.patch.log" 2>&1 ||
          { cat "$tree.patch.log"; return 1; }
      done
    fi
    printf '%s\n' "$SETUP_LOCAL" >"$tree/Modules/Setup.local"
    local flags envs
    mapfile -t flags < <(flags_for "$v")
    mapfile -t envs < <(env_for "$v")
    (cd "$tree" && env "${envs[@]}" ./configure "${flags[@]}" >config.devbuf.log 2>&1) ||
      { tail -30 "$tree/config.devbuf.log"; return 1; }
    echo "$want" >"$stamp"
  fi
  [ "$conf_only" = 1 ] && return 0
  local envs
  mapfile -t envs < <(env_for "$v")
  (cd "$tree" && env "${envs[@]}" make -j"$JOBS" >make.devbuf.log 2>&1) || { tail -40 "$tree/make.devbuf.log"; return 1; }
}
