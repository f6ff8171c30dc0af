"""Cost of one plugin operation through a libffi closure into Python, against
the same operation in a C plugin, measured in the same run.

Run from the repository root, after building with the Python bindings:

    DEVBUF_BUILD_DIR=build PYTHONPATH=build/python \\
        python benchmarks/ffi/bench_closure.py [--quick] [--json out.json]

Cases, ns per call (best of several interleaved rounds):

- runtime ``devbuf_event_query`` on the C ``cpu`` plugin and on a minimal
  Python plugin (its ``event_query`` returns True): a C loop in
  devbuf._pyplugin with the GIL released, so each Python call pays the
  trampoline, PyGILState_Ensure/Release, argument boxing and the method call;
- the same for ``devbuf_device_props_get`` (a dict converted field by field);
- the bare Python method called from Python (what the closure adds on top);
- an extension function through ``devbuf.plugin.call_ext`` (ffi_call with
  checked conversions): a C function of the test-double plugin, and a
  Python-defined one (ffi_call -> closure -> Python).
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import sys
import timeit

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(BUILD / "python"))

import devbuf  # noqa: E402
import devbuf.plugin as P  # noqa: E402

_pp = P._pyplugin


class Minimal(P.PythonPlugin):
    """The least a plugin can do per call: nothing but return."""

    name = "bench_py"
    identifiers = ("bench.py",)

    def device_count(self):
        return 1

    def device_props(self, device):
        return {"name": "bench", "vendor": "devbuf", "alloc_alignment": 64,
                "flags": 1, "dlpack_device_type": -1}

    def mem_alloc(self, device, size, alignment, stream):
        return 0x1000

    def mem_free(self, device, ptr, stream):
        pass

    def copy_h2d(self, *a):
        pass

    copy_d2h = copy_d2d = copy_h2d

    def stream_create(self, device):
        return None

    def stream_destroy(self, device, stream):
        pass

    stream_synchronize = stream_destroy

    def event_create(self, device):
        return 1

    def event_destroy(self, device, event):
        pass

    event_synchronize = event_destroy

    def event_record(self, device, event, stream):
        pass

    def stream_wait_event(self, device, stream, event):
        pass

    def event_query(self, device, event):
        return True

    @P.ext_function("i(i)")
    def echo_i(self, v):
        return v


def best(fn, repeat):
    return min(fn() for _ in range(repeat))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    n_c = 20_000 if args.quick else 200_000
    n_py = 20_000 if args.quick else 100_000
    repeat = 5 if args.quick else 15

    plugin = Minimal()
    reg = P.register_plugin(plugin)
    ext_so = BUILD / "lib" / "devbuf" / "test-plugins" / "devbuf_plugin_extfn_test.so"
    have_ext = ext_so.exists()
    if have_ext and not any(p.name == "extfn_test" and p.loaded for p in devbuf.plugins()):
        devbuf.load_plugin(ext_so)

    cases = {
        "event_query: C plugin (cpu)": lambda: _pp._bench("cpu", "event_query", n_c),
        "event_query: Python plugin (closure)": lambda: _pp._bench("bench.py", "event_query", n_py),
        "device_props: C plugin (cpu)": lambda: _pp._bench("cpu", "device_props", n_c),
        "device_props: Python plugin (closure)": lambda: _pp._bench("bench.py", "device_props", n_py),
        "event_query: the Python method alone, from Python":
            lambda: timeit.timeit(lambda: plugin.event_query(0, 1), number=n_py) / n_py * 1e9,
        "call_ext from Python: C function echo_i(i)":
            (lambda: timeit.timeit(lambda: P.call_ext("extfn_test", "echo_i", 5), number=n_py)
             / n_py * 1e9) if have_ext else None,
        "call_ext from Python: Python function echo_i(i) (ffi_call -> closure)":
            lambda: timeit.timeit(lambda: P.call_ext("bench_py", "echo_i", 5), number=n_py) / n_py * 1e9,
    }
    cases = {k: v for k, v in cases.items() if v is not None}
    results = {k: float("inf") for k in cases}
    for _ in range(repeat):  # interleaved rounds: load hits every case alike
        for k, fn in cases.items():
            results[k] = min(results[k], fn())
    reg.unregister()

    ratio_q = results["event_query: Python plugin (closure)"] / results["event_query: C plugin (cpu)"]
    ratio_p = results["device_props: Python plugin (closure)"] / results["device_props: C plugin (cpu)"]
    q_py = results["event_query: Python plugin (closure)"]
    q_c = results["event_query: C plugin (cpu)"]
    print(f"**Machine**: {platform.node()} ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs), CPython {platform.python_version()}, libffi "
          f"{getattr(_pp, 'ffi_version', '?')}, devbuf {devbuf.__version__}. "
          f"**Date**: {datetime.date.today().isoformat()}. Best of {repeat} interleaved rounds.\n")
    print("ns per runtime call, in a C loop inside `devbuf._pyplugin` with the GIL released, on the "
          "C `cpu` plugin and on a minimal Python plugin whose methods only return (each Python "
          "call pays the libffi trampoline, `PyGILState_Ensure`/`Release`, argument boxing, the "
          "method call and the conversion of its answer); the bare method called from Python; and "
          "`devbuf.plugin.call_ext` (lookup, signature parsing, checked conversions, `ffi_call`).\n")
    print("| case | ns/call |")
    print("|---|---:|")
    for k, v in results.items():
        print(f"| {k} | {v:,.0f} |")
    print(f"\nPython plugin / C plugin: event_query {ratio_q:.1f}x, device_props {ratio_p:.1f}x. "
          f"A Python plugin adds about {q_py - q_c:.0f} ns to every operation on top of what its "
          "Python code does, and every call takes the GIL, so calls from several threads into one "
          "Python plugin run one at a time: it is for convenience (prototypes, test devices, "
          "wrapping a Python driver), not the hot path.")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"results": results, "ratio_event_query": ratio_q, "ratio_device_props": ratio_p},
            indent=2))


if __name__ == "__main__":
    main()
