#!/usr/bin/env bash
# Instructions per call of the import paths, load-independent where the
# timings of bench_dlpack.py and bench_nanobind.py are not (shared cores):
# callgrind over the whole process, N calls minus 0 calls, divided by N (the
# `for` loop's own few dozen instructions included, alike for every case).
# Each call's result is dropped at once, so deallocation (and NumPy's
# deleter) is counted too. Needs valgrind.
#
#   benchmarks/interop/callgrind_import.sh [BUILD_DIR] [CASE...]
#
# Cases: devbuf.from_dlpack, np.from_dlpack, devbuf.view (a 32x32 float32
# ndarray, as bench_dlpack.py); c.devbuf.dlpack_only, c.capi.dlpack_only,
# c.nanobind.dlpack_only, c.devbuf.numpy, c.nanobind.numpy (benchmarks/nanobind's
# two extensions, as bench_nanobind.py builds them; run bench_nanobind.py once
# first). c.devbuf.* is the header-only route (devbuf_dlpack_import.h for a
# DLPack-only producer), c.capi.* the C API capsule's Import_FromObject, and
# c.floor.dlpack_only no consumer at all: __dlpack__(max_version=(1, 3)) and
# the deleter, the floor under any consumer of that producer.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
shift || true
PY="$ROOT/.venv/bin/python"
N=${N:-20000}
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(devbuf.from_dlpack np.from_dlpack devbuf.view)
export PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 DEVBUF_BUILD_DIR="$BUILD" BENCH_ROOT="$ROOT"
run() {  # case n -> Ir of the whole process
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$PY" - "$1" "$2" <<'PYEOF' 2>&1 |
import glob, os, sys
b = os.environ["DEVBUF_BUILD_DIR"]
sys.path[:0] = [b + "/python"]
import numpy as np
import devbuf
case, n = sys.argv[1], int(sys.argv[2])
a = np.arange(1024, dtype=np.float32).reshape(32, 32)
if case.startswith("c."):
    ext = sorted(glob.glob(b + "/bench_nanobind/ext-*/"), key=os.path.getmtime)[-1]
    sys.path.insert(0, ext)
    sys.path.insert(0, os.environ["BENCH_ROOT"] + "/benchmarks/nanobind")
    from bench_nanobind import DLPackOnly
    import _devbuf_bench, _nb_bench
    _, lib, what = case.split(".")
    f = {"devbuf": _devbuf_bench.data_ptr, "capi": _devbuf_bench.data_ptr_capi,
         "floor": _devbuf_bench.floor_dlpack, "nanobind": _nb_bench.data_ptr}[lib]
    x = DLPackOnly(np.arange(1024, dtype=np.float32)) if what == "dlpack_only" else a
else:
    f = {"devbuf.from_dlpack": devbuf.from_dlpack, "np.from_dlpack": np.from_dlpack,
         "devbuf.view": devbuf.view}[case]
    x = a
f(x)  # warm every cache first, in both runs
for _ in range(n):
    f(x)
PYEOF
    sed -n 's/.*Collected : //p'
}
for c in "${CASES[@]}"; do
  hi=$(run "$c" "$N")
  lo=$(run "$c" 0)
  "$PY" -c "print('%-26s %8.0f instructions per call' % ('$c', ($hi - $lo) / $N))"
done
