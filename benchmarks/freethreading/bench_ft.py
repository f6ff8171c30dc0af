"""Per-call cost and thread scaling on whatever interpreter runs this file:
scripts/python-ft.sh runs it on the default and the free-threaded
build of the same CPython 3.13 source, one after the other, and prints the
ratios (docs/benchmarks.md, "Free-threaded CPython").

    python bench_ft.py [--json]

Per-call figures are medians of interleaved rounds (benchmarks/timing.py).
Scaling: throughput of N threads (each looping for a fixed time) divided by
one thread's, for two threads on their own objects and for two threads
sharing one DeviceBuffer, and CPython's own exporter beside it (two threads
sharing one bytearray through memoryview). Each figure is the best (highest)
throughput of SCALE_ROUNDS rounds, the cases interleaved within each round, so
that a moment of load elsewhere lowers one round, not one case. (An earlier
version took the lowest throughput of three rounds, case after case: one slow
one-thread round then made the ratio absurd, 6.97x from 2 threads on 2 CPUs.)
Every figure here is load-dependent: docs/benchmarks.md's instruction counts
(benchmarks/interop/callgrind_ft.sh) are not.
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from timing import interleaved  # noqa: E402

import numpy as np  # noqa: E402

import devbuf  # noqa: E402

try:
    import devbuf_consumer as consumer
except ImportError:  # pragma: no cover - the test extension was not built
    consumer = None

N = int(os.environ.get("BENCH_FT_N", "20000"))
REPEAT = int(os.environ.get("BENCH_FT_REPEAT", "7"))
SCALE_SECONDS = float(os.environ.get("BENCH_FT_SCALE_SECONDS", "0.5"))
SCALE_ROUNDS = int(os.environ.get("BENCH_FT_SCALE_ROUNDS", "5"))
RECORDS_RO_DEVICE = 0x11C | devbuf.PyBUF_DEVICE


def per_call(fn, n=N):
    def run():
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n
    return run


def workload(buf):
    """One unit of the scaling loop: a view, a DLPack export, a release."""
    def step():
        with devbuf.view(buf):
            pass
        np.from_dlpack(buf)
    return step


def workload_memoryview(ba):
    """CPython's own exporter, the same shape: a view of a bytearray, released."""
    def step():
        with memoryview(ba):
            pass
    return step


def throughput(steps, seconds=SCALE_SECONDS):
    """Total steps per second with one thread per entry of `steps`."""
    counts = [0] * len(steps)
    barrier = threading.Barrier(len(steps) + 1)
    stop = [False]

    def run(i):
        fn = steps[i]
        barrier.wait()
        n = 0
        while not stop[0]:
            for _ in range(50):
                fn()
            n += 50
        counts[i] = n

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(steps))]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop[0] = True
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def main():
    arr = np.arange(256, dtype=np.float32)
    buf = devbuf.from_host(arr)
    cases = {
        "devbuf.view(DeviceBuffer)": per_call(lambda: devbuf.view(buf).release()),
        "devbuf.view(ndarray)": per_call(lambda: devbuf.view(arr).release()),
        "devbuf.from_dlpack(ndarray)": per_call(lambda: devbuf.from_dlpack(arr)),
        "np.from_dlpack(DeviceBuffer)": per_call(lambda: np.from_dlpack(buf)),
    }
    if consumer is not None:
        def getbuffer_ex():
            return consumer.bench_getbuffer(arr, N, RECORDS_RO_DEVICE, 1)
        cases["DevbufPy_GetBufferEx(ndarray), cache hit"] = getbuffer_ex
    ns = interleaved(cases, REPEAT)

    own = [devbuf.from_host(arr) for _ in range(2)]
    ba = bytearray(1024)
    scale_cases = {
        "one": lambda: [workload(own[0])],
        "two_own": lambda: [workload(o) for o in own],
        "two_shared": lambda: [workload(buf), workload(buf)],
        "mv_one": lambda: [workload_memoryview(ba)],
        "mv_two_shared": lambda: [workload_memoryview(ba), workload_memoryview(ba)],
    }
    best = dict.fromkeys(scale_cases, 0.0)
    for _ in range(SCALE_ROUNDS):  # interleaved: every case once per round
        for k, make in scale_cases.items():
            best[k] = max(best[k], throughput(make()))
    one, two_own, two_shared = best["one"], best["two_own"], best["two_shared"]
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    out = {
        "python": sys.version.split()[0],
        "build": "free-threaded" if "free-threading" in sys.version else "default",
        "gil_enabled": gil,
        "ns_per_call": ns,
        "scaling": {
            "1 thread (steps/s)": one,
            "2 threads, own objects / 1 thread": two_own / one,
            "2 threads, one shared DeviceBuffer / 1 thread": two_shared / one,
            "2 threads, one shared bytearray via memoryview / 1 thread":
                best["mv_two_shared"] / best["mv_one"],
        },
        "cpus": os.cpu_count(),
    }
    if "--json" in sys.argv:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
