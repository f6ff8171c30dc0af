"""devbuf.empty / from_host / DeviceBuffer: round trips, exports, discipline."""
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf

consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")


def test_sim_round_trip(sim):
    a = np.arange(1000, dtype=np.float64).reshape(10, 100)
    b = devbuf.from_host(a, device=sim)
    assert b.device is sim and b.shape == (10, 100) and b.strides == (800, 8)
    assert b.format == "d" and b.itemsize == 8 and b.nbytes == 8000 and b.ndim == 2
    assert b.readonly is False
    h = b.to_host()
    assert h.device == devbuf.device("cpu")
    np.testing.assert_array_equal(np.asarray(h), a)


def test_sim_round_trip_noncontiguous_source(sim):
    a = np.arange(60, dtype=np.int32).reshape(6, 10)[::2, 1::3]
    b = devbuf.from_host(a, device=sim)
    assert b.shape == a.shape and b.strides == (12, 4)
    np.testing.assert_array_equal(np.asarray(b.to_host()), a)


def test_sim_copies(sim):
    a = np.random.default_rng(1).integers(0, 255, 4096, dtype=np.uint8)
    b = devbuf.from_host(a, device="devbuf.sim")
    c = b.copy_to("devbuf.sim:0")  # same device: d2d after b's event
    d = c.copy_to("cpu")
    e = devbuf.from_host(d, device=sim).copy_to(None)  # None: the host
    for x in (c, d, e):
        assert x.shape == (4096,) and x.format == "B"
    np.testing.assert_array_equal(np.asarray(d), a)
    np.testing.assert_array_equal(np.asarray(e), a)
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)


def test_plain_request_on_sim_is_buffer_error_with_advice(sim):
    b = devbuf.empty((4, 4), "f", device=sim)
    for f in (memoryview, np.asarray, bytes):
        with pytest.raises(BufferError) as ei:
            f(b)
        msg = str(ei.value)
        assert "PyBUF_DEVICE" in msg and ".to_host()" in msg and "devbuf.sim:0" in msg
    assert b.exports == 0


def test_host_memory_serves_plain_buffer_protocol():
    b = devbuf.from_host(np.arange(6, dtype=np.int16).reshape(2, 3), device="cpu")
    m = memoryview(b)
    assert m.format == "h" and m.shape == (2, 3) and m.strides == (6, 2) and not m.readonly
    assert b.exports == 1
    m[1, 2] = 99
    np.testing.assert_array_equal(np.asarray(b), [[0, 1, 2], [3, 4, 99]])
    m.release()
    assert b.exports == 0
    # host memory stays a CPU buffer even when PyBUF_DEVICE is asked for
    r = consumer.inspect(b)
    assert r["is_device"] is False and r["flags"] == 0


def test_empty_shapes_and_formats():
    assert devbuf.empty(5).shape == (5,)
    z = devbuf.empty((), "d", device="cpu")
    assert z.shape == () and z.nbytes == 8 and z.ndim == 0
    assert devbuf.empty((3, 0), "i").nbytes == 0
    assert devbuf.empty(2, "T{i:a:d:b:}").itemsize == 16
    bf = devbuf.empty(3, "[devbuf$bfloat16]", device="cpu")
    assert bf.itemsize == 2 and bf.format == "[devbuf$bfloat16]"
    with pytest.raises(ValueError, match="negative"):
        devbuf.empty((-1,))
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.empty(3, "iiZ")
    assert ei.value.offset == 3 and isinstance(ei.value, ValueError)
    with pytest.raises(TypeError, match="device must be"):
        devbuf.empty(1, device=3.5)
    with pytest.raises(OverflowError):
        devbuf.empty((2**40, 2**40))


def test_readonly_buffers_refuse_writable_requests(sim):
    b = devbuf.from_host(b"abcd", device="cpu", readonly=True)
    assert b.readonly
    with pytest.raises(BufferError, match="read-only"):
        consumer.inspect(b, 0x1)
    assert memoryview(b).readonly
    s = devbuf.from_host(b"abcd", device=sim, readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        devbuf.view(s, writable=True)
    assert devbuf.view(s).readonly


def test_free_while_exported_is_buffer_error(sim):
    b = devbuf.from_host(bytearray(64), device=sim)
    held = consumer.Held(b)
    assert b.exports == 1
    with pytest.raises(BufferError, match="exported"):
        b.free()
    assert not b.freed
    held.release()
    held.release()  # once only
    assert b.exports == 0
    b.free()
    b.free()  # idempotent
    assert b.freed
    with pytest.raises(ValueError, match="freed"):
        b.to_host()
    with pytest.raises(BufferError, match="freed"):
        devbuf.view(b)


@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_context_manager_frees(sim):
    stats0 = devbuf.plugin_stats("sim")
    with devbuf.empty(1024, device=sim) as b:
        assert devbuf.plugin_stats("sim")["live_bytes"] == stats0["live_bytes"] + 1024
    assert b.freed
    assert devbuf.plugin_stats("sim")["live_bytes"] == stats0["live_bytes"]


def test_release_does_not_decref_obj():
    # The exporter's release must not drop the reference PyBuffer_Release owns.
    b = devbuf.from_host(bytearray(8), device="cpu")
    before = sys.getrefcount(b)
    for _ in range(100):
        memoryview(b).release()
        consumer.inspect(b)
    assert sys.getrefcount(b) == before


def _settle():
    gc.collect()


@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_stats_return_to_baseline(sim):
    # Warm up (first use maps the arena, starts workers), then loop.
    devbuf.from_host(bytearray(16), device=sim).to_host()
    _settle()
    base = devbuf.plugin_stats("sim")
    for i in range(200):
        b = devbuf.from_host(np.full(100, i, dtype=np.int32), device=sim)
        c = b.copy_to(sim)
        with devbuf.view(c) as v:
            h = v.to_host()
        assert np.asarray(h)[-1] == i
        if i % 2:
            b.free()
        del b, c, v, h
    _settle()
    after = devbuf.plugin_stats("sim")
    for k in ("live_allocations", "live_bytes", "live_streams", "live_events",
              "live_host_allocations"):
        assert after[k] == base[k], (k, base, after)
    assert after["total_allocations"] >= base["total_allocations"] + 400


def test_device_info_event_is_honoured_under_latency(devbuf_env):
    # With a slow simulated device, a consumer that reads without honouring
    # the exported event would see stale data; to_host() and the C consumer
    # through the runtime must not. Runs in a subprocess: the sim reads its
    # configuration once, at load.
    code = textwrap.dedent("""
        import numpy as np, devbuf, devbuf_capi_consumer as cc
        sim = devbuf.device("devbuf.sim")
        for i in range(5):
            a = np.full(1 << 16, i + 1, dtype=np.uint8)
            b = devbuf.from_host(a, device=sim)
            assert b.event is not None
            v = devbuf.view(b)
            assert v.sync.event == b.event and v.sync.identifier == "devbuf.sim"
            assert bytes(cc.read_bytes(b)) == a.tobytes()
            np.testing.assert_array_equal(np.asarray(v.to_host()), a)
        print("ok")
    """)
    env = dict(devbuf_env, DEVBUF_SIM_LATENCY_US="20000")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_out_of_memory_is_a_plugin_error(devbuf_env):
    code = textwrap.dedent("""
        import devbuf
        try:
            devbuf.empty(2 << 20, device="devbuf.sim")
        except devbuf.OutOfMemoryError as e:
            assert isinstance(e, MemoryError) and isinstance(e, devbuf.PluginError)
            print(e.code)
    """)
    env = dict(devbuf_env, DEVBUF_SIM_MEMORY_MB="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "DEVBUF_ENOMEM"


def test_concurrent_synchronize_frees_staging_once(devbuf_env):
    # Several threads wait on the same pending upload; its staging memory must
    # be freed exactly once (a double free crashes or shows in the stats).
    code = textwrap.dedent("""
        import threading, devbuf
        sim = devbuf.device("devbuf.sim")
        devbuf.from_host(bytearray(8), device=sim).synchronize()
        base = devbuf.plugin_stats("sim")["live_host_allocations"]
        for _ in range(5):
            b = devbuf.from_host(bytearray(1 << 16), device=sim)
            assert devbuf.plugin_stats("sim")["live_host_allocations"] == base + 1
            ts = [threading.Thread(target=b.synchronize) for _ in range(8)]
            for t in ts: t.start()
            for t in ts: t.join()
            assert devbuf.plugin_stats("sim")["live_host_allocations"] == base
            assert bytes(b.to_host()) == bytes(1 << 16)
        print("ok")
    """)
    env = dict(devbuf_env, DEVBUF_SIM_LATENCY_US="20000")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


@pytest.mark.parametrize("dev", ["cpu", "devbuf.sim"])
def test_zero_dimensional_buffers_keep_their_shape(dev):
    a = np.array(3.5)
    b = devbuf.from_host(a, device=dev)
    assert b.shape == () and b.nbytes == 8
    h = b.to_host()
    assert h.shape == ()
    assert np.asarray(h) == a
    v = devbuf.view(a)
    assert v.shape == () and np.asarray(v.to_host()) == a
    v.release()
    b.free()
