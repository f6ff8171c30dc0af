"""The differential stage: devbuf against CPython's reference buffer exporter.

Forward: every request that CPython's Lib/test/test_buffer.py makes of an
exporter (15 requests x {0, WRITABLE, FORMAT, WRITABLE|FORMAT}) is made of
each devbuf exporter (DeviceBuffer, DeviceView, the DLPack-import
ForeignArray) over C-, Fortran- and non-contiguous, empty, 0-d and read-only
sources, and of the reference that holds the same items (memoryview or a
_testbuffer.ndarray). The outcomes must agree: BufferError on both sides, or
the same ndim, shape, strides, suboffsets, format, itemsize, len, readonly,
contiguity and bytes. Independently of the reference, no devbuf answer may
describe more memory than the export holds.

Reverse: devbuf.view of generated _testbuffer.ndarrays against memoryview of
the same ndarray, every field and the data; suboffset (PIL-style) arrays must
be refused with BufferError.

The case counts go to the terminal summary (conftest.py), so CI logs show
how much was compared. Generation is fixed: a failure names its case.
"""
import itertools
import struct
import sys
import threading

import numpy as np
import pytest

import devbuf

tb = pytest.importorskip("_testbuffer", reason="this Python ships no _testbuffer")

# ---- what test_buffer.py requests (the table lives in the conformance kit) ----------
# (15 requests x {0, WRITABLE, FORMAT, WRITABLE|FORMAT}: 28 distinct flag sets)
from devbuf.check._capi import ALL_REQUESTS  # noqa: E402
from devbuf.check._dlpack import to_py_object  # noqa: E402

# ---- sources, as test_buffer.py builds them --------------------------------------
ITEMS_FMT = (
    ([x for x in range(12)], "B"),
    ([x - 6 for x in range(12)], "h"),
    ([x * 1.5 for x in range(12)], "d"),
    ([(x, bool(x % 2)) for x in range(12)], "i?"),  # a struct record: 5-byte items
)
# (shape, strides in items, offset in items)
STRUCTURE = (
    ([], [], 0),
    ([1, 3, 1], [], 0),
    ([12], [], 0),
    ([12], [-1], 11),
    ([6], [2], 0),
    ([1], [], 0),
    ([3, 4], [], 0),
    ([3, 4], [-4, -1], 11),
    ([2, 2], [4, 1], 4),
    ([2, 2], [-4, -1], 8),
    ([2, 3, 2], [], 0),
    ([0], [], 0),
    ([7, 0, 7], [], 0),
    ([3, 0], [], 0),
)
ND_FLAGS = (0, tb.ND_WRITABLE, tb.ND_FORTRAN, tb.ND_FORTRAN | tb.ND_WRITABLE)


def sources(pil=False):
    """(name, ndarray) for every generated source, with the [::-2] slice of
    each non-0-d one (negative, non-unit strides) as test_buffer does."""
    flags_list = ND_FLAGS + ((tb.ND_PIL, tb.ND_PIL | tb.ND_WRITABLE) if pil else ())
    for (items, fmt), (shape, strides, offset), flags in itertools.product(
            ITEMS_FMT, STRUCTURE, flags_list):
        if strides and flags & tb.ND_FORTRAN:
            continue
        if not shape and flags & tb.ND_PIL:
            continue
        itemsize = struct.calcsize(fmt)
        name = f"{fmt} shape={shape} strides={strides} offset={offset} flags={flags}"
        ex = tb.ndarray(items if shape else items[0], format=fmt, flags=flags, shape=shape,
                        strides=[s * itemsize for s in strides], offset=offset * itemsize)
        yield name, ex
        if shape and 0 not in shape:
            yield name + " [::-2]", ex[::-2]


# ---- outcomes -------------------------------------------------------------------
def outcome(obj, req):
    """What a CPython-rule consumer gets from obj for request req."""
    try:
        nd = tb.ndarray(obj, getbuf=req)
    except BufferError:
        return "BufferError"
    except SystemError:
        # 3.12+: PyObject_GetBuffer itself refuses a request equal to
        # PyBUF_READ (0x100) or PyBUF_WRITE (0x200) before any exporter runs,
        # so reference and devbuf alike raise it there.
        if req in (0x100, 0x200) and sys.version_info >= (3, 12):
            return "SystemError"
        raise
    return {
        "ndim": nd.ndim, "shape": nd.shape, "strides": nd.strides,
        "suboffsets": nd.suboffsets, "format": nd.format, "itemsize": nd.itemsize,
        "len": nd.nbytes, "readonly": nd.readonly, "c_contiguous": nd.c_contiguous,
        "f_contiguous": nd.f_contiguous, "contiguous": nd.contiguous, "bytes": nd.tobytes(),
    }


def span(shape, strides, itemsize):
    """Bytes from the lowest to the highest byte an array touches."""
    if 0 in shape:
        return 0
    lo = sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
    hi = sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0)
    return hi - lo + itemsize


def c_strides(shape, itemsize):
    out, st = [], itemsize
    for n in reversed(shape):
        out.append(st)
        st *= n
    return tuple(reversed(out))


def check_bounds(got, req, holds):
    """No answer describes more memory than the export holds."""
    if got in ("BufferError", "SystemError"):  # refused: nothing described
        return
    fmt, itemsize, n = got["format"], got["itemsize"], got["len"]
    if not req & tb.PyBUF_ND:
        # Flat bytes (ndim 1, no shape): a consumer reads len bytes, so no
        # item format may come with it (memoryview's rule).
        assert got["shape"] == () and fmt == "", got
        assert n <= holds
        return
    shape = got["shape"]
    count = 1
    for d in shape:
        count *= d
    assert count * itemsize == n, got
    strides = got["strides"] or c_strides(shape, itemsize)
    assert span(shape, strides, itemsize) <= holds, (got, holds)
    if fmt:
        try:
            size = struct.calcsize(fmt)
        except struct.error:
            return  # not struct's grammar
        assert size == itemsize, got


def compare(counts, key, label, obj, ref, holds):
    for req in ALL_REQUESTS:
        got, want = outcome(obj, req), outcome(ref, req)
        check_bounds(got, req, holds)
        assert got == want, f"{label}: request {req:#x}: devbuf {got!r}\n  reference {want!r}"
        counts[key] += 1


def c_copy(ex, writable):
    """A C-contiguous _testbuffer.ndarray holding ex's items (what from_host
    gives, as CPython's own exporter would hold it)."""
    flags = tb.ND_WRITABLE if writable else 0
    if ex.ndim == 0:
        return tb.ndarray(ex.tolist(), format=ex.format, flags=flags, shape=[])
    flat = list(_flatten(ex.tolist()))
    if not flat:  # zero-size: the items do not matter, the layout does
        flat = [_one(ex.format)]
    return tb.ndarray(flat, format=ex.format, flags=flags, shape=list(ex.shape))


def _flatten(x):
    if isinstance(x, list):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


def _one(fmt):
    return {"B": 0, "h": 0, "d": 0.0, "i?": (0, False)}[fmt]


def span_of(ex):
    return span(ex.shape, ex.strides, ex.itemsize) if ex.ndim else ex.itemsize


class _Counts:
    """The cases compared: each thread counts its own (pytest-run-parallel runs
    a test in several threads at once, and `+=` on one shared dict loses
    counts without the GIL); items() and values() give the totals."""

    def __init__(self, keys):
        self._keys, self._local, self._all, self._lock = keys, threading.local(), [], threading.Lock()

    def _mine(self):
        d = getattr(self._local, "d", None)
        if d is None:
            d = self._local.d = dict.fromkeys(self._keys, 0)
            with self._lock:
                self._all.append(d)
        return d

    def __getitem__(self, key):
        return self._mine()[key]

    def __setitem__(self, key, value):
        self._mine()[key] = value

    def items(self):
        with self._lock:
            return [(k, sum(d[k] for d in self._all)) for k in self._keys]

    def values(self):
        return [v for _, v in self.items()]

    def __bool__(self):
        return True


@pytest.fixture(scope="module")
def counts(request):
    c = _Counts(("DeviceBuffer", "DeviceView", "ForeignArray", "view vs memoryview",
                 "suboffsets refused"))
    # conftest.py's pytest_terminal_summary prints these at the end of the run.
    request.config.devbuf_differential_cases = c
    return c


# ---- forward: devbuf as the exporter ----------------------------------------------
def test_device_buffer_answers_as_cpython(counts):
    for name, ex in sources():
        for readonly in (False, True):
            b = devbuf.from_host(ex, readonly=readonly)
            ref = c_copy(ex, writable=not readonly)
            compare(counts, "DeviceBuffer", f"DeviceBuffer(readonly={readonly}) of {name}", b,
                    ref, holds=b.nbytes)
    assert counts["DeviceBuffer"] > 15000


def test_device_view_answers_as_memoryview(counts):
    for name, ex in sources():
        v = devbuf.view(ex)
        compare(counts, "DeviceView", f"DeviceView of {name}", v, memoryview(ex),
                holds=span_of(ex))
        v.release()
    # and a view of devbuf's own buffer, writable and read-only
    for name, ex in sources():
        if ex.ndim and 0 in ex.shape:
            continue
        for readonly in (False, True):
            b = devbuf.from_host(ex, readonly=readonly)
            compare(counts, "DeviceView", f"DeviceView of DeviceBuffer of {name}",
                    devbuf.view(b), c_copy(ex, writable=not readonly), holds=b.nbytes)
    assert counts["DeviceView"] > 20000


def test_foreign_array_answers_as_memoryview(counts):
    done = 0
    for name, ex in sources():
        if ex.format == "i?":
            continue  # DLPack has no record dtypes
        a = np.asarray(ex)
        f = to_py_object(devbuf.ForeignArray, a)
        compare(counts, "ForeignArray", f"ForeignArray of {name}", f, memoryview(ex),
                holds=span_of(ex))
        done += 1
    # read-only: NumPy exports a read-only array with the DLPack 1.x flag
    a = np.arange(12.0).reshape(3, 4)
    a.flags.writeable = False
    f = to_py_object(devbuf.ForeignArray, a)
    compare(counts, "ForeignArray", "ForeignArray of a read-only array", f, memoryview(a),
            holds=a.nbytes)
    assert done > 100


def test_no_request_bits_describe_more_than_held(counts):
    """Beyond test_buffer's requests: every subset of the request bits
    (WRITABLE FORMAT ND STRIDES C F ANY INDIRECT), against each exporter,
    answers as the reference does and stays inside the export."""
    bits = (tb.PyBUF_WRITABLE, tb.PyBUF_FORMAT, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)
    every = sorted({sum(c) for n in range(len(bits) + 1)
                    for c in itertools.combinations(bits, n)})
    picked = [(n, ex) for n, ex in sources()
              if ex.format in ("B", "d") and
              (f"flags={tb.ND_WRITABLE}" in n or f"flags={tb.ND_FORTRAN}" in n)]
    assert len(picked) > 30
    for name, ex in picked:
        ro = not memoryview(ex).readonly  # the copy's access is the opposite of the source's
        exporters = [("DeviceView", devbuf.view(ex), memoryview(ex), span_of(ex))]
        if not name.endswith("[::-2]"):
            b = devbuf.from_host(ex, readonly=ro)
            exporters.append(("DeviceBuffer", b, c_copy(ex, not ro), b.nbytes))
            exporters.append(("ForeignArray", to_py_object(devbuf.ForeignArray, np.asarray(ex)),
                              memoryview(ex), span_of(ex)))
        for key, obj, ref, holds in exporters:
            for req in every:
                got, want = outcome(obj, req), outcome(ref, req)
                check_bounds(got, req, holds)
                assert got == want, f"{key} of {name}: request {req:#x}: {got!r} vs {want!r}"
                counts[key] += 1


# ---- reverse: devbuf as the consumer ----------------------------------------------
def view_fields(v):
    return {
        "ndim": v.ndim, "shape": v.shape, "strides": v.strides, "format": v.format,
        "itemsize": v.itemsize, "nbytes": v.nbytes, "readonly": v.readonly,
        "c_contiguous": v.c_contiguous,
    }


def mv_fields(m):
    return {
        "ndim": m.ndim, "shape": m.shape, "strides": m.strides, "format": m.format,
        "itemsize": m.itemsize, "nbytes": m.nbytes, "readonly": m.readonly,
        "c_contiguous": m.c_contiguous,
    }


def test_view_of_testbuffer_matches_memoryview(counts):
    for name, ex in sources(pil=True):
        m = memoryview(ex)
        if m.suboffsets:
            with pytest.raises(BufferError):
                devbuf.view(ex)
            counts["suboffsets refused"] += 1
            continue
        v = devbuf.view(ex)
        assert view_fields(v) == mv_fields(m), name
        assert v.dtype.itemsize == m.itemsize, name  # never a dtype of another size
        assert bytes(v.to_host()) == m.tobytes(), name
        with memoryview(v) as again:  # and re-exported, as it came in
            assert mv_fields(again) == mv_fields(m), name
            assert again.tobytes() == m.tobytes(), name
        v.release()
        counts["view vs memoryview"] += 1
    assert counts["view vs memoryview"] > 300 and counts["suboffsets refused"] > 50
