"""The header-only backport (devbuf_buffer.h), exercised through a third-party
extension (tests/python/consumer_ext/consumer.c) that knows nothing else of
devbuf: the canary, old producers handed PyBUF_DEVICE, required flags,
supported-flags advertising."""
import array

import numpy as np
import pytest

import devbuf

consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")

PLAIN_REQUESTS = [
    0,  # PyBUF_SIMPLE
    0x1,  # WRITABLE
    0x4 | 0x8,  # FORMAT | ND
    0x1c,  # RECORDS_RO = STRIDES | FORMAT
    0x11c,  # FULL_RO
    0x3c,  # C_CONTIGUOUS | FORMAT
]


def test_flag_values_agree():
    assert devbuf.PyBUF_DEVICE == consumer.PyBUF_DEVICE == 0x1000000
    # every classic flag except INDIRECT's own bit, not DEVICE
    assert devbuf.PyBUF_REQUIRED_FLAGS == consumer.PyBUF_REQUIRED_FLAGS == 0xFD
    assert not devbuf.PyBUF_REQUIRED_FLAGS & devbuf.PyBUF_DEVICE


# ---- the canary ------------------------------------------------------------------------

@pytest.mark.parametrize("flags", PLAIN_REQUESTS)
def test_canary_devicebuffer_host(flags):
    b = devbuf.from_host(bytearray(b"0123456789abcdef"), device="cpu")
    assert consumer.canary(b, flags) == []


@pytest.mark.parametrize("flags", [0, 0x1c, 0x11c])
def test_canary_devicebuffer_sim_refuses_without_touching(sim, flags):
    b = devbuf.from_host(bytearray(16), device=sim)
    # Device memory without PyBUF_DEVICE: BufferError, and nothing written.
    with pytest.raises(BufferError, match="PyBUF_DEVICE"):
        consumer.canary(b, flags)
    assert b.exports == 0


@pytest.mark.parametrize("flags", PLAIN_REQUESTS)
def test_canary_deviceview(flags):
    # A DeviceView of host memory re-exports without touching extended fields.
    v = devbuf.view(bytearray(b"x" * 32))
    assert consumer.canary(v, flags & ~0x1) == []


@pytest.mark.parametrize("flags", PLAIN_REQUESTS)
def test_canary_third_party_exporter(flags):
    ok = consumer.Exporter(b"abcd", mode="both")
    assert consumer.canary(ok, flags) == []


def test_canary_catches_a_misbehaving_producer():
    # The harness must be able to fail: a producer that writes the extended
    # fields without being asked is reported field by field.
    bad = consumer.Exporter(b"abcd", mode="both", misbehave=True)
    assert consumer.canary(bad, 0x11c) == ["flags", "device", "device_info"]


def test_canary_with_device_flag_is_allowed_to_write(sim):
    b = devbuf.from_host(bytearray(8), device=sim)
    touched = consumer.canary(b, 0x1c | devbuf.PyBUF_DEVICE)
    if consumer.NATIVE:
        # A patched CPython (cpython/patches) zeroes all four extended fields
        # itself for an extended request, ext_flags included.
        assert touched == ["flags", "ext_flags", "device", "device_info"]
    else:
        assert touched == ["flags", "device", "device_info"]  # and nothing past the struct


# ---- old-style producers handed PyBUF_DEVICE -----------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: bytearray(b"hello world!"),
    lambda: b"immutable bytes",
    lambda: np.arange(12, dtype=np.float64).reshape(3, 4),
    lambda: array.array("i", range(5)),
    lambda: memoryview(bytearray(10)),
    lambda: np.arange(20, dtype=np.int16)[::3],
])
def test_old_producers_come_back_as_cpu_buffers(make):
    obj = make()
    r = consumer.inspect(obj, 0x1c | devbuf.PyBUF_DEVICE)
    assert r["is_device"] is False
    assert r["device"] is None and r["device_info"] is None
    assert r["flags"] == 0 and r["ext_flags"] == 0  # GetBufferEx zeroed the 0xA5 fill
    mv = memoryview(obj)
    assert r["len"] == mv.nbytes and r["format"] == mv.format and r["shape"] == mv.shape
    v = devbuf.view(obj)
    assert v.is_device is False and v.identifier is None and v.sync is None
    assert v.device == devbuf.device("cpu")
    assert v.shape == mv.shape and v.strides == mv.strides and v.format == mv.format


def test_numpy_and_bytearray_ignore_the_flag_in_canary():
    for obj in (bytearray(b"abc"), np.zeros(3)):
        assert consumer.canary(obj, 0x11c) == []


# ---- supported flags and required flags --------------------------------------------------------

def test_supported_flags_advertised():
    assert devbuf.DeviceBuffer.__buffer_supported_flags__ == devbuf.PyBUF_CLASSIC_FLAGS | devbuf.PyBUF_DEVICE
    assert devbuf.DeviceView.__buffer_supported_flags__ & devbuf.PyBUF_DEVICE
    assert consumer.SimpleOnly.__buffer_supported_flags__ == -1


def test_check_supports():
    b = devbuf.empty(4, device="cpu")
    D = devbuf.PyBUF_DEVICE
    for check in (consumer.check_supports, devbuf.check_buffer_supports):
        assert check(b, D | 0x1c)
        assert check(bytearray(), 0x1d)  # legacy type: every classic flag
        assert not check(bytearray(), D)  # ...but no extended flag advertised
        assert not check(object(), 0)  # no buffer protocol
        assert check(consumer.SimpleOnly(), 0)
        assert not check(consumer.SimpleOnly(), 0x4)
        assert check(consumer.Exporter(b"x"), D | 0x1)


def test_required_flags_enforced():
    s = consumer.SimpleOnly()
    assert consumer.inspect(s, 0)["len"] == 16
    with pytest.raises(BufferError, match="does not support buffer request flags 0x1c"):
        consumer.inspect(s, 0x1c | devbuf.PyBUF_DEVICE)
    with pytest.raises(TypeError, match="bytes-like"):
        consumer.inspect(object(), 0x1c)


def test_python_class_can_advertise_and_cache_follows_changes():
    class Buf(bytearray):
        pass

    assert consumer.check_supports(Buf(b"x"), 0x1c)
    Buf.__buffer_supported_flags__ = -1  # version tag changes: the cache must notice
    assert not consumer.check_supports(Buf(b"x"), 0x1c)
    with pytest.raises(BufferError):
        consumer.inspect(Buf(b"x"), 0x1c)
    Buf.__buffer_supported_flags__ = "nope"
    with pytest.raises(TypeError, match="must be an int"):
        consumer.check_supports(Buf(b"x"), 0x1c)
    del Buf.__buffer_supported_flags__
    assert consumer.check_supports(Buf(b"x"), 0x1c)


class _CountingMeta(type):
    """Counts uncached lookups: the header reads the advertised flags with
    PyObject_GetAttr on the type, which goes through the metaclass."""
    lookups = 0

    def __getattribute__(cls, name):
        if name == "__buffer_supported_flags__":
            type(cls).lookups += 1
        return super().__getattribute__(name)


# The per-type cache must be hit (it was never filled on 3.13, where
# Py_TPFLAGS_VALID_VERSION_TAG is no longer set) and must follow changes
# (stale on 3.9, where PyType_Modified leaves tp_version_tag unchanged).
# Counts, not timings: a miss costs one lookup, so N calls must not cost N.
@pytest.mark.parametrize("advertise", [None, 0x1d | 0x1000000, -1])
def test_supported_flags_cache_is_hit(advertise):
    class Meta(_CountingMeta):
        lookups = 0

    class Buf(bytearray, metaclass=Meta):
        pass

    if advertise is not None:
        Buf.__buffer_supported_flags__ = advertise
    want = advertise is None or advertise != -1
    obj = Buf(b"x")
    for _ in range(50):
        assert consumer.check_supports(obj, 0x1c) == want
    assert Meta.lookups <= 3, f"{Meta.lookups} lookups for 50 checks: the cache is never hit"
    # The hot path of DevbufPy_GetBufferEx (required flags, inlined hit).
    Meta.lookups = 0
    if want:
        consumer.bench_getbuffer(obj, 200, 0x1c, 1)
        assert Meta.lookups <= 3, f"{Meta.lookups} lookups for 200 GetBufferEx calls"


def test_supported_flags_cache_follows_every_change():
    class Meta(_CountingMeta):
        lookups = 0

    class Buf(bytearray, metaclass=Meta):
        pass

    obj = Buf(b"x")
    for i in range(20):
        flags = -1 if i % 2 else 0x1d
        Buf.__buffer_supported_flags__ = flags
        for _ in range(3):  # the first call fills the cache, the others hit it
            assert consumer.check_supports(obj, 0x1c) == (flags != -1), (i, flags)
    # A change made by a base class reaches the subclass too.
    class Sub(Buf):
        pass

    assert consumer.check_supports(Sub(b"x"), 0x1c) is False  # inherited -1
    Buf.__buffer_supported_flags__ = 0
    assert consumer.check_supports(Sub(b"x"), 0x1c) is True


# ---- a third-party consumer of devbuf's own producer ---------------------------------------------

def test_third_party_reads_devicebuffer_device_info(sim):
    b = devbuf.from_host(np.arange(8, dtype=np.int32), device=sim, readonly=True)
    r = consumer.inspect(b)
    assert r["is_device"] and r["device"] == "devbuf.sim"
    assert r["flags"] & devbuf.PyBUF_DEVICE
    assert r["ptr"] == b.ptr and r["len"] == 32 and r["format"] == "i" and r["shape"] == (8,)
    assert r["readonly"] is True
    info = r["device_info"]
    assert info["struct_size"] >= 64 and info["version"] == 1
    assert info["device_ordinal"] == 0
    assert info["flags"] & 0x2  # DEVBUF_DEVICE_INFO_READONLY
    assert not info["flags"] & 0x1  # sim memory is never host-accessible
    assert info["event"] == b.event  # the producer's event: what the consumer waits on
    assert b.exports == 0  # released exactly once


def test_third_party_exporter_is_viewable():
    e = consumer.Exporter(b"device bytes", mode="device")
    v = devbuf.view(e)
    assert v.is_device and v.identifier == consumer.FAKE_DEVICE
    assert v.device_info == e.info_ptr
    assert e.counts["exports"] == 1 and e.counts["last_flags"] & devbuf.PyBUF_DEVICE
    with pytest.raises(devbuf.PluginError, match="consumer.fake"):
        v.device  # no plugin implements it: devbuf cannot open its device
    with pytest.raises(BufferError, match="PyBUF_DEVICE"):
        memoryview(e)
    v.release()
    assert e.counts == {**e.counts, "exports": 0, "getbuffer": 2, "release": 1}

