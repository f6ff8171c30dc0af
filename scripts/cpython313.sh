# cpython313.sh: sourced by scripts/python-ft.sh and scripts/cpython-reference.sh.
# Debian trixie's CPython 3.13 source, fetched once, and its builds, made once
# per variant and kept in the cache (scripts/devbuf-cache.sh): the free-
# threaded 3.13t that python-ft.sh tests devbuf on is the same tree as the
# CPython reference's unpatched 3.13t, whose headers its ABI test compiles
# against. Needs ROOT.
#
#   cpy313_source                fetch (once); sets CPY313_SRC and CPY313_VER
#   cpy313_dir VARIANT           the entry's folder (tree/, prefix/ inside)
#   cpy313_make VARIANT LEVEL    make the entry up to LEVEL: configure, build or
#                                install (`make altinstall` into prefix/)
#
# Variants: default, ft (--disable-gil), ft-tsan (--disable-gil
# --with-thread-sanitizer), and the same with the device-extension series of
# cpython/patches-3.13/ applied: patched, patched-ft, patched-ft-tsan.

# shellcheck source=scripts/devbuf-cache.sh
. "$ROOT/scripts/devbuf-cache.sh"
# shellcheck source=scripts/debian-source.sh
. "$ROOT/scripts/debian-source.sh"

CPY313_SERIES="$ROOT/cpython/patches-3.13"
# Debian's security backports make Modules/pyexpat.c include internal
# headers: build it as a core module.
CPY313_SETUP_LOCAL=$'*shared*\npyexpat pyexpat.c -DPy_BUILD_CORE_MODULE -lexpat'
CPY313_JOBS="${CPY313_JOBS:-$(nproc)}"

cpy313_fetch() { # under the lock: a fetch cut off halfway starts again
  local base="$1"
  [ -f "$base/.fetched-python3.13" ] && return 0
  rm -rf "$base/src"
  debian_source python3.13 trixie "$base" && touch "$base/.fetched-python3.13"
}
cpy313_source() {
  local base="$DEVBUF_CACHE/debian-trixie" dsc
  cache_locked "$base" cpy313_fetch "$base" || return 1
  CPY313_SRC="$(ls -d "$base"/src/python3.13-*/ | head -1)"; CPY313_SRC="${CPY313_SRC%/}"
  dsc="$(ls "$base"/src/python3.13_*.dsc | head -1)"
  CPY313_VER="${dsc##*/python3.13_}"; CPY313_VER="${CPY313_VER%.dsc}"
  [ -d "$CPY313_SRC" ] && [ -n "$CPY313_VER" ]
}

cpy313_flags() { # $1 = variant: configure flags, one per line
  printf '%s\n' --without-ensurepip --with-system-expat
  case "$1" in *ft*) echo --disable-gil ;; esac
  case "$1" in *tsan) echo --with-thread-sanitizer ;; esac
  # The unpatched trees are installed for python-ft.sh (its venvs); the
  # patched ones are run from their trees only.
  case "$1" in patched*) ;; *) echo "--prefix=$(cpy313_dir "$1")/prefix" ;; esac
}
cpy313_env() { # $1 = variant: the compiler environment, one per line
  # TSan: gcc, whose runtime is a shared library for programs and shared
  # objects alike (see python-ft.sh); LDFLAGS too: configure adds
  # -fsanitize=thread to the compile flags only, and Debian's Makefile takes
  # LDFLAGS from make's environment.
  case "$1" in
    *tsan) printf '%s\n' "CC=${DEVBUF_CCACHE_CC}gcc" "CXX=${DEVBUF_CCACHE_CC}g++" LDFLAGS=-fsanitize=thread ;;
    *) echo "CC=${DEVBUF_CCACHE_CC}gcc" ;;
  esac
}
cpy313_series_code() { # the patches that change what is built (not Doc/-only ones)
  local p
  for p in "$CPY313_SERIES"/*.patch; do
    if grep '^+++ b/' "$p" | grep -qv '^+++ b/Doc/'; then cat "$p"; fi
  done
}
cpy313_dir() {
  local v="$1" key
  # The key: flags (without the prefix, which names the entry itself),
  # compiler environment (less ccache, which changes no object), Setup.local
  # and, patched, the series' code.
  key="$( { cpy313_flags_noprefix "$v"; (DEVBUF_CCACHE_CC=; cpy313_env "$v"); echo "$CPY313_SETUP_LOCAL"
    case "$v" in patched*) cpy313_series_code ;; esac; } | cache_key)"
  echo "$DEVBUF_CACHE/cpython-$CPY313_VER/$v-$key"
}
cpy313_flags_noprefix() {
  printf '%s\n' --without-ensurepip --with-system-expat
  case "$1" in *ft*) echo --disable-gil ;; esac
  case "$1" in *tsan) echo --with-thread-sanitizer ;; esac
  case "$1" in patched*) ;; *) echo "prefix" ;; esac
}

# Under the entry's lock. Each level's stamp is written when it is done;
# a level found started but not done (.started-LEVEL) means a run was cut
# off there: the entry is made again from scratch.
cpy313_make_locked() {
  local v="$1" level="$2" dir tree flags envs p
  dir="$(cpy313_dir "$v")" tree="$dir/tree"
  mapfile -t flags < <(cpy313_flags "$v")
  mapfile -t envs < <(cpy313_env "$v")
  if compgen -G "$dir/.started-*" >/dev/null || [ ! -f "$dir/.done-configure" ]; then
    echo "== cpython $CPY313_VER $v: fresh tree from $CPY313_SRC ($dir)"
    rm -rf "$dir"; mkdir -p "$dir"
    touch "$dir/.started-configure"
    cp -a "$CPY313_SRC" "$tree"
    if [[ "$v" == patched* ]]; then
      for p in "$CPY313_SERIES"/*.patch; do
        echo "   applying $(basename "$p")"
        patch -d "$tree" -p1 --no-backup-if-mismatch <"$p" >"$dir/patch.log" 2>&1 ||
          { cat "$dir/patch.log"; return 1; }
      done
    fi
    printf '%s\n' "$CPY313_SETUP_LOCAL" >"$tree/Modules/Setup.local"
    echo "   configure ${flags[*]} (${envs[*]})"
    (cd "$tree" && env "${envs[@]}" ./configure "${flags[@]}" >config.devbuf.log 2>&1) ||
      { tail -30 "$tree/config.devbuf.log"; return 1; }
    mv "$dir/.started-configure" "$dir/.done-configure"
  fi
  if [ "$level" != configure ] && [ ! -f "$dir/.done-build" ]; then
    echo "== cpython $CPY313_VER $v: make -j$CPY313_JOBS"
    touch "$dir/.started-build"
    (cd "$tree" && env "${envs[@]}" make -j"$CPY313_JOBS" >make.devbuf.log 2>&1) ||
      { tail -40 "$tree/make.devbuf.log"; return 1; }
    mv "$dir/.started-build" "$dir/.done-build"
  fi
  if [ "$level" = install ] && [ ! -f "$dir/.done-install" ]; then
    echo "== cpython $CPY313_VER $v: make altinstall"
    touch "$dir/.started-install"
    (cd "$tree" && env "${envs[@]}" make altinstall >install.devbuf.log 2>&1) ||
      { tail -40 "$tree/install.devbuf.log"; return 1; }
    mv "$dir/.started-install" "$dir/.done-install"
  fi
  # The tree's own stamp (scripts/cpython-mutation.py copies a tree with it).
  [ -f "$tree/.devbuf-stamp" ] || basename "$dir" >"$tree/.devbuf-stamp"
  echo "== cpython $CPY313_VER $v: $level done ($dir)"
}
cpy313_make() {
  local dir; dir="$(cpy313_dir "$1")"
  cache_locked "$dir" cpy313_make_locked "$@"
}
