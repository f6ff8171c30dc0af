#!/usr/bin/env bash
# The CPython matrix: build devbuf against every pyenv
# CPython from 3.9 to 3.13 and run a fast subset of tests/python on each.
# The full suite runs on 3.11 (the project's .venv) in scripts/test.sh.
#
#   scripts/test-matrix.sh [--pip] [3.9 3.10 ...]   (default: 3.9 3.10 3.11 3.12 3.13)
#
# --pip also runs scripts/test-pip-install.sh --no-pytest with each version
# (`pip install .` into a fresh venv, then import every installed extension
# module): about a minute per version, so not part of scripts/test.sh.
#
# Per version X, everything under build-matrix/ (git-ignored, kept between
# runs, so a second run only rebuilds what changed):
#   build-matrix/venv-X   a link to a venv in the cache (DEVBUF_CACHE, default
#                         ~/.cache/devbuf/matrix/, outside the checkout) from
#                         pyenv's newest X.*, with the pinned wheels of
#                         requirements-matrix.txt (a new one when either
#                         changes; wheels only, never a source build)
#   build-matrix/build-X  the extension, the test extensions, libdevbuf and
#                         the plugins, built with -Werror against that venv
# then: the README's taste (examples/taste.py) and the subset below.
#
# Environment: DEVBUF_JOBS (default 2); PYENV_ROOT (default ~/.pyenv).
# Exit status 0 when every version built and passed. A version whose
# interpreter is not installed fails the run (say so, never pass silently).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${DEVBUF_JOBS:-2}"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
MATRIX="$ROOT/build-matrix"
REQ="$ROOT/requirements-matrix.txt"
pip_too=0
if [[ "${1:-}" == --pip ]]; then pip_too=1; shift; fi
versions=("$@")
(( ${#versions[@]} )) || versions=(3.9 3.10 3.11 3.12 3.13)

# The fast subset: build and import (taste.py), a DeviceBuffer on devbuf.sim,
# views, DLPack to and from NumPy, pickle, the header backport with its
# supported-flags cache, the header-only DLPack route (C and C++), and the
# subinterpreter sequences.
SUBSET=(
  tests/python/test_device_buffer.py
  tests/python/test_view.py
  tests/python/test_interop_dlpack.py
  tests/python/test_pickle.py
  tests/python/test_backport.py
  tests/python/test_dlpack_header.py
  tests/python/test_subinterpreters.py
  tests/python/test_pep788.py
)

say() { printf '[matrix %s] %s\n' "$v" "$*"; }
# Run quietly; on failure show the log's tail.
quiet() {
  local log="$1"; shift
  if ! "$@" >"$log" 2>&1; then tail -n 40 "$log" >&2; return 1; fi
}

# The newest installed pyenv interpreter of X (e.g. 3.12 -> .../3.12.1/bin/python).
find_python() {
  local d
  d=$(ls -d "$PYENV_ROOT"/versions/"$1".* 2>/dev/null | grep -E "/$1\.[0-9]+$" | sort -V | tail -n 1)
  [[ -n "$d" && -x "$d/bin/python" ]] && echo "$d/bin/python"
}

mkdir -p "$MATRIX"
# shellcheck source=scripts/devbuf-cache.sh
. "$ROOT/scripts/devbuf-cache.sh"
mkdir -p "$DEVBUF_CACHE/matrix"
want=$(sha256sum "$REQ" | cut -d' ' -f1)
declare -A result
failed=0
t_all=$(date +%s)
for v in "${versions[@]}"; do
  t0=$(date +%s)
  py=$(find_python "$v") || {
    say "FAIL: no pyenv CPython $v under $PYENV_ROOT/versions (pyenv install $v)"
    result[$v]="FAIL (no interpreter)"; failed=1; continue
  }
  # The venv lives in the cache (scripts/devbuf-cache.sh), keyed by the
  # interpreter (another patch release makes a new one) and the pins;
  # build-matrix/venv-X links to it.
  venv="$DEVBUF_CACHE/matrix/venv-$(basename "$(dirname "$(dirname "$py")")")-$( (readlink -f "$py"; echo "$want") | cache_key)"
  build="$MATRIX/build-$v"
  [[ -L "$MATRIX/venv-$v" ]] || rm -rf "${MATRIX:?}/venv-$v"  # a venv of the old in-checkout layout
  ln -sfn "$venv" "$MATRIX/venv-$v"
  # No stamp: never made, or cut off halfway: made again from scratch.
  if [[ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
    rm -rf "$venv"
    say "creating $venv from $py, with the pinned wheels of requirements-matrix.txt"
    quiet "$MATRIX/venv-$v.log" "$py" -m venv "$venv" || { result[$v]="FAIL (venv)"; failed=1; continue; }
    quiet "$MATRIX/pip-$v.log" "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      --only-binary=:all: -r "$REQ" || { result[$v]="FAIL (pip)"; failed=1; continue; }
    echo "$want" >"$venv/.requirements.sha256"
  fi
  # Configured every time (seconds when cached): a target added since the
  # tree was made is otherwise unknown to it ("No rule to make target").
  [[ -f "$build/CMakeCache.txt" ]] || say "configuring $build"
  quiet "$MATRIX/cmake-$v.log" cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDEVBUF_WERROR=ON -DDEVBUF_BUILD_TESTS=ON -DDEVBUF_BUILD_PYTHON=ON \
    -DPython3_EXECUTABLE="$venv/bin/python" || { result[$v]="FAIL (configure)"; failed=1; continue; }
  # Only what the Python tests load (libdevbuf and the plugins come with
  # the extension), not the C tests.
  quiet "$MATRIX/build-$v.log" cmake --build "$build" -j"$JOBS" --target devbuf_python \
    devbuf_pyplugin devbuf_consumer devbuf_capi_consumer devbuf_dlpack_consumer \
    devbuf_dlpack_consumer_cpp devbuf_late_deleter ||
    { result[$v]="FAIL (build)"; failed=1; continue; }
  pyver=$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')
  npver=$("$venv/bin/python" -c 'import numpy; print(numpy.__version__)')
  say "CPython $pyver, NumPy $npver: examples/taste.py"
  # Import by sys.path alone, as a user of the build tree would.
  if ! env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH PYTHONPATH="$build/python" \
       "$venv/bin/python" examples/taste.py >"$MATRIX/taste-$v.log" 2>&1; then
    cat "$MATRIX/taste-$v.log" >&2; result[$v]="FAIL (taste.py)"; failed=1; continue
  fi
  sed 's/^/    /' "$MATRIX/taste-$v.log"
  say "pytest (fast subset)"
  # -rfEs: every failure, error and skip (with its reason) is listed.
  if DEVBUF_BUILD_DIR="$build" "$venv/bin/python" -m pytest -q -rfEs -p no:cacheprovider \
       "${SUBSET[@]}" >"$MATRIX/pytest-$v.log" 2>&1; then
    summary=$(tail -n 1 "$MATRIX/pytest-$v.log")
    grep '^SKIPPED' "$MATRIX/pytest-$v.log" | sed 's/^/    /'
    result[$v]="ok: CPython $pyver, NumPy $npver, ${summary//=/} ($(( $(date +%s) - t0 ))s)"
  else
    tail -n 60 "$MATRIX/pytest-$v.log" >&2
    result[$v]="FAIL (pytest: $(tail -n 1 "$MATRIX/pytest-$v.log" | tr -d =))"; failed=1
    continue
  fi
  if (( pip_too )); then
    say "pip install . (scripts/test-pip-install.sh --python $py --no-pytest)"
    if scripts/test-pip-install.sh --python "$py" --no-pytest >"$MATRIX/pip-install-$v.log" 2>&1; then
      result[$v]+="; pip install . ok"
    else
      tail -n 40 "$MATRIX/pip-install-$v.log" >&2
      result[$v]="FAIL (pip install .)"; failed=1
    fi
  fi
done

echo
echo "CPython matrix ($(( $(date +%s) - t_all ))s):"
for v in "${versions[@]}"; do printf '  %-5s %s\n' "$v" "${result[$v]}"; done
exit $failed
