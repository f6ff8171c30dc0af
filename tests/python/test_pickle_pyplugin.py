"""Pickling against devices written in Python (devbuf.plugin), where the
plugin itself counts every copy it is asked for, and where a device can
really go away (unregister) between dumps and loads."""
import gc
import pathlib
import pickle
import sys

import numpy as np
import pytest

import devbuf

plugin = pytest.importorskip("devbuf.plugin",
                             reason="devbuf.plugin (the libffi Python-plugin extension) not built")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples"
sys.path.insert(0, str(EXAMPLES))
from python_plugin_mmap import DEVICE_INFO, DEVICE_INFO_VERSION, MmapDevice  # noqa: E402


class CountingDevice(MmapDevice):
    """The example mmap device, with every host<->device copy recorded at the
    plugin; with host_accessible=False the runtime and the bindings treat its
    memory as memory the host must not read, like a GPU's."""

    def __init__(self, identifier, host_accessible):
        super().__init__(devices=1, identifiers=(identifier,), name=identifier.replace(".", "_"))
        self.host_accessible = host_accessible
        self.d2h, self.h2d = [], []

    def device_props(self, device):
        props = super().device_props(device)
        if not self.host_accessible:
            props["flags"] = set()
        return props

    def device_info_export(self, identifier, device, event, stream, flags):
        if self.host_accessible:
            return super().device_info_export(identifier, device, event, stream, flags)
        return DEVICE_INFO.pack(DEVICE_INFO.size, DEVICE_INFO_VERSION, 0, device,
                                flags & ~plugin.DEVICE_INFO_HOST_ACCESSIBLE, event or 0,
                                stream or 0, 0, 0, 0, 0, 0, 0)

    def copy_d2h(self, device, dst, src, src_offset, stream):
        self.d2h.append(len(dst))
        return super().copy_d2h(device, dst, src, src_offset, stream)

    def copy_h2d(self, device, dst, dst_offset, src, stream):
        self.h2d.append(len(src))
        return super().copy_h2d(device, dst, dst_offset, src, stream)


@pytest.fixture
def registered(request):
    regs = []

    def make(identifier, host_accessible):
        dev = CountingDevice(identifier, host_accessible)
        dev.registration = plugin.register_plugin(dev)
        regs.append(dev.registration)
        return dev

    yield make
    gc.collect()
    for r in regs:
        if r.registered:
            r.unregister()


@pytest.fixture(autouse=True)
def _error_policy():
    old = devbuf.set_unpickle_policy("error")
    yield
    devbuf.set_unpickle_policy(old)


def test_device_memory_one_copy_counted_by_the_plugin(registered):
    dev = registered("example.pkcount", host_accessible=False)
    n = 3 << 20
    a = np.random.default_rng(3).integers(0, 255, n, dtype=np.uint8)
    b = devbuf.from_host(a, device="example.pkcount")
    assert not b.device.host_accessible
    with pytest.raises(BufferError):
        memoryview(b)
    dev.d2h.clear()
    dev.h2d.clear()
    bufs = []
    data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    assert dev.d2h == [n]  # the plugin was asked for exactly one copy, of everything
    assert isinstance(memoryview(bufs[0]).obj, devbuf.HostStaging)
    c = pickle.loads(data, buffers=bufs)
    assert dev.d2h == [n] and dev.h2d == [n]  # loads: one copy back, none out
    assert c.device.identifier == "example.pkcount" and c.ptr != b.ptr
    dev.d2h.clear()
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)
    assert dev.d2h == [n]
    # in-band protocols: one copy too (straight into the bytes object)
    dev.d2h.clear()
    pickle.dumps(b, protocol=4)
    assert dev.d2h == [n]
    # a DeviceView of it
    dev.d2h.clear()
    v = devbuf.view(b)
    w = pickle.loads(pickle.dumps(v, protocol=5))
    assert dev.d2h == [n] and w.identifier == "example.pkcount"
    del bufs, c, v, w, b
    gc.collect()


def test_host_accessible_plugin_device_zero_copy(registered):
    dev = registered("example.pkhost", host_accessible=True)
    a = np.arange(1 << 16, dtype="<u4")
    b = devbuf.from_host(a, device="example.pkhost")
    assert b.device.host_accessible
    dev.d2h.clear()
    dev.h2d.clear()
    bufs = []
    data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    assert dev.d2h == []  # the memory itself went out
    assert np.frombuffer(bufs[0], np.uint8).ctypes.data == b.ptr
    c = pickle.loads(data, buffers=bufs)
    # another device than cpu: the payload is uploaded into its own memory
    assert c.device.identifier == "example.pkhost" and c.ptr != b.ptr
    assert dev.h2d == [a.nbytes]
    np.testing.assert_array_equal(np.asarray(c), a)
    del bufs, b, c
    gc.collect()


@pytest.mark.parametrize("host_accessible", [False, True])
def test_unregistered_plugin_at_load_time(registered, host_accessible):
    """The device really is gone when the pickle is loaded: each policy."""
    # one identifier per case: the bindings cache Device objects by spec
    ident = f"example.pkgone{int(host_accessible)}"
    dev = registered(ident, host_accessible)
    a = np.arange(12, dtype="<i2").reshape(3, 4)
    b = devbuf.from_host(a, device=ident, readonly=True)
    bufs = []
    oob = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    payload = bytes(bufs[0])  # what would travel; the staging goes with bufs
    inband = pickle.dumps(b, protocol=4)
    fmt = b.format
    del b, bufs
    gc.collect()
    dev.registration.unregister()
    assert ident not in {i for p in devbuf.plugins() if p.loaded for i in p.identifiers}
    for load in (lambda: pickle.loads(oob, buffers=[payload]), lambda: pickle.loads(inband)):
        with pytest.raises(devbuf.MissingDeviceError) as ei:
            load()
        assert ei.value.identifier == ident
        assert f"'{ident}:0'" in str(ei.value) and "not registered" in str(ei.value)
        with devbuf.unpickle_policy("host"):
            c = load()
        assert c.device.identifier == "cpu" and c.readonly and c.format == fmt
        np.testing.assert_array_equal(np.asarray(c), a)
