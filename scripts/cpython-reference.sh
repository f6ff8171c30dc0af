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
#   CPYREF_TSAN=0                           skip the default ThreadSanitizer
#                                           stage (the patched 3.13t built
#                                           with TSan, the threaded buffer
#                                           tests on it: cpython/tests/tsan.sh;
#                                           list: CPYREF_TSAN_TESTS)
#   CPYREF_TSAN=only                        that stage alone (scripts/test.sh
#                                           runs it in its second lane)
#   CPYREF_TSAN_UNPATCHED=1                 with CPYREF_TSAN=1: the same on
#                                           an unpatched TSan 3.13t, for
#                                           comparison (not counted)
#   CPYREF_DOC=1                            also check the Doc/ patch with
#                                           sphinx-lint and a nit-picky
#                                           Sphinx build (cpython/tests/doc.sh;
#                                           Sphinx from PyPI, once)
#
# The source comes from `apt-get source python3.13` (trixie) through a
# PRIVATE apt configuration (scripts/debian-source.sh): the machine's apt
# sources and lists are never touched. No root needed.
#
# Trees (links under build-cpython313/, git-ignored, to the cached trees of
# scripts/cpython313.sh under DEVBUF_CACHE, default ~/.cache/devbuf):
#                                          unpatched  patched  (default build)
#                                          unpatched-t patched-t (--disable-gil)
#                                          patched-tsan (default), unpatched-tsan (opt-in)
# Each is rebuilt only when its key (configure flags + the series' code
# patches) changes; the unpatched 3.13t is python-ft.sh's interpreter tree.
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
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
finish() { echo "cpython-reference: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
mkdir -p "$OUT"

# ---- 1. the source and 2. the trees: from the cache -----------------------
# scripts/cpython313.sh fetches Debian's source once and builds each variant
# once per key (flags, Setup.local and, patched, the series' code patches: a
# patch touching only Doc/ (0008) rebuilds no tree) under DEVBUF_CACHE
# (default ~/.cache/devbuf), outside the checkout; $OUT/VARIANT is a link to
# the cached tree. The unpatched 3.13t is the very tree python-ft.sh tests
# devbuf on: built once for both.
# shellcheck source=scripts/cpython313.sh
. "$ROOT/scripts/cpython313.sh"
CPY313_JOBS="$JOBS"
fetch_source() { # and OUT/src: the source, for cpython/tests/doc.sh
  cpy313_source || return 1
  [ -L "$OUT/src" ] || rm -rf "${OUT:?}/src"
  ln -sfn "$(dirname "$CPY313_SRC")" "$OUT/src"
}
variant_of() { # this script's tree names -> scripts/cpython313.sh's variants
  case "$1" in
    unpatched) echo default ;; unpatched-t) echo ft ;; unpatched-tsan) echo ft-tsan ;;
    patched) echo patched ;; patched-t) echo patched-ft ;; patched-tsan) echo patched-ft-tsan ;;
    *) echo "cpython-reference.sh: unknown tree '$1'" >&2; return 1 ;;
  esac
}
# $1 = tree name, $2 = configure-only (1) or full build (0)
build_variant() {
  local v="$1" conf_only="${2:-0}" cv dir level=build
  cv="$(variant_of "$v")" || return 1
  [ "$conf_only" = 1 ] && level=configure
  cpy313_make "$cv" "$level" || return 1
  dir="$(cpy313_dir "$cv")"
  [ -L "$OUT/$v" ] || rm -rf "${OUT:?}/$v"  # a tree of the old in-checkout layout
  ln -sfn "$dir/tree" "$OUT/$v"
}

T0=$(date +%s)
if fetch_source; then pass "python3.13 source $CPY313_VER (trixie, private apt config, cached)"; else fail "fetch python3.13 source"; finish; fi
# The unpatched trees are configured only (their headers and pyconfig.h are
# what the old-ABI extensions compile against), unless the benchmarks need
# their interpreters.
UNPATCHED_CONF_ONLY=1
[ "${CPYREF_BENCH:-0}" = 1 ] && UNPATCHED_CONF_ONLY=0
TSAN="${CPYREF_TSAN:-1}"
case "$TSAN" in 0 | 1 | only) ;; *) echo "cpython-reference.sh: CPYREF_TSAN is 0, 1 or only, not '$TSAN'" >&2; exit 2 ;; esac
# CPYREF_TSAN=only: the source, then step 5 alone.
if [ "$TSAN" != only ]; then
for v in ${CPYREF_VARIANTS:-unpatched unpatched-t patched patched-t}; do
  t=$(date +%s)
  only=0; [[ "$v" == unpatched* ]] && only=$UNPATCHED_CONF_ONLY
  what=build; [ "$only" = 1 ] && what=configure
  if build_variant "$v" "$only"; then pass "$what $v ($(( $(date +%s) - t ))s)"; else fail "$what $v"; fi
done
[ -z "${CPYREF_VARIANTS:-}" ] || finish
[ -x "$OUT/patched/python" ] && [ -x "$OUT/patched-t/python" ] || finish

# A patch that breaks an optional module (it happened on 3.11: _testbuffer)
# must fail here, not leave the tests skipping: every module the tests need
# imports, on both builds, and the free-threaded one really runs without the GIL.
NEED="_testcapi _testbuffer _testinternalcapi _testlimitedcapi _pickle _struct array _interpreters"
for v in patched patched-t; do
  gil=(); [ "$v" = patched ] || gil=(PYTHON_GIL=0)
  if out="$(env "${gil[@]}" "$OUT/$v/python" -c "
import importlib, sys
for m in '$NEED'.split(): importlib.import_module(m)
gil = sys._is_gil_enabled()
print(sys.version.split()[0], 'GIL' if gil else 'free-threaded')
assert gil == ('$v' == 'patched')" 2>&1)"; then
    pass "$v imports $NEED ($out)"
  else
    fail "$v: $out"
  fi
done

# ---- 3. CPython's own tests on both patched builds -------------------------
# One regrtest run per build, -j$JOBS worker processes; a test counts as
# passed when regrtest names it neither failed, nor changed its environment,
# nor skipped nor left unrun.
# test_free_threading raises SkipTest("GIL enabled") on a GIL build by design:
# it runs on the free-threaded tree only.
cpython_tests() { # $1 = tree, $2 = timeout per test
  local tree="$1" limit="$2" log t bad gil=() tests="$TESTS"
  log="$OUT/$tree/test-all.log"
  [ "$tree" = patched ] || gil=(PYTHON_GIL=0)
  [ "$tree" != patched ] || tests="$(tr ' ' '\n' <<<"$TESTS" | grep -vx test_free_threading | tr '\n' ' ')"
  # shellcheck disable=SC2086 # word-split the test list on purpose
  (cd "$OUT/$tree" && env "${gil[@]}" ./python -m test -j"$JOBS" --timeout "$limit" $tests >"$log" 2>&1)
  bad="$(sed -n '/test[s]* failed:/,/^$/p;/altered the execution environment/,/^$/p;/test[s]* skipped:/,/^$/p;/run no tests:/,/^$/p;/test[s]* omitted:/,/^$/p' "$log" | tr -s ' \n' '\n' | grep '^test_' | sort -u)"
  for t in $tests; do
    if grep -qx "$t" <<<"$bad"; then
      fail "$tree: $t (see $log)"
    elif grep -q "^Result: SUCCESS" "$log" || grep -Eq "\] $t passed" "$log"; then
      pass "$tree: $t"
    else
      fail "$tree: $t (not run, see $log)"
    fi
  done
  grep -E "^(Total duration|Result):" "$log" | tr '\n' ' '; echo
}
cpython_tests patched 900
cpython_tests patched-t 900

# ---- 4. the series' own stages on both builds ------------------------------
for v in patched patched-t; do
  if OUT="$OUT" CPYREF_ABI_TREE=$v bash "$ROOT/cpython/tests/abi.sh"; then pass "$v: abi.sh (old binaries, guard pages)"; else fail "$v: abi.sh"; fi
done
for v in patched patched-t; do
  t=$(date +%s)
  if OUT="$OUT" ROOT="$ROOT" CPYREF_DEVBUF_TREE=$v bash "$ROOT/cpython/tests/devbuf.sh"; then
    pass "$v: devbuf native build + suite ($(( $(date +%s) - t ))s)"
  else
    fail "$v: devbuf native build + suite"
  fi
done

fi  # CPYREF_TSAN=only skips to here

# ---- 5. the patched 3.13t under ThreadSanitizer (CPYREF_TSAN=0: skipped) ---
# On by default because the series must hold under TSan on every run:
# the three buffer modules, where the series' code runs (about 7 min
# cold: the TSan build, then 2-3 min of tests). The whole list of 11 modules
# takes about 23 min; CPYREF_TSAN_TESTS runs it (docs/cpython-reference.md).
# cpython/tests/tsan.sh: the tests pass and TSan reports nothing that
# CPython's suppressions and cpython/tsan-suppressions.txt (known 3.13.5
# races, each reproduced without the series) do not cover.
# CPYREF_TSAN_UNPATCHED=1 also builds the unpatched 3.13t with TSan and runs
# the same tests there with CPython's suppressions only: the comparison
# that justifies each entry of cpython/tsan-suppressions.txt (its reports are
# shown, not counted: they are CPython's).
if [ "$TSAN" != 0 ]; then
  tsan_tests="${CPYREF_TSAN_TESTS:-test_buffer_device test_memoryview test_buffer}"
  t=$(date +%s)
  if build_variant patched-tsan 0; then
    pass "build patched-tsan ($(( $(date +%s) - t ))s)"
    t=$(date +%s)
    if OUT="$OUT" CPYREF_TSAN_TREE=patched-tsan CPYREF_TSAN_TESTS="$tsan_tests" bash "$ROOT/cpython/tests/tsan.sh"; then
      pass "patched-tsan: $tsan_tests, 0 unsuppressed TSan reports ($(( $(date +%s) - t ))s)"
    else
      fail "patched-tsan: $tsan_tests (see $OUT/tsan-patched-tsan/)"
    fi
  else
    fail "build patched-tsan"
  fi
  if [ "${CPYREF_TSAN_UNPATCHED:-0}" = 1 ]; then
    t=$(date +%s)
    if build_variant unpatched-tsan 0; then
      pass "build unpatched-tsan ($(( $(date +%s) - t ))s)"
      # The series' own test module does not exist there.
      u_tests="$(tr ' ' '\n' <<<"$tsan_tests" | grep -vx test_buffer_device | tr '\n' ' ')"
      OUT="$OUT" CPYREF_TSAN_TREE=unpatched-tsan CPYREF_TSAN_SUPP=cpython CPYREF_TSAN_TESTS="$u_tests" \
        bash "$ROOT/cpython/tests/tsan.sh" | tail -30
      echo "(unpatched-tsan: reports above are CPython 3.13.5's own; compare with $OUT/tsan-patched-tsan/)"
    else
      fail "build unpatched-tsan"
    fi
  fi
fi

# ---- 5b. opt-in: the Doc/ patch under CPython's documentation checks ---------
if [ "${CPYREF_DOC:-0}" = 1 ]; then
  t=$(date +%s)
  if out="$(OUT="$OUT" bash "$ROOT/cpython/tests/doc.sh" 2>&1)"; then
    pass "Doc: $(tail -1 <<<"$out") ($(( $(date +%s) - t ))s)"
  else
    echo "$out" | tail -30; fail "Doc: $(tail -1 <<<"$out")"
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
