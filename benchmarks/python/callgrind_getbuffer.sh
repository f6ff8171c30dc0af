#!/usr/bin/env bash
# Instructions per getbuffer+release from C, the four cases of bench_view.py's
# C section: callgrind collecting only inside devbuf_consumer.bench_getbuffer
# (the bench's own C loop, its ~13 loop instructions included), N calls minus
# 0 calls, divided by N. Deterministic where the timings are not (shared
# cores, no hardware counters). Needs valgrind.
#
#   benchmarks/python/callgrind_getbuffer.sh [BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
PY="$ROOT/.venv/bin/python"
N=100000
export PYTHONHASHSEED=0 DEVBUF_BUILD_DIR="$BUILD"
run() {  # case n -> Ir collected inside bench_getbuffer
  valgrind --tool=callgrind --toggle-collect=bench_getbuffer --callgrind-out-file=/dev/null \
    "$PY" - "$1" "$2" <<'PYEOF' 2>&1 | sed -n 's/.*Collected : //p'
import os, sys
b = os.environ["DEVBUF_BUILD_DIR"]
sys.path[:0] = [b + "/python", b + "/python_tests"]
import devbuf, devbuf_consumer as c
D, RECORDS_RO = devbuf.PyBUF_DEVICE, 0x1C
ba = bytearray(4096)
ext = devbuf.from_host(ba, device=devbuf.device("devbuf.sim"))
ext.synchronize()
obj, flags, extended = {"ba": (ba, RECORDS_RO, 0), "dev": (ext, RECORDS_RO | D, 0),
                        "baex": (ba, RECORDS_RO | D, 1), "devex": (ext, RECORDS_RO | D, 1)}[sys.argv[1]]
c.bench_getbuffer(obj, int(sys.argv[2]), flags, extended)
PYEOF
}
for case in "ba:bytearray, PyObject_GetBuffer(RECORDS_RO)" \
            "dev:DeviceBuffer on devbuf.sim:0, PyObject_GetBuffer(RECORDS_RO|DEVICE)" \
            "baex:bytearray, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)" \
            "devex:DeviceBuffer on devbuf.sim:0, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)"; do
  a=$(run "${case%%:*}" $N)
  z=$(run "${case%%:*}" 0)
  "$PY" -c "print('  %8.1f  %s' % (($a - $z) / $N, '${case#*:}'))"
done
