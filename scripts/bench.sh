#!/usr/bin/env bash
# Run every benchmark and regenerate docs/benchmarks.md and docs/img/*.svg.
#   scripts/bench.sh [--quick]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh build -DCMAKE_BUILD_TYPE=Release
# The 3.12 and 3.13 builds that benchmarks/python/bench_versions.py compares.
scripts/test-matrix.sh 3.12 3.13 >/dev/null || echo "[bench] scripts/test-matrix.sh 3.12 3.13 failed" >&2
exec .venv/bin/python benchmarks/run_all.py --build "$ROOT/build" "$@"
