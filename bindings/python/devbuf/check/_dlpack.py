"""Hand-made DLPack producers, and a reader of DLPack capsules, with ctypes.

The conformance kit (devbuf.check) reads what a producer put in its capsule
with `read_capsule`, and feeds consumers the `Producer` below as an
adversarial producer; the interop tests use it too (tests/python/dlpack_ctypes.py).

`Producer` hands out capsules of any shape, good or malformed: a legacy-only
`__dlpack__`, a wrong capsule name, a capsule that was already consumed, a
huge ndim, NULL shape, overflowing strides, another major version, an
unsupported device or dtype. It counts how often each tensor's deleter runs,
so tests can check "exactly once".
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64,
                    c_uint8, c_uint16, c_uint32, c_uint64, c_void_p, py_object)
from typing import (TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence, Tuple, TypedDict,
                    Union, cast)

from ._capi import _Api

if TYPE_CHECKING:  # typeshed's names for ctypes' internal types
    from ctypes import Array, _Pointer

    import numpy.typing as npt
    from _ctypes import CFuncPtr


class DLDevice(Structure):
    device_type: int
    device_id: int
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    code: int
    bits: int
    lanes: int
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    data: Optional[int]
    device: DLDevice
    ndim: int
    dtype: DLDataType
    shape: _Pointer[c_int64]
    strides: _Pointer[c_int64]
    byte_offset: int
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    dl_tensor: DLTensor
    manager_ctx: Optional[int]
    deleter: CFuncPtr
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(Structure):
    major: int
    minor: int
    manager_ctx: Optional[int]
    deleter: CFuncPtr
    flags: int
    dl_tensor: DLTensor
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("manager_ctx", c_void_p),
                ("deleter", DELETER), ("flags", c_uint64), ("dl_tensor", DLTensor)]


assert ctypes.sizeof(DLTensor) == 48 and DLManagedTensorVersioned.dl_tensor.offset == 32

CAPSULE_DESTRUCTOR = CFUNCTYPE(None, py_object)
_api = _Api()  # private prototypes (see _capi._Api), never ctypes.pythonapi's shared ones
_api.PyCapsule_New = _Api.make("PyCapsule_New", py_object, c_void_p, c_char_p,
                               CAPSULE_DESTRUCTOR)
_api.PyCapsule_IsValid = _Api.make("PyCapsule_IsValid", c_int, py_object, c_char_p)
_api.PyCapsule_GetPointer = _Api.make("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)
_api.PyCapsule_GetName = _Api.make("PyCapsule_GetName", c_char_p, py_object)
_api.PyCapsule_SetName = _Api.make("PyCapsule_SetName", c_int, py_object, c_char_p)

# DLPack 1.x flag bits (dlpack.h) and the device types the kit names.
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2
KDLCPU, KDLCUDA, KDLCUDAHOST, KDLEXTDEV = 1, 2, 3, 12

# Static names: the capsule keeps only the pointer.
NAMES: Dict[bytes, Array[ctypes.c_char]] = {
    n: ctypes.create_string_buffer(n) for n in
    (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned",
     b"not_a_tensor")}

# address -> (struct, arrays, producer): kept until the deleter runs
_live: Dict[int, Tuple[Union[DLManagedTensor, DLManagedTensorVersioned],
                       Tuple[Array[c_int64], Optional[Array[c_int64]], Optional[npt.NDArray[Any]]],
                       Producer]] = {}


def _delete(addr: int) -> None:
    entry = _live.pop(addr, None)
    if entry is not None:
        entry[2].deleted += 1


_deleter = DELETER(_delete)


# A capsule destructor cannot be written in Python (ctypes would revive the
# dying capsule), so these capsules have none: the producer keeps every
# capsule it made, and settle() does what the destructor would do: call the
# deleter of each capsule that was never consumed.
_NO_DESTRUCTOR = ctypes.cast(0, CAPSULE_DESTRUCTOR)  # NULL


def live_tensors() -> int:
    return len(_live)


class Producer:
    """A DLPack producer over a NumPy array (or raw fields).

    legacy_only: __dlpack__ accepts only `stream` (pre-2023 signature) and
    returns "dltensor" capsules. Every field of the tensor can be overridden
    to make it malformed.
    """

    def __init__(self, array: Optional[npt.NDArray[Any]] = None, *, legacy_only: bool = False,
                 versioned: Optional[bool] = None, name: Optional[bytes] = None, major: int = 1,
                 minor: int = 3, flags: int = 0, device: Sequence[int] = (1, 0),
                 dtype: Optional[Tuple[int, int, int]] = None, ndim: Optional[int] = None,
                 shape: Optional[Sequence[int]] = None,
                 strides: Union[Literal["auto"], Sequence[int], None] = "auto",
                 null_shape: bool = False, byte_offset: int = 0, data: Optional[int] = None,
                 reuse_capsule: bool = False) -> None:
        self.array = array
        self.legacy_only = legacy_only
        self.versioned = versioned
        self.name = name
        self.major, self.minor, self.flags = major, minor, flags
        self.device = device
        self.dtype = dtype
        self.ndim = ndim
        self.shape = shape
        self.strides = strides
        self.null_shape = null_shape
        self.byte_offset = byte_offset
        self.data = data
        self.reuse_capsule = reuse_capsule
        self._capsule: Optional[object] = None
        self.deleted = 0
        self.made = 0
        self.calls: List[Dict[str, object]] = []  # the arguments of each __dlpack__ call
        self.capsules: List[Tuple[object, int]] = []  # (capsule, tensor address)

    def _fields(self) -> Tuple[int, int, int, List[int], Optional[Sequence[int]], int]:
        a = self.array
        if self.dtype is not None:
            code, bits, lanes = self.dtype
        else:
            if a is None:
                raise ValueError("Producer: give an array, or dtype=(code, bits, lanes) and the "
                                 "other fields")
            kind = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}[a.dtype.kind]
            code, bits, lanes = kind, a.dtype.itemsize * 8, 1
        shape = list(self.shape if self.shape is not None else (a.shape if a is not None else ()))
        strides: Optional[Sequence[int]]
        if self.strides == "auto":
            strides = ([s // a.itemsize for s in a.strides] if a is not None else None)
        else:
            strides = self.strides
        data = self.data if self.data is not None else (a.ctypes.data if a is not None else 0)
        return code, bits, lanes, shape, strides, data

    def make(self, versioned: bool) -> object:
        code, bits, lanes, shape, strides, data = self._fields()
        nd = self.ndim if self.ndim is not None else len(shape)
        shape_arr = (c_int64 * max(len(shape), 1))(*shape)
        strides_arr = (c_int64 * max(len(strides), 1))(*strides) if strides is not None else None
        t = DLTensor()
        t.data = data
        t.device = DLDevice(*self.device)
        t.ndim = nd
        t.dtype = DLDataType(code, bits, lanes)
        # (a new DLTensor's shape and strides are NULL)
        if not self.null_shape:
            t.shape = ctypes.cast(shape_arr, POINTER(c_int64))
        if strides_arr is not None:
            t.strides = ctypes.cast(strides_arr, POINTER(c_int64))
        t.byte_offset = self.byte_offset
        m: Union[DLManagedTensor, DLManagedTensorVersioned]
        if versioned:
            mv = m = DLManagedTensorVersioned()
            mv.major, mv.minor, mv.flags = self.major, self.minor, self.flags
        else:
            m = DLManagedTensor()
        m.dl_tensor = t
        m.deleter = _deleter
        addr = ctypes.addressof(m)
        _live[addr] = (m, (shape_arr, strides_arr, self.array), self)
        self.made += 1
        name = self.name or (b"dltensor_versioned" if versioned else b"dltensor")
        cap = _api.PyCapsule_New(addr, NAMES[name], _NO_DESTRUCTOR)
        self.capsules.append((cap, addr))
        return cap

    def pending(self) -> bool:
        """Whether a tensor this producer made is still alive (its deleter not called)."""
        return any(addr in _live for _, addr in self.capsules)

    def settle(self) -> None:
        """Delete what unconsumed capsules still own, as their destructor would."""
        for cap, addr in self.capsules:
            name = _api.PyCapsule_GetName(cap)
            if name in (b"dltensor", b"dltensor_versioned", b"not_a_tensor") and addr in _live:
                _live[addr][0].deleter(addr)
        self.capsules = []
        self._capsule = None

    def __dlpack__(self, stream: object = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> object:
        if self.legacy_only and (max_version is not None or dl_device is not None or
                                 copy is not None):
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        self.calls.append(dict(stream=stream, max_version=max_version, dl_device=dl_device,
                               copy=copy))
        if self.reuse_capsule and self._capsule is not None:
            return self._capsule
        versioned = self.versioned
        if versioned is None:
            versioned = (not self.legacy_only and max_version is not None and max_version[0] >= 1)
        cap = self.make(versioned)
        if self.reuse_capsule:
            self._capsule = cap
        return cap

    def __dlpack_device__(self) -> Tuple[int, ...]:
        return tuple(self.device)


def capsule_name(cap: object) -> str:
    # (a DLPack capsule has a name; a nameless one raises AttributeError here)
    return cast(bytes, _api.PyCapsule_GetName(cap)).decode()


def is_capsule(obj: object) -> bool:
    return type(obj).__name__ == "PyCapsule"


class CapsuleInfo(TypedDict):
    """What read_capsule() finds in a DLPack capsule."""

    name: str
    versioned: bool
    version: Optional[Tuple[int, int]]  # (major, minor) of a versioned capsule
    flags: int
    device: Tuple[int, int]  # (device_type, device_id)
    ndim: int
    dtype: Tuple[int, int, int]  # (code, bits, lanes)
    shape: Tuple[int, ...]
    null_shape: bool
    strides: Optional[Tuple[int, ...]]  # None when NULL
    byte_offset: int
    data: int
    has_deleter: bool
    tensor: DLTensor
    managed: Union[DLManagedTensor, DLManagedTensorVersioned]
    address: int


def read_capsule(cap: object, any_name: bool = False,
                 versioned: Optional[bool] = None) -> CapsuleInfo:
    """Everything a DLPack capsule holds, read without consuming it: a dict
    with name, versioned, version, flags, device, ndim, dtype, shape,
    strides (None when NULL), byte_offset, data, has_deleter, tensor (the
    DLTensor), managed (the managed struct) and address. Raises ValueError
    when the capsule has no DLPack name (unless any_name: the kit's broken
    consumers read used capsules on purpose) or a NULL pointer."""
    # (None, a nameless capsule, is refused, or with any_name fails below as it always did)
    name = cast(bytes, _api.PyCapsule_GetName(cap))
    if name not in (b"dltensor", b"dltensor_versioned") and not any_name:
        raise ValueError(f"capsule named {name!r}, not 'dltensor' or 'dltensor_versioned'")
    if versioned is None:
        versioned = name.endswith(b"_versioned")  # (any_name: used_dltensor_versioned too)
    addr = _api.PyCapsule_GetPointer(cap, name)
    if not addr:
        raise ValueError(f"capsule {name!r} holds a NULL pointer")
    m: Union[DLManagedTensor, DLManagedTensorVersioned]
    version: Optional[Tuple[int, int]]
    if versioned:
        mv = m = DLManagedTensorVersioned.from_address(addr)
        version, flags = (mv.major, mv.minor), mv.flags
    else:
        m = DLManagedTensor.from_address(addr)
        version, flags = None, 0
    t = m.dl_tensor
    nd = t.ndim
    shape = tuple(t.shape[i] for i in range(nd)) if nd > 0 and t.shape else ()
    strides = tuple(t.strides[i] for i in range(nd)) if t.strides else None
    return {
        "name": name.decode(), "versioned": versioned, "version": version, "flags": flags,
        "device": (t.device.device_type, t.device.device_id), "ndim": nd,
        "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes), "shape": shape,
        "null_shape": nd > 0 and not t.shape, "strides": strides,
        "byte_offset": t.byte_offset, "data": t.data or 0,
        "has_deleter": bool(ctypes.cast(m.deleter, c_void_p).value), "tensor": t,
        "managed": m, "address": addr,
    }


def consume(cap: object) -> CapsuleInfo:
    """Do what a consumer does: rename the capsule to used_*, then call the
    deleter once (as the consumer's own object would when it dies)."""
    info = read_capsule(cap)
    used = NAMES[b"used_dltensor_versioned" if info["versioned"] else b"used_dltensor"]
    if _api.PyCapsule_SetName(cap, used) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    if info["has_deleter"]:
        info["managed"].deleter(info["address"])
    return info


class ExchangeAPI(Structure):
    """The DLPack 1.3 C exchange table (DLPackExchangeAPI): its header, then
    its five function pointers, as addresses."""

    major: int
    minor: int
    prev_api: Optional[int]
    managed_tensor_allocator: Optional[int]
    managed_tensor_from_py_object_no_sync: Optional[int]
    managed_tensor_to_py_object_no_sync: Optional[int]
    dltensor_from_py_object_no_sync: Optional[int]
    current_work_stream: Optional[int]
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev_api", c_void_p),
                ("managed_tensor_allocator", c_void_p),
                ("managed_tensor_from_py_object_no_sync", c_void_p),
                ("managed_tensor_to_py_object_no_sync", c_void_p),
                ("dltensor_from_py_object_no_sync", c_void_p),
                ("current_work_stream", c_void_p)]


# int (*)(DLManagedTensorVersioned *tensor, void **out_py_object), called
# holding the GIL; -1 with a Python exception set.
_TO_PY_OBJECT = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
_api.Py_DecRef = _Api.make("Py_DecRef", None, c_void_p)


def exchange_api(t: type) -> ExchangeAPI:
    """type t's DLPack C exchange table (its __dlpack_c_exchange_api__)."""
    cap = getattr(t, "__dlpack_c_exchange_api__")
    addr = _api.PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    if not addr:
        raise ValueError(f"{t.__name__}.__dlpack_c_exchange_api__ holds a NULL pointer")
    return ExchangeAPI.from_address(addr)


def to_py_object(t: type, x: object) -> Any:
    """What a C consumer of type t's exchange table gets from
    managed_tensor_to_py_object_no_sync for x's DLPack tensor (x.__dlpack__
    with max_version (1, 3), consumed here: ownership passes to the table).
    For devbuf.ForeignArray this is the one public way a ForeignArray is
    made (devbuf's imports give a DeviceView, whose .obj is the producer)."""
    cap = getattr(x, "__dlpack__")(max_version=(1, 3))
    info = read_capsule(cap)
    if not info["versioned"]:
        raise ValueError(f"{type(x).__name__}.__dlpack__(max_version=(1, 3)) gave a legacy "
                         "capsule, which the exchange table cannot take (NumPy before 2.1 "
                         "does): pass a producer of versioned tensors, e.g. devbuf.from_host(x)")
    if _api.PyCapsule_SetName(cap, NAMES[b"used_dltensor_versioned"]) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    fn = _TO_PY_OBJECT(cast(int, exchange_api(t).managed_tensor_to_py_object_no_sync))
    out = c_void_p()
    fn(info["address"], ctypes.byref(out))  # raises the table's exception
    obj: Any = ctypes.cast(out, py_object).value  # a second reference ...
    _api.Py_DecRef(out)  # ... and the table's own one given back
    return obj
