#!/usr/bin/env bash
# cpython-reference.sh: build Debian's CPython 3.11 twice from the same source,
# once unpatched and once with the device-extension patch series in
# cpython/patches/, and run CPython's buffer-related tests on the patched one.
#
#   scripts/cpython-reference.sh            fetch (once), build (cached), test
#   CPYREF_TESTS="test_buffer" scripts/cpython-reference.sh   a smaller test set
#   CPYREF_JOBS=2                           make -j (default 2)
#   CPYREF_BENCH=1                          also time patched vs unpatched
#   CPYREF_VARIANTS=unpatched               build only these trees, no tests
#   CPYREF_ASAN=1                           also build the patched tree with
#                                           AddressSanitizer (no pymalloc) and
#                                           rerun the buffer tests and the
#                                           old-ABI test on it
#
# The source comes from `apt-get source python3.11` through a PRIVATE apt
# configuration (its own sources.list with one deb-src line, its own lists
# directory, under build-cpython/apt/): the machine's apt sources and lists
# are never touched. No root needed.
#
# Caching: the unpacked source is kept in build-cpython/src/; each build tree
# is rebuilt only when its stamp (hash of configure flags + patch series) is
# out of date. A second run with nothing changed only runs the tests.
#
# scripts/test.sh runs it (plain: no ASan, no benchmarks); a first run takes
# about 5 to 7 minutes on 2 cores, a cached one about 2.
# Last line, always: "cpython-reference: N passed, M failed".
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${CPYREF_DIR:-$ROOT/build-cpython}"
JOBS="${CPYREF_JOBS:-2}"
TESTS="${CPYREF_TESTS:-test_buffer test_buffer_device test_memoryview test_struct test_bytes test_array test_picklebuffer test_pickle test_capi test_sys test_stable_abi_ctypes}"
# Same flags for both builds: plain ./configure, no PGO, no LTO.
CONFIGURE_FLAGS=(--without-ensurepip --with-system-expat)
# Debian's security backports make Modules/pyexpat.c include internal
# headers; Debian builds it into the interpreter, setup.py builds it without
# Py_BUILD_CORE_MODULE and fails.  Both trees get this Modules/Setup.local,
# so pyexpat (and with it xml.*, plistlib, test_gpu_check_report) works.
SETUP_LOCAL=$'*shared*\npyexpat pyexpat.c -DPy_BUILD_CORE_MODULE -lexpat'
# The ASan tree: the same, plus these (pymalloc off so that every object
# has ASan's redzones; leak reports off, CPython does not free at exit).
ASAN_CONFIGURE_FLAGS=(--with-address-sanitizer --without-pymalloc)
ASAN_TESTS="${CPYREF_ASAN_TESTS:-test_buffer test_buffer_device test_memoryview test_struct test_bytes test_array test_picklebuffer test_capi}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
finish() { echo "cpython-reference: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
mkdir -p "$OUT"

# ---- 1. the source, from Debian's archive, through a private apt config ----
# shellcheck source=scripts/debian-source.sh
. "$ROOT/scripts/debian-source.sh"
fetch_source() { debian_source python3.11 bookworm "$OUT"; }

# ---- 2. one build tree per variant -----------------------------------------
flags_for() { # $1 = variant: its configure flags, one per line
  printf '%s\n' "${CONFIGURE_FLAGS[@]}"
  [ "$1" != patched-asan ] || printf '%s\n' "${ASAN_CONFIGURE_FLAGS[@]}"
}
stamp_for() { # what a tree was built from: flags, Setup.local, the series
  local v="$1" flags
  flags="$(flags_for "$v" | tr '\n' ' ' | sed 's/ $//')"
  case "$v" in
    patched*) { echo "$flags$SETUP_LOCAL"; cat "$ROOT"/cpython/patches/*.patch 2>/dev/null; } | sha256sum | cut -c1-16 ;;
    *) echo "$flags$SETUP_LOCAL" | sha256sum | cut -c1-16 ;;
  esac
}
build_variant() { # $1 = unpatched | patched | patched-asan
  local v="$1" src tree stamp want
  src="$(ls -d "$OUT"/src/python3.11-*/ | head -1)"
  tree="$OUT/$v"
  stamp="$tree/.devbuf-stamp"
  want="$(stamp_for "$v")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$tree/python" ]; then
    echo "== $v: cached ($want)"
    return 0
  fi
  echo "== $v: fresh tree from $src"
  rm -rf "$tree"
  # The Debian source package's tree is upstream 3.11 with debian/ beside it;
  # Debian's own patches are applied by dpkg-source -x already (3.0 quilt).
  cp -a "$src" "$tree"
  if [[ "$v" == patched* ]]; then
    local p
    for p in "$ROOT"/cpython/patches/*.patch; do
      [ -e "$p" ] || continue
      echo "   applying $(basename "$p")"
      patch -d "$tree" -p1 --no-backup-if-mismatch <"$p" >"$tree.patch.log" 2>&1 ||
        { cat "$tree.patch.log"; return 1; }
    done
  fi
  printf '%s\n' "$SETUP_LOCAL" >"$tree/Modules/Setup.local"
  local flags
  mapfile -t flags < <(flags_for "$v")
  (cd "$tree" && ./configure "${flags[@]}" >config.devbuf.log 2>&1) ||
    { tail -30 "$tree/config.devbuf.log"; return 1; }
  (cd "$tree" && make -j"$JOBS" >make.devbuf.log 2>&1) || { tail -40 "$tree/make.devbuf.log"; return 1; }
  echo "$want" >"$stamp"
}

T0=$(date +%s)
if fetch_source; then pass "fetch python3.11 source (private apt config)"; else fail "fetch python3.11 source"; finish; fi
for v in ${CPYREF_VARIANTS:-unpatched patched}; do
  t=$(date +%s)
  if build_variant "$v"; then pass "build $v ($(( $(date +%s) - t ))s)"; else fail "build $v"; fi
done
[ -x "$OUT/patched/python" ] && [ -z "${CPYREF_VARIANTS:-}" ] || finish

# setup.py reports a module it could not compile and carries on: a patch
# that breaks one (it happened: _testbuffer) must fail here, not leave a
# stale .so behind. Modules the unpatched tree cannot build either are the
# environment's, not the series'.
failed_mods() { sed -n '/^Failed to build these modules:/,/^$/p' "$OUT/$1/make.devbuf.log" 2>/dev/null | tail -n +2 | tr -s ' \n' '\n' | sort -u; }
extra="$(comm -13 <(failed_mods unpatched) <(failed_mods patched) | tr '\n' ' ')"
if [ -z "${extra// /}" ]; then
  pass "patched builds every module the unpatched tree builds (both lack: $(failed_mods unpatched | tr '\n' ' '))"
else
  fail "modules only the patched tree failed to build: $extra"
fi

# ---- 3. CPython's own tests on the patched build ---------------------------
cpython_tests() { # $1 = tree, $2 = label prefix, $3 = timeout, then test names
  local tree="$1" label="$2" limit="$3" t log
  shift 3
  for t in "$@"; do
    log="$OUT/$tree/test-$t.log"
    if (cd "$OUT/$tree" && timeout "$limit" ./python -m test -q "$t" >"$log" 2>&1); then
      pass "$label$t ($(grep -Eo 'Total duration: [0-9.a-z ]+' "$log" | head -1))"
    else
      fail "$label$t (see $log)"; grep -m3 -A12 'ERROR: AddressSanitizer' "$log" || tail -15 "$log"
    fi
  done
}
# shellcheck disable=SC2086 # word-split test lists on purpose
cpython_tests patched "" 900 $TESTS

# ---- 4. optional extra stages (present when their scripts exist) ----------
for extra in "$ROOT"/cpython/tests/*.sh; do
  [ -e "$extra" ] || continue
  if OUT="$OUT" ROOT="$ROOT" bash "$extra"; then pass "$(basename "$extra")"; else fail "$(basename "$extra")"; fi
done
# ---- 5. opt-in: the patched tree under AddressSanitizer --------------------
# Guard pages (cpython/tests/oldabi.c) catch a write past an old binary's
# struct; ASan also catches the interpreter's own out-of-bounds accesses and
# use-after-free anywhere the series touched.
if [ "${CPYREF_ASAN:-0}" = 1 ]; then
  t=$(date +%s)
  if build_variant patched-asan; then
    pass "build patched-asan ($(( $(date +%s) - t ))s)"
    # shellcheck disable=SC2086
    cpython_tests patched-asan "ASan: " 1800 $ASAN_TESTS
    if OUT="$OUT" ROOT="$ROOT" CPYREF_ABI_TREE=patched-asan bash "$ROOT/cpython/tests/abi.sh"; then
      pass "ASan: abi.sh"
    else
      fail "ASan: abi.sh"
    fi
  else
    fail "build patched-asan"
  fi
fi
# ---- 6. the cost, patched vs unpatched (opt-in: timing is not pass/fail) ---
if [ "${CPYREF_BENCH:-0}" = 1 ]; then
  if OUT="$OUT" bash "$ROOT/cpython/bench/bench.sh" | tee "$OUT/bench.md"; then
    pass "benchmarks (table in $OUT/bench.md)"
  else
    fail "benchmarks"
  fi
fi
echo "total: $(( $(date +%s) - T0 ))s"
finish
