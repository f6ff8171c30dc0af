#!/usr/bin/env bash
# Run every benchmark and regenerate docs/benchmarks.md and docs/img/*.svg.
#   scripts/bench.sh [--quick]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release
exec .venv/bin/python benchmarks/run_all.py --build "$ROOT/build" "$@"
