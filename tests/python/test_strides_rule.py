"""One strides rule on every route (docs/consumers.md): when a strided request
(PyBUF_STRIDES or more) is answered for ndim > 0, the consumer sees strides,
never NULL. A producer that leaves them NULL (allowed by older habits, and the
old producer sample) gets C-order strides filled in by devbuf: in the
header-only DevbufPy_GetBufferEx, in the C API capsule's views
(View_FromObject + View_GetInfo), and in Python (DeviceView.strides)."""
import pytest

import devbuf

consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")
cc = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")

PyBUF_ND = 0x0008
PyBUF_STRIDES = 0x0010 | PyBUF_ND
PyBUF_FORMAT = 0x0004
PyBUF_RECORDS_RO = PyBUF_STRIDES | PyBUF_FORMAT
OWNS_STRIDES = 0x40000000  # DEVBUFPY_EXT_OWNS_STRIDES


def _null(itemsize=1, mode="host"):
    return consumer.Exporter(bytes(range(16)), mode=mode, itemsize=itemsize, null_strides=True)


@pytest.mark.parametrize("itemsize", [1, 4])
@pytest.mark.parametrize("flags", [PyBUF_STRIDES, PyBUF_RECORDS_RO,
                                   PyBUF_RECORDS_RO | devbuf.PyBUF_DEVICE])
def test_header_only_route_fills_strides(itemsize, flags):
    e = _null(itemsize)
    r = consumer.inspect(e, flags)
    assert r["ndim"] == 1 and r["shape"] == (16 // itemsize,)
    assert r["strides"] == (itemsize,), r
    assert r["ext_flags"] & OWNS_STRIDES
    assert e.counts["exports"] == 0 and e.counts["release"] == e.counts["getbuffer"]


def test_header_only_route_leaves_unrequested_strides_alone():
    r = consumer.inspect(_null(), PyBUF_ND)
    assert r["strides"] is None and r["ext_flags"] == 0
    # A producer that gives strides keeps its own (and nothing is owned).
    r = consumer.inspect(consumer.Exporter(bytes(8), mode="host"), PyBUF_RECORDS_RO)
    assert r["strides"] == (1,) and r["ext_flags"] == 0


def test_header_only_route_device_memory():
    e = _null(mode="device")
    r = consumer.inspect(e, PyBUF_RECORDS_RO | devbuf.PyBUF_DEVICE)
    assert r["is_device"] and r["strides"] == (1,)
    assert e.counts["exports"] == 0


def test_capsule_route_fills_strides():
    e = _null()
    info = cc.info(e)
    assert info["shape"] == (16,) and info["strides"] == (1,), info
    assert e.counts["exports"] == 0


def test_python_route_fills_strides():
    e = _null()
    with devbuf.view(e) as v:
        assert v.strides == (1,) and v.c_contiguous
        assert consumer.inspect(v, PyBUF_RECORDS_RO)["strides"] == (1,)  # a re-export
    assert e.counts["exports"] == 0


def test_zero_dim_keeps_null_shape_and_strides():
    np = pytest.importorskip("numpy")
    info = cc.info(np.array(3.0))
    assert info["ndim"] == 0 and info["strides"] in (None, ())
