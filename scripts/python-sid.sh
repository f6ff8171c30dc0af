#!/usr/bin/env bash
# python-sid.sh: devbuf on CPython 3.14, 3.15 and the debug build 3.14-dbg,
# Debian sid's own binary packages, in a Debian sid root made with debootstrap.
#
#   scripts/python-sid.sh                 every interpreter: build, taste, suite
#   scripts/python-sid.sh 3.15            some of them (3.14 3.15 3.14d)
#   SID_STEPS="build taste"               only some steps: build taste info
#                                         suite leaks (default: all of them;
#                                         `leaks` runs on 3.14d only)
#   SID_TESTS="tests/python/test_view.py" only these tests (default: the
#                                         whole of tests/python)
#   SID_REFLEAK=test_view.py,test_capi.py the modules the leak hunt repeats
#                                         (default: refleak.py's DEFAULT list)
#
# The root is made once and cached OUTSIDE the clone, under
# ${DEVBUF_CACHE:-~/.cache/devbuf}/sid-root-KEY, KEY a hash of the mirror and
# the package list below: `debootstrap --variant=minbase sid` from the mirror
# this machine's apt uses, then the interpreters and the build tools. It is
# built in KEY.tmp.PID and renamed when complete, so a half-made root is never
# reused. sid's Release file can be past its Valid-Until date, hence
# Acquire::Check-Valid-Until=false.
#
# Per interpreter T (3.14, 3.15, 3.14d), inside the root (chroot, in a private
# mount namespace, so that no mount outlives the script):
#   /src              this checkout, bind-mounted (read by the build)
#   /build/T          devbuf built with -Werror (the clone's build-sid/T)
#   /opt/venv-T-HASH  a venv with requirements-sid.txt (HASH: that file's
#                     hash; a new pin makes a new venv, in the cached root)
# then examples/taste.py, devbuf-info, and the WHOLE Python suite
# (tests/python). On 3.14d, the debug interpreter, the suite runs with
# CPython's assertions on. The `leaks` step then hunts reference leaks on
# 3.14d with scripts/refleak.py, in a pytest process of its own over the
# hunted modules: it runs each module's quick tests several times in that one
# process, in the manner of CPython's `regrtest -R`, and compares the
# references held on live objects, allocated blocks, open descriptors and
# sys.gettotalrefcount() between the repeats (which of them decide:
# scripts/refleak.py); the step is green when no module leaks (its verdict:
# build-sid/refleak-3.14d.log). It does not ride in the suite's run: there
# every measurement walks the whole suite's heap (ten measurements a module,
# each a collection and a walk over every live object), and the hunt took
# 2.4 times as long as the hunted modules' own run plus the hunt in a process
# of their own (405 s against 170 s on a 2-core machine). The modules hunted:
# SID_TESTS, else SID_REFLEAK's, else refleak.py's list.
#
# Needs root (debootstrap, chroot, mount namespaces) and the package indexes
# (Debian's archive, PyPI). Last line, always: "python-sid: N passed, M failed".
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DEVBUF_CACHE:-$HOME/.cache/devbuf}"
JOBS="${DEVBUF_JOBS:-2}"
STEPS="${SID_STEPS:-build taste info suite leaks}"
TAGS=("$@")
(( ${#TAGS[@]} )) || TAGS=(3.14 3.15 3.14d)
REQ="$ROOT/requirements-sid.txt"
# The mirror this machine's apt uses (deb822 URIs: or a one-line deb entry).
MIRROR="${SID_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
  grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ')}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
PACKAGES=(python3.14 python3.14-dev python3.14-venv python3.14-dbg
          python3.15 python3.15-dev python3.15-venv python3.15-dbg
          gcc g++ make cmake pkg-config libffi-dev ca-certificates git ccache)

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
finish() { echo "python-sid: $PASSED passed, $FAILED failed"; exit $((FAILED > 0)); }
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
say() { printf '[sid] %s\n' "$*"; }
# Run quietly into a log; on failure show its tail.
quiet() {
  local log="$1"; shift
  if ! "$@" >"$log" 2>&1; then tail -n 40 "$log" >&2; return 1; fi
}

KEY="$(printf '%s\n' "$MIRROR" "${PACKAGES[@]}" | sha256sum | cut -c1-16)"
SIDROOT="$CACHE/sid-root-$KEY"
OUT="$ROOT/build-sid"
mkdir -p "$CACHE" "$OUT"

# Run a command in the root, in a private mount namespace: /proc, /dev, the
# checkout at /src and build-sid/ at /build are mounted for it alone.
in_root() {
  local r="$1"; shift
  mkdir -p "$r/src" "$r/build"
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    r="$1" src="$2" out="$3"; shift 3
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    mount --bind "$src" "$r/src"
    mount --bind "$out" "$r/build"
    cp -L /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
    # The CAs this machine adds (an intercepting proxy) are trusted in the root too:
    # pip verifies PyPI against the system store.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null && [ -d "$r/etc/ssl/certs" ]; then
      cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
    fi
    exec chroot "$r" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      PYTHONDONTWRITEBYTECODE=1 "$@"
  ' in_root "$r" "$ROOT" "$OUT" "$@"
}

make_root() {
  [[ -x "$SIDROOT/usr/bin/python3.15" ]] && return 0
  local tmp="$SIDROOT.tmp.$$"
  rm -rf "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  say "making the sid root in $SIDROOT (debootstrap from $MIRROR, then ${#PACKAGES[@]} packages)"
  quiet "$OUT/debootstrap.log" debootstrap --variant=minbase sid "$tmp" "$MIRROR" || return 1
  quiet "$OUT/apt.log" in_root "$tmp" /bin/sh -c "
    apt-get -q -o Acquire::Check-Valid-Until=false update &&
    DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends install ${PACKAGES[*]} &&
    apt-get clean" || return 1
  mv "$tmp" "$SIDROOT"
  trap - EXIT
}

interp() { case "$1" in 3.14d) echo /usr/bin/python3.14-dbg ;; *) echo "/usr/bin/python$1" ;; esac; }

# The venv of T, made once per requirements-sid.txt: wheels only, except
# the packages of requirements-sid-source.txt, built from their sdists where
# no wheel exists for that interpreter.
make_venv() {
  local t="$1" py hash venv
  py="$(interp "$t")"
  hash="$(cat "$REQ" "$ROOT/requirements-sid-source.txt" | sha256sum | cut -c1-12)"
  venv="/opt/venv-$t-$hash"
  VENV="$venv"
  # (bin/python links to /usr/bin/python3.X of the root, not of this machine)
  [[ -f "$SIDROOT$venv/.complete" ]] && return 0
  rm -rf "$SIDROOT$venv"
  say "$t: venv $venv (requirements-sid.txt)"
  quiet "$OUT/venv-$t.log" in_root "$SIDROOT" /bin/sh -c "
    $py -m venv $venv &&
    $venv/bin/python -m pip install -q --disable-pip-version-check --only-binary=:all: -r /src/requirements-sid.txt &&
    $venv/bin/python -m pip install -q --disable-pip-version-check -r /src/requirements-sid-source.txt &&
    touch $venv/.complete" || return 1
}

make_root || { fail "the sid root (see $OUT/debootstrap.log, $OUT/apt.log)"; finish; }
say "root: $SIDROOT ($(in_root "$SIDROOT" /bin/sh -c 'python3.14 --version; python3.15 --version' | tr '\n' ' '))"

for t in "${TAGS[@]}"; do
  t0=$(date +%s)
  make_venv "$t" || { fail "$t: venv (see $OUT/venv-$t.log)"; continue; }
  py="$VENV/bin/python"
  # mypy's cache (test_typing.py) in the cached root, as ccache's objects.
  envs=(env DEVBUF_BUILD_DIR="/build/$t" PYTHONPATH="/build/$t/python"
        DEVBUF_MYPY_CACHE=/var/cache/devbuf-mypy)
  if has_step build; then
    # -Werror: a deprecation in a new CPython's headers fails the build.
    # ccache, its objects kept in the cached root: the three interpreters'
    # builds share every object but the extension's (BASEDIR=/ makes the
    # per-interpreter build folders' include paths relative), and a later
    # run shares them all.
    if quiet "$OUT/build-$t.log" in_root "$SIDROOT" /usr/bin/env CCACHE_DIR=/var/cache/devbuf-ccache \
         CCACHE_BASEDIR=/ CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=2G /bin/sh -c "
         cmake -S /src -B /build/$t -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEVBUF_WERROR=ON \
           -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
           -DDEVBUF_BUILD_TESTS=ON -DDEVBUF_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$py &&
         cmake --build /build/$t -j$JOBS"; then
      pass "$t: build (-Werror)"
    else
      fail "$t: build (see $OUT/build-$t.log)"; continue
    fi
  fi
  if has_step taste; then
    if quiet "$OUT/taste-$t.log" in_root "$SIDROOT" "${envs[@]}" "$py" -X dev -W error /src/examples/taste.py; then
      pass "$t: examples/taste.py (-X dev -W error): $(tail -n 1 "$OUT/taste-$t.log")"
    else
      fail "$t: examples/taste.py"
    fi
  fi
  if has_step info; then
    # The tool of this build tree, as a user of it runs it.
    if quiet "$OUT/info-$t.log" in_root "$SIDROOT" "/build/$t/bin/devbuf-info"; then
      pass "$t: devbuf-info ($(grep -c . "$OUT/info-$t.log") lines)"
    else
      fail "$t: devbuf-info"
    fi
  fi
  if has_step suite; then
    # The whole suite; -rfEs lists every failure, error and skip with its reason.
    tests=()
    for x in ${SID_TESTS:-tests/python}; do tests+=("/src/$x"); done
    if in_root "$SIDROOT" "${envs[@]}" PYTHONPATH="/build/$t/python:/src/scripts" \
         "$py" -m pytest -v -rfEs --durations=15 -p no:cacheprovider "${tests[@]}" \
         >"$OUT/pytest-$t.log" 2>&1; then
      pass "$t: tests/python: $(tail -n 1 "$OUT/pytest-$t.log" | tr -d =)"
    else
      tail -n 60 "$OUT/pytest-$t.log"
      fail "$t: tests/python: $(tail -n 1 "$OUT/pytest-$t.log" | tr -d =)"
    fi
    grep '^SKIPPED' "$OUT/pytest-$t.log" | sed 's/^/    /'
  fi
  if has_step leaks && [[ "$t" == 3.14d ]]; then
    # In a process of its own (see the top of this file): the hunted modules
    # (SID_TESTS, else SID_REFLEAK's, else refleak.py's list).
    paths=()
    for x in ${SID_TESTS:-}; do paths+=("/src/$x"); done
    if (( ${#paths[@]} == 0 )) && [[ -n "${SID_REFLEAK:-}" && "$SID_REFLEAK" != default ]]; then
      if [[ "$SID_REFLEAK" == all ]]; then paths=(/src/tests/python)
      else for x in ${SID_REFLEAK//,/ }; do paths+=("/src/tests/python/$x"); done; fi
    fi
    rm -f "$OUT/refleak-$t.log"
    in_root "$SIDROOT" "${envs[@]}" "$py" /src/scripts/refleak.py --report "/build/refleak-$t.log" \
      "${paths[@]}" >"$OUT/refleak-run-$t.log" 2>&1
    # Green only with every hunted module measured and none leaking.
    verdict="$(tail -n 1 "$OUT/refleak-$t.log" 2>/dev/null)"
    if [[ "$verdict" =~ ^refleak:\ [1-9][0-9]*\ modules,\ 0\ leaking,\ 0\ unmeasured ]]; then
      pass "$t: reference leaks: $verdict"
    else
      [[ -f "$OUT/refleak-$t.log" ]] && grep -v '^ok ' "$OUT/refleak-$t.log"
      tail -n 40 "$OUT/refleak-run-$t.log"
      fail "$t: reference leaks: ${verdict:-no verdict (see $OUT/refleak-run-$t.log)}"
    fi
  fi
  say "$t: $(( $(date +%s) - t0 ))s"
done
finish
