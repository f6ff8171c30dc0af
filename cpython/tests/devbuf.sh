#!/usr/bin/env bash
# Stage of scripts/cpython-reference.sh: devbuf built against the PATCHED
# interpreter (devbuf_buffer.h then uses the native Py_buffer, checked by its
# static assertions) and its pytest suite run there. Third-party packages
# (pytest, NumPy 2.x cp311 wheel, ...) come from the project's .venv, built
# for the stock 3.11 ABI: loading them into the patched interpreter is part
# of the old-binary test. Needs OUT and ROOT.
set -eu
OUT="${OUT:?}"; ROOT="${ROOT:?}"
PY="$OUT/patched/python"
# The build tree keeps pyconfig.h outside Include/; FindPython wants one dir.
INC="$OUT/patched-include"
rm -rf "$INC"; mkdir -p "$INC"
cp -r "$OUT/patched/Include/." "$INC/"; cp "$OUT/patched/pyconfig.h" "$INC/"
B="$OUT/devbuf"
cmake -S "$ROOT" -B "$B" -DPython3_EXECUTABLE="$PY" -DPython3_INCLUDE_DIR="$INC" >"$OUT/devbuf-cmake.log" 2>&1
cmake --build "$B" -j"${CPYREF_JOBS:-2}" >"$OUT/devbuf-build.log" 2>&1
SP="$(readlink -f "$ROOT/.venv")/lib/python3.11/site-packages"
# Deselected, environment only (the same on the UNPATCHED build tree):
#  - test_gpu_check_report.py::test_report_of_a_real_run: needs pyexpat,
#    which this configure (no system expat flags) did not build.
cd "$ROOT"
DEVBUF_BUILD_DIR="$B" PYTHONPATH="$B/python:$SP" "$PY" -m pytest -q -p no:cacheprovider tests/python \
  --deselect tests/python/test_gpu_check_report.py::test_report_of_a_real_run 2>&1 | tail -4
exit "${PIPESTATUS[0]}"
