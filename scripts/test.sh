#!/usr/bin/env bash
# The test command (README, CI's .ci/run): every test, set-up included.
#
#   scripts/test.sh           every stage (below)
#   scripts/test.sh --quick   the edit-test loop: configure, build, ctest (less
#                             the `install` and `slow` labels) and pytest on
#                             the default interpreter only
#
# Stages: the plain build (ctest + pytest, the third-party suites, the
# conformance kit, the docs), the GPU check's dry run,
# the sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer, ctest),
# the ThreadSanitizer build (ctest -L tsan), the fuzzers (bounded) and the
# Python fuzz stage (hypothesis against the ASan+UBSan extension, bounded);
# free-threaded 3.13t (each test in 4 threads at once); the CPython reference
# (patched 3.13 and 3.13t); alongside them, in a second lane (the other core):
# CPython 3.14/3.15/3.14-dbg in a Debian sid root, then the CPython matrix,
# then the reference's patched interpreters, built ahead (cached).
#
# Each stage prints its elapsed time; the run ends with a table (stage,
# result, counts, seconds), the total, "test stages: N passed, M failed, K
# skipped" and "all test suites passed" (or "SOME TESTS FAILED"); exit status
# 0 only when every stage passed. Each stage's output is also kept in
# build/test-logs/.
#
# Interpreter builds, their venvs, Debian's sources and ccache's objects are
# cached outside the checkout, under DEVBUF_CACHE (default ~/.cache/devbuf;
# scripts/devbuf-cache.sh): a fresh clone on a machine that ran this before
# rebuilds none of them. docs/development.md has the budget and the timings.
#
# A new stage is one line: `stage "NAME" CMD ARGS...` (a script of its own
# under scripts/ whose output ends with pytest's or ctest's closing line, or
# with "NAME: N passed, M failed", gets its counts in the table).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (known: --quick, --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/devbuf-cache.sh
. scripts/devbuf-cache.sh
# shellcheck source=scripts/stage.sh
. scripts/stage.sh
echo "test.sh: cache $DEVBUF_CACHE${CCACHE_DIR:+ (ccache: $CCACHE_DIR)}"

# The plain build's Python: the tree just built, never another install of
# devbuf the venv may hold.
PLAIN=(env DEVBUF_BUILD_DIR="$ROOT/build" PYTHONPATH="$ROOT/build/python")
pytest_plain() {
  "${PLAIN[@]}" .venv/bin/python - "$ROOT/build/python/devbuf" <<'PY' || return 1
import os, sys, devbuf
got = os.path.realpath(os.path.dirname(devbuf.__file__))
sys.exit(0 if got == os.path.realpath(sys.argv[1]) else f"pytest would test {got}, not {sys.argv[1]}")
PY
  # --durations: the slowest tests, where a shorter run starts.
  "${PLAIN[@]}" .venv/bin/python -m pytest -q --durations=15 tests/python --ignore-glob='*/test_thirdparty_*'
}

# ---- the second lane: other interpreters -----------------------------------
# The machines have 2 cores, and most stages are one pytest process: these
# stages, which build and test devbuf against interpreters of their own (in
# build-sid/, build-matrix/ and the cache), run in a second lane alongside
# every other stage (scripts/stage.sh: stage_lane). Their output is printed
# when the lane ends. Which stage goes in which lane only balances the two:
# each lane takes about half the time of a warm run (docs/development.md).
other_interpreters() {
  # CPython 3.14, 3.15 and the debug 3.14-dbg: Debian sid's binary packages in a
  # sid root made with debootstrap (cached under DEVBUF_CACHE): a -Werror build,
  # the taste, devbuf-info and the whole suite on each (scripts/python-sid.sh).
  # Then a pytest process of its own hunts reference leaks on 3.14-dbg
  # (scripts/refleak.py).
  stage "CPython 3.14, 3.15, 3.14-dbg (Debian sid root: build, taste, devbuf-info, suite; leak hunt on 3.14-dbg)" \
    env SID_STEPS="build taste info suite leaks" scripts/python-sid.sh
  # Every other CPython: build, taste and a fast subset on
  # pyenv's 3.9-3.13 (venvs cached).
  stage "CPython matrix (3.9-3.13, fast subset)" scripts/test-matrix.sh
  # The CPython reference's patched trees (the first lane's last stage), built
  # ahead into the cache: on a cold run, while the first lane still tests;
  # on a warm one there is nothing to do (scripts/cpython313-prebuild.sh).
  stage "CPython 3.13 patched trees, built ahead for the reference (cached)" \
    scripts/cpython313-prebuild.sh
  # The reference's ThreadSanitizer step (the patched 3.13t built with TSan,
  # CPython's threaded buffer tests on it), on the tree just built ahead; the
  # rest of the reference is the first lane's last stage.
  if [[ "${DEVBUF_SKIP_CPYREF:-0}" != 1 ]]; then
    stage "CPython reference under ThreadSanitizer (patched 3.13t: threaded buffer tests)" \
      env CPYREF_TSAN=only scripts/cpython-reference.sh
  else
    stage_skip "CPython reference under ThreadSanitizer" "DEVBUF_SKIP_CPYREF=1"
  fi
}
# It starts before the plain build: it needs the Debian packages only (step 1
# of scripts/setup.sh, quiet when they are there), nothing that build makes,
# and the build's first half (the venv's packages) keeps one core busy only.
if (( ! QUICK )); then
  scripts/setup.sh --packages || { echo "test.sh: installing the Debian packages failed" >&2; exit 1; }
  stage_lane other_interpreters
fi

stage --fatal "build (plain)" scripts/setup.sh build

if (( QUICK )); then
  # The two install tests (cmake --install and pip install ., each with the
  # install subset of the suite against the install: minutes) run in the
  # full command only.
  # ctest alongside pytest (a second lane): pytest is one process, ctest
  # mostly waits on the processes it spawns.
  quick_ctest() {
    stage "ctest (plain; quick: not the install and slow labels)" \
      ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 300 -LE 'install|slow'
  }
  stage_lane quick_ctest
  stage "pytest" pytest_plain
  stage_summary
  exit
fi

stage "ctest (plain)" ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 300
stage "pytest" pytest_plain
# Other projects' expectations (NumPy's and the array API's DLPack tests,
# CPython's struct/memoryview format cases), ported: a stage of their own
# so that a regression against them is named as such.
stage "third-party suites (NumPy + array API DLPack, CPython struct)" \
  "${PLAIN[@]}" .venv/bin/python -m pytest -q tests/python/test_thirdparty_*.py
# The conformance kit on the pinned libraries and on devbuf's own
# types: devbuf must pass every rule, and the libraries must fail exactly the
# rules docs/conformance-report.md triages (a new failure or an upstream fix
# fails the stage until the report is updated). About 15 s.
stage "conformance kit (devbuf.check on the pinned libraries, the standard library's exporters, Pillow and devbuf)" \
  "${PLAIN[@]}" timeout 300 .venv/bin/python scripts/conformance_report.py --check \
  --json build/conformance-report.json
# Every sample of README.md and docs/ run as written, then the docs built
# with warnings as errors (Sphinx + MyST, requirements-docs.txt).
docs_stage() { .venv/bin/python scripts/check_doc_samples.py && scripts/docs-build.sh build; }
stage "docs (samples: scripts/check_doc_samples.py; build: scripts/docs-build.sh)" docs_stage
# The GPU check over the fake libcuda, on the plain build just
# made: the script for GPU machines must not rot between runs on one.
stage "GPU check, dry run (scripts/gpu-check.sh --fake)" env OUT= scripts/gpu-check.sh --fake

stage --fatal "build (address,undefined sanitizers)" scripts/setup.sh build-asan \
  -DDEVBUF_SANITIZE=address,undefined -DDEVBUF_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug
stage "ctest (address,undefined sanitizers)" \
  env ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 600 -LE no_sanitizer

# ---- hardening: ThreadSanitizer stage, then the fuzzers, bounded ----
# TSan runs the tests labelled `tsan` (threads in the loader, sim, conformance
# suite, GPU fakes, tests/stress, fuzz replays); each fuzz target then runs for
# DEVBUF_FUZZ_SECONDS (default 20) from its seed corpus and regress/ inputs.
stage --fatal "build (thread sanitizer)" scripts/setup.sh build-tsan \
  -DDEVBUF_SANITIZE=thread -DDEVBUF_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug
stage "ctest -L tsan (thread sanitizer)" env TSAN_OPTIONS="second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure -j"$JOBS" --timeout 600 -L tsan
stage --fatal "build (fuzz targets: clang, libFuzzer + ASan + UBSan)" scripts/setup.sh build-fuzz \
  -DCMAKE_C_COMPILER=clang -DDEVBUF_FUZZ=ON -DDEVBUF_WERROR=OFF -DDEVBUF_BUILD_PYTHON=OFF \
  -DDEVBUF_FUZZ_SECONDS="${DEVBUF_FUZZ_SECONDS:-20}"
stage "fuzz (every target, bounded)" \
  ctest --test-dir build-fuzz --output-on-failure -j"$JOBS" -R '^fuzz_' -E '_replay$'

# ---- Python fuzz: the extension built with ASan + UBSan, loaded
# into the plain interpreter with the sanitizer runtimes preloaded; the
# hardening regressions, then each hypothesis target (tests/python/pyfuzz.py)
# for DEVBUF_PYFUZZ_SECONDS (default 20). Leaks are the interpreter's: off.
pysan=(env LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
       ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
       DEVBUF_BUILD_DIR="$ROOT/build-asan-py" PYTHONPATH="$ROOT/build-asan-py/python")
python_fuzz() {
  local rc=0
  "${pysan[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_hardening_python.py \
    tests/python/test_pyfuzz.py tests/python/test_arrow.py || rc=1
  "${pysan[@]}" .venv/bin/python tests/python/pyfuzz.py --seconds "${DEVBUF_PYFUZZ_SECONDS:-20}" || rc=1
  return $rc
}
stage --fatal "build (Python extension, address,undefined sanitizers)" scripts/setup.sh build-asan-py \
  -DDEVBUF_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug
stage "python fuzz (hypothesis, ASan+UBSan extension, bounded)" python_fuzz
# ---- end of hardening stages ----

# ---- Free-threaded CPython 3.13t: built from Debian trixie's python3.13
# source (cached; a first run adds about 10 minutes on 2 cores; the CPython
# reference below uses the same build), then devbuf's whole suite with the
# GIL off, each test in 4 threads at once (pytest-run-parallel; the tests
# marked thread_unsafe in one), the stress suite, and a check that importing
# devbuf leaves the GIL off (scripts/python-ft.sh, scripts/run-parallel.sh).
stage "free-threaded CPython 3.13t (GIL off: whole suite, each test in 4 threads; stress suite)" \
  scripts/python-ft.sh

# ---- CPython reference: the device extension and the Stable Reads capability
# gate inside CPython 3.13 and free-threaded 3.13t. A first run fetches
# Debian's source (shared with the 3.13t stage above), builds the
# patched interpreters (cached, see scripts/cpython313.sh); then the tests and
# devbuf's suites run. DEVBUF_SKIP_CPYREF=1 leaves it out of a local run
# (CI never sets it). See scripts/cpython-reference.sh.
if [[ "${DEVBUF_SKIP_CPYREF:-0}" != 1 ]]; then
  stage "CPython reference (patched 3.13 and 3.13t; its TSan step is in the second lane)" \
    env CPYREF_TSAN=0 scripts/cpython-reference.sh
else
  stage_skip "CPython reference" "DEVBUF_SKIP_CPYREF=1"
fi

stage_summary
