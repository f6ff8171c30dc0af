"""What the kit reads through ctypes: a buffer request exactly as a C consumer
makes it (every field of the Py_buffer, NULL kept apart from empty), and the
Arrow C (device) data interface structs behind a PyCapsule.

Nothing here needs _testbuffer: the kit runs on any CPython 3.9+.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_ssize_t,
                    c_void_p, py_object)
from typing import (TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Tuple, Type, TypeVar,
                    cast)

if TYPE_CHECKING:  # typeshed's names for ctypes' internal types
    from ctypes import Array, _Pointer

    from _ctypes import CFuncPtr, _CArgObject, _CData

_S = TypeVar("_S", bound=Structure)

# Request flags (Include/pybuffer.h; stable since Python 3.0).
PyBUF_SIMPLE = 0
PyBUF_WRITABLE = 0x1
PyBUF_FORMAT = 0x4
PyBUF_ND = 0x8
PyBUF_STRIDES = 0x10 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x20 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x40 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x80 | PyBUF_STRIDES
PyBUF_INDIRECT = 0x100 | PyBUF_STRIDES
PyBUF_CONTIG = PyBUF_ND | PyBUF_WRITABLE
PyBUF_CONTIG_RO = PyBUF_ND
PyBUF_STRIDED = PyBUF_STRIDES | PyBUF_WRITABLE
PyBUF_STRIDED_RO = PyBUF_STRIDES
PyBUF_RECORDS = PyBUF_STRIDES | PyBUF_WRITABLE | PyBUF_FORMAT
PyBUF_RECORDS_RO = PyBUF_STRIDES | PyBUF_FORMAT
PyBUF_FULL = PyBUF_INDIRECT | PyBUF_WRITABLE | PyBUF_FORMAT
PyBUF_FULL_RO = PyBUF_INDIRECT | PyBUF_FORMAT
# The draft device extension's request flag (devbuf_buffer.h): the exporter
# may answer device memory, naming it in the fields after the Py_buffer.
PyBUF_DEVICE = 0x1000000

# The requests CPython's Lib/test/test_buffer.py makes of every exporter
# (its `requests` tuple, crossed with its `real_flags`).
TEST_BUFFER_REQUESTS: Tuple[int, ...] = (
    PyBUF_INDIRECT, PyBUF_STRIDES, PyBUF_ND, PyBUF_SIMPLE, PyBUF_C_CONTIGUOUS,
    PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS, PyBUF_FULL, PyBUF_FULL_RO, PyBUF_RECORDS,
    PyBUF_RECORDS_RO, PyBUF_STRIDED, PyBUF_STRIDED_RO, PyBUF_CONTIG, PyBUF_CONTIG_RO,
)
TEST_BUFFER_REAL_FLAGS: Tuple[int, ...] = (0, PyBUF_WRITABLE, PyBUF_FORMAT,
                                           PyBUF_WRITABLE | PyBUF_FORMAT)
ALL_REQUESTS: Tuple[int, ...] = tuple(sorted({r | b for r in TEST_BUFFER_REQUESTS
                                              for b in TEST_BUFFER_REAL_FLAGS}))

FLAG_NAMES = (("WRITABLE", 0x1), ("FORMAT", 0x4), ("ND", 0x8), ("STRIDES", 0x10),
              ("C_CONTIGUOUS", 0x20), ("F_CONTIGUOUS", 0x40), ("ANY_CONTIGUOUS", 0x80),
              ("INDIRECT", 0x100))


def request_name(flags: int) -> str:
    names = [n for n, bit in FLAG_NAMES if flags & bit]
    return "PyBUF_" + "|PyBUF_".join(names) if names else "PyBUF_SIMPLE"


class Py_buffer(Structure):
    buf: Optional[int]
    obj: Optional[int]
    len: int
    itemsize: int
    readonly: int
    ndim: int
    format: Optional[bytes]
    shape: _Pointer[c_ssize_t]
    strides: _Pointer[c_ssize_t]
    suboffsets: _Pointer[c_ssize_t]
    internal: Optional[int]
    _fields_ = [("buf", c_void_p), ("obj", c_void_p), ("len", c_ssize_t),
                ("itemsize", c_ssize_t), ("readonly", c_int), ("ndim", c_int),
                ("format", c_char_p), ("shape", POINTER(c_ssize_t)),
                ("strides", POINTER(c_ssize_t)), ("suboffsets", POINTER(c_ssize_t)),
                ("internal", c_void_p)]


class _Padded(Structure):
    """A Py_buffer with room behind it: an exporter that writes the device
    extension's fields unasked (dx.no_unasked_fields) must not corrupt the kit."""
    view: Py_buffer
    pad: Array[ctypes.c_char]
    _fields_ = [("view", Py_buffer), ("pad", ctypes.c_char * 64)]


class _ExtFields(Structure):
    """The device extension's fields right after the Py_buffer (DevbufPy_buffer_ext)."""
    flags: int
    ext_flags: int
    device: Optional[int]
    device_info: Optional[int]
    _fields_ = [("flags", c_int), ("ext_flags", c_int), ("device", c_void_p),
                ("device_info", c_void_p)]


_EXT_OFFSET = ctypes.sizeof(Py_buffer)  # where _Padded.pad starts


class _Api:
    """Private prototypes of the C API calls the kit makes. Never the shared
    ctypes.pythonapi attributes: another module (a test suite) setting their
    argtypes to its own Py_buffer class would break every call here."""

    # The prototypes the kit sets (here and in _dlpack), as the kit calls them.
    PyObject_GetBuffer: Callable[[object, _CArgObject, int], int]
    PyBuffer_Release: Callable[[_CArgObject], None]
    PyCapsule_GetName: Callable[[object], Optional[bytes]]
    PyCapsule_GetPointer: Callable[[object, Optional[bytes]], Optional[int]]
    PyCapsule_New: Callable[[int, Array[ctypes.c_char], CFuncPtr], object]
    PyCapsule_IsValid: Callable[[object, Optional[bytes]], int]
    PyCapsule_SetName: Callable[[object, Array[ctypes.c_char]], int]
    Py_DecRef: Callable[[c_void_p], None]

    @staticmethod
    def make(name: str, restype: Optional[Type[_CData]], *argtypes: Type[_CData]) -> CFuncPtr:
        return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_api = _Api()
_api.PyObject_GetBuffer = _Api.make("PyObject_GetBuffer", c_int, py_object, POINTER(Py_buffer),
                                    c_int)
_api.PyBuffer_Release = _Api.make("PyBuffer_Release", None, POINTER(Py_buffer))
_api.PyCapsule_GetName = _Api.make("PyCapsule_GetName", c_char_p, py_object)
_api.PyCapsule_GetPointer = _Api.make("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)


class Answer:
    """A buffer answer, copied out of the Py_buffer before it is released.
    `shape`/`strides`/`suboffsets`/`format` are None where the exporter left
    NULL. `data` is the bytes the answer describes, gathered in C order
    (None when the answer was not readable as a host array)."""

    __slots__ = ("flags", "buf", "obj", "len", "itemsize", "readonly", "ndim", "format",
                 "shape", "strides", "suboffsets", "data", "ext_flags", "device", "device_info")
    flags: int
    # the device extension's fields, read only for a PyBUF_DEVICE request
    # (else None): the flags the exporter honoured, its identifier, device_info
    ext_flags: Optional[int]
    device: Optional[bytes]
    device_info: Optional[int]
    buf: int
    obj: Optional[int]
    len: int
    itemsize: int
    readonly: int
    ndim: int
    format: Optional[bytes]
    shape: Optional[Tuple[int, ...]]
    strides: Optional[Tuple[int, ...]]
    suboffsets: Optional[Tuple[int, ...]]
    data: Optional[bytes]

    def as_dict(self) -> Dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__ if k not in ("data", "buf", "obj")}
        d["format"] = self.format.decode("latin-1") if self.format is not None else None
        d["device"] = self.device.decode("latin-1") if self.device is not None else None
        return d


def _gather(buf: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bytes:
    """The items an answer describes, in C order, read from the host."""
    if not shape:
        return ctypes.string_at(buf, itemsize)
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return b""
    out = bytearray()
    idx = [0] * len(shape)
    for _ in range(n):
        off = sum(i * s for i, s in zip(idx, strides))
        out += ctypes.string_at(buf + off, itemsize)
        for ax in range(len(shape) - 1, -1, -1):
            idx[ax] += 1
            if idx[ax] < shape[ax]:
                break
            idx[ax] = 0
    return bytes(out)


def c_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    out, st = [], itemsize
    for n in reversed(shape):
        out.append(st)
        st *= n
    return tuple(reversed(out))


def f_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    out, st = [], itemsize
    for n in shape:
        out.append(st)
        st *= n
    return tuple(out)


def is_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int,
                  order: str) -> bool:
    """CPython's PyBuffer_IsContiguous for a strided answer: size-1 and
    empty dimensions never break contiguity."""
    if 0 in shape:
        return True
    want = c_strides(shape, itemsize) if order == "C" else f_strides(shape, itemsize)
    return all(n == 1 or s == w for n, s, w in zip(shape, strides, want))


def getbuffer(obj: object, flags: int, gather: bool = True) -> Answer:
    """Make request `flags` of obj as a C consumer would; return an Answer, or
    raise what the exporter raised. The export is released before return."""
    padded = _Padded()
    view = padded.view
    _api.PyObject_GetBuffer(obj, ctypes.byref(view), flags)  # raises on -1
    try:
        a = Answer()
        a.flags = flags
        a.buf, a.obj, a.len, a.itemsize = view.buf or 0, view.obj, view.len, view.itemsize
        a.readonly, a.ndim, a.format = view.readonly, view.ndim, view.format
        nd = view.ndim
        # ndim 0 asked with PyBUF_ND: NULL and an empty array say the same
        zero_d = nd == 0 and flags & PyBUF_ND
        a.shape = tuple(view.shape[i] for i in range(nd)) if view.shape or zero_d else None
        a.strides = tuple(view.strides[i] for i in range(nd)) if view.strides or zero_d \
            else None
        a.suboffsets = tuple(view.suboffsets[i] for i in range(nd)) if view.suboffsets else None
        a.data = None
        a.ext_flags = a.device = a.device_info = None
        if flags & PyBUF_DEVICE:
            ext = _ExtFields.from_buffer(padded, _EXT_OFFSET)
            a.ext_flags, a.device_info = ext.flags, ext.device_info
            a.device = ctypes.string_at(ext.device) if ext.device else None
        if gather and a.buf and a.suboffsets is None:
            if a.shape is None:
                a.data = ctypes.string_at(a.buf, a.len) if a.len > 0 else b""
            elif a.itemsize > 0:
                st = a.strides if a.strides is not None else c_strides(a.shape, a.itemsize)
                a.data = _gather(a.buf, a.shape, st, a.itemsize)
        return a
    finally:
        _api.PyBuffer_Release(ctypes.byref(view))


class Held:
    """An export kept open (for export-count checks); release() once."""

    def __init__(self, obj: object, flags: int) -> None:
        self._padded = _Padded()
        self.view = self._padded.view
        _api.PyObject_GetBuffer(obj, ctypes.byref(self.view), flags)
        self.open = True

    def release(self) -> None:
        if self.open:
            self.open = False
            _api.PyBuffer_Release(ctypes.byref(self.view))


# ---- the Arrow C data interface and C device data interface -------------------------
class ArrowSchema(Structure):
    format: Optional[bytes]
    name: Optional[bytes]
    metadata: Optional[bytes]
    flags: int
    n_children: int
    children: _Pointer[_Pointer[ArrowSchema]]
    dictionary: _Pointer[ArrowSchema]
    release: Optional[int]
    private_data: Optional[int]


ArrowSchema._fields_ = [
    ("format", c_char_p), ("name", c_char_p), ("metadata", c_char_p), ("flags", c_int64),
    ("n_children", c_int64), ("children", POINTER(POINTER(ArrowSchema))),
    ("dictionary", POINTER(ArrowSchema)), ("release", c_void_p), ("private_data", c_void_p)]


class ArrowArray(Structure):
    length: int
    null_count: int
    offset: int
    n_buffers: int
    n_children: int
    buffers: _Pointer[c_void_p]
    children: _Pointer[_Pointer[ArrowArray]]
    dictionary: _Pointer[ArrowArray]
    release: Optional[int]
    private_data: Optional[int]


ArrowArray._fields_ = [
    ("length", c_int64), ("null_count", c_int64), ("offset", c_int64), ("n_buffers", c_int64),
    ("n_children", c_int64), ("buffers", POINTER(c_void_p)),
    ("children", POINTER(POINTER(ArrowArray))), ("dictionary", POINTER(ArrowArray)),
    ("release", c_void_p), ("private_data", c_void_p)]


class ArrowDeviceArray(Structure):
    array: ArrowArray
    device_id: int
    device_type: int
    sync_event: Optional[int]
    reserved: Array[c_int64]
    _fields_ = [("array", ArrowArray), ("device_id", c_int64), ("device_type", c_int32),
                ("sync_event", c_void_p), ("reserved", c_int64 * 3)]


RELEASE_SCHEMA = CFUNCTYPE(None, POINTER(ArrowSchema))
RELEASE_ARRAY = CFUNCTYPE(None, POINTER(ArrowArray))
ARROW_DEVICE_CPU = 1

# Arrow format string -> NumPy dtype string, for the primitive types the kit
# value-checks (the Arrow C data interface's table).
ARROW_FORMATS: Dict[str, str] = {
    "b": "?", "c": "i1", "C": "u1", "s": "i2", "S": "u2", "i": "i4", "I": "u4", "l": "i8",
    "L": "u8", "e": "f2", "f": "f4", "g": "f8"}


def capsule_name(cap: object) -> Optional[str]:
    name = _api.PyCapsule_GetName(cap)
    return None if name is None else name.decode("latin-1")


def capsule_struct(cap: object, struct: Type[_S]) -> _S:
    name = _api.PyCapsule_GetName(cap)
    addr = _api.PyCapsule_GetPointer(cap, name)
    if not addr:
        raise ValueError(f"capsule {name!r} holds a NULL pointer")
    return struct.from_address(addr)


def release_array(arr: ArrowArray) -> bool:
    """Call an ArrowArray's release callback, as a consumer that moved it out
    does; returns whether it marked itself released (release = NULL). The
    caller checked that release is not NULL."""
    RELEASE_ARRAY(cast(int, arr.release))(ctypes.byref(arr))
    return not arr.release


def release_schema(schema: ArrowSchema) -> bool:
    RELEASE_SCHEMA(cast(int, schema.release))(ctypes.byref(schema))
    return not schema.release


# (a literal list: type checkers and stubtest read __all__ statically)
__all__ = [
    "ARROW_DEVICE_CPU", "ARROW_FORMATS", "ArrowArray", "ArrowDeviceArray", "ArrowSchema",
    "PyBUF_ANY_CONTIGUOUS", "PyBUF_CONTIG", "PyBUF_DEVICE", "PyBUF_CONTIG_RO", "PyBUF_C_CONTIGUOUS",
    "PyBUF_FORMAT", "PyBUF_FULL", "PyBUF_FULL_RO", "PyBUF_F_CONTIGUOUS", "PyBUF_INDIRECT",
    "PyBUF_ND", "PyBUF_RECORDS", "PyBUF_RECORDS_RO", "PyBUF_SIMPLE", "PyBUF_STRIDED",
    "PyBUF_STRIDED_RO", "PyBUF_STRIDES", "PyBUF_WRITABLE",
    "ALL_REQUESTS", "TEST_BUFFER_REQUESTS", "Answer", "Held", "Py_buffer", "c_strides",
    "capsule_name", "capsule_struct", "f_strides", "getbuffer", "is_contiguous",
    "release_array", "release_schema", "request_name"]
