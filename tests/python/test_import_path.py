"""The one import path (docs/consumers.md "The one import path"):
every protocol a producer speaks is read into one description that the
DeviceView owns, with no object in between. view.obj is the producer on every
route, view.imported says how it was read, and an Arrow import keeps the
moved array itself (no devbuf.ArrowArray, no second export), releasing it
exactly once."""
import ctypes
import gc

import numpy as np
import pytest

import devbuf
from devbuf.check._capi import (ArrowArray, ArrowDeviceArray, ArrowSchema, RELEASE_ARRAY,
                                RELEASE_SCHEMA)
from dlpack_ctypes import Producer, to_py_object

EXT_DEV = 12

_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))


class CountedArrow:
    """An Arrow producer written as a C library writes one: its own schema and
    array structs, behind capsules without a destructor (the producer keeps
    them), and a release callback that counts its calls. `device_array`:
    __arrow_c_device_array__ (with `sync_event`, an event handle, on
    `device_type`), else only __arrow_c_array__."""

    def __init__(self, values, device_array=False, device_type=1, sync_event=None):
        self.values = values  # host: a NumPy array; device: a DeviceBuffer
        self.released = 0
        self.calls = 0
        self._release = RELEASE_ARRAY(self._on_release)
        self._release_schema = RELEASE_SCHEMA(self._on_release_schema)
        self._names = {n: ctypes.create_string_buffer(n)
                       for n in (b"arrow_schema", b"arrow_array", b"arrow_device_array")}
        self._format = ctypes.create_string_buffer(b"i")
        self._event = ctypes.c_void_p(sync_event)
        self._keep = []
        if device_array:
            self.__arrow_c_device_array__ = self._device_pair
        self.device_type = device_type

    def _on_release(self, arr):
        self.released += 1
        arr.contents.release = None  # as the spec says a release callback must

    def _on_release_schema(self, schema):
        schema.contents.release = None

    def _ptr(self):
        v = self.values
        return v.ptr if isinstance(v, devbuf.DeviceBuffer) else v.ctypes.data

    def _pair(self, device):
        self.calls += 1
        schema = ArrowSchema()
        schema.format = ctypes.addressof(self._format)
        schema.release = ctypes.cast(self._release_schema, ctypes.c_void_p).value
        buffers = (ctypes.c_void_p * 2)(None, self._ptr())
        arr = ArrowArray()
        arr.length = len(self.values) if not isinstance(self.values, devbuf.DeviceBuffer) \
            else self.values.shape[0]
        arr.n_buffers = 2
        arr.buffers = ctypes.cast(buffers, ctypes.POINTER(ctypes.c_void_p))
        arr.release = ctypes.cast(self._release, ctypes.c_void_p).value
        if device:
            dev = ArrowDeviceArray()
            dev.array = arr
            dev.device_type = self.device_type
            dev.device_id = 0 if self.device_type != 1 else -1
            dev.sync_event = ctypes.addressof(self._event) if self._event.value else None
            arr = dev
        self._keep += [schema, buffers, arr]
        name = b"arrow_device_array" if device else b"arrow_array"
        return (_new_capsule(ctypes.addressof(schema), self._names[b"arrow_schema"], None),
                _new_capsule(ctypes.addressof(arr), self._names[name], None))

    def __arrow_c_array__(self, requested_schema=None):
        return self._pair(False)

    def _device_pair(self, requested_schema=None, **kwargs):
        return self._pair(True)


class _ArrayInterface:
    def __init__(self, a):
        self.a = a
        self.__array_interface__ = a.__array_interface__


# ---- view.obj is the producer, on every route ---------------------------------------------

def test_obj_is_the_producer_through_dlpack():
    p = Producer(np.arange(6.0))
    v = devbuf.from_dlpack(p)
    assert v.obj is p and v.imported.kind == "dlpack"
    w = devbuf.view(Producer(np.arange(3.0), legacy_only=True))
    assert type(w.obj) is Producer and w.imported.kind == "dlpack_legacy"
    a = np.arange(4, dtype=np.int16)
    assert devbuf.from_dlpack(a).obj is a  # NumPy's __dlpack__


def test_obj_is_the_producer_through_the_exchange_table():
    b = devbuf.from_host(np.arange(5, dtype=np.float32))
    v = devbuf.from_dlpack(b)  # DeviceBuffer's table, no capsule
    assert v.obj is b and v.imported.kind == "dlpack" and v.imported.dlpack_version == (1, 3)
    # A tensor a C caller hands to the table has no producer object.
    t = to_py_object(devbuf.DeviceView, np.arange(3.0))
    assert isinstance(t, devbuf.DeviceView) and t.obj is None and t.imported.kind == "dlpack"


def test_obj_is_the_producer_through_the_array_interface():
    p = _ArrayInterface(np.arange(6, dtype=np.uint8).reshape(2, 3))
    v = devbuf.view(p)
    assert v.obj is p and v.imported == ("array_interface", (1, 0), (1, 8, 1), None, False)
    dt = np.arange(3).astype("M8[s]")  # NumPy's buffer refuses it: the fallback route
    assert devbuf.view(dt).obj is dt


def _cuda_identifier_known():
    return any("devbuf.cuda" in p.identifiers for p in devbuf.plugins())


@pytest.mark.skipif(not _cuda_identifier_known(), reason="devbuf.cuda plugin not built")
def test_obj_is_the_producer_through_the_cuda_array_interface():
    class CAI:
        __cuda_array_interface__ = dict(shape=(4,), typestr="<f4", data=(0x10000, False),
                                        version=3)
    p = CAI()
    v = devbuf.view(p)
    assert v.obj is p and v.imported.kind == "cuda_array_interface"
    assert v.imported.dl_device == (2, 0)


def test_obj_is_the_producer_through_arrow():
    p = CountedArrow(np.arange(5, dtype=np.int32))
    v = devbuf.view(p)
    assert type(v.obj) is CountedArrow and v.obj is p
    assert v.imported.kind == "arrow" and v.imported.dl_device == (1, -1)
    assert v.imported.dl_dtype is None and v.readonly and v.format == "i"
    assert memoryview(v).tolist() == [0, 1, 2, 3, 4]


def test_obj_of_a_buffer_view_is_the_exporter_and_nothing_was_imported():
    a = np.arange(3.0)
    v = devbuf.view(a)
    assert v.obj is a and v.imported is None
    v.release()
    with pytest.raises(ValueError, match="released"):
        v.imported


# ---- Arrow: the moved array itself, released exactly once ---------------------------------

def test_arrow_import_makes_no_arrow_array_and_releases_once_at_release():
    p = CountedArrow(np.arange(8, dtype=np.int32))
    v = devbuf.view(p)
    assert p.calls == 1 and p.released == 0  # moved in, not released
    # What the view holds: the producer, and no intermediate object (an
    # ArrowArray or any exporter the view would hold an export of).
    assert gc.get_referents(v) == [p]
    assert not any(isinstance(o, devbuf.ArrowArray) for o in gc.get_referents(v))
    m = memoryview(v)  # a re-export holds the view, not the producer's array
    with pytest.raises(BufferError, match="1 export"):
        v.release()
    assert p.released == 0
    del m
    v.release()
    assert p.released == 1  # at release(), once
    v.release()
    del v
    gc.collect()
    assert p.released == 1  # not twice


def test_arrow_array_outlives_the_view_through_a_re_export():
    p = CountedArrow(np.arange(4, dtype=np.int32))
    v = devbuf.view(p)
    x = np.asarray(v)
    del v
    gc.collect()
    assert p.released == 0 and x.tolist() == [0, 1, 2, 3]  # the re-export keeps it
    del x
    gc.collect()
    assert p.released == 1


def test_a_refused_arrow_array_is_released_once_at_the_refusal():
    p = CountedArrow(np.arange(4, dtype=np.int32))
    p._format = ctypes.create_string_buffer(b"u")  # utf8: an offsets buffer
    with pytest.raises(BufferError, match="variable-length"):
        devbuf.view(p)
    assert p.released == 1
    q = CountedArrow(np.arange(4, dtype=np.int32))
    with pytest.raises(BufferError, match="devbuf.ArrowArray is read-only"):
        devbuf.view(q, writable=True)  # the same message as through an ArrowArray
    assert q.released == 1


def test_from_arrow_still_gives_an_arrow_array_over_the_same_reader():
    p = CountedArrow(np.arange(3, dtype=np.int32))
    a = devbuf.from_arrow(p)
    assert isinstance(a, devbuf.ArrowArray) and a.obj is p and len(a) == 3
    v = devbuf.view(a)  # a buffer exporter: the view's .obj is the ArrowArray
    assert v.obj is a and v.imported is None
    v.release()
    del v, a
    gc.collect()
    assert p.released == 1


def test_arrow_sync_event_is_honoured(sim):
    vals = np.arange(1000, dtype=np.int64)
    buf = devbuf.from_host(vals, device=sim)
    assert buf.event is not None  # the upload still runs on the sim stream
    p = CountedArrow(buf, device_array=True, device_type=EXT_DEV, sync_event=buf.event)
    p._format = ctypes.create_string_buffer(b"l")
    v = devbuf.view(p)
    assert v.obj is p and v.is_device and v.identifier == "devbuf.sim"
    assert v.imported.dl_device == (EXT_DEV, 0)
    assert v.sync is not None and v.sync.event == buf.event  # what readers wait on
    np.testing.assert_array_equal(np.asarray(v.to_host()), vals)
    with pytest.raises(BufferError, match="cannot read"):
        memoryview(v)
    v.release()
    assert p.released == 1


# ---- the other routes: re-exports keep the memory, the view's rules stand ------------------

def test_dlpack_re_export_keeps_the_tensor_and_blocks_release():
    p = Producer(np.arange(6.0))
    v = devbuf.from_dlpack(p)
    y = np.from_dlpack(v)
    with pytest.raises(BufferError, match="export"):
        v.release()
    del v
    gc.collect()
    assert p.deleted == 0 and y.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del y
    gc.collect()
    assert p.deleted == 1


# ---- the C API's Import_FromObject: the same routes, Arrow included ---------------------

def test_capi_import_reads_arrow_and_releases_once():
    cc = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")
    a = np.arange(6, dtype=np.int32)
    p = CountedArrow(a)
    i = cc.import_info(p, 0, 1)  # released, then released again (must do nothing)
    assert p.calls == 1 and p.released == 1
    assert i["ptr"] == a.ctypes.data and i["shape"] == (6,) and i["format"] == "i"
    assert i["readonly"] == 1 and i["is_device"] == 0 and i["obj_is_null"] == 1
    # Arrow memory is immutable: a writable request is refused, with
    # devbuf.view's message, and the moved array is still released once.
    with pytest.raises(BufferError) as e:
        cc.import_info(CountedArrow(a), 1)
    with pytest.raises(BufferError) as f:
        devbuf.view(CountedArrow(a), writable=True)
    assert str(e.value) == str(f.value)
    q = CountedArrow(a)
    with pytest.raises(BufferError):
        cc.import_info(q, 1)
    assert q.released == 1


def test_capi_import_arrow_device_array_sync_event(sim):
    cc = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")
    buf = devbuf.from_host(np.arange(1000, dtype=np.int64), device=sim)
    assert buf.event is not None
    p = CountedArrow(buf, device_array=True, device_type=EXT_DEV, sync_event=buf.event)
    p._format = ctypes.create_string_buffer(b"l")
    i = cc.import_info(p)
    assert i["is_device"] == 1 and i["device"] == "devbuf.sim" and i["ptr"] == buf.ptr
    assert i["has_device_info"] == 1 and i["event"] == buf.event  # the sync to honour
    assert i["shape"] == (1000,) and i["format"] == "q"
    assert p.released == 1
