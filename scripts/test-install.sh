#!/usr/bin/env bash
# test-install.sh: install devbuf into a temporary prefix and prove that the
# install works the way a user outside this repository would use it:
#
#  1. configure, build and `cmake --install` devbuf (no tests, no Python);
#  2. check the layout: headers, libdevbuf's SONAME, plugins, CMake package,
#     pkg-config files, $ORIGIN RPATHs;
#  3. build docs/examples/plugin-hostmem against the install with
#     find_package(devbuf) and check its plugin exports one symbol;
#  4. load it through the installed runtime from DEVBUF_PLUGIN_PATH, then
#     from the runtime's own plugin directory with NO environment variable,
#     and round-trip data through it; the installed devbuf-info must list it;
#  5. move the whole prefix elsewhere and do it again (nothing is hard-coded);
#  6. build the same plugin and program with pkg-config alone and run them;
#  7. when the Python bindings can be built: the installed package (in
#     <libdir>/pythonX.Y/site-packages) imports from the moved prefix, finds
#     the installed plugins, round-trips data, and passes tests/python.
#
# Usage: scripts/test-install.sh [--keep] [--work DIR] [--no-python]
#   --keep       keep the work directory even on success
#   --work DIR   use DIR (created, must not exist) instead of a mktemp dir
#   --no-python  C only, even where the bindings could be built
# Environment: DEVBUF_JOBS (default 2) parallel build jobs; DEVBUF_TEST_PYTHON
# the interpreter for step 7 (default <repo>/.venv/bin/python; it needs
# pytest and numpy, from requirements.txt).
# Exit status 0 when every check passed. On failure the work directory is
# kept and its path printed.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
keep=0
work=""
with_python=1
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --work) work="$2"; shift ;;
    --no-python) with_python=0 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "test-install.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/devbuf-test-install.XXXXXX")
else
  mkdir "$work"
fi
jobs=${DEVBUF_JOBS:-2}

ok=0
cleanup() {
  if [ "$ok" = 1 ] && [ "$keep" = 0 ]; then
    rm -rf "$work"
  else
    echo "test-install.sh: work directory kept: $work" >&2
  fi
}
trap cleanup EXIT

step() { echo "== $*"; }
die() { echo "test-install.sh: FAIL: $*" >&2; exit 1; }
# Run a command quietly, showing its log only if it fails.
quiet() {
  local log="$work/log.$(date +%s%N)"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    die "command failed: $*"
  fi
}
# Nothing from the caller's environment may help the runtime find plugins.
unset DEVBUF_PLUGINS DEVBUF_PLUGIN_PATH DEVBUF_NO_DEFAULT_PLUGINS LD_LIBRARY_PATH
clean_env=(env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u DEVBUF_NO_DEFAULT_PLUGINS -u LD_LIBRARY_PATH)

prefix="$work/prefix"

# The Python part runs where the bindings exist and an interpreter with the
# test requirements is at hand.
pyexe=""
if [ "$with_python" = 1 ] && [ -f "$src/bindings/python/CMakeLists.txt" ]; then
  for c in "${DEVBUF_TEST_PYTHON:-}" "$src/.venv/bin/python"; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" -c "import pytest, numpy, sysconfig; assert sysconfig.get_paths()['include']" 2>/dev/null; then
      pyexe="$c"; break
    fi
  done
fi
if [ -n "$pyexe" ]; then
  pyflags=(-DDEVBUF_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$pyexe")
else
  pyflags=(-DDEVBUF_BUILD_PYTHON=OFF)
fi

# ---- 1. build and install -------------------------------------------------
step "build and install devbuf into $prefix${pyexe:+ (with the Python package)}"
# Warnings are the unit builds' business; here they must not stop an install.
quiet cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEVBUF_WERROR=OFF \
  -DDEVBUF_BUILD_TESTS=OFF "${pyflags[@]}" -DCMAKE_INSTALL_PREFIX="$prefix"
quiet cmake --build "$work/build" -j"$jobs"
quiet cmake --install "$work/build"

# ---- 2. layout --------------------------------------------------------------
step "check the installed layout"
libdir=""
for d in lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu; do
  if [ -e "$prefix/$d/libdevbuf.so" ]; then libdir="$d"; break; fi
done
[ -n "$libdir" ] || die "libdevbuf.so not installed under $prefix/lib*"
for f in include/devbuf/plugin.h include/devbuf/runtime.h include/devbuf/error.h \
         include/devbuf/export.h "$libdir/cmake/devbuf/devbufConfig.cmake" \
         "$libdir/cmake/devbuf/devbufConfigVersion.cmake" "$libdir/cmake/devbuf/devbufTargets.cmake" \
         "$libdir/pkgconfig/devbuf.pc" "$libdir/pkgconfig/devbuf-plugin.pc" share/devbuf/plugin.map; do
  [ -e "$prefix/$f" ] || die "missing $prefix/$f"
done
# Every public header of the source tree is installed.
for h in "$src"/core/include/devbuf/*.h "$src"/registry/include/devbuf/*.h; do
  [ -e "$h" ] || continue
  [ -e "$prefix/include/devbuf/$(basename "$h")" ] || die "header $(basename "$h") not installed"
done
soname=$(readelf -d "$prefix/$libdir/libdevbuf.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$soname" =~ ^libdevbuf\.so\.[0-9]+$ ]] || die "libdevbuf.so has SONAME '$soname'"
[ -e "$prefix/$libdir/$soname" ] || die "$soname (the SONAME link) is not installed"
plugindir="$prefix/$libdir/devbuf/plugins"
[ -e "$plugindir/devbuf_plugin_cpu.so" ] || die "cpu plugin not in $plugindir"
[ -e "$plugindir/devbuf_plugin_sim.so" ] || die "sim plugin not in $plugindir"
# The installed runtime has no RPATH into the build tree.
if readelf -d "$prefix/$libdir/$soname" | grep -E 'R(UN)?PATH' | grep -q "$work/build"; then
  die "libdevbuf carries an RPATH into the build tree"
fi
tools=()
for t in "$prefix"/bin/*; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  tools+=("$t")
  rp=$(readelf -d "$t" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
  case "$rp" in
    '$ORIGIN'/*) ;;
    *) die "$(basename "$t") has RPATH '$rp', expected \$ORIGIN/..." ;;
  esac
done
echo "   $libdir/$soname, ${#tools[@]} tool(s), plugins: $(cd "$plugindir" && echo *.so)"
if [ -n "$pyexe" ]; then
  pyrel=$(cd "$prefix" && ls -d "$libdir"/python3*/site-packages/devbuf 2>/dev/null | head -1)
  [ -n "$pyrel" ] && [ -e "$prefix/$pyrel/__init__.py" ] || die "no devbuf package under $prefix/$libdir/python3*/site-packages"
  ext=$(ls "$prefix/$pyrel"/_devbuf*.so 2>/dev/null | head -1)
  [ -n "$ext" ] || die "the extension _devbuf*.so is not installed in $prefix/$pyrel"
  rp=$(readelf -d "$ext" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
  [ "$(cd "$(dirname "$ext")/${rp#\$ORIGIN/}" && pwd -P)" = "$(cd "$prefix/$libdir" && pwd -P)" ] ||
    die "the extension's RPATH '$rp' does not lead to $prefix/$libdir"
  echo "   Python package: $pyrel (extension RPATH $rp)"
fi

# ---- 3. the out-of-tree example plugin ---------------------------------------
step "build docs/examples/plugin-hostmem against the install"
ex="$work/example"
quiet cmake -S "$src/docs/examples/plugin-hostmem" -B "$ex" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_INSTALL_PREFIX="$work/example-prefix"
quiet cmake --build "$ex" -j"$jobs"
plugin="$ex/devbuf_plugin_hostmem.so"
[ -e "$plugin" ] || die "the example did not produce $plugin"
exports=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "devbuf_plugin_entry " ] || die "the example plugin exports '$exports', expected only devbuf_plugin_entry"
if readelf -d "$plugin" | grep -q 'NEEDED.*libdevbuf'; then
  die "the example plugin links libdevbuf (plugins must not)"
fi

# ---- 4. load it through the installed runtime ---------------------------------
step "load example.hostmem from DEVBUF_PLUGIN_PATH and round-trip data"
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$ex" "$ex/hostmem-roundtrip" DEVBUF_PLUGIN_PATH

info="$prefix/bin/devbuf-info"
if [ -x "$info" ]; then
  step "devbuf-info lists it (and finds the installed plugins with no environment)"
  out=$("${clean_env[@]}" DEVBUF_PLUGIN_PATH="$ex" "$info" 2>&1) || true
  grep -q 'example\.hostmem' <<<"$out" || { echo "$out" >&2; die "devbuf-info does not list example.hostmem"; }
  out=$("${clean_env[@]}" "$info" 2>&1) || true
  grep -q 'devbuf\.sim' <<<"$out" || { echo "$out" >&2; die "installed devbuf-info does not find the installed sim plugin"; }
  if grep -q 'example\.hostmem' <<<"$out"; then die "devbuf-info lists example.hostmem without being told where it is"; fi
else
  echo "   (no devbuf-info installed: the round-trip program checked the listing instead)"
fi
if [ -x "$prefix/bin/devbuf-demo" ]; then
  step "installed devbuf-demo runs on the installed sim plugin, no environment"
  quiet "${clean_env[@]}" "$prefix/bin/devbuf-demo"
fi

step "install the example into its own prefix, found through DEVBUF_PLUGIN_PATH"
quiet cmake --install "$ex"
ex_plugindir=$(dirname "$(find "$work/example-prefix" -name devbuf_plugin_hostmem.so | head -1)")
[ -e "$ex_plugindir/devbuf_plugin_hostmem.so" ] || die "example install put no plugin under $work/example-prefix"
quiet "${clean_env[@]}" DEVBUF_PLUGIN_PATH="$ex_plugindir" "$ex/hostmem-roundtrip" DEVBUF_PLUGIN_PATH

step "install the example into devbuf's own plugin directory: found with NO environment"
quiet cmake -S "$src/docs/examples/plugin-hostmem" -B "$ex" -DHOSTMEM_INSTALL_INTO_DEVBUF=ON
quiet cmake --install "$ex"
[ -e "$plugindir/devbuf_plugin_hostmem.so" ] || die "HOSTMEM_INSTALL_INTO_DEVBUF did not install into $plugindir"
quiet "${clean_env[@]}" "$ex/hostmem-roundtrip" install
if [ -x "$info" ]; then
  out=$("${clean_env[@]}" "$info" 2>&1) || true
  grep -q 'example\.hostmem' <<<"$out" || { echo "$out" >&2; die "devbuf-info does not list the installed example.hostmem"; }
fi

# ---- 5. relocation ------------------------------------------------------------
step "move the prefix: everything is found relative to libdevbuf"
moved="$work/moved/somewhere/else"
mkdir -p "$(dirname "$moved")"
mv "$prefix" "$moved"
# A program built against the old location would look there; build a fresh
# one against the moved prefix, which also proves the CMake package relocates.
quiet cmake -S "$src/docs/examples/plugin-hostmem" -B "$work/example-moved" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$moved"
quiet cmake --build "$work/example-moved" -j"$jobs"
quiet "${clean_env[@]}" "$work/example-moved/hostmem-roundtrip" install
if [ -x "$moved/bin/devbuf-info" ]; then
  out=$("${clean_env[@]}" "$moved/bin/devbuf-info" 2>&1) || true
  grep -q 'example\.hostmem' <<<"$out" || { echo "$out" >&2; die "moved devbuf-info does not list example.hostmem"; }
fi
prefix="$moved"
plugindir="$prefix/$libdir/devbuf/plugins"

# ---- 6. pkg-config ----------------------------------------------------------------
if command -v pkg-config >/dev/null; then
  step "pkg-config: devbuf.pc and devbuf-plugin.pc"
  export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
  v=$(pkg-config --modversion devbuf)
  want=$(sed -n 's/^project(devbuf VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
  [ "$v" = "$want" ] || die "pkg-config --modversion devbuf says '$v', CMakeLists.txt says '$want'"
  pdir=$(pkg-config --variable=plugindir devbuf)
  [ "$(cd "$pdir" && pwd -P)" = "$(cd "$plugindir" && pwd -P)" ] || die "pkg-config plugindir '$pdir' is not $plugindir"
  [ "$(pkg-config --variable=abi_major devbuf-plugin)" -ge 1 ] || die "devbuf-plugin.pc has no abi_major"
  pc="$work/pkgconfig-build"
  mkdir -p "$pc"
  # shellcheck disable=SC2046
  quiet cc -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -fPIC -shared \
    $(pkg-config --cflags devbuf-plugin) "$src/docs/examples/plugin-hostmem/hostmem.c" \
    $(pkg-config --libs devbuf-plugin) -o "$pc/devbuf_plugin_hostmem.so"
  exports=$(nm -D --defined-only "$pc/devbuf_plugin_hostmem.so" | awk '{print $3}' | tr '\n' ' ')
  [ "$exports" = "devbuf_plugin_entry " ] || die "pkg-config-built plugin exports '$exports'"
  # shellcheck disable=SC2046
  quiet cc -std=gnu11 -Wall -Wextra -Werror $(pkg-config --cflags devbuf) \
    "$src/docs/examples/plugin-hostmem/roundtrip.c" $(pkg-config --libs devbuf) \
    -Wl,-rpath,"$(pkg-config --variable=libdir devbuf)" -o "$pc/hostmem-roundtrip"
  # DEVBUF_PLUGINS names the file; the installed copy must then not be used.
  quiet "${clean_env[@]}" DEVBUF_PLUGINS="$pc/devbuf_plugin_hostmem.so" DEVBUF_NO_DEFAULT_PLUGINS=1 \
    "$pc/hostmem-roundtrip" DEVBUF_PLUGINS
else
  echo "   (pkg-config not found: skipped)"
fi

# ---- 7. the Python package from the (moved) prefix ---------------------------------
if [ -n "$pyexe" ]; then
  step "Python: import the installed package, no environment but PYTHONPATH"
  sp="$prefix/$(dirname "$pyrel")"
  quiet "${clean_env[@]}" PYTHONPATH="$sp" DEVBUF_SMOKE_PLUGIN_DIR="$plugindir" \
    "$pyexe" "$src/scripts/pip_smoke.py"
  # The example plugin was installed into devbuf's own directory above.
  "${clean_env[@]}" PYTHONPATH="$sp" DEVBUF_SMOKE_PLUGIN_DIR="$plugindir" \
    "$pyexe" "$src/scripts/pip_smoke.py" cpu devbuf.sim example.hostmem | sed 's/^/   /'
  # The install subset (scripts/run-python-tests-installed.sh);
  # DEVBUF_INSTALL_WHOLE_SUITE=1 runs the whole suite.
  install_subset=subset
  [ "${DEVBUF_INSTALL_WHOLE_SUITE:-0}" = 1 ] && install_subset=""
  step "tests/python against the installed package${install_subset:+ (the install subset)}"
  PYTHONPATH="$sp" bash "$src/scripts/run-python-tests-installed.sh" \
    "$pyexe" "$prefix/$pyrel" "$prefix/$libdir" "$work/pytest"
else
  echo "   (Python bindings not built here: step 7 skipped)"
fi

ok=1
echo "test-install.sh: all checks passed"
