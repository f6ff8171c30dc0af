#!/usr/bin/env bash
# Every test: the plain build (ctest + pytest), then the sanitizer build
# (AddressSanitizer + UndefinedBehaviorSanitizer, ctest). Set-up included.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc)"
status=0
step() { printf '\n==== %s ====\n' "$*"; }

step "build (plain)"
scripts/setup.sh build || exit 1

step "ctest (plain)"
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 300 || status=1

if compgen -G "tests/python/test_*.py" >/dev/null; then
  step "pytest"
  DEVBUF_BUILD_DIR="$ROOT/build" PYTHONPATH="$ROOT/build/python" \
    .venv/bin/python -m pytest -q tests/python || status=1
fi

step "build (address,undefined sanitizers)"
scripts/setup.sh build-asan -DDEVBUF_SANITIZE=address,undefined -DDEVBUF_BUILD_PYTHON=OFF \
  -DCMAKE_BUILD_TYPE=Debug || exit 1

step "ctest (address,undefined sanitizers)"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" --timeout 600 -LE no_sanitizer || status=1

step "summary"
if (( status == 0 )); then echo "all test suites passed"; else echo "SOME TESTS FAILED"; fi
exit $status
