"""Third-party DLPack expectations, ported: what NumPy's own DLPack tests
(numpy/_core/tests/test_dlpack.py) and the array API standard's DLPack
checks ask of a producer and a consumer, asked of devbuf in both roles, with
NumPy as the partner. Written for devbuf from the behaviour those suites
check, not copied from them.

Covered: refcounts of capsules and imports, stream/copy/dl_device/max_version
arguments, capsule names and renaming, dtypes (new and legacy producers),
unsupported dtypes and byte orders, non-contiguous, negative and odd strides,
size-1 dimensions, 0-d and empty arrays, up to 64 dimensions, read-only and
writable, copies, devices, a destructor running during an exception, and
NumPy scalars (through the buffer protocol: they have no __dlpack__)."""
import gc
import sys

import numpy as np
import pytest

import devbuf
from dlpack_ctypes import capsule_name

KDLCPU = 1

ALL_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]


class LegacyOnly:
    """A producer with the pre-2023 signature: __dlpack__(stream=None) only,
    answering with unversioned capsules."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, stream=None):
        return self.inner.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def producers(a):
    """devbuf producers of the same data: a copy, a view, a legacy wrapper."""
    b = devbuf.from_host(a)
    return [b, devbuf.view(b), LegacyOnly(b)]


# ---- reference counts ------------------------------------------------------------

@pytest.mark.parametrize("max_version", [(0, 0), None, (1, 0), (100, 3)])
def test_capsule_holds_one_reference_until_dropped(max_version):
    b = devbuf.from_host(np.arange(5))
    cap = b.__dlpack__(max_version=max_version)
    held = sys.getrefcount(b)
    assert b.exports == 1
    del cap
    gc.collect()
    assert held - sys.getrefcount(b) == 1 and b.exports == 0


@pytest.mark.parametrize("legacy", [False, True])
def test_import_keeps_the_producer_alive_then_lets_go(legacy):
    a = np.arange(5)
    src = LegacyOnly(a) if legacy else a
    before = sys.getrefcount(src)
    v = devbuf.from_dlpack(src)
    assert sys.getrefcount(src) > before  # the import keeps its producer alive
    v.release()
    del v
    gc.collect()
    assert sys.getrefcount(src) == before  # and lets go of every reference


# ---- keyword arguments -----------------------------------------------------------

def test_stream_on_a_cpu_buffer():
    b = devbuf.from_host(np.arange(5))
    b.__dlpack__(stream=None)
    b.__dlpack__(stream=-1)  # "no synchronisation": allowed everywhere
    with pytest.raises(ValueError, match="stream"):
        b.__dlpack__(stream=1)


def test_copy_argument_is_parsed_as_a_truth_value():
    b = devbuf.from_host(np.arange(5))
    for c in (True, None, False):
        b.__dlpack__(max_version=(1, 0), copy=c)
    with pytest.raises(ValueError):
        b.__dlpack__(copy=np.array([1, 2, 3]))  # ambiguous truth value


def test_capsule_names_follow_max_version():
    b = devbuf.from_host(np.arange(3))
    assert capsule_name(b.__dlpack__()) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(b.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(b.__dlpack__(max_version=(2, 0))) == "dltensor_versioned"


def test_a_capsule_is_consumed_once_and_renamed():
    b = devbuf.from_host(np.arange(3))
    cap = b.__dlpack__(max_version=(1, 0))

    class Once:
        def __dlpack__(self, **kw):
            return cap

        def __dlpack_device__(self):
            return (KDLCPU, 0)

    v = devbuf.from_dlpack(Once())
    assert capsule_name(cap) == "used_dltensor_versioned"
    with pytest.raises(BufferError, match="already consumed"):
        devbuf.from_dlpack(Once())
    assert v.imported.dlpack_version[0] == 1


def test_version_reported_is_at_most_the_consumers():
    b = devbuf.from_host(np.arange(3))
    v = devbuf.from_dlpack(b)
    assert v.imported.kind == "dlpack" and v.imported.dlpack_version[0] == 1


# ---- dtypes ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtype_passthrough_devbuf_to_numpy(dtype):
    a = (np.arange(5) % 3).astype(dtype)
    for p in producers(a):
        y = np.from_dlpack(p)
        assert y.dtype == a.dtype and np.array_equal(y, a)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtype_passthrough_numpy_to_devbuf(dtype):
    a = (np.arange(5) % 3).astype(dtype)
    for src in (a, LegacyOnly(a)):
        v = devbuf.from_dlpack(src)
        assert np.asarray(v).dtype == a.dtype and np.array_equal(np.asarray(v), a)


def test_unsupported_dtype_is_a_buffer_error():
    with pytest.raises(BufferError):
        devbuf.from_dlpack(np.asarray(np.datetime64("2021-05-27")))
    # a devbuf custom dtype with no DLPack code
    b = devbuf.empty(2, format="[devbuf$datetime64(ns)]", device="cpu")
    with pytest.raises(BufferError):
        b.__dlpack__(max_version=(1, 0))


def test_byte_swapped_data_is_a_buffer_error():
    swapped = np.dtype("=i8").newbyteorder()
    b = devbuf.from_host(np.arange(5, dtype=swapped))
    with pytest.raises(BufferError, match="native byte order"):
        np.from_dlpack(b)
    with pytest.raises(BufferError):
        devbuf.from_dlpack(np.arange(5, dtype=swapped))


def test_strides_not_a_multiple_of_the_itemsize():
    z = np.zeros(5, dtype=[("i", np.int32), ("c", np.int8)])["i"]
    with pytest.raises(BufferError, match="multiple of the itemsize"):
        np.from_dlpack(devbuf.view(z))
    with pytest.raises(BufferError):
        devbuf.from_dlpack(z)


# ---- shapes and strides ---------------------------------------------------------------

def _slices():
    x = np.arange(25).reshape(5, 5)
    return [x[0], x[:, 0], x[1, :], x[1], np.diagonal(x).copy(), x[::-1], x[:, ::-2],
            x[::2, 1::2], x.T]


@pytest.mark.parametrize("i", range(9))
def test_non_contiguous_and_negative_strides_both_ways(i):
    y = _slices()[i]
    assert np.array_equal(np.from_dlpack(devbuf.view(y)), y)
    v = devbuf.from_dlpack(y)
    assert v.shape == y.shape and v.strides == y.strides
    assert np.array_equal(np.asarray(v), y)


def test_size_one_dimensions_with_odd_strides():
    x = np.ndarray(dtype="f8", shape=(10, 5, 1), strides=(8, 80, 4),
                   buffer=np.ones(1000, dtype=np.uint8), order="F")
    assert np.array_equal(np.from_dlpack(devbuf.view(x)), x)
    assert np.array_equal(np.asarray(devbuf.from_dlpack(x)), x)


@pytest.mark.parametrize("ndim", [0, 1, 2, 17, 32, 33, 64])
def test_many_dimensions(ndim):
    x = np.zeros((1,) * ndim)
    assert np.from_dlpack(devbuf.view(x)).shape == x.shape
    assert devbuf.from_dlpack(x).shape == x.shape


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 4, 2)])
def test_zero_d_and_empty_both_ways(shape):
    a = np.ones(shape, dtype=np.float32)
    for p in producers(a):
        y = np.from_dlpack(p)
        assert y.shape == a.shape and np.array_equal(y, a)
    v = devbuf.from_dlpack(a)
    assert v.shape == a.shape
    assert np.array_equal(np.asarray(v), a)


def test_numpy_scalars_through_the_buffer_protocol():
    for s in (np.float32(3.5), np.int8(-2), np.bool_(True), np.complex64(1j)):
        v = devbuf.view(s)
        assert v.shape == () and v.readonly
        y = np.from_dlpack(v)
        assert y.shape == () and y == s and not y.flags.writeable


# ---- read-only, writable, copies --------------------------------------------------------

def test_read_only_needs_a_versioned_capsule():
    b = devbuf.from_host(np.arange(5), readonly=True)
    with pytest.raises(BufferError, match="max_version"):
        b.__dlpack__()
    y = np.from_dlpack(b)
    assert not y.flags.writeable


def test_writable_follows_the_capsule_kind():
    a = np.arange(5)
    b = devbuf.from_host(a)
    assert np.from_dlpack(b).flags.writeable  # versioned: the flag is honoured
    assert not np.from_dlpack(LegacyOnly(b)).flags.writeable  # legacy: read-only
    assert not devbuf.from_dlpack(a).readonly
    assert devbuf.from_dlpack(LegacyOnly(a)).readonly


def test_copy_keyword_of_from_dlpack():
    x = np.arange(5)
    assert devbuf.from_dlpack(x).ptr == x.ctypes.data
    assert devbuf.from_dlpack(x, copy=False).ptr == x.ctypes.data
    c = devbuf.from_dlpack(x, copy=True)
    assert c.ptr != x.ctypes.data and np.array_equal(np.asarray(c), x)
    b = devbuf.from_host(x)
    assert not np.may_share_memory(np.from_dlpack(b, copy=True), np.from_dlpack(b))
    assert np.from_dlpack(b, copy=False).ctypes.data == b.ptr


# ---- devices -----------------------------------------------------------------------

def test_devices():
    b = devbuf.from_host(np.arange(5))
    assert b.__dlpack_device__() == (KDLCPU, 0)
    v = devbuf.from_dlpack(b)
    assert v.__dlpack_device__() == (KDLCPU, 0)
    assert devbuf.view(np.arange(5)[::2]).__dlpack_device__() == (KDLCPU, 0)
    b.__dlpack__(max_version=(1, 0), dl_device=(KDLCPU, 0))
    devbuf.from_dlpack(b, device="cpu")
    devbuf.from_dlpack(b, device=None)
    with pytest.raises(BufferError):
        b.__dlpack__(max_version=(1, 0), dl_device=(10, 0))
    with pytest.raises(devbuf.Error):
        devbuf.from_dlpack(b, device="gpu")  # not a device identifier


# ---- a destructor running while an exception propagates ---------------------------------

def _make_capsule_then_raise(max_version):
    b = devbuf.from_host(np.arange(5))
    _ = b.__dlpack__(max_version=max_version)
    raise RuntimeError("on purpose")


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_capsule_destructor_during_an_exception(max_version):
    with pytest.raises(RuntimeError, match="on purpose"):
        _make_capsule_then_raise(max_version)
