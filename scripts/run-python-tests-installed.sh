#!/usr/bin/env bash
# run-python-tests-installed.sh PYTHON PKGDIR LIBDIR WORKDIR [pytest args...]
#
# Run tests/python against an INSTALLED devbuf package, never a build tree.
#   PYTHON   interpreter whose sys.path reaches the installed package
#            (a venv's python, or any python plus PYTHONPATH)
#   PKGDIR   the installed package directory (.../site-packages/devbuf)
#   LIBDIR   the directory of the installed libdevbuf.so
#   WORKDIR  scratch directory (created if missing)
# Used by test-install.sh and test-pip-install.sh.
# DEVBUF_INSTALLED_TESTS="test_a.py test_b.py" runs those modules only; by
# default the install subset (below), DEVBUF_INSTALL_WHOLE_SUITE=1 the whole
# of tests/python.
#
# tests/python/conftest.py wants a build directory; it gets one under WORKDIR
# that holds no devbuf: python/devbuf is an empty directory (a namespace-
# package portion, which loses to the installed regular package on sys.path),
# lib/ is LIBDIR, and python_tests/ holds the test-only extensions of
# tests/python/CMakeLists.txt, built here for PYTHON. Tests that load
# libdevbuf through ctypes get the installed one (DEVBUF_LIB).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 4 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
py="$1"; pkgdir="$2"; libdir="$3"; work="$4"; shift 4
jobs=${DEVBUF_JOBS:-2}
mkdir -p "$work"

die() { echo "run-python-tests-installed.sh: FAIL: $*" >&2; exit 1; }
quiet() {
  local log="$work/log.$(date +%s%N)"
  if ! "$@" >"$log" 2>&1; then tail -n 60 "$log" >&2; die "command failed: $*"; fi
}

if ! compgen -G "$src/tests/python/test_*.py" >/dev/null; then
  echo "   (no tests in tests/python)"
  exit 0
fi

# The test-only extensions are not what is under test: ccache may serve them
# even where the caller turned it off for its own builds (test-pip-install.sh
# compares two real compiles). BASEDIR=/: every path relative, so the random
# work folder does not change the key.
cc_env=(env -u CCACHE_DISABLE CCACHE_BASEDIR=/)
quiet "${cc_env[@]}" cmake -S "$src" -B "$work/testext" -G "Unix Makefiles" -DDEVBUF_WERROR=OFF \
  -DDEVBUF_BUILD_TESTS=ON -DDEVBUF_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$py"
if [ -d "$work/testext/tests/python" ]; then
  quiet "${cc_env[@]}" make -C "$work/testext/tests/python" -j"$jobs"
fi
fake="$work/fake-build"
rm -rf "$fake"
mkdir -p "$fake/python/devbuf"
ln -s "$libdir" "$fake/lib"
if [ -d "$work/testext/python_tests" ]; then ln -s "$work/testext/python_tests" "$fake/python_tests"; fi

# The SONAME file, the one the extensions load: a wheel cannot hold symlinks,
# so there libdevbuf.so is a second copy, and dlopen of it would start a
# second, separate runtime in the same process.
export DEVBUF_BUILD_DIR="$fake" DEVBUF_LIB="$libdir/libdevbuf.so.0" PYTHONDONTWRITEBYTECODE=1
unset DEVBUF_PLUGINS DEVBUF_PLUGIN_PATH DEVBUF_NO_DEFAULT_PLUGINS LD_LIBRARY_PATH
"$py" - "$pkgdir" <<'PY' || die "with the test set-up, import devbuf does not give $pkgdir"
import os, sys
sys.path.insert(0, os.path.join(os.environ["DEVBUF_BUILD_DIR"], "python"))
import devbuf
got = os.path.realpath(os.path.dirname(os.path.abspath(devbuf.__file__)))
assert got == os.path.realpath(sys.argv[1]), got
PY
cd "$work"
# Which modules: DEVBUF_INSTALLED_TESTS (file names) when set; otherwise the
# install subset below; the whole of tests/python with
# DEVBUF_INSTALL_WHOLE_SUITE=1. The subset is the modules that read what an
# install lays out (plugins and their discovery, devbuf-info, headers and
# get_include, the C API capsule, Cython, the stubs, the Python plugin layer)
# plus the core view and buffer tests; the rest test code that is the same
# files in the build tree, where the whole suite runs (the pytest stage).
install_subset="test_devices.py test_plugin_entry_points.py test_devbuf_info_command.py
  test_capi.py test_cython.py test_typing.py test_pyplugin.py test_readme_taste.py
  test_first_day.py test_import_path.py test_view.py test_device_buffer.py"
[ "${DEVBUF_INSTALL_WHOLE_SUITE:-0}" = 1 ] && install_subset=""
: "${DEVBUF_INSTALLED_TESTS=$install_subset}"
targets=("$src/tests/python")
if [ -n "${DEVBUF_INSTALLED_TESTS:-}" ]; then
  targets=()
  for t in $DEVBUF_INSTALLED_TESTS; do
    [ -f "$src/tests/python/$t" ] || die "DEVBUF_INSTALLED_TESTS names $t, which is not in tests/python"
    targets+=("$src/tests/python/$t")
  done
fi
"$py" -m pytest -q -p no:cacheprovider "$@" "${targets[@]}" ||
  die "tests/python failed against the installed devbuf in $pkgdir"
