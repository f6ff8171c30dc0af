"""DevbufPy_GetBufferEx and devbuf.view() on several CPython versions, side
by side, each as a ratio to a baseline measured in the same process (issue
24: on 3.13 the header's supported-flags cache was never filled, and
GetBufferEx with required flags went from 12 ns to 549 ns).

Uses the builds of the CPython matrix (scripts/test-matrix.sh):
build-matrix/venv-X and build-matrix/build-X. Run that first.

    python benchmarks/python/bench_versions.py [--quick] [--json out.json]
        [--against REV] [3.12 3.13 ...]

--against REV adds, per version, a column measured with the test consumer
compiled (gcc -O2) against devbuf_buffer.h as of git revision REV, e.g. the
revision before a header change.

Prints a Markdown table. Absolute numbers on a shared VM are noisy; the
ratios are what to compare across versions.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
MATRIX = REPO / "build-matrix"

# Runs inside each version's venv; prints one JSON object.
CHILD = r'''
import json, platform, sys, timeit
import devbuf, devbuf_consumer as consumer
quick = sys.argv[1] == "1"
n_c, number, repeat = (100_000, 20_000, 5) if quick else (500_000, 100_000, 31)
RO, D = 0x1C, devbuf.PyBUF_DEVICE

class Sub(bytearray):  # a Python class that advertises nothing: the AttributeError path
    pass

ba, sub = bytearray(4096), Sub(4096)
dev = devbuf.from_host(ba, device="devbuf.sim")
dev.synchronize()
env = dict(memoryview=memoryview, view=devbuf.view, ba=ba)
cases = {
    "c_getbuffer_bytearray": lambda: consumer.bench_getbuffer(ba, n_c, RO, 0),
    "c_getbufferex_bytearray": lambda: consumer.bench_getbuffer(ba, n_c, RO | D, 1),
    "c_getbufferex_subclass": lambda: consumer.bench_getbuffer(sub, n_c, RO | D, 1),
    "c_getbufferex_devicebuffer": lambda: consumer.bench_getbuffer(dev, n_c, RO | D, 1),
    "py_memoryview_release": (lambda t: lambda: t.timeit(number) / number * 1e9)(
        timeit.Timer("memoryview(ba).release()", globals=env)),
    "py_view_release": (lambda t: lambda: t.timeit(number) / number * 1e9)(
        timeit.Timer("view(ba).release()", globals=env)),
}
best = {k: float("inf") for k in cases}
for fn in cases.values():
    fn()
for _ in range(repeat):  # interleaved: load from elsewhere hits every case alike
    for k, fn in cases.items():
        best[k] = min(best[k], fn())
print(json.dumps({"python": platform.python_version(), "ns": best,
                  "n_c": n_c, "number": number, "repeat": repeat}))
'''

ROWS = [
    ("c_getbuffer_bytearray", "PyObject_GetBuffer(bytearray, RECORDS_RO), from C (baseline)"),
    ("c_getbufferex_bytearray", "DevbufPy_GetBufferEx(bytearray, RECORDS_RO\\|DEVICE), from C"),
    ("c_getbufferex_subclass", "DevbufPy_GetBufferEx(bytearray subclass, RECORDS_RO\\|DEVICE), from C"),
    ("c_getbufferex_devicebuffer", "DevbufPy_GetBufferEx(DeviceBuffer on devbuf.sim, RECORDS_RO\\|DEVICE), from C"),
    ("py_memoryview_release", "`memoryview(bytearray).release()` (baseline)"),
    ("py_view_release", "`devbuf.view(bytearray).release()`"),
]
RATIOS = [
    ("GetBufferEx / GetBuffer, bytearray", "c_getbufferex_bytearray", "c_getbuffer_bytearray"),
    ("GetBufferEx / GetBuffer, bytearray subclass", "c_getbufferex_subclass", "c_getbuffer_bytearray"),
    ("view().release() / memoryview().release()", "py_view_release", "py_memoryview_release"),
]


def old_consumer(py, rev, tmp):
    """The test consumer built against devbuf_buffer.h of `rev`; its folder."""
    hdr = subprocess.run(["git", "show", f"{rev}:bindings/python/include/devbuf_buffer.h"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    inc, suffix = subprocess.run(
        [str(py), "-c", "import sysconfig as s; print(s.get_paths()['include']); "
                        "print(s.get_config_var('EXT_SUFFIX'))"],
        capture_output=True, text=True, check=True).stdout.split()
    out = pathlib.Path(tempfile.mkdtemp(dir=tmp))
    (out / "devbuf_buffer.h").write_text(hdr)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-I{inc}", f"-I{out}",
                    str(REPO / "tests/python/consumer_ext/consumer.c"),
                    "-o", str(out / f"devbuf_consumer{suffix}")], check=True)
    return out


def run(version, quick, consumer_dir=None):
    py = MATRIX / f"venv-{version}" / "bin" / "python"
    build = MATRIX / f"build-{version}"
    if not py.exists() or not (build / "python" / "devbuf").is_dir():
        raise SystemExit(f"bench_versions: no matrix build for {version} under {MATRIX}: "
                         f"run scripts/test-matrix.sh {version} first")
    path = [str(build / "python"), str(build / "python_tests")]
    if consumer_dir is not None:
        path.insert(0, str(consumer_dir))
    env = dict(os.environ, DEVBUF_BUILD_DIR=str(build), PYTHONPATH=os.pathsep.join(path))
    p = subprocess.run([str(py), "-c", CHILD, "1" if quick else "0"], env=env, cwd=REPO,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_versions: CPython {version} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--against", metavar="REV")
    ap.add_argument("versions", nargs="*", default=["3.12", "3.13"])
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in a.versions:
            if a.against:
                py = MATRIX / f"venv-{v}" / "bin" / "python"
                r = run(v, a.quick, old_consumer(py, a.against, tmp))
                r["label"] = f"CPython {r['python']}, header of {a.against}"
                res[f"{v}@{a.against}"] = r
            r = run(v, a.quick)
            r["label"] = f"CPython {r['python']}" + (", this header" if a.against else "")
            res[v] = r
    first = next(iter(res.values()))
    head = " | ".join(r["label"] for r in res.values())
    print(f"ns per call, best of {first['repeat']} interleaved rounds "
          f"({first['n_c']} C calls, {first['number']} Python calls each), one process per version\n")
    print(f"| | {head} |")
    print("|---" * (len(res) + 1) + "|")
    # An --against column swaps only the test consumer: devbuf.view() is
    # devbuf's own build in every column, so it is shown once per version.
    def cell(k, r, text):
        return "–" if k.startswith("py_") and "@" in r["key"] else text

    for k, r in res.items():
        r["key"] = k
    for key, label in ROWS:
        print(f"| {label} | " + " | ".join(cell(key, r, f"{r['ns'][key]:.1f}")
                                         for r in res.values()) + " |")
    for label, num, den in RATIOS:
        print(f"| **ratio** {label} | " + " | ".join(
            cell(num, r, f"**{r['ns'][num] / r['ns'][den]:.2f}**") for r in res.values()) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
