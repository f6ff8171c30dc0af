#!/usr/bin/env bash
# The whole GPU proof of devbuf.cuda in one command: build, versions,
# conformance and the CUDA C tests, the real-interop tests with PyTorch, CuPy and
# JAX, bench_cuda and the Python interop benchmark, the conformance kit
# (devbuf.check) on CuPy and PyTorch CUDA arrays; a report in
# Markdown + JSON.
#
#   scripts/gpu-check.sh           on a machine with an NVIDIA GPU
#   scripts/gpu-check.sh --fake    anywhere: the same steps over the fake libcuda
#                                  (tests/gpu/fake_cuda.c); scripts/test.sh runs it
#
# Report: $OUT when set (a folder that is collected afterwards), else build-gpu/report
# (--fake: <build>/gpu-check-fake). At most 8 files there, no folders:
# gpu-check.md (everything), gpu-check.json, log.md (each step's output),
# bench_cuda.md/.json, bench_cuda_interop.json, interop_tests.json,
# conformance_kit.json.
#
# Real mode builds in build-gpu with the `python3` on PATH (a GPU machine may
# have no PyPI, no Debian packages, no network: what is missing is reported,
# not installed; CPython headers may be carried in build-gpu-carry/pythonX.Y,
# see docs/development.md, "Running on a GPU machine"). --fake reuses ./build when it is configured (scripts/test.sh
# has just built it). Every step has a time limit and the whole run a budget
# (DEVBUF_GPU_CHECK_BUDGET seconds, default 480), so that it ends well inside
# 10 minutes; a step that did not fit is reported as such.
# Exit status: 0 when no step failed (skips are not failures), else 1.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

FAKE=0
BUILD=""
for a in "$@"; do
  case "$a" in
    --fake) FAKE=1 ;;
    --build=*) BUILD="${a#--build=}" ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$a' (expected --fake, --build=DIR)" >&2; exit 2 ;;
  esac
done
if [[ -z "$BUILD" ]]; then
  if (( FAKE )) && [[ -f build/CMakeCache.txt ]]; then BUILD=build; else BUILD=build-gpu; fi
fi
BUILD="$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)"
if [[ -n "${OUT:-}" ]]; then REPORT="$OUT"
elif (( FAKE )); then REPORT="$BUILD/gpu-check-fake"
else REPORT="$ROOT/build-gpu/report"; fi
mkdir -p "$REPORT"
WORK="$BUILD/gpu-check-work"   # logs and scratch; never in the report folder
rm -rf "$WORK" && mkdir -p "$WORK"
STEPS="$WORK/steps.tsv"
: >"$STEPS"
BUDGET="${DEVBUF_GPU_CHECK_BUDGET:-480}"
START=$SECONDS
MODE=$( (( FAKE )) && echo fake || echo real )

say() { printf '[gpu-check] %s\n' "$*"; }
note() { say "$*"; printf '%s\n' "$*" >>"$WORK/notes.txt"; }  # also into the report

# step NAME LIMIT_S COMMAND...: run with a time limit (capped by what is left
# of the budget), output to the terminal and to $WORK/NAME.log, one line in
# steps.tsv: name, status (pass/fail/timeout/out_of_time/skipped), seconds, note.
step() {
  local name="$1" limit="$2"; shift 2
  local left=$(( BUDGET - (SECONDS - START) - 15 ))
  if (( left < 5 )); then
    # Not a skip: an incomplete check must not read as a passed one.
    printf '%s\tout_of_time\t0\tnot run: the run budget of %ss was spent\n' "$name" "$BUDGET" >>"$STEPS"
    say "$name: not run, out of time"
    return 1
  fi
  (( limit > left )) && limit=$left
  printf '\n==== %s (limit %ss) ====\n' "$name" "$limit"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$WORK/$name.log"
  rc=${PIPESTATUS[0]}
  local dt=$(( SECONDS - t0 )) status=pass note=""
  if (( rc == 124 || rc == 137 )); then status=timeout; note="killed after ${limit}s"
  elif (( rc != 0 )); then status=fail; note="exit status $rc"; fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$dt" "$note" >>"$STEPS"
  return "$rc"
}
skip() {  # skip NAME REASON
  printf '%s\tskipped\t0\t%s\n' "$1" "$2" >>"$STEPS"
  say "$1: skipped: $2"
}

# ---- the interpreter and the build ---------------------------------------------------
PY=""  # never a PY the caller's environment happens to hold; PYTHON picks one
if (( FAKE )) && [[ -f "$BUILD/CMakeCache.txt" ]]; then
  # The interpreter the existing build was configured for, so that its
  # extension imports.
  PY=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" | head -1)
fi
PY="${PY:-${PYTHON:-$(command -v python3 || true)}}"
[[ -x "$PY" ]] || PY=""

FAKE_LIB="$BUILD/lib/libdevbuf_fake_cuda.so"
RUNENV=(env "DEVBUF_BUILD_DIR=$BUILD" "PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
        "XLA_PYTHON_CLIENT_PREALLOCATE=false")
(( FAKE )) && RUNENV+=("DEVBUF_CUDA_LIBRARY=$FAKE_LIB")

# Versions first: what the machine is, whatever happens next.
if [[ -n "$PY" ]]; then
  step environment 60 "$PY" scripts/gpu_check_report.py env "$WORK/env.json" \
    --fake-lib="$( (( FAKE )) && echo "$FAKE_LIB")"
else
  skip environment "no python3 on PATH (versions and the report need it)"
  nvidia-smi 2>&1 | head -20
fi

configure_args=()
# Real runs always (re)configure, cheaply: a warm machine keeps build-gpu
# between calls, and a configure that failed there must not be trusted.
if (( ! FAKE )) || [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  if [[ ! -f "$BUILD/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
    configure_args+=(-G Ninja)
  fi
  # A new compiler's new warning must not cost a GPU run: CI keeps -Werror.
  configure_args+=(-DDEVBUF_WERROR=OFF -DCMAKE_BUILD_TYPE=Release)
  if [[ -n "$PY" ]]; then
    configure_args+=("-DPython3_EXECUTABLE=$PY")
    pyinc=$("$PY" -c 'import os, sysconfig; p = sysconfig.get_paths()["include"]; print(p if os.path.exists(os.path.join(p, "Python.h")) else "")' 2>/dev/null)
    pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    # An interpreter without its -dev headers (a distribution's python3 in a
    # venv): the same minor version's headers from elsewhere build a working
    # extension (only pyconfig.h differs between builds, and not in what an
    # extension sees), as manylinux wheels are built. Put them in
    # build-gpu-carry/pythonX.Y/Python.h (docs/development.md, GPU machine).
    carried="${DEVBUF_PYTHON_INCLUDE:-$ROOT/build-gpu-carry/python$pyver}"
    if [[ -n "${DEVBUF_PYTHON_INCLUDE:-}" || ( -z "$pyinc" && -f "$carried/Python.h" ) ]]; then
      if [[ -n "${DEVBUF_PYTHON_INCLUDE:-}" ]]; then why="DEVBUF_PYTHON_INCLUDE"
      else why="the interpreter has none of its own"; fi
      note "Python headers for $PY ($pyver): using $carried ($why)"
      configure_args+=(-DDEVBUF_BUILD_PYTHON=ON "-DPython3_INCLUDE_DIR=$carried")
    elif [[ -n "$pyinc" ]]; then
      configure_args+=(-DDEVBUF_BUILD_PYTHON=ON)
    else
      note "no Python.h for $PY ($pyver): Python bindings not built, the interop tests cannot run; carry CPython $pyver's include/python$pyver as build-gpu-carry/python$pyver (docs/development.md, Running on a GPU machine)"
      configure_args+=(-DDEVBUF_BUILD_PYTHON=OFF)
    fi
  else
    configure_args+=(-DDEVBUF_BUILD_PYTHON=OFF)
  fi
  if command -v pkg-config >/dev/null && pkg-config --exists libffi; then
    configure_args+=(-DDEVBUF_WITH_PYPLUGIN=ON)
  else
    note "libffi not found (pkg-config libffi): devbuf._pyplugin (plugins written in Python) not built; nothing here needs it"
    configure_args+=(-DDEVBUF_WITH_PYPLUGIN=OFF)
  fi
  # cuda.h: where CMake looks by itself, else beside the nvcc on PATH.
  nvcc=$(command -v nvcc || true)
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda ${nvcc:+"$(dirname "$nvcc")/.."}; do
    for inc in "$d/include" "$d/targets/x86_64-linux/include" "$d/targets/sbsa-linux/include"; do
      if [[ -n "$d" && -f "$inc/cuda.h" ]]; then
        configure_args+=("-DDEVBUF_CUDA_INCLUDE_DIR=$(cd "$inc" && pwd)"); break 2
      fi
    done
  done
  if ! step configure 180 cmake -S . -B "$BUILD" "${configure_args[@]}" \
     && [[ " ${configure_args[*]} " == *" -DDEVBUF_BUILD_PYTHON=ON "* ]]; then
    # Most likely the Python part (headers, interpreter): keep the C half.
    note "configure failed with the Python bindings (see log.md, configure): configured again without them"
    step configure_without_python 120 cmake -S . -B "$BUILD" "${configure_args[@]}" \
      -DDEVBUF_BUILD_PYTHON=OFF
  fi
fi
if ! grep -q '^DEVBUF_CUDA_INCLUDE_DIR:PATH=/' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  note "cuda.h not found (set CUDA_HOME or DEVBUF_CUDA_INCLUDE_DIR): devbuf.cuda cannot be built"
fi
step build 300 cmake --build "$BUILD" -j"$(nproc)" --target \
  devbuf devbuf_plugin_cuda devbuf_conformance test_gpu_plugins bench_cuda
build_ok=$?
# The bindings on their own: a failure there must not cost the C half.
HAVE_PY=0
if [[ -n "$PY" ]] && grep -q '^DEVBUF_BUILD_PYTHON:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null \
   && [[ -d "$BUILD/bindings/python" ]] && (( build_ok == 0 )); then  # configured: Python found
  step build_python 300 cmake --build "$BUILD" -j"$(nproc)" --target devbuf_python && HAVE_PY=1
fi

# ---- C: conformance suite and the CUDA tests ------------------------------------------
if (( build_ok != 0 )); then
  skip conformance "the build failed"
  skip ctest_cuda "the build failed"
else
  conf=(env ASAN_OPTIONS=allocator_may_return_null=1)
  (( FAKE )) && conf+=("DEVBUF_CUDA_LIBRARY=$FAKE_LIB")
  step conformance 180 "${conf[@]}" "$BUILD/bin/devbuf_conformance" devbuf.cuda
  step ctest_cuda 180 ctest --test-dir "$BUILD" --output-on-failure -R '^(gpu_cuda_|conformance_cuda)'
fi

# ---- Python: real interop --------------------------------------------------------------
if [[ -z "$PY" ]]; then skip interop_tests "no python3 on PATH"
elif (( build_ok != 0 )); then skip interop_tests "the build failed"
elif (( ! HAVE_PY )); then skip interop_tests "Python bindings not built for $PY (see the notes and build_python)"
elif ! "$PY" -c 'import pytest' 2>/dev/null; then skip interop_tests "pytest is not installed for $PY"
else
  # A hung test (a stream wait that never ends) must fail alone, not take the
  # step and every other result with it: pytest-timeout where it is there (the
  # GPU image has it), else at least the stacks in the log.
  ptimeout=(-o faulthandler_timeout=100)
  "$PY" -c 'import pytest_timeout' 2>/dev/null && ptimeout+=(--timeout=120)
  step interop_tests 300 "${RUNENV[@]}" "$PY" -m pytest -q -rs -p no:cacheprovider "${ptimeout[@]}" \
    -o junit_family=xunit1 --junitxml="$WORK/interop.xml" tests/python/test_gpu_interop.py
fi

# ---- benchmarks ----------------------------------------------------------------------
if (( build_ok != 0 )); then
  skip bench_cuda "the build failed"
else
  bargs=(--json "$WORK/bench_cuda.json")
  # Over the fake the figures mean nothing: small and quick, paths only.
  (( FAKE )) && bargs+=(--iters 3 --pairs 2000 --max-size 1048576)
  step bench_cuda 300 "${RUNENV[@]}" "$BUILD/bin/bench_cuda" "${bargs[@]}"
  cp "$WORK/bench_cuda.log" "$WORK/bench_cuda.md" 2>/dev/null
fi
if [[ -z "$PY" || $HAVE_PY == 0 || $build_ok != 0 ]]; then
  skip bench_cuda_interop "no Python bindings built"
else
  iargs=(--json "$WORK/bench_cuda_interop.json")
  (( FAKE )) && iargs+=(--quick)
  step bench_cuda_interop 120 "${RUNENV[@]}" "$PY" benchmarks/cuda/bench_cuda_interop.py "${iargs[@]}"
fi

# ---- the conformance kit on CUDA arrays ---------------------------------------
# Last, each with its own limit: the library's findings must not cost the
# benchmarks above their time. Failing rules are findings (the report's kit
# section), not a failed step; a kit that could not run is.
for lib in cupy torch; do
  # (find_spec: whether it is there, without importing torch for seconds)
  have_lib=0
  [[ -n "$PY" ]] && "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$lib') is None)" 2>/dev/null && have_lib=1
  if (( FAKE )); then
    skip "kit_$lib" "dry run: the fake libcuda is no GPU for $lib's CUDA arrays$( (( have_lib )) || echo ", and $lib is not installed"); runs on a machine with an NVIDIA GPU"
  elif [[ -z "$PY" ]]; then skip "kit_$lib" "no python3 on PATH"
  elif (( build_ok != 0 || ! HAVE_PY )); then skip "kit_$lib" "no Python bindings built"
  elif (( ! have_lib )); then skip "kit_$lib" "$lib is not installed for $PY"
  else
    step "kit_$lib" 120 "${RUNENV[@]}" "$PY" scripts/gpu_check_report.py kit "$lib" "$WORK/kit_$lib.json"
  fi
done

# ---- report --------------------------------------------------------------------------
say "report in $REPORT ($(( SECONDS - START ))s so far)"
if [[ -n "$PY" ]]; then
  "$PY" scripts/gpu_check_report.py report --work "$WORK" --out "$REPORT" --mode "$MODE" \
    --elapsed "$(( SECONDS - START ))" || say "the report could not be written"
else
  cp "$STEPS" "$REPORT/steps.tsv"
fi
failed=$(awk -F'\t' '$2 == "fail" || $2 == "timeout" || $2 == "out_of_time" { printf "%s ", $1 }' "$STEPS")
if [[ -n "$failed" ]]; then
  say "FAILED: $failed"
  exit 1
fi
say "no step failed ($MODE run, $(( SECONDS - START ))s)"
