#!/usr/bin/env bash
# python-ft.sh: free-threaded CPython 3.13 from Debian's source, and devbuf's
# suite on it with the GIL off.
#
#   scripts/python-ft.sh            fetch (once), build (cached), test
#   FT_TSAN=1 scripts/python-ft.sh  also build a ThreadSanitizer interpreter
#                                   and run the stress suite on it with devbuf
#                                   built with -fsanitize=thread
#   FT_BENCH=1 scripts/python-ft.sh also build the default (GIL) interpreter of
#                                   the same source and run
#                                   benchmarks/freethreading/bench_ft.py on both
#   FT_STEPS="build"                only some steps: build venv devbuf tests tsan bench
#                                   default (the default build, its venv and
#                                   devbuf, as bench; benchmarks/interop/callgrind_ft.sh)
#   FT_JOBS=2                       make -j (default: nproc)
#
# Source: `apt-get source python3.13` from Debian trixie through a PRIVATE
# apt configuration (one deb-src line, own lists): the machine's apt sources
# are never touched.
#
# The interpreters and their venvs are cached OUTSIDE the checkout
# (scripts/cpython313.sh, scripts/devbuf-cache.sh; DEVBUF_CACHE, default
# ~/.cache/devbuf), keyed by the source version and the configure flags, so
# a fresh clone reuses them:
#   cpython-VERSION/ft-HASH/{tree,prefix}   the --disable-gil build and its
#                                           `make altinstall` (also the CPython
#                                           reference's unpatched 3.13t)
#   cpython-VERSION/ft-HASH/venv-HASH       a venv with numpy's cp313t wheel,
#                                           pytest, hypothesis
#                                           (requirements-ft.txt), installed by
#                                           the project's .venv pip through
#                                           `pip --python`
#   cpython-VERSION/ft-tsan-HASH/..., default-HASH/...   FT_TSAN=1, FT_BENCH=1
# Under build-ft/ (git-ignored, in the checkout): venv-* (links to the cached
# venvs), build-t/ (devbuf built against venv-t, -Werror), build-tsan-py/,
# build-d/, the logs.
#
# The suite runs with PYTHON_GIL=0 *and* checks that importing devbuf leaves
# the GIL off by itself (no module may re-enable it); every RuntimeWarning is
# an error.  Last line, always: "python-ft: N passed, M failed".
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${FT_DIR:-$ROOT/build-ft}"
JOBS="${FT_JOBS:-$(nproc)}"
STEPS="${FT_STEPS:-build venv devbuf tests}"
[ "${FT_TSAN:-0}" = 1 ] && STEPS="$STEPS tsan"
[ "${FT_BENCH:-0}" = 1 ] && STEPS="$STEPS bench"
HOSTPY="$ROOT/.venv/bin/python"
FT_PIP=25.0.1  # bootstraps the 3.13t venv (see make_venv)
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
finish() { echo "python-ft: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT"

# The interpreters come from the cache (scripts/cpython313.sh): Debian's
# source fetched once, each variant built once per key, shared with
# scripts/cpython-reference.sh (its unpatched 3.13t is the 3.13t here).
# shellcheck source=scripts/cpython313.sh
. "$ROOT/scripts/cpython313.sh"
CPY313_JOBS="$JOBS"
fetch_source() { cpy313_source; }
variant_of() { case "$1" in t) echo ft ;; tsan) echo ft-tsan ;; d) echo default ;; esac; }
entry_of() { cpy313_dir "$(variant_of "$1")"; }

# The interpreter of variant $1 (t, tsan: free-threaded; d: the default build).
interp_of() { if [ "$1" = d ]; then echo "$(entry_of d)/prefix/bin/python3.13"; else echo "$(entry_of "$1")/prefix/bin/python3.13t"; fi; }

# $1 = t | tsan | d: configure, make, make altinstall (cached); OUT/prefix-$1
# links to the prefix (scripts/build-manylinux.sh looks for the 3.13t there).
build_interp() {
  cpy313_make "$(variant_of "$1")" install && [ -x "$(interp_of "$1")" ] || return 1
  [ -L "$OUT/prefix-$1" ] || rm -rf "${OUT:?}/prefix-$1"
  ln -sfn "$(entry_of "$1")/prefix" "$OUT/prefix-$1"
}

# $1 = t | tsan: a venv over prefix-$1 with requirements-ft.txt.
make_venv() {
  local v="$1" venv py want
  py="$(interp_of "$v")"
  want="$( (cat "$ROOT/requirements-ft.txt"; echo "$FT_PIP") | cache_key)"
  venv="$(entry_of "$v")/venv-$want"
  [ -L "$OUT/venv-$v" ] || rm -rf "$OUT/venv-$v"  # a venv of the old in-checkout layout
  ln -sfn "$venv" "$OUT/venv-$v"
  # The pip wheel, kept in the cache too (OUT/wheels links to it: the
  # 3.13t checks of scripts/build-manylinux.sh install pip from it).
  mkdir -p "$DEVBUF_CACHE/pip-wheels"
  [ -L "$OUT/wheels" ] || rm -rf "${OUT:?}/wheels"
  ln -sfn "$DEVBUF_CACHE/pip-wheels" "$OUT/wheels"
  cache_locked "$venv" make_venv_locked "$v" "$venv" "$py" "$want"
}
make_venv_locked() {
  local v="$1" venv="$2" py="$3" want="$4"
  if [ "$(cat "$venv/.devbuf-stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  rm -rf "$venv"
  "$py" -m venv --without-pip "$venv" || return 1
  # Debian's site.py looks in lib/python3.13/site-packages of a venv, while
  # sysconfig (pip) installs into lib/python3.13t/: make them one folder.
  [ "$v" = d ] || [ -e "$venv/lib/python3.13" ] || ln -s python3.13t "$venv/lib/python3.13"
  # Debian's source ships no bundled pip wheel for ensurepip, and the
  # project's pip (23.0) cannot run on 3.13: fetch a newer pip wheel with it
  # and bootstrap from that wheel; then wheels only, never a source build.
  "$HOSTPY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$OUT/wheels" "pip==$FT_PIP" >"$OUT/pip-$v.log" 2>&1 || { tail -20 "$OUT/pip-$v.log"; return 1; }
  local whl
  whl="$(ls "$OUT"/wheels/pip-"$FT_PIP"-*.whl | head -1)"
  "$venv/bin/python" "$whl/pip" install -q --disable-pip-version-check --no-index "$whl" \
    >>"$OUT/pip-$v.log" 2>&1 || { tail -20 "$OUT/pip-$v.log"; return 1; }
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
    -r "$ROOT/requirements-ft.txt" >>"$OUT/pip-$v.log" 2>&1 || { tail -20 "$OUT/pip-$v.log"; return 1; }
  echo "$want" >"$venv/.devbuf-stamp"
}

# $1 = venv dir, $2 = build dir, then extra cmake flags.
build_devbuf() {
  local venv="$1" build="$2"; shift 2
  # Configured every time (seconds when cached): a target added since the
  # tree was made (make <target> of a stale tree says "No rule") is there.
  cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEVBUF_WERROR=ON \
    -DDEVBUF_BUILD_TESTS=ON -DDEVBUF_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$venv/bin/python" \
    "$@" >"$build.cmake.log" 2>&1 || { tail -30 "$build.cmake.log"; return 1; }
  cmake --build "$build" -j"$JOBS" --target devbuf_python devbuf_pyplugin devbuf_consumer \
    devbuf_capi_consumer devbuf_dlpack_consumer devbuf_dlpack_consumer_cpp devbuf_broken devbuf-info \
    >"$build.log" 2>&1 || { grep -E 'error|warning' "$build.log" | head -30; tail -20 "$build.log"; return 1; }
}

T0=$(date +%s)
# The source (cached): every step names its interpreter by its version.
if fetch_source; then pass "python3.13 source $CPY313_VER (trixie, private apt config, cached)"; else fail "fetch python3.13 source"; finish; fi
if has_step build; then
  t=$(date +%s)
  if build_interp t; then pass "build CPython 3.13t --disable-gil ($(( $(date +%s) - t ))s)"; else fail "build CPython 3.13t"; finish; fi
fi
PYT="$OUT/venv-t/bin/python"
if has_step venv; then
  if make_venv t; then
    pass "venv-t: $("$PYT" -c 'import sys,numpy; print(sys.version.split()[0], "free-threaded" if sys._is_gil_enabled.__self__ and not sys._is_gil_enabled() else "GIL", "numpy", numpy.__version__)' 2>&1)"
  else fail "venv-t (requirements-ft.txt)"; finish; fi
fi
if has_step devbuf; then
  t=$(date +%s)
  if build_devbuf "$OUT/venv-t" "$OUT/build-t"; then pass "build devbuf for 3.13t ($(( $(date +%s) - t ))s)"; else fail "build devbuf for 3.13t"; finish; fi
fi
if has_step tests; then
  # The GIL must stay off by itself: no PYTHON_GIL here, warnings are errors.
  if env -u PYTHON_GIL PYTHONPATH="$OUT/build-t/python:$OUT/build-t/python_tests" "$PYT" -W error -c '
import sys, devbuf, devbuf._devbuf
import devbuf_consumer, devbuf_capi_consumer, devbuf_broken, devbuf.check
mods = [m for m in sys.modules if m.startswith("devbuf")]
assert not sys._is_gil_enabled(), "the GIL was enabled by importing " + ", ".join(mods)
print("imported", len(mods), "devbuf modules; GIL still off")
' 2>&1; then pass "import devbuf leaves the GIL off"; else fail "import devbuf leaves the GIL off"; fi
  # The whole suite, GIL forced off (PYTHON_GIL=0 also guards against a
  # module re-enabling it halfway through), each test run by FT_SUITE_THREADS
  # (default 4) threads at once (scripts/run-parallel.sh, pytest-run-parallel):
  # every test still runs, so this replaces a run in one thread, for the same
  # time on two cores; the tests marked thread_unsafe run in one thread.
  # FT_SUITE_THREADS=1 runs the suite once, in one thread, as before.
  if [ "${FT_SUITE_THREADS:-4}" -gt 1 ]; then
    if FT_DIR="$OUT" RUN_PARALLEL_THREADS="${FT_SUITE_THREADS:-4}" "$ROOT/scripts/run-parallel.sh" \
        >"$OUT/pytest-t.log" 2>&1; then
      pass "pytest tests/python on 3.13t, GIL off, each test in ${FT_SUITE_THREADS:-4} threads: $(grep '^run-parallel: [0-9]' "$OUT/pytest-t.log" | tail -1 | sed 's/^run-parallel: //')"
      tail -1 "$OUT/pytest-t.log"
    else
      cat "$OUT/pytest-t.log"
      fail "pytest tests/python on 3.13t, GIL off, each test in ${FT_SUITE_THREADS:-4} threads (see $OUT/run-parallel.log)"
    fi
  elif PYTHON_GIL=0 DEVBUF_BUILD_DIR="$OUT/build-t" PYTHONPATH="$OUT/build-t/python" \
      "$PYT" -m pytest -q -rfE -p no:cacheprovider tests/python \
      --ignore-glob='*/test_thirdparty_*' >"$OUT/pytest-t.log" 2>&1; then
    pass "pytest tests/python on 3.13t, GIL off: $(tail -1 "$OUT/pytest-t.log" | tr -d =)"
  else
    tail -60 "$OUT/pytest-t.log"; fail "pytest tests/python on 3.13t, GIL off (see $OUT/pytest-t.log)"
  fi
  # The stress suite again, with its 20-round ledger scenario at full length.
  if PYTHON_GIL=0 DEVBUF_STRESS_ROUNDS="${DEVBUF_STRESS_ROUNDS:-20}" DEVBUF_BUILD_DIR="$OUT/build-t" \
      PYTHONPATH="$OUT/build-t/python" "$PYT" -m pytest -q -rfE -p no:cacheprovider \
      tests/python/test_freethreading.py >"$OUT/stress-t.log" 2>&1; then
    pass "stress suite on 3.13t: $(tail -1 "$OUT/stress-t.log" | tr -d =)"
  else
    tail -60 "$OUT/stress-t.log"; fail "stress suite on 3.13t (see $OUT/stress-t.log)"
  fi
fi
if has_step tsan; then
  t=$(date +%s)
  if build_interp tsan && make_venv tsan; then
    pass "build CPython 3.13t with ThreadSanitizer ($(( $(date +%s) - t ))s)"
    if build_devbuf "$OUT/venv-tsan" "$OUT/build-tsan-py" -DDEVBUF_SANITIZE=thread \
        -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DDEVBUF_WERROR=OFF; then
      pass "build devbuf -fsanitize=thread for the TSan interpreter"
      # Reports go to files (log_path): pytest captures the tests' stderr.
      log="$OUT/stress-tsan.log" rep="$OUT/tsan-report"
      rm -f "$rep".*
      PYTHON_GIL=0 TSAN_OPTIONS="halt_on_error=0 exitcode=66 log_path=$rep suppressions=$ROOT/tests/python/tsan-ft.supp" \
        DEVBUF_STRESS_ROUNDS="${DEVBUF_STRESS_ROUNDS_TSAN:-2}" DEVBUF_BUILD_DIR="$OUT/build-tsan-py" \
        PYTHONPATH="$OUT/build-tsan-py/python" "$OUT/venv-tsan/bin/python" -m pytest -q -p no:cacheprovider \
        tests/python/test_freethreading.py >"$log" 2>&1
      rc=$?
      nrep=$(cat "$rep".* 2>/dev/null | grep -c 'WARNING: ThreadSanitizer')
      if [ "$rc" = 0 ] && [ "$nrep" = 0 ]; then
        pass "stress suite under ThreadSanitizer: 0 reports ($(tail -1 "$log" | tr -d =))"
      else
        cat "$rep".* 2>/dev/null | grep -A30 -m3 'WARNING: ThreadSanitizer' | head -90; tail -5 "$log"
        fail "stress suite under ThreadSanitizer (pytest rc $rc, $nrep reports in $rep.*)"
      fi
    else fail "build devbuf -fsanitize=thread"; fi
  else fail "build CPython 3.13t with ThreadSanitizer (see $(entry_of tsan)/tree/*.devbuf.log)"; fi
fi
if has_step default; then
  if build_interp d && make_venv d && build_devbuf "$OUT/venv-d" "$OUT/build-d"; then
    pass "build CPython 3.13 (default, same source) and devbuf for it"
  else fail "build CPython 3.13 (default) and devbuf for it"; fi
fi
if has_step bench; then
  t=$(date +%s)
  if build_interp d && make_venv d && build_devbuf "$OUT/venv-d" "$OUT/build-d"; then
    pass "build CPython 3.13 (default, same source) and devbuf for it ($(( $(date +%s) - t ))s)"
    for v in d t; do
      # PYTHON_GIL=0 only where it means something (the default build refuses it).
      gil=(); [ "$v" = t ] && gil=(PYTHON_GIL=0)
      env "${gil[@]}" PYTHONPATH="$OUT/build-$v/python:$OUT/build-$v/python_tests" \
        "$OUT/venv-$v/bin/python" "$ROOT/benchmarks/freethreading/bench_ft.py" --json >"$OUT/bench-$v.json" ||
        { fail "bench_ft.py on $v"; finish; }
    done
    if "$HOSTPY" "$ROOT/benchmarks/freethreading/ft_table.py" "$OUT/bench-d.json" "$OUT/bench-t.json" |
        tee "$OUT/bench.md"; then
      pass "benchmarks (table in $OUT/bench.md)"
    else fail "benchmark table"; fi
  else fail "build CPython 3.13 (default) for the benchmarks"; fi
fi
echo "total: $(( $(date +%s) - T0 ))s"
finish
