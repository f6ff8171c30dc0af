"""devbuf.devices / device / plugins / load_plugin / plugin_stats."""
import pytest

import devbuf


def test_device_spellings_resolve_to_one_object(sim):
    assert devbuf.device("devbuf.sim") is sim
    assert devbuf.device("devbuf.sim:0") is sim
    assert devbuf.device(sim) is sim
    assert sim.identifier == "devbuf.sim" and sim.ordinal == 0
    assert str(sim) == "devbuf.sim:0" and repr(sim) == "devbuf.Device('devbuf.sim:0')"
    assert sim.host_accessible is False and sim.is_async is True
    assert sim.plugin == "sim" and sim.dlpack_device == (12, 0)
    assert sim.total_memory > 0 and sim.alignment >= 1 and sim.name
    sim.synchronize()


def test_host_device():
    h = devbuf.device("cpu")
    assert h is devbuf.device("cpu:0")
    assert h.host_accessible and h.identifier == "cpu"
    assert h in devbuf.devices()


def test_devices_lists_every_usable_device(sim):
    ds = devbuf.devices()
    assert sim in ds
    assert all(isinstance(d, devbuf.Device) for d in ds)
    assert len({str(d) for d in ds}) == len(ds)


def test_bad_device_specs():
    with pytest.raises(devbuf.PluginError) as ei:
        devbuf.device("no.such.device")
    assert ei.value.code == "DEVBUF_ENOTFOUND" and "no.such.device" in str(ei.value)
    with pytest.raises(devbuf.Error, match="ordinal"):
        devbuf.device("devbuf.sim:x")
    with pytest.raises(devbuf.PluginError, match="no such device"):
        devbuf.device("devbuf.sim:99")
    with pytest.raises(TypeError):
        devbuf.device(0)


def test_plugins_and_reasons():
    ps = devbuf.plugins()
    names = {p.name: p for p in ps}
    assert names["cpu"].loaded and names["cpu"].device_count == 1
    assert "cpu" in names["cpu"].identifiers
    for p in ps:
        assert p.state in ("loaded", "failed", "unregistered")
        if p.loaded and p.device_count == 0:
            assert p.device_error  # says why there is no device
        if p.state == "failed":
            assert p.reason


def test_load_plugin_failure_is_plugin_error(tmp_path):
    bogus = tmp_path / "devbuf_plugin_bogus.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(devbuf.PluginError) as ei:
        devbuf.load_plugin(bogus)
    assert str(bogus) in str(ei.value) or "bogus" in str(ei.value)
    assert any(p.path == str(bogus) and p.state == "failed" for p in devbuf.plugins())


def test_load_plugin_again_by_path(devbuf_build):
    so = devbuf_build / "lib" / "devbuf" / "plugins" / "devbuf_plugin_cpu.so"
    if not so.exists():
        pytest.skip("cpu plugin not built")
    # cpu is already loaded: the same file again gives back its record
    before = len(devbuf.plugins())
    p = devbuf.load_plugin(so)
    assert p.loaded and p.name == "cpu" and p.identifiers == ("cpu",)
    assert len(devbuf.plugins()) == before


@pytest.mark.thread_unsafe(reason="live_bytes is the plugin's, for the whole process: another thread's allocation counts in it")
def test_plugin_stats():
    s = devbuf.plugin_stats("cpu")
    assert set(s) == {"live_allocations", "live_bytes", "total_allocations", "live_streams",
                      "live_events", "live_host_allocations"}
    b = devbuf.empty(100, device="cpu")
    assert devbuf.plugin_stats("cpu")["live_bytes"] == s["live_bytes"] + 100
    b.free()
    assert devbuf.plugin_stats("cpu")["live_bytes"] == s["live_bytes"]
    with pytest.raises(devbuf.PluginError):
        devbuf.plugin_stats("nope")


def test_exception_hierarchy():
    assert issubclass(devbuf.PluginError, devbuf.Error)
    assert issubclass(devbuf.FormatError, devbuf.Error) and issubclass(devbuf.FormatError, ValueError)
    assert issubclass(devbuf.OutOfMemoryError, devbuf.PluginError)
    assert issubclass(devbuf.OutOfMemoryError, MemoryError)
    assert issubclass(devbuf.Error, Exception)
