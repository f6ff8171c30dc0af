"""Reference-leak hunt over devbuf's own test modules, in the manner of
CPython's `regrtest -R`: each module runs several times in ONE process (a
debug interpreter: sys.gettotalrefcount exists there only), and the total
reference count after each repeat is compared with the one before it.

    python3.14-dbg scripts/refleak.py [--warmups 2] [--repeats 3] [MODULE ...]

The first --warmups runs fill caches (imports, interned strings, pytest's
own state, lazily made types) and are not counted. A module leaks when
EVERY counted repeat grows the total by more than what pytest itself grows
it per run (measured the same way on a module of empty tests, the
baseline); as in -R, a single noisy repeat is not a leak. Last line:
"refleak: N modules, M leaking (total +R references per repeat)".
"""
import argparse
import gc
import io
import os
import sys
import tempfile
import contextlib

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests", "python")
# The modules that drive devbuf's C code (buffers, views, DLPack, the
# array interfaces, Arrow, pickle, formats, lifetimes, the C API).
DEFAULT = [
    "test_device_buffer.py", "test_view.py", "test_interop_dlpack.py",
    "test_buffer_rules.py", "test_lifetimes.py", "test_arrow.py", "test_pickle.py",
    "test_format_api.py", "test_format_complex.py", "test_format_struct.py",
    "test_consumer_edges.py", "test_capi.py", "test_backport.py", "test_dlpack_header.py",
    "test_zero_dim.py",
]


def run_once(path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", path])
    gc.collect()
    gc.collect()
    return rc, out.getvalue()


def deltas(path, warmups, repeats):
    got = []
    for i in range(warmups + repeats):
        before = sys.gettotalrefcount()
        rc, text = run_once(path)
        if rc not in (0, 5):  # 5: nothing collected
            raise SystemExit(f"refleak: {path} failed (pytest exit {rc}):\n{text[-3000:]}")
        if i >= warmups:
            got.append(sys.gettotalrefcount() - before)
    return got


def main():
    if not hasattr(sys, "gettotalrefcount"):
        raise SystemExit("refleak: needs a debug interpreter (sys.gettotalrefcount)")
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmups", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("modules", nargs="*")
    a = ap.parse_args()
    mods = a.modules or [m for m in DEFAULT if os.path.exists(os.path.join(TESTS, m))]
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "test_baseline.py")
        with open(base, "w") as f:
            f.write("".join(f"def test_{i}():\n    pass\n" for i in range(20)))
        floor = max(deltas(base, a.warmups, a.repeats))
    print(f"baseline (pytest alone, 20 empty tests): {floor:+d} per repeat at most", flush=True)
    leaking, total = 0, 0
    for m in mods:
        d = deltas(os.path.join(TESTS, m), a.warmups, a.repeats)
        excess = [x - floor for x in d]
        leak = all(x > 0 for x in excess)
        if leak:
            leaking += 1
            total += min(excess)
        print(f"{'LEAK' if leak else 'ok  '} {m}: {' '.join(f'{x:+d}' for x in d)}", flush=True)
    print(f"refleak: {len(mods)} modules, {leaking} leaking (total +{total} references per repeat)")
    return 1 if leaking else 0


if __name__ == "__main__":
    sys.exit(main())
