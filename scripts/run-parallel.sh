#!/usr/bin/env bash
# run-parallel.sh: devbuf's whole Python suite on free-threaded CPython 3.13t
# with the GIL off, every test run by 4 threads at once (pytest-run-parallel,
# pinned in requirements-ft.txt), as NumPy's and SciPy's free-threaded CI do.
# Uses the interpreter, venv and devbuf build of scripts/python-ft.sh, whose
# suite step (in the test command) runs this script; by hand, run
# python-ft.sh first. Tests that are thread-unsafe by construction
# carry @pytest.mark.thread_unsafe(reason=...) and run in one thread; the
# stage prints how many (scripts/run_parallel_count.py) and fails above 10%
# of the items. Deadlines in the tests are multiplied by
# DEVBUF_TEST_TIME_SCALE (set here to the thread count).
#
#   scripts/run-parallel.sh [pytest args...]     RUN_PARALLEL_THREADS=4
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${FT_DIR:-$ROOT/build-ft}"
THREADS="${RUN_PARALLEL_THREADS:-4}"
PYT="$OUT/venv-t/bin/python"
if [ ! -x "$PYT" ] || [ ! -d "$OUT/build-t/python/devbuf" ]; then
  echo "run-parallel: no 3.13t build under $OUT (run scripts/python-ft.sh first)"; exit 1
fi
"$PYT" -c 'import pytest_run_parallel' 2>/dev/null ||
  { echo "run-parallel: pytest-run-parallel is not in $OUT/venv-t (requirements-ft.txt; rerun scripts/python-ft.sh)"; exit 1; }
cd "$ROOT"
log="$OUT/run-parallel.log"
PYTHON_GIL=0 DEVBUF_TEST_TIME_SCALE="$THREADS" DEVBUF_BUILD_DIR="$OUT/build-t" \
  PYTHONPATH="$OUT/build-t/python:$ROOT/scripts" \
  "$PYT" -m pytest -q -rfE -p no:cacheprovider -p run_parallel_count --parallel-threads="$THREADS" \
  tests/python "$@" >"$log" 2>&1
rc=$?
grep -E '^run-parallel: |^(FAILED|ERROR) ' "$log" | head -80
tail -3 "$log"
[ "$rc" = 0 ] || echo "run-parallel: FAILED (pytest rc $rc; log: $log)"
exit "$rc"
