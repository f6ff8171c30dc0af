#!/usr/bin/env bash
# test-pip-install.sh: `pip install .` into a fresh virtual environment and
# prove the result is self-contained:
#
#  1. a fresh venv from Debian's /usr/bin/python3; scikit-build-core pinned
#     from requirements.txt; `pip install .` (the README's command);
#  2. `pip wheel .`, and the wheel holds the package, its extension,
#     libdevbuf, the plugins, devbuf-info, headers and the CMake package;
#  3. with NO devbuf environment variable and from a directory outside the
#     source tree: import devbuf (from the venv, not the checkout), list the
#     devices, round-trip bytes on cpu and on devbuf.sim; the `devbuf-info`
#     command finds the installed plugins;
#  4. the out-of-tree example plugin builds against the pip-installed devbuf
#     (find_package through CMAKE_PREFIX_PATH=<site-packages>/devbuf), shows
#     up in devbuf-info and works from Python;
#  5. the Python tests (tests/python) run against the installed package.
#
# Usage: scripts/test-pip-install.sh [--keep] [--work DIR] [--no-pytest]
#                                    [--python PY] [--isolated]
#   --keep       keep the work directory even on success
#   --work DIR   use DIR (created, must not exist) instead of a mktemp dir
#   --no-pytest  skip step 5
#   --python PY  interpreter for the venv (default /usr/bin/python3)
#   --isolated   let pip build in an isolated environment (needs the index)
#                instead of --no-build-isolation with the pinned backend
# Needs the package index (or a pip cache / PIP_FIND_LINKS) for
# scikit-build-core and, for step 5, the test requirements.
# Takes about a minute on 2 cores; registered in ctest only with
# -DDEVBUF_TEST_PIP_INSTALL=ON (label "slow").
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
keep=0
work=""
pytest=1
py=/usr/bin/python3
isolated=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --work) work="$2"; shift ;;
    --no-pytest) pytest=0 ;;
    --python) py="$2"; shift ;;
    --isolated) isolated=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "test-pip-install.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/devbuf-test-pip.XXXXXX")
else
  mkdir "$work"
fi
jobs=${DEVBUF_JOBS:-2}

ok=0
cleanup() {
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then
    rm -rf "$work"
  else
    echo "test-pip-install.sh: work directory kept: $work" >&2
  fi
}
trap cleanup EXIT

step() { echo "== $*"; }
die() { echo "test-pip-install.sh: FAIL: $*" >&2; exit 1; }
quiet() {
  local log="$work/log.$(date +%s%N)"
  if ! "$@" >"$log" 2>&1; then
    tail -n 80 "$log" >&2
    die "command failed: $*"
  fi
}
pin() { # the pinned requirement line for a package, from requirements.txt
  local line
  line=$(grep -i -E "^$1==" "$src/requirements.txt" || true)
  [ -n "$line" ] || die "requirements.txt pins no version of $1"
  echo "$line"
}

unset DEVBUF_PLUGINS DEVBUF_PLUGIN_PATH DEVBUF_NO_DEFAULT_PLUGINS LD_LIBRARY_PATH PYTHONPATH
clean_env=(env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u DEVBUF_NO_DEFAULT_PLUGINS
           -u LD_LIBRARY_PATH -u PYTHONPATH -u DEVBUF_BUILD_DIR -u DEVBUF_LIB)

venv="$work/venv"
vpy="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Both the build and the wheel reuse one build directory outside the source tree.
cfg=(--config-settings=build-dir="$work/build")
export CMAKE_BUILD_PARALLEL_LEVEL="$jobs"

# ---- 1. fresh venv, pip install . ----------------------------------------------
step "fresh venv ($py) and pip install ."
quiet "$py" -m venv "$venv"
if [ "$isolated" = 1 ]; then
  build_flags=()
else
  quiet "$vpy" -m pip install "$(pin scikit-build-core)" "$(pin pathspec)"
  build_flags=(--no-build-isolation)
fi
start=$(date +%s)
quiet "$vpy" -m pip install -v "${build_flags[@]}" "${cfg[@]}" "$src"
echo "   built and installed in $(( $(date +%s) - start )) s"

# ---- 2. the wheel -----------------------------------------------------------
step "pip wheel . and its contents"
quiet "$vpy" -m pip wheel --no-deps "${build_flags[@]}" "${cfg[@]}" -w "$work/dist" "$src"
wheel=$(ls "$work"/dist/devbuf-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || die "pip wheel produced no devbuf-*.whl in $work/dist"
contents=$("$vpy" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
for pattern in 'devbuf/__init__\.py' 'devbuf/_devbuf[.].*\.so' 'devbuf/lib/libdevbuf\.so\.[0-9]+$' \
               'devbuf/lib/devbuf/plugins/devbuf_plugin_cpu\.so' 'devbuf/lib/devbuf/plugins/devbuf_plugin_sim\.so' \
               'devbuf/bin/devbuf-info' 'devbuf/_devbuf_info\.py' 'devbuf/include/devbuf/plugin\.h' \
               'devbuf/lib/cmake/devbuf/devbufConfig\.cmake' 'entry_points\.txt' \
               'devbuf/__init__\.pxd' 'devbuf/include/devbuf_capi\.h'; do
  grep -E -q "$pattern" <<<"$contents" || die "wheel $(basename "$wheel") has no file matching $pattern"
done
if grep -E -q '^(bin|lib|include|share)/' <<<"$contents"; then
  die "wheel installs files outside the devbuf package: $(grep -E '^(bin|lib|include|share)/' <<<"$contents" | head -3)"
fi
echo "   $(basename "$wheel"): $(wc -l <<<"$contents") files"

# ---- 3. smoke test, no environment, away from the checkout ------------------
step "import devbuf from the venv, devices, round trips (no environment)"
cd "$work"
pkgdir=$("${clean_env[@]}" "$vpy" -c 'import devbuf, os; print(os.path.dirname(devbuf.__file__))')
case "$pkgdir" in
  "$venv"/*) ;;
  *) die "import devbuf found $pkgdir, not the venv's copy" ;;
esac
quiet "${clean_env[@]}" "$vpy" "$src/scripts/pip_smoke.py"
"${clean_env[@]}" "$vpy" "$src/scripts/pip_smoke.py" | sed 's/^/   /'

info_out=$("${clean_env[@]}" "$venv/bin/devbuf-info" 2>&1) || true
grep -q 'devbuf\.sim' <<<"$info_out" || { echo "$info_out" >&2; die "venv's devbuf-info does not list devbuf.sim"; }
"${clean_env[@]}" "$venv/bin/devbuf-info" --json >"$work/info.json" || true
"$vpy" - "$work/info.json" "$pkgdir/lib/devbuf/plugins" <<'PY' || die "venv's devbuf-info does not use the package's plugin directory"
import json, os, sys
info = json.load(open(sys.argv[1]))
want = os.path.realpath(sys.argv[2])
dirs = [e for e in info["search_path"] if e.get("kind") == "directory"]
assert any(os.path.realpath(e["path"]) == want and e["source"] == "install" for e in dirs), dirs
PY

# ---- 4. the example plugin against the pip-installed devbuf --------------------
step "build docs/examples/plugin-hostmem against the pip-installed devbuf"
quiet cmake -S "$src/docs/examples/plugin-hostmem" -B "$work/example" -DCMAKE_PREFIX_PATH="$pkgdir"
quiet cmake --build "$work/example" -j"$jobs"
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$work/example/hostmem-roundtrip" DEVBUF_PLUGIN_PATH
info_out=$("${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$venv/bin/devbuf-info" 2>&1) || true
grep -q 'example\.hostmem' <<<"$info_out" || { echo "$info_out" >&2; die "devbuf-info does not list example.hostmem"; }
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$vpy" "$src/scripts/pip_smoke.py" example.hostmem

# ---- 5. the Python tests against the installed package ---------------------------
if [ "$pytest" = 1 ] && compgen -G "$src/tests/python/test_*.py" >/dev/null; then
  step "tests/python against the installed package"
  # The test requirements (numpy, jax, ...) are big: borrow them from the
  # project's .venv when it has them, through a .pth file that comes after
  # the fresh venv's own site-packages (so devbuf is still the fresh one);
  # otherwise install them from requirements.txt.
  vsp=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  psp=""
  if [ -x "$src/.venv/bin/python" ]; then
    psp=$("$src/.venv/bin/python" -c 'import sys, sysconfig, pytest, numpy
if sys.version_info[:2] == tuple(map(int, sys.argv[1].split("."))): print(sysconfig.get_paths()["purelib"])' \
      "$("$vpy" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" 2>/dev/null || true)
  fi
  if [ -n "$psp" ] && [ ! -e "$psp/devbuf" ]; then
    echo "$psp" > "$vsp/zz_devbuf_test_requirements.pth"
    echo "   test requirements borrowed from $psp"
  else
    quiet "$vpy" -m pip install -r "$src/requirements.txt"
  fi
  bash "$src/scripts/run-python-tests-installed.sh" "$vpy" "$pkgdir" "$pkgdir/lib" "$work/pytest"
fi

ok=1
echo "test-pip-install.sh: all checks passed"
