#!/usr/bin/env bash
# Set-up for a fresh Debian machine (run as root), idempotent and quiet when
# already done: system packages, the project's Python venv, and the build.
#
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
#   scripts/setup.sh --packages    step 1 only (the test command's second
#                                  lane needs them before the build starts)
#
# The one interpreter: Debian's /usr/bin/python3, in a venv at .venv. The
# build, the tests and the README all use .venv/bin/python; after set-up it
# imports devbuf from the default build (step 4).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PACKAGES_ONLY=0
[[ "${1:-}" == --packages ]] && PACKAGES_ONLY=1
BUILD="${1:-build}"
shift || true

say() { printf '[setup] %s\n' "$*"; }

# 1. System packages (scripts/packages.txt), installed only when missing.
missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done < scripts/packages.txt
if (( ${#missing[@]} )); then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
(( PACKAGES_ONLY )) && exit 0

# 2. The Python venv, from Debian's interpreter, with pinned packages.
PY=/usr/bin/python3
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv from $PY ($($PY --version 2>&1))"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  say "installing Python packages from requirements.txt"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi

# 3. Configure (once) and build.
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  say "configuring $BUILD"
  cmake -S . -B "$BUILD" -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" "$@" >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" -- --no-print-directory -s 2>&1 | { grep -v '^\[' || true; }
rc="${PIPESTATUS[0]}"
(( rc == 0 )) || exit "$rc"

# 4. The default build's package, installed into .venv in editable form: a
# .pth file naming build/python, as `pip install -e` does, so that
# `.venv/bin/python -c "import devbuf"` works right after set-up and always
# sees the latest build (no copy to go stale, no PYTHONPATH to know about).
# Only a venv that belongs to this checkout: a .venv that is a link to
# another checkout's venv is left alone (it would point theirs at ours).
if [[ "$BUILD" == build && -d build/python/devbuf ]]; then
  venv_real=$(readlink -f .venv)
  if [[ "$venv_real" == "$ROOT/.venv" ]]; then
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    pth="$site/devbuf-build-tree.pth"
    if [[ "$(cat "$pth" 2>/dev/null)" != "$ROOT/build/python" ]]; then
      say "installing devbuf into .venv (editable: $pth -> build/python)"
      echo "$ROOT/build/python" >"$pth"
    fi
    # The `devbuf-info` command, as `pip install` makes it: a console script
    # that runs build/bin/devbuf-info (devbuf/_info.py finds it next to the
    # build's libdevbuf), so `.venv/bin/devbuf-info` works after set-up.
    launcher=$(printf '#!%s\nimport sys\nfrom devbuf._info import main\nsys.exit(main())\n' \
                      "$ROOT/.venv/bin/python")
    if [[ "$(cat .venv/bin/devbuf-info 2>/dev/null)" != "$launcher" ]]; then
      printf '%s\n' "$launcher" >.venv/bin/devbuf-info
      chmod +x .venv/bin/devbuf-info
    fi
  else
    say "not installing devbuf into .venv: it is $venv_real, outside this checkout"
  fi
fi
