"""Cost of devbuf.view() and of extended-buffer exports, against same-run
baselines (memoryview(bytearray), numpy.asarray, a plain bytearray export).

Run from the repository root, after building with the Python bindings:

    DEVBUF_BUILD_DIR=build PYTHONPATH=build/python:build/python_tests \
        python benchmarks/python/bench_view.py [--quick] [--json out.json]

Goals: devbuf.view() of an extended-buffer exporter within 1.5x of
memoryview() and under 300 ns; getbuffer+release from C within 1.2x of a
plain bytearray export. Each number is the best of several repeats of a
tight loop (timeit for Python calls, a C loop in devbuf_consumer for
getbuffer+release), in ns per call, object destruction included.
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import timeit

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build"))
for p in (BUILD / "python", BUILD / "python_tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import numpy as np  # noqa: E402

import devbuf  # noqa: E402
import devbuf_consumer as consumer  # noqa: E402

PyBUF_RECORDS_RO = 0x1C
PyBUF_FULL_RO = 0x11C
D = devbuf.PyBUF_DEVICE


def interleaved(cases, repeat):
    """Best of `repeat` rounds; each round runs every case once, so that load
    from other processes hits all cases alike (the ratios are what matter)."""
    best = {k: float("inf") for k in cases}
    for fn in cases.values():
        fn()  # warm up
    for _ in range(repeat):
        for k, fn in cases.items():
            best[k] = min(best[k], fn())
    return best


def py_case(stmt, env, number):
    t = timeit.Timer(stmt, globals=env)
    return lambda: t.timeit(number) / number * 1e9


def c_case(obj, n, flags, extended):
    return lambda: consumer.bench_getbuffer(obj, n, flags, extended)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    number = 20_000 if args.quick else 100_000
    repeat = 3 if args.quick else 31
    n_c = 100_000 if args.quick else 500_000

    ba = bytearray(4096)
    try:
        dev = devbuf.device("devbuf.sim")
    except devbuf.Error:
        dev = devbuf.device("cpu")
    ext = devbuf.from_host(ba, device=dev)  # an extended-buffer exporter
    ext.synchronize()
    host = devbuf.from_host(ba, device="cpu")
    arr = np.zeros(512)
    env = dict(memoryview=memoryview, np=np, view=devbuf.view, ba=ba, ext=ext, host=host, arr=arr)

    py = interleaved({
        "memoryview(bytearray)": py_case("memoryview(ba)", env, number),
        "numpy.asarray(bytearray)": py_case("np.asarray(ba)", env, number),
        "numpy.asarray(ndarray)": py_case("np.asarray(arr)", env, number),
        f"devbuf.view(DeviceBuffer on {dev})": py_case("view(ext)", env, number),
        "devbuf.view(DeviceBuffer on cpu)": py_case("view(host)", env, number),
        "devbuf.view(bytearray)": py_case("view(ba)", env, number),
        "devbuf.view(ndarray)": py_case("view(arr)", env, number),
    }, repeat)
    c = interleaved({
        "bytearray, PyObject_GetBuffer(RECORDS_RO)": c_case(ba, n_c, PyBUF_RECORDS_RO, 0),
        f"DeviceBuffer on {dev}, PyObject_GetBuffer(RECORDS_RO|DEVICE)":
            c_case(ext, n_c, PyBUF_RECORDS_RO | D, 0),
        "bytearray, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)":
            c_case(ba, n_c, PyBUF_RECORDS_RO | D, 1),
        f"DeviceBuffer on {dev}, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)":
            c_case(ext, n_c, PyBUF_RECORDS_RO | D, 1),
    }, repeat)
    mv = py["memoryview(bytearray)"]
    dv = py[f"devbuf.view(DeviceBuffer on {dev})"]
    cb = c["bytearray, PyObject_GetBuffer(RECORDS_RO)"]
    ex_dev = c[f"DeviceBuffer on {dev}, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)"]
    ratios = {
        "view(extended) / memoryview(bytearray)": dv / mv,
        # the exporter's own cost: what the 1.2x goal is about
        "C extended export / bytearray export (PyObject_GetBuffer)":
            c[f"DeviceBuffer on {dev}, PyObject_GetBuffer(RECORDS_RO|DEVICE)"] / cb,
        # plus the consumer-side backport (zeroing, required-flags check, CPU scrub)
        "C extended export via GetBufferEx / raw bytearray export": ex_dev / cb,
        "C GetBufferEx: extended export / bytearray":
            ex_dev / c["bytearray, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)"],
    }
    goals = {
        "view(extended) <= 1.5x memoryview": ratios["view(extended) / memoryview(bytearray)"] <= 1.5,
        "view(extended) < 300 ns": dv < 300,
        "C getbuffer+release of the extended export <= 1.2x bytearray":
            ratios["C extended export / bytearray export (PyObject_GetBuffer)"] <= 1.2,
    }

    print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, numpy {np.__version__}, devbuf {devbuf.__version__}")
    print("\n## from Python (ns per call, best of %d x %d)" % (repeat, number))
    for k, v in py.items():
        print(f"  {v:8.1f}  {k}")
    print("\n## getbuffer+release from C (ns per call, best of %d x %d)" % (repeat, n_c))
    for k, v in c.items():
        print(f"  {v:8.1f}  {k}")
    print("\n## ratios")
    for k, v in ratios.items():
        print(f"  {v:8.2f}  {k}")
    print("\n## goals")
    for k, v in goals.items():
        print(f"  {'met' if v else 'MISSED':>8}  {k}")
    # The third goal: where the extended export's extra time goes. Static text:
    # instruction counts do not move from run to run, so they are measured apart
    # (benchmarks/python/callgrind_getbuffer.sh) and kept here by hand.
    print("""
  Instructions per getbuffer+release from C (callgrind inside the C loop above, its ~13 own
  included; benchmarks/python/callgrind_getbuffer.sh), before -> after the export fast path:
         88 ->  88  bytearray, PyObject_GetBuffer(RECORDS_RO)
        183 -> 132  DeviceBuffer on devbuf.sim:0, PyObject_GetBuffer(RECORDS_RO|DEVICE)
        150 -> 150  bytearray, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)
        240 -> 189  DeviceBuffer on devbuf.sim:0, DevbufPy_GetBufferEx(RECORDS_RO|DEVICE)
  DeviceBuffer's extra over bytearray: the export ledger (each export's serial kept, so a
  double release is reported, not miscounted: ~23), the device fields, and the fast path's
  checks (freed, request bits served, device_info ready or host-readable, ledger room); the
  rest of the checks run only off the fast path. Time: DeviceBuffer 12.2-12.5 -> 10.0-10.6 ns
  (interleaved runs of both builds, 2 shared cores). The 1.2x goal sits at the edge: the
  DeviceBuffer figure is steady, the bytearray baseline moves (8.2-10.3 ns here, 7.8 ns in a
  one-case loop, where the ratio is ~1.3); an exporter that only fills the fields (no ledger,
  checks or device fields; an experiment) measured 1.18x in that loop.""")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python_ns": py, "c_ns": c, "ratios": ratios, "goals": goals}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
