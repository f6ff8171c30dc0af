#!/usr/bin/env python3
"""Benchmark devbuf's format engine against struct.calcsize and NumPy's PEP 3118
parser, on the same strings, in the same run; then the C microbenchmark.

    .venv/bin/python benchmarks/format/bench_format.py [--lib build/lib/libdevbuf.so] [--quick]

From Python the engine is called three ways:
  ext    a ~30-line CPython extension built here on the fly (METH_O, as a real
         binding calls it); the fair "from Python" number
  ctypes ctypes.CDLL, for reference: its per-call overhead alone (~0.3-1 us)
         exceeds the engine's cost
  devbuf the project's own binding, when `devbuf` imports and exposes one
Times are per call, thread CPU time (the machine is shared), best of N repeats.
Prints a Markdown table; --markdown FILE appends it under "## Format strings".
"""
import argparse
import ctypes
import datetime
import glob
import os
import platform
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

EXT_SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "devbuf/format.h"

static PyObject *size_mode(PyObject *arg, uint32_t mode) {
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
  if (s == NULL) return NULL;
  uint64_t sz;
  if (devbuf_format_itemsize(s, (size_t)n, mode, &sz, NULL, NULL, NULL) != 0) {
    devbuf_error err;
    devbuf_format_itemsize(s, (size_t)n, mode, &sz, NULL, NULL, &err);
    PyErr_SetString(PyExc_ValueError, err.message);
    return NULL;
  }
  return PyLong_FromUnsignedLongLong(sz);
}
static PyObject *itemsize(PyObject *m, PyObject *a) { return size_mode(a, 0); }
static PyObject *itemsize_struct(PyObject *m, PyObject *a) { return size_mode(a, 1); }
static PyObject *itemsize_numpy(PyObject *m, PyObject *a) { return size_mode(a, 2); }
/* Full parse (field tree) in NumPy mode; returns the itemsize. */
static PyObject *parse_numpy(PyObject *m, PyObject *arg) {
  Py_ssize_t n;
  const char *s = PyUnicode_AsUTF8AndSize(arg, &n);
  if (s == NULL) return NULL;
  static _Thread_local devbuf_format f;
  f.struct_size = sizeof f;
  int rc = devbuf_format_parse(s, (size_t)n, 2, &f, NULL);
  uint64_t sz = f.itemsize;
  devbuf_format_release(&f);
  if (rc != 0) { PyErr_SetString(PyExc_ValueError, "bad format"); return NULL; }
  return PyLong_FromUnsignedLongLong(sz);
}
/* What struct.calcsize does: remember the answer per format string (a dict
 * keyed by the str object, cleared when it reaches 100 entries as struct's). */
static PyObject *cache;
static PyObject *itemsize_struct_cached(PyObject *m, PyObject *arg) {
  PyObject *hit = PyDict_GetItemWithError(cache, arg);
  if (hit != NULL) return Py_NewRef(hit);
  if (PyErr_Occurred()) return NULL;
  PyObject *v = size_mode(arg, 1);
  if (v == NULL) return NULL;
  if (PyDict_GET_SIZE(cache) >= 100) PyDict_Clear(cache);
  if (PyDict_SetItem(cache, arg, v) < 0) { Py_DECREF(v); return NULL; }
  return v;
}
static PyMethodDef M[] = {
  {"itemsize", itemsize, METH_O, NULL},
  {"itemsize_struct_cached", itemsize_struct_cached, METH_O, NULL},
  {"itemsize_struct", itemsize_struct, METH_O, NULL},
  {"itemsize_numpy", itemsize_numpy, METH_O, NULL},
  {"parse_numpy", parse_numpy, METH_O, NULL},
  {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "_fmtbench", NULL, -1, M};
PyMODINIT_FUNC PyInit__fmtbench(void) {
  cache = PyDict_New();
  return cache ? PyModule_Create(&D) : NULL;
}
"""


def find_lib(explicit):
    if explicit:
        return os.path.abspath(explicit)
    env = os.environ.get("DEVBUF_LIB")
    if env:
        return os.path.abspath(env)
    cands = glob.glob(os.path.join(ROOT, "build*", "lib", "libdevbuf.so"))
    if not cands:
        sys.exit("libdevbuf.so not found: build first or pass --lib")
    return max(cands, key=os.path.getmtime)


def cc():
    return os.environ.get("CC", "cc")


def build_ext(lib, tmp):
    src = os.path.join(tmp, "_fmtbench.c")
    with open(src, "w") as fh:
        fh.write(EXT_SRC)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = os.path.join(tmp, "_fmtbench" + suffix)
    libdir = os.path.dirname(lib)
    subprocess.check_call([cc(), "-O2", "-shared", "-fPIC", src, "-o", out,
                           "-I", sysconfig.get_paths()["include"],
                           "-I", os.path.join(ROOT, "core", "include"),
                           "-I", os.path.join(ROOT, "registry", "include"),
                           "-L", libdir, "-ldevbuf", "-Wl,-rpath," + libdir])
    sys.path.insert(0, tmp)
    import _fmtbench
    return _fmtbench


def load_ctypes(lib):
    L = ctypes.CDLL(lib)
    f = L.devbuf_format_itemsize
    f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    out = ctypes.c_uint64()
    ref = ctypes.byref(out)

    def call(s, mode=0):
        b = s.encode()
        if f(b, len(b), mode, ref, None, None, None):
            raise ValueError(s)
        return out.value
    return call


def per_call_ns(fn, arg, repeat, number):
    t = timeit.Timer(lambda: fn(arg), timer=time.thread_time)
    # the lambda adds the same overhead to every contender; measure it too
    best = min(t.repeat(repeat=repeat, number=number)) / number * 1e9
    return best


def lambda_overhead_ns(repeat, number):
    def noop(x):
        return x
    return per_call_ns(noop, "i", repeat, number)


def direct_ns(stmt, setup_globals, repeat, number):
    t = timeit.Timer(stmt, globals=setup_globals, timer=time.thread_time)
    return min(t.repeat(repeat=repeat, number=number)) / number * 1e9


PLAIN = ["i", "<iid", "10sHHd", "@3sdq?", "=" + "h" * 20]
STRUCTURED_NP = [
    # what NumPy itself exports for record arrays (memoryview(arr).format)
    ("record (packed)", "T{<d:x:<d:y:<i:id:5s:name:}"),
    ("record (aligned)", None),  # filled from numpy at run time
    ("nested + subarray", "T{<i:a:T{<H:b:<B:c:}:sub:(4,4)<f:m:}"),
]
CUSTOM = ["[devbuf$bfloat16]", "[numpy$x;devbuf$float8_e4m3fn]", "(2,2)[devbuf$bfloat16]:w:"]
# devbuf.parse_format: plain formats of five codes against
# struct.Struct(f), record formats against NumPy's reader.
FIVE = ["bhiqd", "<iHdQf", "=cBhId"]
RECORDS = [("the goal's example (default mode)", "T{i:a:(2)d:b:}", "default"),
           ("record (packed), NumPy mode", "T{<d:x:<d:y:<i:id:5s:name:}", "numpy"),
           ("nested + subarray, NumPy mode", "T{<i:a:T{<H:b:<B:c:}:sub:(4,4)<f:m:}", "numpy")]


def interleaved_median_ns(stmts, g, rounds):
    """Median ns per call of each statement over `rounds` rounds; each round
    times every statement once, so that load hits all of them alike."""
    per = {k: [] for k in stmts}
    for k, (stmt, n) in stmts.items():
        timeit.Timer(stmt, globals=g, timer=time.thread_time).timeit(max(n // 10, 1))  # warm up
    for _ in range(rounds):
        for k, (stmt, n) in stmts.items():
            t = timeit.Timer(stmt, globals=g, timer=time.thread_time)
            per[k].append(t.timeit(n) / n * 1e9)
    return {k: sorted(v)[len(v) // 2] for k, v in per.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--markdown", help="append the results to this Markdown file")
    a = ap.parse_args()
    repeat, number = (5, 20000) if a.quick else (15, 100000)
    os.environ.setdefault("DEVBUF_NO_DEFAULT_PLUGINS", "1")
    lib = find_lib(a.lib)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ext = build_ext(lib, tmp)
        cty = load_ctypes(lib)
        g = {"struct": struct, "ext": ext}
        try:
            import numpy as np
            try:
                from numpy._core._internal import _dtype_from_pep3118
            except ImportError:
                from numpy.core._internal import _dtype_from_pep3118
        except ImportError:
            np = None
        try:
            import devbuf as devbuf_pkg
            binding = next((getattr(devbuf_pkg, n) for n in ("calcsize", "format_itemsize", "itemsize")
                            if callable(getattr(devbuf_pkg, n, None))), None)
        except Exception:
            binding = None

        # ---- plain formats: struct mode vs struct.calcsize ----------------------------
        for f in PLAIN:
            assert ext.itemsize_struct(f) == struct.calcsize(f), f
            g["f"] = f
            cached = direct_ns("struct.calcsize(f)", g, repeat, number)
            uncached = direct_ns("struct.Struct(f).size", g, repeat, number // 4)
            ours = direct_ns("ext.itemsize_struct(f)", g, repeat, number)
            ours_cached = direct_ns("ext.itemsize_struct_cached(f)", g, repeat, number)
            ct = direct_ns("cty(f, 1)", dict(g, cty=cty), repeat, number // 4)
            row = {"group": "plain", "format": f, "devbuf_ext": ours, "devbuf_ctypes": ct,
                   "devbuf_cached": ours_cached,
                   "struct_cached": cached, "struct_uncached": uncached}
            if binding is not None:
                row["devbuf_pkg"] = direct_ns("b(f)", dict(g, b=binding), repeat, number)
            rows.append(row)

        # ---- structured: NumPy mode vs numpy's parser ------------------------------------
        if np is not None:
            aligned = np.dtype([("a", "i1"), ("b", "f8"), ("c", "i2"), ("d", "S3")], align=True)
            structured = [(n, f if f else memoryview(np.zeros(1, aligned)).format)
                          for n, f in STRUCTURED_NP]
            for name, f in structured:
                want = _dtype_from_pep3118(f).itemsize
                assert ext.parse_numpy(f) == want, (f, ext.parse_numpy(f), want)
                g["f"] = f
                g["np_parse"] = _dtype_from_pep3118
                theirs = direct_ns("np_parse(f)", g, repeat, max(number // 20, 1000))
                ours = direct_ns("ext.parse_numpy(f)", g, repeat, number)
                ours_size = direct_ns("ext.itemsize_numpy(f)", g, repeat, number)
                rows.append({"group": "structured", "format": f, "name": name,
                             "devbuf_parse": ours, "devbuf_itemsize": ours_size, "numpy": theirs})

        # ---- devbuf.parse_format, as a Python user calls it --------------------
        try:
            import devbuf as devbuf_pkg
            parse = devbuf_pkg.parse_format
        except Exception:
            parse = None
        if parse is not None:
            rounds = 5 if a.quick else 21
            g2 = {"struct": struct, "parse": parse}
            for f in FIVE:
                g2["f"] = f
                r = interleaved_median_ns({
                    "devbuf": ("parse(f, 'struct')", number // 4),
                    "devbuf_default": ("parse(f)", number // 4),
                    "struct": ("struct.Struct(f)", number // 4)}, g2, rounds)
                rows.append({"group": "pf_plain", "format": f, **r})
            if np is not None:
                g2["np_parse"] = _dtype_from_pep3118
                for name, f, mode in RECORDS:
                    g2["f"], g2["m"] = f, mode
                    r = interleaved_median_ns({
                        "devbuf": ("parse(f, m)", number // 4),
                        "devbuf_fields": ("parse(f, m).fields[0].children", number // 4),
                        "numpy": ("np_parse(f)", max(number // 40, 500))}, g2, rounds)
                    rows.append({"group": "pf_record", "name": name, "format": f, "mode": mode, **r})

        # ---- custom dtypes ------------------------------------------------------------------
        for f in CUSTOM:
            g["f"] = f
            rows.append({"group": "custom", "format": f,
                         "devbuf_ext": direct_ns("ext.itemsize(f)", g, repeat, number),
                         "devbuf_ctypes": direct_ns("cty(f)", dict(g, cty=cty), repeat, number // 4)})

        # ---- C microbenchmark ---------------------------------------------------------------
        exe = os.path.join(tmp, "bench_format")
        libdir = os.path.dirname(lib)
        subprocess.check_call([cc(), "-O2", "-std=c11", "-D_GNU_SOURCE",
                               os.path.join(HERE, "bench_format.c"), "-o", exe,
                               "-I", os.path.join(ROOT, "core", "include"),
                               "-I", os.path.join(ROOT, "registry", "include"),
                               "-L", libdir, "-ldevbuf", "-Wl,-rpath," + libdir])
        out = subprocess.check_output([exe, "200000" if a.quick else "1000000"], text=True)
        crows = [line.split("\t") for line in out.strip().splitlines()]

    md = render(rows, crows, lib, binding is not None)
    print(md)
    if a.markdown:
        append_markdown(a.markdown, md)


def fmt_ns(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def render(rows, crows, lib, has_pkg):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(l.split(":", 1)[1].strip() for l in fh if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = []
    lines.append(f"Run {datetime.date.today().isoformat()} on {cpu}, {os.cpu_count()} CPUs, "
                 f"Python {platform.python_version()}, numpy "
                 f"{__import__('numpy').__version__ if 'numpy' in sys.modules else '-'}, "
                 f"library {os.path.relpath(lib, ROOT)}; load average at start "
                 f"{os.getloadavg()[0]:.1f}. Nanoseconds per call, thread CPU time, best of the repeats.")
    lines.append("")
    lines.append("Plain formats, struct mode vs the struct module. `struct.calcsize` keeps compiled "
                 "Structs in a per-string cache, so on a repeated string it parses nothing; "
                 "`struct.Struct(f).size` is its parser at work. 'devbuf parse' parses every call; "
                 "'devbuf + cache' adds the same kind of per-string cache in the extension. "
                 "Ratios > 1 mean devbuf is faster:")
    lines.append("")
    hdr = ("| format | devbuf parse | struct parse (`Struct(f).size`) | ratio | devbuf + cache | "
           "`struct.calcsize` (cached) | ratio | devbuf via ctypes |")
    if has_pkg:
        hdr += " devbuf package |"
    lines.append(hdr)
    lines.append("|" + "---|" * (hdr.count("|") - 1))
    for r in rows:
        if r["group"] != "plain":
            continue
        line = (f"| `{r['format']}` | {fmt_ns(r['devbuf_ext'])} | {fmt_ns(r['struct_uncached'])} | "
                f"{r['struct_uncached'] / r['devbuf_ext']:.1f}x | {fmt_ns(r['devbuf_cached'])} | "
                f"{fmt_ns(r['struct_cached'])} | {r['struct_cached'] / r['devbuf_cached']:.2f}x | "
                f"{fmt_ns(r['devbuf_ctypes'])} |")
        if has_pkg:
            line += f" {fmt_ns(r.get('devbuf_pkg', float('nan')))} |"
        lines.append(line)
    lines.append("")
    lines.append("Structured formats, NumPy mode (full field tree) vs "
                 "`numpy._core._internal._dtype_from_pep3118`:")
    lines.append("")
    lines.append("| case | format | devbuf parse | devbuf itemsize | numpy | speed-up (parse) |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        if r["group"] != "structured":
            continue
        lines.append(f"| {r['name']} | `{r['format']}` | {fmt_ns(r['devbuf_parse'])} | "
                     f"{fmt_ns(r['devbuf_itemsize'])} | {fmt_ns(r['numpy'])} | "
                     f"{r['numpy'] / r['devbuf_parse']:.0f}x |")
    lines.append("")
    pf_plain = [r for r in rows if r["group"] == "pf_plain"]
    pf_rec = [r for r in rows if r["group"] == "pf_record"]
    if pf_plain or pf_rec:
        lines.append("`devbuf.parse_format` as a Python user calls it: the returned "
                     "`devbuf.Format` is a C object whose attributes are made on first read. "
                     "Medians of interleaved rounds, ns per call, thread CPU time.")
        lines.append("")
    if pf_plain:
        lines.append("| format | `parse_format(f, 'struct')` | `parse_format(f)` | `struct.Struct(f)` | "
                     "ratio, struct mode (goal <= 3x) |")
        lines.append("|---|---|---|---|---|")
        for r in pf_plain:
            ratio = r["devbuf"] / r["struct"]
            lines.append(f"| `{r['format']}` | {fmt_ns(r['devbuf'])} | {fmt_ns(r['devbuf_default'])} | "
                         f"{fmt_ns(r['struct'])} | {ratio:.2f}x {'met' if ratio <= 3 else 'MISSED'} |")
        lines.append("")
    if pf_rec:
        lines.append("| case | format | `parse_format(f, mode)` | `... .fields[0].children` | "
                     "`_dtype_from_pep3118(f)` | speed-up (goal >= 20x) |")
        lines.append("|---|---|---|---|---|---|")
        for r in pf_rec:
            sp = r["numpy"] / r["devbuf"]
            lines.append(f"| {r['name']} | `{r['format']}` | {fmt_ns(r['devbuf'])} | "
                         f"{fmt_ns(r['devbuf_fields'])} | {fmt_ns(r['numpy'])} | "
                         f"{sp:.0f}x {'met' if sp >= 20 else 'MISSED'} "
                         f"({r['numpy'] / r['devbuf_fields']:.0f}x with the fields read) |")
        lines.append("")
    lines.append("Custom dtypes from Python:")
    lines.append("")
    lines.append("| format | devbuf (ext) | devbuf (ctypes) |")
    lines.append("|---|---|---|")
    for r in rows:
        if r["group"] == "custom":
            lines.append(f"| `{r['format']}` | {fmt_ns(r['devbuf_ext'])} | {fmt_ns(r['devbuf_ctypes'])} |")
    lines.append("")
    lines.append("C microbenchmark (`benchmarks/format/bench_format.c`, no Python):")
    lines.append("")
    lines.append("| case | format | devbuf_format_itemsize | devbuf_format_parse + release |")
    lines.append("|---|---|---|---|")
    for name, f, a, b in crows:
        lines.append(f"| {name} | `{f}` | {a} | {b} |")
    return "\n".join(lines)


def append_markdown(path, md):
    head = "## Format strings"
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    cmd = ("Command: `.venv/bin/python benchmarks/format/bench_format.py --markdown docs/benchmarks.md`")
    block = f"\n### Run of {datetime.date.today().isoformat()}\n\n{cmd}\n\n{md}\n"
    if head not in text:
        text = text.rstrip("\n") + f"\n\n{head}\n" + block
    else:
        start = text.index(head)
        nxt = text.find("\n## ", start + len(head))
        end = len(text) if nxt < 0 else nxt
        text = text[:end].rstrip("\n") + "\n" + block + text[end:]
    with open(path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
