#!/usr/bin/env bash
# Build the documentation with warnings as errors: Sphinx + MyST-Parser, pinned
# in requirements-docs.txt and installed into their own venv (cached under
# ~/.cache/devbuf/docs-venv, rebuilt when requirements-docs.txt changes), with
# autodoc importing the devbuf just built (build/python).
#
#   scripts/docs-build.sh [BUILD_DIR]      HTML into BUILD_DIR/docs-html (default build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="$(cd "${1:-build}" && pwd)"
VENV="${DEVBUF_DOCS_VENV:-${DEVBUF_CACHE:-$HOME/.cache/devbuf}/docs-venv}"
[[ -d "$BUILD/python/devbuf" ]] || { echo "docs-build: $BUILD has no built devbuf package (scripts/setup.sh first)" >&2; exit 2; }
want=$(cat requirements-docs.txt /usr/bin/python3 2>/dev/null | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
  echo "docs-build: installing requirements-docs.txt into $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-docs.txt
  echo "$want" >"$VENV/.requirements.sha256"
fi
PYTHONPATH="$BUILD/python" DEVBUF_BUILD_DIR="$BUILD" \
  "$VENV/bin/python" -m sphinx -W --keep-going -q -b html -d "$BUILD/docs-doctrees" docs "$BUILD/docs-html"
echo "docs-build: HTML in $BUILD/docs-html/index.html"
