# devbuf-cache.sh: sourced by scripts/test.sh, scripts/python-ft.sh,
# scripts/cpython-reference.sh and scripts/test-matrix.sh. The cache of
# everything that takes minutes to make and depends only on its inputs
# (interpreter builds, their venvs, Debian's sources, ccache's objects): it
# lives OUTSIDE the checkout, so that a fresh clone on a machine that ran the
# test command before reuses it.
#
#   DEVBUF_CACHE   the cache folder (default ${XDG_CACHE_HOME:-~/.cache}/devbuf)
#   DEVBUF_CCACHE  0: no ccache even where it is installed (default 1)
#
# Layout (each entry's name carries its key: the source version and a hash of
# what it was made from, so a change of flags or patches makes a new entry and
# never reuses a stale one):
#   debian-trixie/src/python3.13-*/       Debian's CPython 3.13 source
#   cpython-VERSION/VARIANT-HASH/tree     a configured (and built) CPython tree
#   cpython-VERSION/VARIANT-HASH/prefix   its `make altinstall`, where needed
#   cpython-VERSION/VARIANT-HASH/venv-*   venvs over that prefix
#   matrix/venv-X.Y.Z-HASH                the CPython matrix's venvs
#   ccache/                               ccache's objects (CCACHE_DIR)
# An entry is used only when its stamp file is there; the stamp is written
# last, under a lock (flock), so a build that was cut off halfway is made
# again from scratch, never half reused. (Entries are built where they stay,
# not renamed into place: CPython trees, prefixes and venvs carry their own
# absolute paths.)
# `rm -rf ~/.cache/devbuf` is always safe: the next run is a cold one.

DEVBUF_CACHE="${DEVBUF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/devbuf}"
export DEVBUF_CACHE
mkdir -p "$DEVBUF_CACHE"
# mypy's incremental cache for tests/python/test_typing.py: NumPy's and the
# standard library's stubs are checked once per interpreter, not per clone.
export DEVBUF_MYPY_CACHE="${DEVBUF_MYPY_CACHE:-$DEVBUF_CACHE/mypy}"

# ccache for every C/C++ build CMake configures from here on (CMake reads
# these two variables from the environment on a first configure), with its
# objects in the cache. BASEDIR: paths under the checkout are hashed relative
# to it, so a clone in another folder hits the same objects; NOHASHDIR: the
# working folder of a -g compile is not part of the key (a CPython tree's
# path carries its key hash).
if [ "${DEVBUF_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-$DEVBUF_CACHE/ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${ROOT:-$PWD}}"
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  DEVBUF_CCACHE_CC="ccache "
else
  DEVBUF_CCACHE_CC=""
fi

# cache_locked ENTRY CMD ARGS...: run CMD holding ENTRY's lock (ENTRY.lock),
# so that two runs at once never build the same entry.
cache_locked() {
  local entry="$1"; shift
  mkdir -p "$(dirname "$entry")"
  ( flock 9 || exit 1; "$@" ) 9>"$entry.lock"
}

# cache_key: a short hash of stdin.
cache_key() { sha256sum | cut -c1-16; }
