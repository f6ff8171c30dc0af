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
import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64,
                    c_uint8, c_uint16, c_uint32, c_uint64, c_void_p, py_object)

from ._capi import _Api


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(Structure):
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
NAMES = {n: ctypes.create_string_buffer(n) for n in
         (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned",
          b"not_a_tensor")}

_live = {}  # address -> (struct, arrays, producer): kept until the deleter runs


@DELETER
def _deleter(addr):
    entry = _live.pop(addr, None)
    if entry is not None:
        entry[2].deleted += 1


# A capsule destructor cannot be written in Python (ctypes would revive the
# dying capsule), so these capsules have none: the producer keeps every
# capsule it made, and settle() does what the destructor would do: call the
# deleter of each capsule that was never consumed.
_NO_DESTRUCTOR = ctypes.cast(None, CAPSULE_DESTRUCTOR)


def live_tensors():
    return len(_live)


class Producer:
    """A DLPack producer over a NumPy array (or raw fields).

    legacy_only: __dlpack__ accepts only `stream` (pre-2023 signature) and
    returns "dltensor" capsules. Every field of the tensor can be overridden
    to make it malformed.
    """

    def __init__(self, array=None, *, legacy_only=False, versioned=None, name=None, major=1,
                 minor=3, flags=0, device=(1, 0), dtype=None, ndim=None, shape=None,
                 strides="auto", null_shape=False, byte_offset=0, data=None, reuse_capsule=False):
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
        self._capsule = None
        self.deleted = 0
        self.made = 0
        self.calls = []
        self.capsules = []

    def _fields(self):
        a = self.array
        if self.dtype is not None:
            code, bits, lanes = self.dtype
        else:
            kind = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}[a.dtype.kind]
            code, bits, lanes = kind, a.dtype.itemsize * 8, 1
        shape = list(self.shape if self.shape is not None else (a.shape if a is not None else ()))
        if self.strides == "auto":
            strides = ([s // a.itemsize for s in a.strides] if a is not None else None)
        else:
            strides = self.strides
        data = self.data if self.data is not None else (a.ctypes.data if a is not None else 0)
        return code, bits, lanes, shape, strides, data

    def make(self, versioned):
        code, bits, lanes, shape, strides, data = self._fields()
        nd = self.ndim if self.ndim is not None else len(shape)
        shape_arr = (c_int64 * max(len(shape), 1))(*shape)
        strides_arr = (c_int64 * max(len(strides), 1))(*strides) if strides is not None else None
        t = DLTensor()
        t.data = data
        t.device = DLDevice(*self.device)
        t.ndim = nd
        t.dtype = DLDataType(code, bits, lanes)
        t.shape = None if self.null_shape else ctypes.cast(shape_arr, POINTER(c_int64))
        t.strides = ctypes.cast(strides_arr, POINTER(c_int64)) if strides_arr is not None else None
        t.byte_offset = self.byte_offset
        if versioned:
            m = DLManagedTensorVersioned()
            m.major, m.minor, m.flags = self.major, self.minor, self.flags
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

    def settle(self):
        """Delete what unconsumed capsules still own, as their destructor would."""
        for cap, addr in self.capsules:
            name = _api.PyCapsule_GetName(cap)
            if name in (b"dltensor", b"dltensor_versioned", b"not_a_tensor") and addr in _live:
                _live[addr][0].deleter(addr)
        self.capsules = []
        self._capsule = None

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
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

    def __dlpack_device__(self):
        return tuple(self.device)


def capsule_name(cap):
    return _api.PyCapsule_GetName(cap).decode()


def is_capsule(obj):
    return type(obj).__name__ == "PyCapsule"


def read_capsule(cap, any_name=False, versioned=None):
    """Everything a DLPack capsule holds, read without consuming it: a dict
    with name, versioned, version, flags, device, ndim, dtype, shape,
    strides (None when NULL), byte_offset, data, has_deleter, tensor (the
    DLTensor), managed (the managed struct) and address. Raises ValueError
    when the capsule has no DLPack name (unless any_name: the kit's broken
    consumers read used capsules on purpose) or a NULL pointer."""
    name = _api.PyCapsule_GetName(cap)
    if name not in (b"dltensor", b"dltensor_versioned") and not any_name:
        raise ValueError(f"capsule named {name!r}, not 'dltensor' or 'dltensor_versioned'")
    if versioned is None:
        versioned = name.endswith(b"_versioned")  # (any_name: used_dltensor_versioned too)
    addr = _api.PyCapsule_GetPointer(cap, name)
    if not addr:
        raise ValueError(f"capsule {name!r} holds a NULL pointer")
    if versioned:
        m = DLManagedTensorVersioned.from_address(addr)
        version, flags = (m.major, m.minor), m.flags
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


def consume(cap):
    """Do what a consumer does: rename the capsule to used_*, then call the
    deleter once (as the consumer's own object would when it dies)."""
    info = read_capsule(cap)
    used = NAMES[b"used_dltensor_versioned" if info["versioned"] else b"used_dltensor"]
    if _api.PyCapsule_SetName(cap, used) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    if info["has_deleter"]:
        info["managed"].deleter(info["address"])
    return info
