"""A 0-d array has no shape and no strides: the Py_buffer devbuf hands out
for ndim 0 carries NULL in both, whatever route the data came by (devbuf's
own buffer, DLPack import, the array interface and the CUDA array interface,
a producer's buffer held by devbuf.view). CPython's debug build asserts
`ndim > 0` whenever strides is non-NULL (_IsCContiguous), so a non-NULL
pointer there aborts python3.X-dbg; the release build only hides it.

The C-level check asks for the buffer through ctypes' PyObject_GetBuffer
and reads the two pointers, on any interpreter."""
import ctypes
import sys

import pytest

import devbuf

np = pytest.importorskip("numpy")


class Py_buffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


# A private handle: ctypes.pythonapi's function objects are shared with
# other test modules, which set their own argtypes on them.
_api = ctypes.PyDLL(None)
_get = _api.PyObject_GetBuffer
_get.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
_get.restype = ctypes.c_int
_release = _api.PyBuffer_Release
_release.argtypes = [ctypes.POINTER(Py_buffer)]
_release.restype = None
PyBUF_FULL_RO, PyBUF_RECORDS_RO, PyBUF_ND = 0x11C, 0x1C, 0x8


def c_level(obj, flags):
    b = Py_buffer()
    if _get(obj, ctypes.byref(b), flags) != 0:
        raise AssertionError(f"PyObject_GetBuffer({type(obj).__name__}, {flags:#x}) failed")
    try:
        return b.ndim, b.shape, b.strides, b.len
    finally:
        _release(ctypes.byref(b))


_SCALAR = np.asarray(1.5)


class _Iface:
    def __init__(self, key):
        setattr(self, key, {"shape": (), "typestr": "<f8", "version": 3,
                            "data": (_SCALAR.ctypes.data, False)})


def _routes():
    return {
        "DeviceBuffer (from_host)": lambda: devbuf.from_host(np.asarray(2.5)),
        "DLPack import (from_dlpack)": lambda: devbuf.from_dlpack(np.asarray(1.5)),
        "DLPack import of a DeviceBuffer": lambda: devbuf.from_dlpack(devbuf.from_host(np.asarray(2.5))),
        "view of a NumPy 0-d buffer": lambda: devbuf.view(np.asarray(1.5)),
        "view of a memoryview": lambda: devbuf.view(memoryview(np.asarray(1.5))),
        "view of a DeviceBuffer": lambda: devbuf.view(devbuf.from_host(np.asarray(2.5))),
        "__array_interface__": lambda: devbuf.view(_Iface("__array_interface__")),
    }


@pytest.mark.parametrize("route", list(_routes()))
@pytest.mark.parametrize("flags", [PyBUF_FULL_RO, PyBUF_RECORDS_RO, PyBUF_ND])
def test_zero_dim_buffer_has_null_shape_and_strides(route, flags):
    obj = _routes()[route]()
    ndim, shape, strides, nbytes = c_level(obj, flags)
    assert ndim == 0, f"{route}: ndim {ndim}"
    assert shape is None and strides is None, (
        f"{route}: a 0-d buffer must have shape=NULL and strides=NULL, got "
        f"shape={shape!r}, strides={strides!r}")
    assert nbytes == 8


@pytest.mark.parametrize("route", list(_routes()))
def test_zero_dim_python_level(route):
    obj = _routes()[route]()
    m = memoryview(obj)
    assert m.ndim == 0 and m.shape == () and m.strides == ()
    assert m.c_contiguous and m.f_contiguous and m.contiguous
    v = devbuf.view(obj)
    # The properties that ask CPython about contiguity (its assertions on a
    # debug build): the repro was from_dlpack(np.asarray(1.5)).c_contiguous.
    assert v.c_contiguous
    assert v.shape == () and v.strides == ()
    if hasattr(obj, "c_contiguous"):
        assert obj.c_contiguous


def test_cuda_array_interface_zero_dim_is_refused_or_null():
    # The CUDA array interface names device memory; devbuf.view either refuses
    # a host address there or holds it with no shape and no strides.
    try:
        v = devbuf.view(_Iface("__cuda_array_interface__"))
    except (BufferError, ValueError, TypeError, devbuf.Error) as e:
        assert str(e), "a refusal says why"
        return
    assert v.ndim == 0 and v.shape == () and v.strides == ()
    assert v.c_contiguous


def test_zero_d_dlpack_import_on_this_interpreter():
    # On a debug interpreter this aborted the process before the fix.
    assert devbuf.from_dlpack(np.asarray(1.5)).c_contiguous
    assert sys.getrefcount(_SCALAR) >= 2
