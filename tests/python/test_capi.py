"""The C API capsule, used by an extension that does not link libdevbuf."""
import subprocess

import numpy as np
import pytest

import devbuf

cc = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")


def test_capsule_version():
    major, minor, size = cc.version()
    assert (major, minor) == (1, 1) and size > 200


def test_capi_consumer_does_not_link_libdevbuf():
    so = cc.__file__
    try:
        out = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("readelf not available")
    assert "libdevbuf" not in out


def test_view_info_host_and_device(sim):
    a = np.arange(10, dtype=np.int32)
    i = cc.info(a)
    assert i["is_device"] == 0 and i["device"] is None and i["host_accessible"] == 1
    assert i["dev_identifier"] == "cpu" and i["nbytes"] == 40 and i["format"] == "i"
    b = devbuf.from_host(a, device=sim)
    j = cc.info(b)
    assert j["is_device"] == 1 and j["device"] == "devbuf.sim" and j["host_accessible"] == 0
    assert j["ptr"] == b.ptr and j["event"] == b.event and j["dev_ordinal"] == 0
    assert b.exports == 0  # View_Release released


def test_runtime_through_the_table(sim):
    a = np.arange(256, dtype=np.uint8)
    assert cc.read_bytes(devbuf.from_host(a, device=sim)) == a.tobytes()
    assert cc.read_bytes(a) == a.tobytes()
    assert cc.itemsize("T{i:a:[devbuf$bfloat16]:b:}") == 8
    with pytest.raises(devbuf.FormatError):
        cc.itemsize("T{")
    e = cc.empty((2, 3), "d", "devbuf.sim")
    assert isinstance(e, devbuf.DeviceBuffer) and e.nbytes == 48 and e.device is sim


class DLPackOnly:
    """A producer without the buffer protocol: DLPack and nothing else."""

    def __init__(self, a):
        self.a = a
        self.calls = []

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_import_without_a_view_object_host():
    import sys
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    p = DLPackOnly(a)
    before = sys.getrefcount(a)
    i = cc.import_info(p)
    # The description of devbuf.view(p), without a DeviceView or ForeignArray.
    v = devbuf.view(p)
    assert i["ptr"] == v.ptr == a.ctypes.data and i["shape"] == (3, 4) == v.shape
    assert i["strides"] == (16, 4) and i["format"] == "f" and i["itemsize"] == 4
    assert i["nbytes"] == 48 and i["is_device"] == 0 and i["device"] is None
    assert i["host_accessible"] == 1 and i["obj_is_null"] == 1
    v.release()
    # The DLPack spec's consumer: max_version passed, CPU stream None left out.
    assert p.calls[0] == {"max_version": (1, 3)}
    # Released exactly once: NumPy's deleter dropped its reference (twice
    # would drop one too many, which the second release must not do).
    assert cc.import_info(p, 0, 1)["ptr"] == a.ctypes.data
    assert sys.getrefcount(a) == before


def test_import_without_a_view_object_device(sim):
    b = devbuf.from_host(np.arange(8, dtype=np.int16), device=sim)
    i = cc.import_info(DLPackOnly(b))
    assert i["is_device"] == 1 and i["device"] == "devbuf.sim" and i["has_device_info"] == 1
    assert i["ptr"] == b.ptr and i["shape"] == (8,) and i["format"] == "h"
    assert b.exports == 0  # the DLPack export devbuf took was released


def test_import_without_a_view_object_errors():
    with pytest.raises(TypeError, match="speaks no protocol devbuf imports"):
        cc.import_info(object())
    ro = np.arange(4.0)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="marked it read-only"):
        cc.import_info(DLPackOnly(ro), 1)
    assert cc.import_info(DLPackOnly(np.arange(4.0)), 1)["readonly"] == 0
