"""CPython's reference buffer rules at the edges: requests that
would describe more memory than an export holds, and empty arrays."""
import numpy as np
import pytest

import devbuf
from devbuf.check._dlpack import to_py_object

tb = pytest.importorskip("_testbuffer", reason="this Python ships no _testbuffer")


def exporters(arr):
    """Every devbuf exporter of a host copy of `arr`: DeviceBuffer, DeviceView
    and the ForeignArray of ForeignArray's DLPack exchange table."""
    b = devbuf.from_host(arr)
    return {
        "DeviceBuffer": b,
        "DeviceView": devbuf.view(b),
        "ForeignArray": to_py_object(devbuf.ForeignArray, np.ascontiguousarray(arr)),
    }


@pytest.mark.parametrize("name", ["DeviceBuffer", "DeviceView", "ForeignArray"])
@pytest.mark.parametrize("extra", [0, tb.PyBUF_WRITABLE])
def test_simple_with_format_is_refused(name, extra):
    # The reproducer: 32 MiB of doubles exported as ndim 1 without a
    # shape but with format 'd' made a consumer read 8 times past the end.
    obj = exporters(np.zeros(1 << 22))[name]
    with pytest.raises(BufferError, match="PyBUF_FORMAT"):
        tb.ndarray(obj, getbuf=tb.PyBUF_SIMPLE | tb.PyBUF_FORMAT | extra).tolist()
    # memoryview's own exporter refuses the same request.
    with pytest.raises(BufferError):
        tb.ndarray(memoryview(np.zeros(4)), getbuf=tb.PyBUF_SIMPLE | tb.PyBUF_FORMAT | extra)
    # Without the format flag it is bytes, and the length is the export's.
    nd = tb.ndarray(obj, getbuf=tb.PyBUF_SIMPLE | extra)
    # (format NULL means bytes; itemsize stays the item's, as in memoryview.)
    assert nd.format == "" and nd.ndim == 1 and nd.shape == ()
    assert len(nd.tobytes()) == nd.nbytes == 8 << 22


def test_simple_with_format_is_refused_on_device_exports(sim):
    # The same rule behind PyBUF_DEVICE, on memory the host cannot read.
    consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")
    b = devbuf.from_host(np.zeros(1 << 10), device=sim)
    for obj in (b, devbuf.view(b), to_py_object(devbuf.ForeignArray, b)):
        for extra in (0, tb.PyBUF_WRITABLE):
            with pytest.raises(BufferError, match="PyBUF_FORMAT"):
                consumer.inspect(obj, tb.PyBUF_FORMAT | extra | devbuf.PyBUF_DEVICE)
        r = consumer.inspect(obj, devbuf.PyBUF_DEVICE)
        assert r["is_device"] and r["len"] == 8 << 10 and r["format"] is None


@pytest.mark.parametrize("name", ["DeviceBuffer", "DeviceView", "ForeignArray"])
def test_simple_of_0d(name):
    obj = exporters(np.array(3.5))[name]
    nd = tb.ndarray(obj, getbuf=tb.PyBUF_SIMPLE)
    assert nd.nbytes == 8 and nd.tobytes() == np.array(3.5).tobytes()


@pytest.mark.parametrize("shape", [(7, 0, 7), (7, 0, 3), (0,), (0, 3), (3, 0), (1, 0, 1)])
def test_empty_is_c_and_fortran_contiguous(shape):
    b = devbuf.empty(shape, "h")
    ref = tb.ndarray([1], shape=list(shape), format="h", flags=tb.ND_WRITABLE)
    assert b.strides == ref.strides  # CPython's init_strides_from_shape
    assert tb.is_contiguous(b, "C") and tb.is_contiguous(b, "F")
    for obj in (b, devbuf.view(b)):
        for req in (tb.PyBUF_C_CONTIGUOUS, tb.PyBUF_F_CONTIGUOUS, tb.PyBUF_ANY_CONTIGUOUS,
                    tb.PyBUF_FULL, tb.PyBUF_STRIDED, tb.PyBUF_ND, tb.PyBUF_SIMPLE):
            got, want = tb.ndarray(obj, getbuf=req), tb.ndarray(ref, getbuf=req)
            assert (got.shape, got.strides, got.nbytes) == (want.shape, want.strides, want.nbytes)
        assert tb.cmp_contig(obj, ref)


def test_empty_strides_7_0_7():
    assert devbuf.empty((7, 0, 7), "h").strides == (0, 14, 2)
    assert memoryview(devbuf.empty((7, 0, 7), "h")).strides == (0, 14, 2)


# ---- item sizes under struct's rules -------------------------------------------

import struct  # noqa: E402


@pytest.mark.parametrize("fmt,want", [
    ("i?", "i?3x"), ("3i?", "3i?3x"), ("bd", "bd"), ("<i?", "<i?"), ("q", "q"),
    ("hb", "hbx"), ("dbb", "dbb6x"), ("D", "Zd"), ("bF", "bZf"),
])
def test_exported_format_matches_struct_calcsize(fmt, want):
    b = devbuf.empty(4, fmt)
    assert b.format == want
    m = memoryview(b)
    assert m.format == want and m.itemsize == b.itemsize
    if not any(c in want for c in "Z"):  # 3.11's struct has no complex codes
        assert struct.calcsize(m.format) == m.itemsize
        assert len(list(struct.iter_unpack(m.format, m.cast("B")))) == 4


def test_formats_struct_cannot_read_go_out_as_written():
    assert devbuf.empty(2, "T{i?}").format == "T{i?}"
    assert devbuf.empty(2, "T{i?}").itemsize == 8


def test_view_dtype_takes_the_producers_layout():
    # A struct-produced 'i?' has 5-byte items: the dtype says 5, not C's 8.
    nd = tb.ndarray([(1, True), (2, False)], shape=[2], format="i?")
    v = devbuf.view(nd)
    assert v.itemsize == 5 and v.dtype.itemsize == 5
    # NumPy's aligned struct export keeps its own (C) layout.
    a = np.zeros(3, dtype=np.dtype([("a", "i4"), ("b", "?")], align=True))
    v = devbuf.view(a)
    assert v.itemsize == 8 and v.dtype.itemsize == 8


def test_view_dtype_refuses_a_size_no_rule_gives():
    import ctypes

    # ctypes (3.11) exports a native struct as 'T{<i:a:<c:b:}' with itemsize
    # 8: '<' makes the format 5 bytes under every rule.
    class S(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int), ("b", ctypes.c_char)]

    v = devbuf.view((S * 2)())
    assert v.itemsize == 8
    if v.format.endswith("3x}"):
        # 3.13's ctypes writes the trailing padding ('T{<i:a:<c:b:3x}'): the
        # format now says 8 bytes, and the view must agree with it.
        assert v.dtype.itemsize == 8
        return
    with pytest.raises(ValueError, match=r"5-byte items.*itemsize is 8"):
        v.dtype
