#!/usr/bin/env bash
# The main job: set up and build, list what is registered, run the demo on
# the strict simulated device, then the README's Python taste
# (examples/taste.py) with the interpreter the README names.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh build
echo
if [[ -x build/bin/devbuf-info ]]; then
  build/bin/devbuf-info || true   # exit 1 only means some plugin has no device here
else
  echo "(devbuf-info not built)"
fi
echo
build/bin/devbuf-demo devbuf.sim "${1:-16777216}"
echo
if [[ -d build/python/devbuf ]]; then
  echo "\$ .venv/bin/python examples/taste.py   # the README's taste"
  .venv/bin/python examples/taste.py
else
  echo "(Python bindings not built: no taste)"
fi
