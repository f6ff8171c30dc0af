#!/usr/bin/env python3
"""devbuf's C consumer side by side with nanobind's nb::ndarray<>.

    DEVBUF_BUILD_DIR=build PYTHONPATH=build/python \
        python benchmarks/nanobind/bench_nanobind.py [--quick] [--json out.json]

Two tiny extensions with one function, data_ptr(obj) -> the address of obj's
data, are built here and timed from Python in the same run, interleaved:

  nanobind  nb_ext.cpp: m.def("data_ptr", [](nb::ndarray<> a) {...}), nanobind
            from PyPI (pinned in requirements.txt beside this file, installed
            with `pip install --target` into the build directory, never into
            .venv), compiled as nanobind's src/nb_combined.cpp recipe says
            (library -O3, binding -Os, as nanobind_add_module does).
  devbuf    devbuf_ext.c: DevbufPy_GetBufferEx from the header-only backport
            (bindings/python/include/devbuf_buffer.h; -O2), which also reports
            the device, the sync to honour and the format; an object without
            the buffer protocol goes through the header-only DLPack route
            (devbuf_dlpack_import.h: no devbuf object, no link to libdevbuf).
            data_ptr_capi takes devbuf's C API capsule instead
            (devbuf_capi.h: Import_FromObject, the description devbuf.view()
            holds, with the sync recorded), timed as a third case.

What each passes to a DLPack-only producer's __dlpack__: nanobind 3.1
(src/nb_ndarray.cpp, ndarray_import_impl, for nb::ndarray<> without a
read-only constraint) max_version=(1, 1), found once through the type and
called unbound, no stream and no __dlpack_device__ call; devbuf
max_version=(1, 3), stream only off the CPU (after __dlpack_device__, which
is asked once per producer type that has only answered kDLCPU). Both get a
versioned capsule from NumPy; the producer below forwards **kw, so both pay
the same for its own call.

Producers: a NumPy array, and a DLPack-only one (a Python class whose
__dlpack__/__dlpack_device__ forward to a NumPy array, as a framework
without the buffer protocol would). When nanobind cannot be fetched or built
(offline, no g++), the section says so and the run goes on.
"""
import argparse
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import sysconfig
import timeit

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build")).resolve()
if str(BUILD / "python") not in sys.path:
    sys.path.insert(0, str(BUILD / "python"))

import numpy as np  # noqa: E402

import devbuf  # noqa: E402


def pinned_version():
    for line in (HERE / "requirements.txt").read_text().splitlines():
        if line.startswith("nanobind=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("benchmarks/nanobind/requirements.txt pins no nanobind version")


def fetch_nanobind(out):
    """nanobind's package directory, installed under `out` if not there yet."""
    ver = pinned_version()
    target = out / f"nanobind-{ver}"
    pkg = target / "nanobind"
    if not (pkg / "src" / "nb_combined.cpp").exists():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-deps", "--target", str(target), f"nanobind=={ver}"],
                           capture_output=True, text=True)
        if r.returncode != 0 or not (pkg / "src" / "nb_combined.cpp").exists():
            raise RuntimeError(f"pip install --target {target} nanobind=={ver} failed: "
                               f"{(r.stderr or r.stdout).strip()[-300:]}")
    return pkg, ver


def build(out):
    """Build both extensions (cached by source hash) and import them."""
    cxx = os.environ.get("CXX", "g++")
    cc = os.environ.get("CC", "cc")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler ({cxx}) to build nanobind")
    nb, ver = fetch_nanobind(out)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    pyinc = sysconfig.get_paths()["include"]
    h = hashlib.sha256()
    for f in (HERE / "nb_ext.cpp", HERE / "devbuf_ext.c", REPO / "bindings/python/include/devbuf_buffer.h",
              REPO / "bindings/python/include/devbuf_capi.h",
              REPO / "bindings/python/include/devbuf_dlpack_import.h"):
        h.update(f.read_bytes())
    h.update(ver.encode())
    d = out / f"ext-{h.hexdigest()[:12]}"
    d.mkdir(parents=True, exist_ok=True)
    nb_so, db_so = d / ("_nb_bench" + suffix), d / ("_devbuf_bench" + suffix)
    cxxflags = ["-std=c++17", "-fvisibility=hidden", "-DNDEBUG", "-DNB_COMPACT_ASSERTIONS", "-fPIC",
                "-I", pyinc, "-I", str(nb / "include"), "-I", str(nb / "ext/robin_map/include")]
    if not nb_so.exists():
        lib_o = d / "libnanobind.o"
        subprocess.run([cxx, str(nb / "src/nb_combined.cpp"), *cxxflags, "-O3", "-fno-strict-aliasing",
                        "-ffunction-sections", "-fdata-sections", "-c", "-o", str(lib_o)],
                       check=True, capture_output=True, text=True)
        ext_o = d / "nb_ext.o"
        subprocess.run([cxx, str(HERE / "nb_ext.cpp"), *cxxflags, "-Os", "-c", "-o", str(ext_o)],
                       check=True, capture_output=True, text=True)
        subprocess.run([cxx, "-shared", "-Wl,-s", "-Wl,--gc-sections", str(ext_o), str(lib_o),
                        "-o", str(nb_so)], check=True, capture_output=True, text=True)
    if not db_so.exists():
        subprocess.run([cc, "-O2", "-shared", "-fPIC", str(HERE / "devbuf_ext.c"), "-o", str(db_so),
                        "-I", pyinc, "-I", str(REPO / "bindings/python/include"),
                        "-I", str(REPO / "core/include"), "-I", str(REPO / "registry/include")],
                       check=True, capture_output=True, text=True)
    sys.path.insert(0, str(d))
    import _devbuf_bench
    import _nb_bench
    return _nb_bench, _devbuf_bench, ver


class DLPackOnly:
    """A producer that speaks DLPack and nothing else (no buffer protocol)."""
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from timing import interleaved  # noqa: E402  (benchmarks/timing.py)


def py_case(fn, arg, number):
    t = timeit.Timer("f(x)", globals={"f": fn, "x": arg})
    return lambda: t.timeit(number) / number * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    number, repeat = (5000, 5) if args.quick else (50000, 21)
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"NumPy {np.__version__}, devbuf {devbuf.__version__}")
    try:
        nbm, dbm, ver = build(BUILD / "bench_nanobind")
    except (RuntimeError, subprocess.CalledProcessError, OSError, ImportError) as e:
        detail = getattr(e, "stderr", "") or ""
        print(f"Skipped: nanobind could not be fetched or built here ({e}"
              f"{': ' + detail.strip()[-300:] if detail else ''}). This section needs network access "
              "to PyPI once (pip install --target, into the build directory) and g++.")
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"skipped": str(e)}))
        return
    a = np.arange(1024, dtype=np.float32)
    p = DLPackOnly(a)
    want = a.__array_interface__["data"][0]
    for m in (nbm, dbm):
        assert m.data_ptr(a) == want and m.data_ptr(p) == want, m
    assert dbm.data_ptr_capi(p) == want
    cases = {
        "nanobind, NumPy array": py_case(nbm.data_ptr, a, number),
        "devbuf, NumPy array": py_case(dbm.data_ptr, a, number),
        "nanobind, DLPack-only producer": py_case(nbm.data_ptr, p, number // 4),
        "devbuf, DLPack-only producer": py_case(dbm.data_ptr, p, number // 4),
        "devbuf C API, DLPack-only producer": py_case(dbm.data_ptr_capi, p, number // 4),
    }
    best = interleaved(cases, repeat)
    ratios = {
        "NumPy array: devbuf / nanobind": best["devbuf, NumPy array"] / best["nanobind, NumPy array"],
        "DLPack-only: devbuf / nanobind":
            best["devbuf, DLPack-only producer"] / best["nanobind, DLPack-only producer"],
        "DLPack-only: devbuf C API / nanobind":
            best["devbuf C API, DLPack-only producer"] / best["nanobind, DLPack-only producer"],
    }
    print(f"nanobind {ver} (`nb::ndarray<>`), median of {repeat} interleaved rounds, ns per call:")
    print()
    print("| case | ns per call |")
    print("|---|---:|")
    for k, v in best.items():
        print(f"| {k} | {v:.0f} |")
    print()
    print("| ratio (goal: <= 1.00) | value |")
    print("|---|---:|")
    for k, v in ratios.items():
        print(f"| {k} | {v:.2f} |")
    print()
    print("On a NumPy array devbuf's consumer is one `PyObject_GetBuffer` (the backport adds a "
          "cached supported-flags check); nanobind asks `__dlpack__` first. On a DLPack-only "
          "producer devbuf's C consumer takes the header-only DLPack route "
          "(devbuf_dlpack_import.h): no devbuf object and no libdevbuf; it does what "
          "the DLPack Python specification asks of a consumer and nanobind does not (the device "
          "query, cached per producer type that has only answered kDLCPU with each tensor's "
          "device checked; the stream hand-off; the capsule renamed) and devbuf's validation of "
          "the tensor, with its messages. Both pass max_version and get a versioned capsule; "
          "the producer's own `__dlpack__` call is most of both "
          "(benchmarks/interop/callgrind_import.sh: instructions per call). The C API row is "
          "`Import_FromObject`: the same reader as `devbuf.view()`, with devbuf's device "
          "identifier, device_info and recorded sync.")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"ns": best, "ratios": ratios,
                                                       "nanobind": ver}, indent=2))


if __name__ == "__main__":
    main()
