"""The consumer's edges: NumPy datetimes, ml_dtypes 0.6 and DLPack main's codes,
writable requests checked after the answer, copy=True made by devbuf, copies into the
caller's memory (to_host(out=), copy_to(out=)), and the smaller fixes."""
import numpy as np
import pytest

import devbuf
from dlpack_ctypes import Producer

# ---- 1. datetime64 / timedelta64 ---------------------------------------------------------

UNITS = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as", "10s", "25us"]


@pytest.mark.parametrize("kind,base", [("M8", "datetime64"), ("m8", "timedelta64")])
@pytest.mark.parametrize("unit", UNITS)
def test_numpy_times_come_in_through_the_array_interface_and_go_back(kind, base, unit):
    a = np.array([0, 1, -5, 123456, np.iinfo(np.int64).max], dtype="i8").astype(f"{kind}[{unit}]")
    a[1] = np.array("NaT", dtype=a.dtype)
    v = devbuf.view(a)
    assert v.format == f"[devbuf${base}({unit})]" and v.itemsize == 8 and v.shape == (5,)
    assert v.imported.kind == "array_interface" and v.obj is a
    assert v.dtype.fields[0].custom.desc.kind == base.replace("64", "")
    # the values, byte for byte, through devbuf's own copy
    h = v.to_host()
    assert bytes(h) == a.tobytes()
    # and back out to NumPy, with the unit: from the view, and from the host copy
    for src in (v, h):
        b = devbuf.to_numpy(src)
        assert b.dtype == a.dtype
        assert np.array_equal(b.view("i8"), a.view("i8"))
        assert np.isnat(b[1]) and b[0] == a[0]


def test_to_numpy_pins_its_source_and_refuses_device_memory(sim):
    a = np.arange(3).astype("M8[D]")
    v = devbuf.view(a)
    b = devbuf.to_numpy(v)
    with pytest.raises(BufferError, match="export"):
        v.release()  # the NumPy array still reads it
    del b
    v.release()
    d = devbuf.empty(2, format="[devbuf$datetime64(ns)]", device=sim)
    with pytest.raises(BufferError, match="to_host"):
        devbuf.to_numpy(d)


def test_a_datetime_foreign_array_never_leaves_as_its_int64_storage():
    v = devbuf.view(np.arange(3).astype("M8[s]"))
    with pytest.raises(BufferError):
        np.from_dlpack(v)


def test_generic_and_swapped_times_are_refused_saying_why():
    with pytest.raises(ValueError, match=r"without a unit .*astype\('M8\[s\]'\)"):
        devbuf.view(np.array(["NaT"], dtype="M8"))
    with pytest.raises(ValueError, match=r"'>m8\[D\]' is not in native byte order"):
        devbuf.view(np.arange(2).astype(">m8[D]"))


def test_when_every_route_fails_the_error_names_each_route_and_its_reason():
    a = np.zeros(2, dtype=[("n", "i4"), ("t", "M8[D]")])
    with pytest.raises(ValueError) as e:
        devbuf.view(a)
    msg = str(e.value)
    assert "cannot import numpy.ndarray by any route" in msg
    assert "buffer protocol: ValueError: cannot include dtype 'M' in a buffer" in msg
    assert "__dlpack__: BufferError" in msg
    assert "__array_interface__: BufferError: typestr '|V12' has no devbuf format" in msg


def test_an_object_without_the_buffer_protocol_gets_every_route_too():
    class Both:
        def __dlpack__(self, **kw):
            raise BufferError("no DLPack for you")

        __array_interface__ = {"shape": (2,), "typestr": "|V3", "data": (0, True), "version": 3}

    with pytest.raises(BufferError) as e:
        devbuf.view(Both())
    assert "__dlpack__: BufferError: no DLPack for you" in str(e.value)
    assert "__array_interface__: BufferError: typestr '|V3'" in str(e.value)


# ---- 2. ml_dtypes 0.6 and DLPack main ------------------------------------------------------

ml_dtypes = pytest.importorskip("ml_dtypes")

# ml_dtypes types devbuf refuses by name (none today): each with the reason.
REFUSED_ML_DTYPES = {}


def _ml_dtypes_types():
    out = []
    for name in dir(ml_dtypes):
        t = getattr(ml_dtypes, name)
        if isinstance(t, type) and issubclass(t, np.generic):
            out.append(name)
    return sorted(out)


def test_every_ml_dtypes_type_is_mapped_or_refused_by_name():
    names = _ml_dtypes_types()
    assert len(names) >= 20, names  # the enumeration itself works
    for name in names:
        a = np.zeros(4, dtype=getattr(ml_dtypes, name))
        if name in REFUSED_ML_DTYPES:
            with pytest.raises(BufferError, match=f"ml_dtypes type '{name}'"):
                devbuf.view(a)
            continue
        v = devbuf.view(a)  # a new ml_dtypes type fails here: map it or refuse it by name
        assert v.format == f"[devbuf${name}]", name
        assert v.itemsize == a.itemsize, name


@pytest.mark.parametrize("name,values", [
    ("complex32", [0, 1 + 2j, -3.5j, 65504]),
    ("bcomplex32", [0, 1 + 2j, -3.5j, 2.0 ** 100]),
    ("int1", [0, -1, 0, -1]),
    ("uint1", [0, 1, 1, 0]),
])
def test_ml_dtypes_06_types_are_mapped_with_their_values(name, values):
    a = np.array(values, dtype=getattr(ml_dtypes, name))
    v = devbuf.view(a)
    assert v.format == f"[devbuf${name}]"
    assert bytes(v.to_host()) == a.tobytes()
    desc = v.dtype.fields[0].custom.desc
    assert desc.itemsize == a.itemsize


def test_an_unknown_ml_dtypes_type_is_refused_by_its_name():
    class FakeType:
        __module__ = "ml_dtypes._newer"

    class FakeDtype:
        type = FakeType
        name = "float3_e1m1"

    class FakeArray:
        dtype = FakeDtype()
        __array_interface__ = {"shape": (2,), "typestr": "|V1", "data": (0, True), "version": 3}

    with pytest.raises(BufferError, match="ml_dtypes type 'float3_e1m1' is not one devbuf maps"):
        devbuf.view(FakeArray())


def test_bcomplex32_is_dlpack_code_18_both_ways():
    buf = devbuf.view(np.array([1 + 2j, -3j], dtype=ml_dtypes.bcomplex32)).to_host()
    assert buf.format == "[devbuf$bcomplex32]"
    v = devbuf.from_dlpack(buf)  # exported by devbuf, imported by devbuf
    assert v.imported.dl_dtype == (18, 32, 1) and v.format == "[devbuf$bcomplex32]"
    assert bytes(v.to_host()) == bytes(buf)
    a = np.array([1, 2], dtype=np.uint32)
    p = devbuf.from_dlpack(Producer(a, dtype=(18, 32, 1)))
    assert p.format == "[devbuf$bcomplex32]" and bytes(p.to_host()) == a.tobytes()


def test_int1_packs_eight_to_a_byte_in_dlpack():
    a = np.array([0b10110001], dtype=np.uint8)
    v = devbuf.from_dlpack(Producer(a, dtype=(0, 1, 1), shape=(8,), strides=None))
    assert v.format == "[devbuf$int1_x8]" and v.shape == (1,)
    v = devbuf.from_dlpack(Producer(a, dtype=(1, 1, 1), shape=(8,), strides=None))
    assert v.format == "[devbuf$uint1_x8]" and bytes(v.to_host()) == a.tobytes()


def test_tpu_pinned_host_memory_imports_as_cpu():
    a = np.arange(4, dtype=np.float32)
    v = devbuf.from_dlpack(Producer(a, device=(20, 3)))  # kDLTPUHost, a TPU's id
    assert v.identifier is None and v.imported.dl_device == (20, 3)
    assert np.array_equal(np.asarray(v), a)


@pytest.mark.parametrize("code,name", [(19, "kDLTPU"), (21, "kDLAscend")])
def test_tpu_and_ascend_devices_are_refused_by_name(code, name):
    a = np.arange(4, dtype=np.float32)
    p = Producer(a, device=(code, 0))
    with pytest.raises(BufferError, match=rf"device type {code} \({name}\) has no devbuf device"):
        devbuf.from_dlpack(p)
    p.settle()  # the refused capsule is not consumed: delete its tensor, as its destructor would
    assert p.deleted == p.made


# ---- 3. the writable request, checked after the answer ---------------------------------------


def test_a_read_only_answer_to_a_writable_request_is_refused_naming_the_producer():
    pa = pytest.importorskip("pyarrow")
    ro = np.arange(3, dtype=np.int32)
    ro.flags.writeable = False
    t = pa.Tensor.from_numpy(ro)
    assert devbuf.view(t).readonly  # pyarrow says read-only in its answer
    # (refused inside DevbufPy_GetBufferEx, the header-only route, as for any C consumer)
    with pytest.raises(BufferError, match=r"pyarrow.lib.Tensor answered the "
                                          r"writable request with a read-only buffer"):
        devbuf.view(t, writable=True)
    with pytest.raises(BufferError, match="pyarrow.lib.Tensor answered"):
        devbuf.DeviceView(t, writable=True)
    w = devbuf.view(pa.Tensor.from_numpy(np.arange(3, dtype=np.int32)), writable=True)
    assert not w.readonly


def test_every_import_route_refuses_a_writable_request_naming_the_producer():
    ro = np.arange(3, dtype=np.int64)
    ro.flags.writeable = False

    class ArrayInterfaceOnly:
        __array_interface__ = ro.__array_interface__

    class DLPackOnly:
        def __dlpack__(self, **kw):
            return ro.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match=r"ArrayInterfaceOnly, through array_interface\) marked "
                                          r"it read-only"):
        devbuf.view(ArrayInterfaceOnly(), writable=True)
    with pytest.raises(BufferError, match=r"DLPackOnly, through dlpack\) marked it read-only"):
        devbuf.view(DLPackOnly(), writable=True)
    with pytest.raises(ValueError, match="read-only"):  # NumPy's own refusal, unchanged
        devbuf.view(ro, writable=True)
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(BufferError, match=r"immutable \(the producer: pyarrow.lib.Int64Array\)"):
        devbuf.view(pa.array([1, 2, 3]), writable=True)


def test_a_read_only_dlpack_producer_is_refused_naming_it():
    a = np.arange(3, dtype=np.int32)
    p = Producer(a, flags=1)  # DLPACK_FLAG_BITMASK_READ_ONLY
    p.__class__ = type("ReadOnlyProducer", (Producer,), {})
    with pytest.raises(BufferError, match=r"ReadOnlyProducer, through dlpack\) marked it read-only"):
        devbuf.view(p, writable=True)


# ---- 4. copy=True is devbuf's own copy ---------------------------------------------------


def test_copy_true_of_a_strided_pyarrow_tensor_is_right():
    pa = pytest.importorskip("pyarrow")
    a = np.arange(100, 109, dtype=np.int8)[1::3]
    v = devbuf.from_dlpack(pa.Tensor.from_numpy(a), copy=True)
    assert np.asarray(v).tolist() == [101, 104, 107]
    assert not np.shares_memory(np.asarray(v), a)


def test_copy_true_is_never_passed_to_the_producer(sim):
    a = np.arange(6, dtype=np.int16)[::2]
    p = Producer(a)
    v = devbuf.from_dlpack(p, copy=True)
    assert [c["copy"] for c in p.calls] == [None]
    assert np.asarray(v).tolist() == [0, 2, 4] and not np.shares_memory(np.asarray(v), a)
    # a device tensor's copy stays on its device
    d = devbuf.from_host(np.arange(4.0), device=sim)
    w = devbuf.from_dlpack(d, copy=True)
    assert w.identifier == "devbuf.sim" and w.obj is not d
    assert np.asarray(w.to_host()).tolist() == [0, 1, 2, 3]
    # copy=False still reaches the producer, which must not copy
    p = Producer(a)
    devbuf.from_dlpack(p, copy=False)
    assert [c["copy"] for c in p.calls] == [False]


# ---- 5. copies into the caller's memory -------------------------------------------------------

DEVICES = ["cpu", "devbuf.sim"]


@pytest.mark.parametrize("dev", DEVICES)
def test_to_host_into_numpy_staging_and_device_buffers(dev, sim):
    src = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = devbuf.from_host(src, device=dev)
    out = np.zeros_like(src)
    assert b.to_host(out=out) is out and np.array_equal(out, src)
    st = devbuf.HostStaging(dev, src.nbytes)  # the plugin's staging memory, flat bytes
    assert b.to_host(out=st) is st and bytes(st) == src.tobytes()
    flat = bytearray(src.nbytes)
    b.to_host(out=flat)
    assert bytes(flat) == src.tobytes()
    d2 = devbuf.empty((4, 6), "f", device=dev)
    assert b.copy_to(dev, out=d2) is d2 and np.array_equal(np.asarray(d2.to_host()), src)
    d3 = devbuf.empty(src.nbytes, "B", device=dev)
    b.copy_to(out=d3)  # the device is out's
    h = np.zeros((4, 6), np.float32)
    b.copy_to(None, out=h)  # None: the host, as copy_to(None) always meant
    assert np.array_equal(h, src)
    assert bytes(d3.to_host()) == src.tobytes()
    # across devices, through the host
    other = "cpu" if dev != "cpu" else "devbuf.sim"
    d4 = devbuf.empty((4, 6), "f", device=other)
    b.copy_to(other, out=d4)
    assert np.array_equal(np.asarray(d4.to_host()), src)
    # a view, strided, into a NumPy array (the view is gathered)
    v = devbuf.view(b)
    out2 = np.zeros((4, 6), np.float32)
    assert v.to_host(out=out2) is out2 and np.array_equal(out2, src)
    s = devbuf.view(src[:, ::2])
    out3 = np.zeros((4, 3), np.float32)
    s.to_host(out=out3)
    assert np.array_equal(out3, src[:, ::2])


@pytest.mark.parametrize("dev", DEVICES)
def test_to_host_out_errors_say_what_does_not_fit(dev, sim):
    b = devbuf.from_host(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
    with pytest.raises(ValueError, match="has 20 bytes; the copy is 48 bytes"):
        b.to_host(out=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"shape \(4, 3\) of 4-byte items; the source has shape "
                                         r"\(3, 4\)"):
        b.to_host(out=np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="holds items of format 'i', the source 'f'"):
        b.to_host(out=np.zeros((3, 4), np.int32))
    with pytest.raises(ValueError, match="not C-contiguous"):
        b.to_host(out=np.zeros((3, 4), np.float32, order="F"))
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match=r"out \(numpy.ndarray\) refused a writable buffer"):
        b.to_host(out=ro)
    with pytest.raises(BufferError, match=r"out \(bytes\) refused a writable buffer"):
        b.to_host(out=bytes(48))
    pa = pytest.importorskip("pyarrow")
    # a producer that answers the writable request with a read-only buffer
    with pytest.raises(BufferError, match=r"out \(pyarrow.lib.Tensor\) refused a writable buffer: "
                                          r"pyarrow.lib.Tensor answered the writable request "
                                          r"with a read-only buffer"):
        b.to_host(out=pa.Tensor.from_numpy(ro))
    with pytest.raises(TypeError, match="out must be a writable buffer"):
        b.to_host(out=[0] * 12)
    with pytest.raises(ValueError, match=r"device mismatch: out \(devbuf.DeviceBuffer\) is "
                                         r"devbuf.sim:0 memory, the copy goes to the host"):
        b.to_host(out=devbuf.empty((3, 4), "f", device=sim))
    with pytest.raises(ValueError, match=r"device mismatch: out \(numpy.ndarray\) is host memory, "
                                         r"the copy goes to devbuf.sim:0"):
        b.copy_to(sim, out=np.zeros((3, 4), np.float32))
    with pytest.raises(TypeError, match="needs a device, or out="):
        b.copy_to()
    with pytest.raises(TypeError, match="unexpected keyword argument 'into'"):
        b.to_host(into=None)
    assert isinstance(b.to_host(out=None), devbuf.DeviceBuffer)  # None: a new buffer


def test_to_host_out_refuses_overlap_with_its_source(sim):
    d = devbuf.from_host(np.arange(8, dtype=np.int64), device=sim)
    with pytest.raises(ValueError, match="out overlaps the source"):
        d.copy_to(sim, out=d)
    a = np.arange(8, dtype=np.int64)
    with pytest.raises(ValueError, match="overlaps the source"):
        devbuf.view(a).to_host(out=a)
    with pytest.raises(ValueError, match="overlaps the source"):
        devbuf.view(a[:4]).to_host(out=a[2:6])


def test_out_of_a_read_only_source_and_a_freed_buffer():
    b = devbuf.from_host(np.arange(4, dtype=np.int32), readonly=True)
    out = np.zeros(4, np.int32)
    b.to_host(out=out)  # reading a read-only buffer is fine
    assert out.tolist() == [0, 1, 2, 3]
    b.free()
    with pytest.raises(ValueError, match="freed"):
        b.to_host(out=out)


# ---- 8. the smaller ones ----------------------------------------------------------------


def test_parse_format_takes_bytes_as_calcsize_does():
    assert devbuf.parse_format(b"<i2h").itemsize == devbuf.calcsize(b"<i2h") == 8
    with pytest.raises(TypeError, match="must be str or bytes"):
        devbuf.parse_format(4)
    with pytest.raises(UnicodeDecodeError):
        devbuf.parse_format(b"\xff")


def test_a_formatless_producer_with_wide_items_is_refused_by_the_view():
    consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")
    e = consumer.Exporter(bytes(16), mode="host", itemsize=4)
    with pytest.raises(BufferError, match=r"itemsize 4 does not match format 'B' \(no format "
                                          r"given, which means 'B'\)"):
        devbuf.view(e)
    assert devbuf.view(consumer.Exporter(bytes(16), mode="host")).itemsize == 1


def test_a_bool_in_an_array_interface_shape_is_a_type_error_as_in_numpy():
    a = np.arange(1, dtype=np.int32)

    class AI:
        @property
        def __array_interface__(self):
            return dict(a.__array_interface__, shape=(True,))

    with pytest.raises(TypeError):
        np.asarray(AI())
    with pytest.raises(TypeError, match=r"'shape'\[0\] must be an int, not bool"):
        devbuf.view(AI())


def test_an_impossibly_large_buffer_says_it_is_too_large():
    with pytest.raises(MemoryError, match=r"4611686018427387904 bytes .* is more than one buffer "
                                          r"can hold"):
        devbuf.empty(2**62)
    with pytest.raises(MemoryError, match="more than one buffer can hold"):
        devbuf.empty((2**31, 2**31), "b")


def test_host_staging_is_made_by_hand_for_out(sim):
    st = devbuf.HostStaging(sim, 16)
    assert st.nbytes == 16 and not st.readonly and st.device is sim
    m = memoryview(st)
    assert not m.readonly and m.format == "B" and m.nbytes == 16
    m.release()
    assert devbuf.HostStaging("cpu", 0).nbytes == 0
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        devbuf.HostStaging(sim, -1)
    with pytest.raises(TypeError):
        devbuf.HostStaging(sim)
