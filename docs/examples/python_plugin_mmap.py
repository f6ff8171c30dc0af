"""A devbuf device plugin written in Python: device memory is anonymous memory
maps (the mmap module). See docs/python-plugins.md.

    import devbuf, devbuf.plugin
    from python_plugin_mmap import MmapDevice

    reg = devbuf.plugin.register_plugin(MmapDevice(devices=2))
    buf = devbuf.from_host(b"hello", device="example.mmap:1")
    print(bytes(buf.to_host()))
    del buf
    reg.unregister()

Run as a script, it registers itself, runs the plugin conformance suite
against it in this process and prints the report.

What it shows:
- device pointers are real addresses (of page-aligned maps, over-allocated for
  larger alignments), so the device is honestly host-accessible and DLPack
  sees it as kDLCPU memory;
- streams and events are opaque int handles the plugin validates (an unknown
  handle raises KeyError, which the boundary reports as DEVBUF_EINVAL);
- work is synchronous: every copy is complete when the call returns, so
  streams order trivially and events are complete once recorded;
- device_info uses the devbuf_device_info layout (devbuf/device_info.h),
  packed and checked with the struct module;
- one extension function, ``mapping_info``, and one dtype namespace,
  ``[pymmap$rgb8]`` (the namespace is named after the plugin), travel with
  the plugin.

Thread safety: the runtime may call every operation from any thread at once.
Each call holds the GIL, but a dict lookup followed by an update is not
atomic across bytecodes, so the handle tables are guarded by a lock.
"""
from __future__ import annotations

import itertools
import mmap
import struct
import threading

from devbuf.plugin import (
    DEVICE_INFO_HOST_ACCESSIBLE,
    DEVICE_INFO_READONLY,
    DL_CPU,
    InvalidArgument,
    NoDevice,
    PythonPlugin,
    address_of,
    dtype_namespace,
    ext_function,
)

# devbuf_device_info (devbuf/device_info.h): struct_size, version, reserved0,
# device_ordinal, flags, event, stream, reserved[6]; 80 bytes, no padding.
DEVICE_INFO = struct.Struct("=IHHiIQQ6Q")
DEVICE_INFO_VERSION = 1


class _Mapping:
    __slots__ = ("map", "address", "size", "device", "skip")

    def __init__(self, m, address, size, device, skip):
        self.map = m          # the mmap object
        self.address = address
        self.size = size
        self.device = device
        self.skip = skip      # bytes of the map before `address` (alignment)


class MmapDevice(PythonPlugin):
    name = "pymmap"
    version = "1.0.0"
    description = "Python example plugin: device memory is anonymous memory maps"
    identifiers = ("example.mmap",)

    def __init__(self, devices: int = 2, memory: int = 256 << 20, identifiers=None,
                 name=None):
        if identifiers is not None:
            self.identifiers = tuple(identifiers)
        if name is not None:
            self.name = name
        self._devices = devices
        self._memory = memory
        self._lock = threading.Lock()
        self._maps = {}       # address -> _Mapping
        self._streams = {}    # handle -> device
        self._events = {}     # handle -> device
        self._used = [0] * max(devices, 0)
        # Opaque handles: never addresses, never 0.
        self._next = itertools.count(0x5EED0000)

    # ---- helpers ----------------------------------------------------------------
    def _mapping(self, device, ptr):
        m = self._maps.get(ptr)
        if m is None or m.device != device:
            raise KeyError(f"0x{ptr or 0:x} is not memory of device {device}")
        return m

    def _stream(self, device, stream):
        if stream is not None and self._streams.get(stream) != device:
            raise KeyError(f"0x{stream:x} is not a stream of device {device}")

    def _event(self, device, event):
        if event is None:
            raise InvalidArgument("event is NULL")
        if self._events.get(event) != device:
            raise KeyError(f"0x{event:x} is not an event of device {device}")

    @staticmethod
    def _range(m, offset, nbytes, what):
        if offset > m.size or nbytes > m.size - offset:
            raise ValueError(f"{what}: bytes [{offset}, {offset + nbytes}) outside the "
                             f"{m.size}-byte allocation")

    # ---- devices ------------------------------------------------------------------
    def device_count(self):
        if self._devices <= 0:
            raise NoDevice("MmapDevice(devices=0): no device configured")
        return self._devices

    def device_props(self, device):
        return {
            "name": f"mmap device {device}",
            "vendor": "devbuf examples (Python)",
            "total_memory": self._memory,
            "free_memory": self._memory - self._used[device],
            "alloc_alignment": mmap.PAGESIZE,
            "dlpack_device_type": DL_CPU,
            "dlpack_device_id": 0,
            "flags": {"host_accessible"},
        }

    # ---- memory -------------------------------------------------------------------
    def mem_alloc(self, device, size, alignment, stream):
        self._stream(device, stream)
        align = max(alignment, mmap.PAGESIZE)
        with self._lock:
            if size > self._memory - self._used[device]:
                raise MemoryError(f"{size} bytes requested, {self._memory - self._used[device]} "
                                  f"free on mmap device {device}")
            self._used[device] += size
        try:
            # Maps are page-aligned; a larger alignment over-allocates and
            # hands out the first aligned address inside. Size 0 still gets
            # a page, so that its address is unique.
            m = mmap.mmap(-1, max(size, 1) + (align - mmap.PAGESIZE))
        except BaseException:
            with self._lock:
                self._used[device] -= size
            raise
        base = address_of(m)
        address = (base + align - 1) & ~(align - 1)
        with self._lock:
            self._maps[address] = _Mapping(m, address, size, device, address - base)
        return address

    def mem_free(self, device, ptr, stream):
        self._stream(device, stream)
        with self._lock:
            m = self._mapping(device, ptr)
            del self._maps[ptr]
            self._used[device] -= m.size
        m.map.close()

    # ---- copies (synchronous: done when the call returns) ------------------------
    def copy_h2d(self, device, dst, dst_offset, src, stream):
        self._stream(device, stream)
        m = self._mapping(device, dst)
        self._range(m, dst_offset, len(src), "copy_h2d")
        start = dst_offset + m.skip
        m.map[start:start + len(src)] = src

    def copy_d2h(self, device, dst, src, src_offset, stream):
        self._stream(device, stream)
        m = self._mapping(device, src)
        self._range(m, src_offset, len(dst), "copy_d2h")
        start = src_offset + m.skip
        dst[:] = m.map[start:start + len(dst)]

    def copy_d2d(self, device, dst, dst_offset, src, src_offset, nbytes, stream):
        self._stream(device, stream)
        md, ms = self._mapping(device, dst), self._mapping(device, src)
        self._range(md, dst_offset, nbytes, "copy_d2d destination")
        self._range(ms, src_offset, nbytes, "copy_d2d source")
        s, d = src_offset + ms.skip, dst_offset + md.skip
        md.map[d:d + nbytes] = ms.map[s:s + nbytes]

    # ---- streams --------------------------------------------------------------------
    def stream_create(self, device):
        with self._lock:
            h = next(self._next)
            self._streams[h] = device
        return h

    def stream_destroy(self, device, stream):
        if stream is None:
            raise InvalidArgument("the default stream cannot be destroyed")
        with self._lock:
            self._stream(device, stream)
            del self._streams[stream]

    def stream_synchronize(self, device, stream):
        self._stream(device, stream)  # nothing is ever pending

    # ---- events --------------------------------------------------------------------
    def event_create(self, device):
        with self._lock:
            h = next(self._next)
            self._events[h] = device
        return h

    def event_destroy(self, device, event):
        with self._lock:
            self._event(device, event)
            del self._events[event]

    def event_record(self, device, event, stream):
        self._event(device, event)
        self._stream(device, stream)

    def stream_wait_event(self, device, stream, event):
        self._stream(device, stream)
        self._event(device, event)

    def event_synchronize(self, device, event):
        self._event(device, event)

    def event_query(self, device, event):
        self._event(device, event)
        return True

    # ---- device_info (the devbuf_device_info layout) ---------------------------------
    def device_info_export(self, identifier, device, event, stream, flags):
        return DEVICE_INFO.pack(DEVICE_INFO.size, DEVICE_INFO_VERSION, 0, device,
                                flags | DEVICE_INFO_HOST_ACCESSIBLE, event or 0, stream or 0,
                                0, 0, 0, 0, 0, 0)

    def device_info_import(self, identifier, info):
        # `info` holds exactly struct_size bytes (its first field).
        if len(info) < DEVICE_INFO.size:
            raise ValueError(f"device_info of {len(info)} bytes, expected at least "
                             f"{DEVICE_INFO.size}")
        size, version, reserved0, ordinal, flags, event, stream, *reserved = \
            DEVICE_INFO.unpack_from(info)
        if version != DEVICE_INFO_VERSION:
            raise ValueError(f"device_info version {version}, expected {DEVICE_INFO_VERSION}")
        if reserved0 or any(reserved):
            raise ValueError("device_info reserved fields are not zero")
        if flags & ~(DEVICE_INFO_HOST_ACCESSIBLE | DEVICE_INFO_READONLY):
            raise ValueError(f"device_info flags 0x{flags:x}: unknown bits "
                             f"0x{flags & ~(DEVICE_INFO_HOST_ACCESSIBLE | DEVICE_INFO_READONLY):x}")
        if not 0 <= ordinal < self._devices:
            raise ValueError(f"device_ordinal {ordinal} out of range (0..{self._devices - 1})")
        if event and self._events.get(event) != ordinal:
            raise ValueError(f"device_info names event 0x{event:x}, not one of device {ordinal}")
        if stream and self._streams.get(stream) != ordinal:
            raise ValueError(f"device_info names stream 0x{stream:x}, not one of device {ordinal}")
        return ordinal, flags, event or None, stream or None

    # ---- extras travelling with the plugin ---------------------------------------------
    @ext_function("i(p*N*ie)")
    def mapping_info(self, ptr):
        """mapping_info(ptr) -> (size, device): the allocation a device pointer lies in."""
        with self._lock:
            for m in self._maps.values():
                if m.address <= ptr < m.address + max(m.size, 1):
                    return m.size, m.device
        raise InvalidArgument(f"0x{ptr:x} is inside no allocation of {self.name}")

    @dtype_namespace(description="pixel formats of the mmap example: rgb8, rgba8")
    def pixel_dtype(self, payload):
        sizes = {"rgb8": 3, "rgba8": 4}
        if payload not in sizes:
            return None  # not understood: the next alternative is tried
        return {"kind": "opaque", "itemsize": sizes[payload], "alignment": 1,
                "canonical": payload}


if __name__ == "__main__":
    import sys

    import devbuf
    import devbuf.plugin

    reg = devbuf.plugin.register_plugin(MmapDevice())
    print(f"registered {reg}: {reg.info.path}")
    result = devbuf.plugin.run_conformance("example.mmap")
    print(result.output, end="")
    buf = devbuf.from_host(b"hello, mmap", device="example.mmap")
    print(buf, bytes(buf.to_host()))
    buf.free()
    reg.unregister()
    sys.exit(result.returncode)
