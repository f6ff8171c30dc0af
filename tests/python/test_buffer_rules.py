"""CPython's reference buffer rules at the edges (issue 23): requests that
would describe more memory than an export holds, and empty arrays."""
import numpy as np
import pytest

import devbuf

tb = pytest.importorskip("_testbuffer", reason="this Python ships no _testbuffer")


def exporters(arr):
    """Every devbuf exporter of a host copy of `arr`: DeviceBuffer, DeviceView
    and the DLPack-import ForeignArray."""
    b = devbuf.from_host(arr)
    return {
        "DeviceBuffer": b,
        "DeviceView": devbuf.view(b),
        "ForeignArray": devbuf.from_dlpack(np.ascontiguousarray(arr)).obj,
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


@pytest.mark.parametrize("name", ["DeviceBuffer", "DeviceView", "ForeignArray"])
def test_simple_of_0d(name):
    obj = exporters(np.array(3.5))[name]
    nd = tb.ndarray(obj, getbuf=tb.PyBUF_SIMPLE)
    assert nd.nbytes == 8 and nd.tobytes() == np.array(3.5).tobytes()


@pytest.mark.parametrize("shape", [(7, 0, 7), (0,), (0, 3), (3, 0), (1, 0, 1)])
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
