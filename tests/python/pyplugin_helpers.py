"""Shared by tests/python/test_pyplugin*.py: the mmap example plugin, a plugin
that raises on demand, and direct calls into libdevbuf's runtime API through
ctypes (so that every plugin slot can be driven one at a time, exactly as a C
consumer drives it, without going through the bindings)."""
from __future__ import annotations

import copy
import ctypes
import importlib.util
import itertools
import os
import pathlib
import threading

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build")).resolve()

_spec = importlib.util.spec_from_file_location(
    "python_plugin_mmap", REPO / "docs" / "examples" / "python_plugin_mmap.py")
mmap_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mmap_example)
MmapDevice = mmap_example.MmapDevice

_ids = itertools.count()
_ids_lock = threading.Lock()  # itertools.count is not atomic on 3.13t


def fresh_id(prefix="test.pymmap"):
    """A new identifier per registration (devbuf.Device objects are cached by
    spelling, so tests never reuse one), unique across threads too."""
    with _ids_lock:
        n = next(_ids)
    return f"{prefix}{n}"


# ---- the runtime through ctypes ----------------------------------------------------

class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("backend_code", ctypes.c_int),
                ("message", ctypes.c_char * 512)]


class Device(ctypes.Structure):
    _fields_ = [("identifier", ctypes.c_char_p), ("ordinal", ctypes.c_int),
                ("backend", ctypes.c_void_p)]


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "live_allocations", "live_bytes", "total_allocations", "live_streams", "live_events",
        "live_host_allocations")]


class DeviceInfoDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("device_ordinal", ctypes.c_int32), ("reserved0", ctypes.c_uint32),
                ("event", ctypes.c_void_p), ("stream", ctypes.c_void_p),
                ("reserved", ctypes.c_uint64 * 4)]


class Props(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 128), ("vendor", ctypes.c_char * 64),
                ("total_memory", ctypes.c_uint64), ("free_memory", ctypes.c_uint64),
                ("alloc_alignment", ctypes.c_uint32), ("dlpack_device_type", ctypes.c_int32),
                ("dlpack_device_id", ctypes.c_int32), ("reserved0", ctypes.c_uint32),
                ("reserved", ctypes.c_uint64 * 6)]


def _lib():
    import devbuf  # noqa: F401  (loads the very libdevbuf the bindings use)

    # The library the bindings loaded: DEVBUF_LIB when testing an installed
    # devbuf (scripts/run-python-tests-installed.sh), else the build's.
    lib = ctypes.CDLL(os.environ.get("DEVBUF_LIB") or str(BUILD / "lib" / "libdevbuf.so.0"))
    lib.devbuf_status_name.restype = ctypes.c_char_p
    return lib


lib = _lib()


class RuntimeError_(Exception):
    def __init__(self, op, code, message):
        super().__init__(f"{op}: {lib.devbuf_status_name(code).decode()}: {message}")
        self.op, self.code, self.message = op, code, message


P = ctypes.c_void_p
Z = ctypes.c_size_t


class Runtime:
    """One opened device; every method is one runtime call (GIL released by
    ctypes, as a C consumer would call it). Failures raise RuntimeError_ with
    the status and the message the runtime (and the plugin) wrote."""

    def __init__(self, spec):
        self.dev = Device()
        self._call("device_open", spec.encode(), ctypes.byref(self.dev))

    def _call(self, op, *args):
        err = Error()
        rc = getattr(lib, "devbuf_" + op)(*args, ctypes.byref(err))
        if rc != 0:
            raise RuntimeError_(op, rc, err.message.decode(errors="replace"))
        return rc

    @property
    def d(self):
        return ctypes.byref(self.dev)

    def props(self):
        p = Props()
        self._call("device_props_get", self.d, ctypes.byref(p))
        return p

    def alloc(self, size, alignment=0, stream=None):
        out = P()
        self._call("mem_alloc", self.d, Z(size), Z(alignment), P(stream), ctypes.byref(out))
        return out.value

    def free(self, ptr, stream=None):
        self._call("mem_free", self.d, P(ptr), P(stream))

    def h2d(self, dst, offset, data: bytes, stream=None):
        buf = ctypes.create_string_buffer(data, len(data))
        self._call("copy_h2d", self.d, P(dst), Z(offset), buf, Z(len(data)), P(stream))
        return buf  # must live until the stream is synchronized

    def d2h(self, src, offset, n, stream=None):
        buf = ctypes.create_string_buffer(n)
        self._call("copy_d2h", self.d, buf, P(src), Z(offset), Z(n), P(stream))
        return buf

    def d2d(self, dst, dst_offset, src, src_offset, n, stream=None):
        self._call("copy_d2d", self.d, P(dst), Z(dst_offset), P(src), Z(src_offset), Z(n),
                   P(stream))

    def stream_create(self):
        out = P()
        self._call("stream_create", self.d, ctypes.byref(out))
        return out.value

    def stream_destroy(self, s):
        self._call("stream_destroy", self.d, P(s))

    def stream_synchronize(self, s=None):
        self._call("stream_synchronize", self.d, P(s))

    def event_create(self):
        out = P()
        self._call("event_create", self.d, ctypes.byref(out))
        return out.value

    def event_destroy(self, e):
        self._call("event_destroy", self.d, P(e))

    def event_record(self, e, s=None):
        self._call("event_record", self.d, P(e), P(s))

    def stream_wait_event(self, s, e):
        self._call("stream_wait_event", self.d, P(s), P(e))

    def event_synchronize(self, e):
        self._call("event_synchronize", self.d, P(e))

    def event_query(self, e):
        self._call("event_query", self.d, P(e))

    def info_export(self, event=None, stream=None, flags=0, capacity=512):
        buf = ctypes.create_string_buffer(capacity)
        size = Z()
        self._call("device_info_export", self.d, P(event), P(stream), ctypes.c_uint32(flags), buf,
                   Z(capacity), ctypes.byref(size))
        return buf.raw[:size.value]

    def info_import(self, blob: bytes):
        buf = ctypes.create_string_buffer(blob, max(len(blob), 8))
        desc = DeviceInfoDesc()
        dev = Device()
        self._call("device_info_import", self.dev.identifier, buf, ctypes.byref(desc),
                   ctypes.byref(dev))
        return desc, dev

    def host_alloc(self, n):
        out = P()
        self._call("host_alloc", self.d, Z(n), ctypes.byref(out))
        return out.value

    def host_free(self, p):
        self._call("host_free", self.d, P(p))


def device_count(identifier):
    n = ctypes.c_int()
    err = Error()
    rc = lib.devbuf_device_count(identifier.encode(), ctypes.byref(n), ctypes.byref(err))
    return rc, n.value, err.message.decode(errors="replace")


def stats(index):
    s = Stats()
    err = Error()
    assert lib.devbuf_plugin_stats(Z(index), ctypes.byref(s), ctypes.byref(err)) == 0, err.message
    return s


# ---- a plugin that raises on demand --------------------------------------------------

class Faulty(MmapDevice):
    """MmapDevice whose operation `op` raises `self.faults[op]` (an exception
    instance or class), or runs `self.replace[op](self, *args)`, instead of
    its own code. The closures hold the wrapped methods, so a test changes
    behaviour through these dicts, not by patching methods.

    Both dicts are the calling thread's own (the operations run on the
    thread that called the runtime): tests that share one Faulty across
    threads (pytest-run-parallel) set and clear only their own faults. An
    exception instance is raised as a fresh copy each time, never one object
    raised on several threads at once (its traceback would be shared)."""

    name = "faulty"

    def __init__(self, **kw):
        super().__init__(**kw)
        self._local = threading.local()

    def _dicts(self):
        loc = self._local
        if not hasattr(loc, "faults"):
            loc.faults, loc.replace = {}, {}
        return loc

    @property
    def faults(self):
        return self._dicts().faults

    @property
    def replace(self):
        return self._dicts().replace


def _wrap(slot):
    base = getattr(MmapDevice, slot)

    def method(self, *args):
        exc = self.faults.get(slot)
        if exc is not None:
            raise copy.copy(exc) if isinstance(exc, BaseException) else exc
        fn = self.replace.get(slot)
        if fn is not None:
            return fn(self, *args)
        return base(self, *args)

    method.__name__ = slot
    return method


for _slot in ("device_count", "device_props", "mem_alloc", "mem_free", "copy_h2d", "copy_d2h",
              "copy_d2d", "stream_create", "stream_destroy", "stream_synchronize", "event_create",
              "event_destroy", "event_record", "stream_wait_event", "event_synchronize",
              "event_query", "device_info_export", "device_info_import"):
    setattr(Faulty, _slot, _wrap(_slot))
