"""DLPack both ways: devbuf as producer (__dlpack__, capsules, flags, copies,
streams, the C exchange table) and as consumer (from_dlpack, view()), with
NumPy as the real library on the other side and hand-made producers
(tests/python/dlpack_ctypes.py) for the legacy and malformed cases."""
import gc
import sys

import numpy as np
import pytest

import devbuf
from dlpack_ctypes import (Producer, capsule_name, forwarding_producer_type, live_tensors,
                           to_py_object)

KDLCPU, KDLCUDA, KDLVULKAN, KDLEXTDEV = 1, 2, 7, 12

# NumPy 2.1 added np.from_dlpack(device=, copy=), writable imports and the
# read-only flag of DLPack 1.0; it has no wheel for CPython 3.9, where the
# matrix (scripts/test-matrix.sh) runs NumPy 2.0.
NUMPY_21 = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 1)
needs_numpy_21 = pytest.mark.skipif(
    not NUMPY_21,
    reason=f"needs NumPy >= 2.1 (from_dlpack device=/copy=, DLPack 1.0 read-only flag); "
           f"NumPy {np.__version__} here" + (", the newest with a wheel for CPython 3.9"
                                              if sys.version_info < (3, 10) else ""))


def shares_memory(view, arr):
    return view.ptr == arr.ctypes.data


# ---- devbuf -> NumPy -------------------------------------------------------------

@needs_numpy_21
def test_numpy_from_devbuf_shares_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = devbuf.from_host(a)
    x = np.from_dlpack(b)
    assert x.shape == (3, 4) and x.dtype == np.float32 and x.flags.writeable
    assert x.ctypes.data == b.ptr
    x[1, 2] = 99
    assert np.asarray(b)[1, 2] == 99
    with pytest.raises(BufferError, match="exported"):
        b.free()  # the DLPack consumer still holds an export
    del x
    gc.collect()
    assert b.exports == 0
    b.free()


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64", "float16", "float32",
                                   "float64", "complex64", "complex128", "bool"])
def test_numpy_round_trip_dtypes(dtype):
    a = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    b = devbuf.from_host(a)
    x = np.from_dlpack(b)
    assert x.dtype == a.dtype and np.array_equal(x, a)
    v = devbuf.from_dlpack(a)
    assert np.array_equal(np.asarray(v), a) and shares_memory(v, a)


@needs_numpy_21
def test_numpy_copy_and_device_keywords():
    a = np.arange(5, dtype=np.int64)
    b = devbuf.from_host(a)
    c = np.from_dlpack(b, copy=True)
    assert np.array_equal(c, a) and c.ctypes.data != b.ptr
    c[0] = 42
    assert np.asarray(b)[0] == 0
    d = np.from_dlpack(b, device="cpu")
    assert d.ctypes.data == b.ptr
    with pytest.raises(BufferError, match="copy=False"):
        b.__dlpack__(max_version=(1, 0), dl_device=(KDLEXTDEV, 0), copy=False)
    e = np.from_dlpack(b, device="cpu", copy=False)
    assert e.ctypes.data == b.ptr


@needs_numpy_21
def test_numpy_from_sim_buffer_needs_a_copy(sim):
    a = np.arange(8, dtype=np.float64)
    s = devbuf.from_host(a, device=sim)
    assert s.__dlpack_device__() == (KDLEXTDEV, 0)
    with pytest.raises((BufferError, ValueError, RuntimeError)):
        np.from_dlpack(s)  # NumPy cannot use kDLExtDev memory
    x = np.from_dlpack(s, device="cpu")  # dl_device=(1, 0): devbuf copies through the plugin
    assert np.array_equal(x, a)
    with pytest.raises(BufferError, match="copy=False"):
        s.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 0), copy=False)
    cap = s.__dlpack__(max_version=(1, 3), dl_device=(KDLCPU, 0))
    v = devbuf.from_dlpack(_Capsuled(cap, (KDLCPU, 0)))
    assert v.imported.is_copied and np.array_equal(np.asarray(v), a)


class _Capsuled:
    """Hands out one prepared capsule."""

    def __init__(self, cap, dev):
        self.cap, self.dev = cap, dev

    def __dlpack__(self, **kw):
        cap, self.cap = self.cap, None
        return cap

    def __dlpack_device__(self):
        return self.dev


def test_numpy_asarray_of_imports_keeps_layout():
    a = np.arange(24, dtype=np.int32).reshape(4, 6)
    for src in (a, a[:, ::2], a.T, a[1:3, 2:5]):
        v = devbuf.from_dlpack(src)
        assert v.shape == src.shape and v.strides == src.strides
        assert np.array_equal(np.asarray(v), src)
        assert shares_memory(v, src)


@needs_numpy_21
def test_readonly_both_ways():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    v = devbuf.from_dlpack(a)
    assert v.readonly and v.obj is a
    with pytest.raises(BufferError):
        devbuf.view(v, writable=True)
    b = devbuf.from_host(np.arange(4, dtype=np.float32), readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        b.__dlpack__()  # the legacy form cannot say read-only
    x = np.from_dlpack(b)
    assert not x.flags.writeable


def test_capsule_names_and_deleter_rules():
    b = devbuf.from_host(np.arange(3, dtype=np.uint8))
    assert capsule_name(b.__dlpack__()) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(0, 8))) == "dltensor"
    cap = b.__dlpack__(max_version=(1, 0))
    assert capsule_name(cap) == "dltensor_versioned"
    assert b.exports == 1
    del cap  # never consumed: the capsule's destructor calls the deleter
    gc.collect()
    assert b.exports == 0
    cap = b.__dlpack__(max_version=(1, 3))
    v = devbuf.from_dlpack(_Capsuled(cap, (KDLCPU, 0)))
    assert capsule_name(cap) == "used_dltensor_versioned"
    del cap
    gc.collect()
    assert b.exports == 1  # now owned by the import
    v.release()
    del v
    gc.collect()
    assert b.exports == 0


def test_dlpack_device_and_stream_rules(sim):
    b = devbuf.from_host(np.zeros(2))
    assert b.__dlpack_device__() == (KDLCPU, 0)
    assert devbuf.view(b).__dlpack_device__() == (KDLCPU, 0)
    with pytest.raises(ValueError, match="stream"):
        b.__dlpack__(stream=5)
    b.__dlpack__(stream=-1)
    with pytest.raises(TypeError):
        b.__dlpack__(1)
    with pytest.raises(TypeError):
        b.__dlpack__(bogus=1)
    s = devbuf.from_host(np.arange(4.0), device=sim)
    cap = s.__dlpack__(max_version=(1, 3), stream=None)  # waits on the default stream
    assert capsule_name(cap) == "dltensor_versioned"


def test_sim_round_trip_through_dlpack(sim):
    a = np.arange(10, dtype=np.int16)
    s = devbuf.from_host(a, device=sim)
    v = devbuf.from_dlpack(s)
    assert v.is_device and v.identifier == "devbuf.sim" and v.imported.dl_device == (KDLEXTDEV, 0)
    assert np.array_equal(np.asarray(v.to_host()), a)
    with pytest.raises(BufferError, match="cannot read"):
        memoryview(v)
    h = devbuf.from_dlpack(s, device="cpu")
    assert not h.is_device and np.array_equal(np.asarray(h), a)
    back = devbuf.from_dlpack(np.arange(3.0), device=sim)
    assert back.identifier == "devbuf.sim"
    assert np.array_equal(np.asarray(back.to_host()), np.arange(3.0))


class _HostOnlyRaisingValueError:
    """A host producer that refuses another dl_device with ValueError, as
    NumPy 2.1-2.2 do ("unsupported device requested"); the standard (and
    newer NumPy) says BufferError. Either must fall back to a host export."""

    def __init__(self, a):
        self.a = a
        self.refused = 0

    def __dlpack_device__(self):
        return (KDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != (KDLCPU, 0):
            self.refused += 1
            raise ValueError("unsupported device requested")
        kw = {"max_version": max_version} if max_version is not None else {}
        return self.a.__dlpack__(**kw)


def test_from_dlpack_falls_back_when_producer_refuses_with_value_error(sim):
    p = _HostOnlyRaisingValueError(np.arange(5, dtype=np.int32))
    v = devbuf.from_dlpack(p, device=sim)
    assert p.refused == 1
    assert v.is_device and v.identifier == "devbuf.sim"
    assert np.asarray(v.to_host()).tolist() == [0, 1, 2, 3, 4]
    # copy=False still refuses the cross-device move, with devbuf's message.
    with pytest.raises(BufferError, match="copy=False"):
        devbuf.from_dlpack(p, device=sim, copy=False)


def test_from_dlpack_copy_false_refuses_cross_device(sim):
    with pytest.raises(BufferError, match="copy=False"):
        devbuf.from_dlpack(np.arange(3.0), device=sim, copy=False)
    v = devbuf.from_dlpack(np.arange(3.0), copy=True)
    assert np.array_equal(np.asarray(v), np.arange(3.0))


# ---- the C exchange table ----------------------------------------------------------

def test_exchange_table_attribute():
    for t in (devbuf.DeviceBuffer, devbuf.DeviceView, devbuf.ForeignArray):
        cap = t.__dlpack_c_exchange_api__
        assert capsule_name(cap) == "dlpack_exchange_api"


def test_exchange_table_import():
    b = devbuf.from_host(np.arange(6, dtype=np.float32))
    v = devbuf.from_dlpack(b)  # through the table: no capsule
    assert v.imported.kind == "dlpack" and v.obj is b
    assert b.exports == 1
    # the table's own object, from a versioned tensor (NumPy before 2.1, the
    # matrix's 3.9, answers max_version with a legacy capsule)
    f = to_py_object(devbuf.ForeignArray, devbuf.from_host(np.arange(6.0)))
    assert devbuf._devbuf._exchange_import_bench(f, 100) > 0      # borrowed DLTensor
    assert devbuf._devbuf._exchange_import_bench(b, 100) > 0      # owning tensor + deleter
    assert b.exports == 1
    with pytest.raises(TypeError):
        devbuf._devbuf._exchange_import_bench(np.zeros(1), 1)


# ---- hand-made producers: legacy and malformed ----------------------------------------

def test_legacy_only_producer():
    a = np.arange(6, dtype=np.uint32).reshape(2, 3)
    p = Producer(a, legacy_only=True)
    v = devbuf.from_dlpack(p)
    assert v.imported.kind == "dlpack_legacy" and v.obj is p and np.array_equal(np.asarray(v), a)
    assert p.calls[-1]["max_version"] is None  # asked again without the 2023 keywords
    assert p.deleted == 0
    v.release()
    del v
    gc.collect()
    assert p.deleted == 1
    w = devbuf.view(Producer(a, legacy_only=True))  # view() takes DLPack producers too
    assert np.array_equal(np.asarray(w), a)


def test_versioned_producer_deleter_exactly_once():
    a = np.arange(4, dtype=np.float64)
    p = Producer(a, flags=1)  # read-only
    v = devbuf.from_dlpack(p)
    assert v.readonly and v.imported.dlpack_version == (1, 3)
    del v
    gc.collect()
    assert p.deleted == 1 and p.made == 1


def _refused(producer, match):
    before = live_tensors()
    with pytest.raises(BufferError, match=match):
        devbuf.from_dlpack(producer)
    gc.collect()
    producer.settle()  # the refused capsule was not consumed: its destructor deletes
    assert producer.deleted == producer.made, "a refused tensor must still be deleted, once"
    assert live_tensors() == before


def test_malformed_wrong_capsule_name():
    _refused(Producer(np.zeros(2), name=b"not_a_tensor"), "must be named")


def test_malformed_consumed_twice():
    p = Producer(np.arange(3.0), reuse_capsule=True)
    v = devbuf.from_dlpack(p)
    with pytest.raises(BufferError, match="already consumed"):
        devbuf.from_dlpack(p)
    del v
    gc.collect()
    assert p.deleted == 1


def test_malformed_tensors():
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    _refused(Producer(a, ndim=1000), "ndim 1000 out of range")
    _refused(Producer(a, ndim=-1), "ndim -1")
    _refused(Producer(a, null_shape=True), "shape is NULL")
    _refused(Producer(a, shape=(4, -4)), "negative")
    _refused(Producer(a, strides=(2 ** 62, 1)), "overflow")
    _refused(Producer(a, shape=(2 ** 40, 2 ** 40), strides=(2 ** 40, 1)), "overflow")
    _refused(Producer(a, byte_offset=2 ** 63), "byte_offset")
    _refused(Producer(a, data=0), "data is NULL")
    _refused(Producer(a, device=(KDLVULKAN, 0)), "kDLVulkan")
    _refused(Producer(a, device=(99, 0)), "99")
    _refused(Producer(a, dtype=(3, 64, 1)), "kDLOpaqueHandle")
    _refused(Producer(a, dtype=(2, 128, 1)), "not reinterpreting")
    _refused(Producer(a, dtype=(2, 32, 0)), "lanes is 0")
    _refused(Producer(a, major=2), "version 2")
    _refused(Producer(a, flags=1 << 20), "unknown flag bits")


def test_negative_strides_import():
    a = np.arange(6, dtype=np.int64)
    r = a[::-1]
    p = Producer(r)
    v = devbuf.from_dlpack(p)
    assert v.strides == (-8,) and np.array_equal(np.asarray(v.to_host()), r)


def test_null_strides_mean_c_order():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    v = devbuf.from_dlpack(Producer(a, strides=None))
    assert v.strides == (3, 1) and np.array_equal(np.asarray(v), a)


def test_bool_and_vector_lanes():
    a = np.arange(8, dtype=np.float32)
    v = devbuf.from_dlpack(Producer(a, dtype=(2, 32, 4), shape=(2,), strides=(1,)))
    assert v.format == "4f" and v.itemsize == 16 and v.shape == (2,)


# ---- array interface and CUDA Array Interface producers ----------------------------------

class _ArrayInterface:
    def __init__(self, arr, **extra):
        self.arr = arr
        self.__array_interface__ = dict(arr.__array_interface__, **extra)


def test_array_interface_import():
    a = np.arange(12, dtype=np.uint16).reshape(3, 4)[:, 1:]
    p = _ArrayInterface(a)
    v = devbuf.view(p)
    assert v.imported.kind == "array_interface" and v.obj is p
    assert v.shape == a.shape and v.strides == a.strides
    assert np.array_equal(np.asarray(v), a)
    with pytest.raises(BufferError, match="byte order"):
        devbuf.view(_ArrayInterface(a.astype(">u2")))


def test_array_interface_export():
    b = devbuf.from_host(np.arange(4, dtype=np.int16))
    ai = b.__array_interface__
    assert ai["typestr"] == "<i2" and ai["shape"] == (4,) and ai["data"] == (b.ptr, False)
    assert np.array_equal(np.array(_Holder(ai, b)), np.arange(4, dtype=np.int16))
    assert not hasattr(b, "__cuda_array_interface__")


class _Holder:
    def __init__(self, ai, owner):
        self.__array_interface__ = ai
        self.owner = owner


def test_array_interface_absent_for_device_memory(sim):
    s = devbuf.from_host(np.arange(4.0), device=sim)
    assert not hasattr(s, "__array_interface__")
    assert not hasattr(s, "__cuda_array_interface__")


class _CAI:
    def __init__(self, ptr, shape, typestr="<f4", stream=None, strides=None):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(ptr, False),
                                             version=3, strides=strides, stream=stream)


def _cuda_identifier_known():
    return any("devbuf.cuda" in p.identifiers for p in devbuf.plugins())


@pytest.mark.skipif(not _cuda_identifier_known(), reason="devbuf.cuda plugin not built")
def test_cai_import_describes_without_touching():
    p = _CAI(0x10000, (4, 2), strides=(16, 4))
    v = devbuf.view(p)
    assert v.is_device and v.identifier == "devbuf.cuda"
    assert v.ptr == 0x10000 and v.shape == (4, 2) and v.strides == (16, 4)
    assert v.imported.kind == "cuda_array_interface" and v.obj is p
    # The host may not read CUDA memory: BufferError, or without a GPU the
    # plugin's reason (libcuda.so.1 missing) as soon as the device is needed.
    with pytest.raises((BufferError, devbuf.Error)):
        memoryview(v)
    with pytest.raises(BufferError, match="stream 0"):
        devbuf.view(_CAI(0x10000, (4,), stream=0))
    try:
        devbuf.device("devbuf.cuda:0")
    except devbuf.Error:
        # No GPU: a stream cannot be honoured, and says so.
        with pytest.raises(devbuf.Error, match="stream"):
            devbuf.view(_CAI(0x10000, (4,), stream=7))


def test_plain_objects_still_refused():
    with pytest.raises(TypeError):
        devbuf.view(object())
    with pytest.raises(TypeError, match="__dlpack__"):
        devbuf.from_dlpack(object())


@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_nothing_leaks_over_many_exchanges(sim):
    import sys
    a = np.arange(16, dtype=np.float32)
    b = devbuf.from_host(a)
    s = devbuf.from_host(a, device=sim)
    gc.collect()
    ref_a, ref_b = sys.getrefcount(a), sys.getrefcount(b)
    stats0 = devbuf.plugin_stats("sim")
    live0 = live_tensors()
    for _ in range(200):
        devbuf.from_dlpack(a).release()
        np.from_dlpack(b)
        b.__dlpack__(max_version=(1, 3))
        devbuf.from_dlpack(b)
        devbuf.from_dlpack(s)
        if NUMPY_21:
            np.from_dlpack(s, device="cpu")
        devbuf.from_dlpack(Producer(a, legacy_only=True))
        devbuf._devbuf._exchange_import_bench(b, 3)
    gc.collect()
    assert sys.getrefcount(a) == ref_a and sys.getrefcount(b) == ref_b
    assert b.exports == 0 and s.exports == 0
    stats1 = devbuf.plugin_stats("sim")
    assert stats1["live_allocations"] == stats0["live_allocations"]
    assert stats1["live_events"] == stats0["live_events"]
    assert live_tensors() == live0  # every hand-made tensor was deleted


@needs_numpy_21
def test_opencl_handles_through_dlpack():
    try:
        d = devbuf.device("devbuf.opencl:0")
    except devbuf.Error as e:
        pytest.skip(f"devbuf.opencl is not available: {e}")
    a = np.arange(6, dtype=np.float32)
    b = devbuf.from_host(a, device=d)
    assert b.__dlpack_device__() == (4, 0)  # kDLOpenCL
    v = devbuf.from_dlpack(b)
    assert v.identifier == "devbuf.opencl" and v.ptr == b.ptr  # the cl_mem handle itself
    assert np.array_equal(np.asarray(v.to_host()), a)
    assert np.array_equal(np.from_dlpack(b, device="cpu"), a)
    # A handle cannot be offset inside a Py_buffer: refused, clearly.
    with pytest.raises(BufferError, match="handle"):
        devbuf.from_dlpack(Producer(a, device=(4, 0), data=b.ptr, byte_offset=8, shape=(4,),
                                    strides=(1,)))


# ---- the device query, cached per CPU-only producer type ---------------------------



def test_device_query_is_cached_for_a_type_seen_only_on_the_cpu():
    Fwd, calls = forwarding_producer_type()
    a = np.arange(6.0)
    for _ in range(3):
        v = devbuf.view(Fwd(a))
        assert v.ptr == a.ctypes.data and not v.is_device
        v.release()
    assert len(calls) == 1  # asked once; the next imports checked the tensor instead
    assert np.array_equal(np.asarray(devbuf.from_dlpack(Fwd(a))), a)
    assert len(calls) == 1


def test_a_cached_cpu_type_caught_on_a_device_is_asked_again(sim):
    Fwd, calls = forwarding_producer_type()
    a = np.arange(4, dtype=np.int32)
    devbuf.view(Fwd(a)).release()
    devbuf.view(Fwd(a)).release()
    assert len(calls) == 1
    b = devbuf.from_host(a, device=sim)
    v = devbuf.view(Fwd(b))  # skipped the query, saw kDLExtDev, imported again the full way
    assert v.is_device and v.identifier == "devbuf.sim" and v.ptr == b.ptr
    assert len(calls) == 2
    v.release()
    gc.collect()
    assert b.exports == 0  # the capsule of the first try was deleted unconsumed
    devbuf.view(Fwd(a)).release()  # once seen off the CPU, always asked
    devbuf.view(Fwd(a)).release()
    assert len(calls) == 4
