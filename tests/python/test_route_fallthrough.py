"""Every import route hands over to the next when it refuses: devbuf.view()
and the C API's Import_FromObject try the exchange table, Arrow, __dlpack__,
__cuda_array_interface__ and __array_interface__ (after the buffer protocol
for buffer exporters), and a route's BufferError passes the object on. When
none answers, the error names each route and why it failed. Also: the
header-only route's writable rule, from_host of types without a buffer
format, the array interface's strides and data, and what .obj is."""
import ctypes
import pathlib

import numpy as np
import pytest

import devbuf

ROOT = pathlib.Path(__file__).resolve().parents[2]


class ArrowRefusedArrayInterface:
    """A producer whose Arrow export devbuf refuses (a nested type, as
    Pillow's RGB image gives), with a readable __array_interface__."""

    def __init__(self, a):
        self.a = a

    def __arrow_c_array__(self, requested_schema=None):
        pa = pytest.importorskip("pyarrow")
        return pa.array([{"x": 1}]).__arrow_c_array__()

    @property
    def __array_interface__(self):
        return self.a.__array_interface__


def test_a_refused_arrow_export_falls_through_to_the_array_interface():
    pytest.importorskip("pyarrow")
    a = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    obj = ArrowRefusedArrayInterface(a)
    v = devbuf.view(obj)
    assert v.imported.kind == "array_interface"
    assert v.obj is obj
    assert np.array_equal(np.asarray(v), a)


class RefusesEverything:
    def __arrow_c_array__(self, requested_schema=None):
        raise BufferError("no Arrow here")

    def __dlpack__(self, **kw):
        raise BufferError("no DLPack here")

    @property
    def __array_interface__(self):
        return {"shape": (2,), "typestr": "|V3", "data": (0, True), "version": 3}


def test_when_every_route_refuses_the_error_names_each_route_in_order():
    with pytest.raises(BufferError) as e:
        devbuf.view(RefusesEverything())
    msg = str(e.value)
    assert "cannot import " in msg and "by any route it speaks" in msg
    i = msg.index("Arrow: BufferError: no Arrow here")
    j = msg.index("__dlpack__: BufferError: no DLPack here")
    k = msg.index("__array_interface__: BufferError: typestr '|V3'")
    assert i < j < k


def test_a_hard_error_after_a_refusal_is_one_more_reason_and_the_last():
    class Later:
        def __arrow_c_array__(self, requested_schema=None):
            raise BufferError("Arrow refused")

        def __dlpack__(self, **kw):
            raise TypeError("cannot export nulls")

        @property
        def __array_interface__(self):  # never reached
            raise AssertionError("asked after a hard error")

    with pytest.raises(BufferError, match=r"Arrow: BufferError: Arrow refused; __dlpack__: "
                                          r"TypeError: cannot export nulls\)"):
        devbuf.view(Later())


def test_a_hard_error_of_the_first_route_is_raised_as_it_is():
    class First:
        def __dlpack__(self, **kw):
            raise TypeError("broken producer")

    with pytest.raises(TypeError, match="broken producer"):
        devbuf.view(First())


def test_pillow_images_are_read_through_the_array_interface():
    Image = pytest.importorskip("PIL.Image")
    im = Image.new("RGB", (4, 3), (1, 2, 3))
    want = np.asarray(im)  # NumPy reads it through __array_interface__
    v = devbuf.view(im)
    assert v.shape == want.shape == (3, 4, 3)
    assert np.array_equal(np.asarray(v), want)
    assert v.obj is im


capi = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")


def test_import_from_object_falls_through_the_same_way():
    pytest.importorskip("pyarrow")
    a = np.arange(6, dtype=np.int16)
    info = capi.import_info(ArrowRefusedArrayInterface(a))
    assert info["ptr"] == a.ctypes.data
    with pytest.raises(BufferError) as e:
        capi.import_info(RefusesEverything())
    assert "Arrow: BufferError: no Arrow here" in str(e.value)
    assert "__dlpack__: BufferError: no DLPack here" in str(e.value)


# ---- the header-only route's writable rule --------------------------------------------------

consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")


def test_the_header_route_refuses_a_read_only_answer_to_a_writable_request():
    e = consumer.Exporter(b"abcd", mode="host", readonly_answer=True)
    assert consumer.inspect(e, 0)["readonly"] is True  # a read-only request is fine
    with pytest.raises(BufferError, match=r"devbuf_consumer.Exporter answered the writable "
                                          r"request with a read-only buffer"):
        consumer.inspect(e, 0x1)  # PyBUF_WRITABLE
    assert e.counts["exports"] == 0  # the answer was released
    w = consumer.Exporter(b"abcd", mode="host")
    assert consumer.inspect(w, 0x1)["readonly"] is False


def test_the_header_route_refuses_pyarrows_read_only_tensor():
    pa = pytest.importorskip("pyarrow")
    ro = np.arange(3, dtype=np.int32)
    ro.flags.writeable = False
    t = pa.Tensor.from_numpy(ro)
    assert consumer.inspect(t, 0x11c)["readonly"] is True
    with pytest.raises(BufferError, match="pyarrow.lib.Tensor answered the writable request"):
        consumer.inspect(t, 0x11d)  # PyBUF_FULL


# ---- smaller ones ----------------------------------------------------------------------------

def test_from_host_of_a_datetime64_array_goes_through_the_view():
    x = np.array(["2020-01-01", "2021-06-30"], dtype="datetime64[D]")
    b = devbuf.from_host(x)
    assert b.format == devbuf.from_host(devbuf.view(x)).format
    assert ctypes.string_at(b.ptr, b.nbytes) == x.tobytes()
    bad = np.zeros(2, dtype=[("n", "i4"), ("t", "M8[D]")])  # no route reads it
    with pytest.raises(ValueError, match=r"by any route it speaks \(buffer protocol: "):
        devbuf.from_host(bad)


def test_a_bool_in_array_interface_strides_is_refused():
    a = np.arange(6, dtype=np.int32)

    class AI:
        @property
        def __array_interface__(self):
            return dict(a.__array_interface__, strides=(True,))

    with pytest.raises(TypeError, match=r"__array_interface__ 'strides'\[0\] must be an int, "
                                        r"not bool"):
        devbuf.view(AI())


def test_array_interface_data_may_be_a_buffer_and_is_bounded_by_it():
    class BytesData:
        def __init__(self, shape, data):
            self.d = {"version": 3, "typestr": "<i2", "shape": shape, "data": data}

        @property
        def __array_interface__(self):
            return dict(self.d)

    v = devbuf.view(BytesData((3,), np.arange(3, dtype="<i2").tobytes()))
    assert v.readonly and np.asarray(v).tolist() == [0, 1, 2]
    w = devbuf.view(BytesData((2,), bytearray(4)), writable=True)
    assert not w.readonly
    with pytest.raises(BufferError, match=r"describes bytes 0 to 8 of its 'data' buffer, "
                                          r"which holds 4"):
        devbuf.view(BytesData((4,), bytes(4)))


def test_obj_after_from_dlpack_copy_true_is_the_copy_and_the_docs_say_so():
    x = np.arange(3)
    assert devbuf.from_dlpack(x).obj is x
    c = devbuf.from_dlpack(x, copy=True)
    assert isinstance(c.obj, devbuf.DeviceBuffer) and c.obj.ptr != x.ctypes.data
    docs = (ROOT / "docs" / "interop.md").read_text()
    assert "with `copy=True` its `.obj` is the `DeviceBuffer` holding the copy" in docs
