"""Pickle protocol 5 with out-of-band buffers, against same-run
baselines, at 16, 256 and 1024 MiB.

Run from the repository root, after building with the Python bindings:

    DEVBUF_BUILD_DIR=build PYTHONPATH=build/python \
        python benchmarks/pickle/bench_pickle.py [--sizes 16,256,1024] [--repeat 5] [--json out.json]

1. Host memory (a cpu DeviceBuffer): dumps+loads out-of-band
   (buffer_callback / buffers=) against in-band (protocol 5 without a
   callback, and protocol 4). Goal: out-of-band flat in size, under 1% of
   in-band at 1 GiB.
2. devbuf.sim device memory: dumps out-of-band (the one device->host copy
   into the plugin's staging memory) against one memcpy of the same size
   (ctypes.memmove) into fresh memory (what any copy that hands new memory
   to its caller pays: page faults); and dumps with the staging cache on
   (DEVBUF_PICKLE_STAGING_CACHE_MB: the previous pickle's staging block is
   reused) against a memcpy into memory already touched. Goal: at least
   0.8x the memcpy's speed. dumps+loads (one copy each way) is shown against
   two memcpys into fresh memory.

Each number is the best of --repeat rounds; every round runs every case once
(interleaved), so load from other processes hits all cases alike.
"""
import argparse
import ctypes
import gc
import json
import os
import pathlib
import pickle
import platform
import sys
import time

# A 1 GiB sim buffer, its copy made by loads, and an upload's staging need
# more than the sim device's default 1024 MiB; set before devbuf loads it.
os.environ.setdefault("DEVBUF_SIM_MEMORY_MB", "8192")

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build"))
if str(BUILD / "python") not in sys.path:
    sys.path.insert(0, str(BUILD / "python"))

import numpy as np  # noqa: E402

import devbuf  # noqa: E402

MiB = 1 << 20


def timed(case):
    setup, fn = case if isinstance(case, tuple) else (None, case)
    if setup:
        setup()
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(cases, repeat):
    best = {k: float("inf") for k in cases}
    for fn in cases.values():
        timed(fn)  # warm up
    for _ in range(repeat):
        for k, fn in cases.items():
            best[k] = min(best[k], timed(fn))
    return best


def host_cases(n):
    a = np.ones(n, np.uint8)
    b = devbuf.from_host(a, device="cpu")
    del a

    def oob():
        bufs = []
        data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
        c = pickle.loads(data, buffers=bufs)
        assert c.nbytes == n

    def inband5():
        c = pickle.loads(pickle.dumps(b, protocol=5))
        assert c.nbytes == n

    def inband4():
        c = pickle.loads(pickle.dumps(b, protocol=4))
        assert c.nbytes == n

    return {"oob": oob, "inband5": inband5, "inband4": inband4}


def sim_cases(n):
    src = np.ones(n, np.uint8)
    s = devbuf.from_host(src, device="devbuf.sim")
    s.synchronize()
    warm = np.empty(n, np.uint8)
    warm[:] = 0
    sp, wp = src.ctypes.data, warm.ctypes.data
    keep = (src, warm)  # the closures use raw addresses: keep the arrays alive

    def sim_dumps():
        bufs = []
        pickle.dumps(s, protocol=5, buffer_callback=bufs.append)
        assert memoryview(bufs[0]).nbytes == n

    def cache_off():
        devbuf._devbuf._pickle_staging_cache(0)

    def cache_primed():
        # DEVBUF_PICKLE_STAGING_CACHE_MB: the previous pickle's staging block
        # is reused (the untimed dumps here leaves one behind)
        devbuf._devbuf._pickle_staging_cache(n)
        sim_dumps()

    def sim_dumps_loads():
        bufs = []
        data = pickle.dumps(s, protocol=5, buffer_callback=bufs.append)
        c = pickle.loads(data, buffers=bufs)
        assert c.nbytes == n

    def memcpy_fresh():
        d = np.empty(n, np.uint8)
        ctypes.memmove(d.ctypes.data, sp, n)

    def memcpy_warm():
        ctypes.memmove(wp, sp, n)
        assert keep

    def memcpy_fresh_x2():
        d = np.empty(n, np.uint8)
        ctypes.memmove(d.ctypes.data, sp, n)
        e = np.empty(n, np.uint8)
        ctypes.memmove(e.ctypes.data, d.ctypes.data, n)

    return {"sim_dumps": (cache_off, sim_dumps), "sim_dumps_cached": (cache_primed, sim_dumps),
            "memcpy_fresh": memcpy_fresh, "memcpy_warm": memcpy_warm,
            "sim_dumps_loads": (cache_off, sim_dumps_loads), "memcpy_fresh_x2": memcpy_fresh_x2}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,256,1024", help="MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    results = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                           "cpus": os.cpu_count(), "numpy": np.__version__,
                           "devbuf": devbuf.__version__},
               "repeat": args.repeat, "host": {}, "sim": {}}

    print(f"{'MiB':>6} {'oob ms':>9} {'in-band5 ms':>12} {'in-band4 ms':>12} {'oob/in-band5':>13}")
    for mib in sizes:
        r = interleaved(host_cases(mib * MiB), args.repeat)
        gc.collect()
        results["host"][mib] = r
        print(f"{mib:>6} {r['oob'] * 1e3:>9.3f} {r['inband5'] * 1e3:>12.1f} "
              f"{r['inband4'] * 1e3:>12.1f} {r['oob'] / r['inband5']:>12.4%}")

    print()
    print(f"{'MiB':>6} {'sim dumps':>10} {'memcpy fresh':>13} {'x fresh':>8} "
          f"{'cached dumps':>13} {'memcpy warm':>12} {'x warm':>7} "
          f"{'dumps+loads':>12} {'2 memcpy fresh':>15} {'x':>6}   (ms)")
    for mib in sizes:
        r = interleaved(sim_cases(mib * MiB), args.repeat)
        devbuf._devbuf._pickle_staging_cache(0)
        gc.collect()
        results["sim"][mib] = r
        print(f"{mib:>6} {r['sim_dumps'] * 1e3:>10.1f} {r['memcpy_fresh'] * 1e3:>13.1f} "
              f"{r['memcpy_fresh'] / r['sim_dumps']:>7.2f}x "
              f"{r['sim_dumps_cached'] * 1e3:>13.1f} {r['memcpy_warm'] * 1e3:>12.1f} "
              f"{r['memcpy_warm'] / r['sim_dumps_cached']:>6.2f}x "
              f"{r['sim_dumps_loads'] * 1e3:>12.1f} {r['memcpy_fresh_x2'] * 1e3:>15.1f} "
              f"{r['memcpy_fresh_x2'] / r['sim_dumps_loads']:>5.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
