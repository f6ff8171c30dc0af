"""The C API capsule, used by an extension that does not link libdevbuf."""
import subprocess

import numpy as np
import pytest

import devbuf

cc = pytest.importorskip("devbuf_capi_consumer", reason="test extension not built")


def test_capsule_version():
    major, minor, size = cc.version()
    assert (major, minor) == (1, 0) and size > 200


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
