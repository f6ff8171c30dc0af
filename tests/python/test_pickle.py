"""Pickling DeviceBuffer and DeviceView (PEP 574): protocols 0-5, out-of-band
buffers, copies counted, metadata, the unpickle policy for missing devices.
docs/pickle-and-distributed.md describes the behaviour tested here."""
import copy
import ctypes
import gc
import os
import pickle
import pickletools
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import devbuf
from devbuf import _devbuf

PROTOCOLS = list(range(0, pickle.HIGHEST_PROTOCOL + 1))


@pytest.fixture(params=["cpu", "devbuf.sim"])
def device(request, sim):
    return devbuf.device(request.param)


@pytest.fixture(autouse=True)
def _default_policy():
    old = devbuf.set_unpickle_policy("error")
    yield
    devbuf.set_unpickle_policy(old)


def stats():
    return _devbuf._pickle_stats()


# Process-wide state that a test asserts exactly: under pytest-run-parallel
# the same test's other threads change it between the reset and the check.
STATS_UNSAFE = pytest.mark.thread_unsafe(
    reason="asserts the process-wide pickle statistics (_devbuf._pickle_stats), "
           "which the same test's pickles on other threads change")
POLICY_UNSAFE = pytest.mark.thread_unsafe(
    reason="sets the process-wide unpickle policy (set_unpickle_policy), "
           "which the same test reads on other threads")


def address_of(buf):
    """Address of the first byte of any (read-only or writable) buffer."""
    return np.frombuffer(memoryview(buf).cast("B"), np.uint8).ctypes.data


def values(buf):
    return np.asarray(buf.to_host() if not buf.device.host_accessible else buf)


def sample(shape=(3, 5), dtype="<f8"):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def opcodes(data):
    return [op.name for op, _, _ in pickletools.genops(data)]


def same_metadata(a, b):
    assert (a.shape, a.strides, a.format, a.itemsize, a.readonly) == \
        (b.shape, b.strides, b.format, b.itemsize, b.readonly)
    assert (a.device.identifier, a.device.ordinal) == (b.device.identifier, b.device.ordinal)


# ---- round trips ---------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("readonly", [False, True])
def test_round_trip_in_band(device, protocol, readonly):
    a = sample()
    b = devbuf.from_host(a, device=device, readonly=readonly)
    data = pickle.dumps(b, protocol=protocol)
    c = pickle.loads(data)
    assert type(c) is devbuf.DeviceBuffer
    same_metadata(b, c)
    np.testing.assert_array_equal(values(c), a)
    # in-band: the payload is inside the stream
    assert len(data) > a.nbytes
    assert "NEXT_BUFFER" not in opcodes(data)


@pytest.mark.parametrize("readonly", [False, True])
def test_round_trip_out_of_band(device, readonly):
    a = sample((4, 6), "<i4")
    b = devbuf.from_host(a, device=device, readonly=readonly)
    bufs = []
    data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    assert len(bufs) == 1 and isinstance(bufs[0], pickle.PickleBuffer)
    ops = opcodes(data)
    assert "NEXT_BUFFER" in ops
    assert ("READONLY_BUFFER" in ops) == readonly
    assert len(data) < 400  # metadata only
    assert memoryview(bufs[0]).nbytes == a.nbytes
    assert memoryview(bufs[0]).readonly == readonly
    c = pickle.loads(data, buffers=bufs)
    same_metadata(b, c)
    np.testing.assert_array_equal(values(c), a)
    # buffers= is required once a buffer_callback took the buffers out
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_buffer_callback_may_keep_buffers_in_band(device):
    a = sample()
    b = devbuf.from_host(a, device=device)
    seen = []
    data = pickle.dumps(b, protocol=5, buffer_callback=lambda pb: seen.append(pb) or True)
    assert len(seen) == 1 and "NEXT_BUFFER" not in opcodes(data)
    np.testing.assert_array_equal(values(pickle.loads(data)), a)


def test_protocol_5_without_callback_is_in_band_once(device):
    a = sample((256, 256), "<f4")
    b = devbuf.from_host(a, device=device)
    data = pickle.dumps(b, protocol=5)
    assert "BYTEARRAY8" in opcodes(data)  # a writable PickleBuffer in-band
    np.testing.assert_array_equal(values(pickle.loads(data)), a)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_view_round_trip(device, protocol):
    a = sample((4, 3), "<u2")
    b = devbuf.from_host(a, device=device, readonly=True)
    v = devbuf.view(b)
    bufs = []
    kw = {"buffer_callback": bufs.append} if protocol == 5 else {}
    data = pickle.dumps(v, protocol=protocol, **kw)
    w = pickle.loads(data, buffers=bufs) if bufs else pickle.loads(data)
    assert type(w) is devbuf.DeviceView
    assert (w.shape, w.strides, w.format, w.readonly) == (v.shape, v.strides, v.format, True)
    assert w.device.identifier == v.device.identifier and w.device.ordinal == v.device.ordinal
    np.testing.assert_array_equal(np.asarray(w.to_host()), a)


def test_view_of_host_exporter_and_strided_view():
    a = np.arange(24, dtype="<i8").reshape(4, 6)
    v = devbuf.view(a[:, ::2])
    assert not v.c_contiguous
    fn, (meta, _) = v.__reduce_ex__(5)
    assert meta["identifier"] == "cpu" and meta["source_strides"] == (48, 16)
    for protocol in (4, 5):
        w = pickle.loads(pickle.dumps(v, protocol=protocol))
        assert w.c_contiguous and w.shape == (4, 3) and w.format == v.format
        np.testing.assert_array_equal(np.asarray(w), a[:, ::2])
    # a 2-D Fortran-ordered producer comes back in C order with the same values
    f = np.asfortranarray(a)
    w = pickle.loads(pickle.dumps(devbuf.view(f), protocol=5))
    np.testing.assert_array_equal(np.asarray(w), a)


def test_zero_size_and_zero_dim(device):
    for shape in [(0,), (3, 0), ()]:
        b = devbuf.empty(shape, "<f", device=device)
        for protocol in (2, 5):
            bufs = []
            kw = {"buffer_callback": bufs.append} if protocol == 5 else {}
            c = pickle.loads(pickle.dumps(b, protocol=protocol, **kw), buffers=bufs or None)
            same_metadata(b, c)


def test_zero_dim_value(device):
    fn, (meta, payload) = devbuf.from_host(np.array([7.5]), device=device).__reduce_ex__(5)
    b = fn(dict(meta, shape=()), payload)  # from_host flattens 0-d sources; relabel
    assert b.shape == ()
    c = pickle.loads(pickle.dumps(b, protocol=5))
    assert c.shape == () and values(c).ravel().tolist() == [7.5]


def test_copy_and_deepcopy(device):
    a = sample()
    b = devbuf.from_host(a, device=device)
    for c in (copy.copy(b), copy.deepcopy(b)):
        same_metadata(b, c)
        assert c.ptr != b.ptr
        np.testing.assert_array_equal(values(c), a)


def test_freed_buffer_refuses():
    b = devbuf.from_host(sample())
    b.free()
    for protocol in (4, 5):
        with pytest.raises((ValueError, BufferError)):
            pickle.dumps(b, protocol=protocol)


def test_released_view_refuses():
    v = devbuf.view(sample())
    v.release()
    with pytest.raises(ValueError):
        pickle.dumps(v, protocol=5)


# ---- zero copies for host memory, sharing with buffers= ---------------------------------

@STATS_UNSAFE
@pytest.mark.parametrize("readonly", [False, True])
def test_host_memory_goes_out_as_itself(readonly):
    a = sample((64, 64))
    b = devbuf.from_host(a, device="cpu", readonly=readonly)
    _devbuf._pickle_stats_reset()
    bufs = []
    data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    assert address_of(bufs[0]) == b.ptr  # the memory itself, not a copy
    c = pickle.loads(data, buffers=bufs)
    # the unpickled buffer IS the original memory (PEP 574, "Data sharing")
    assert c.ptr == b.ptr and c.readonly == readonly
    assert np.shares_memory(np.asarray(c), np.asarray(b))
    s = stats()
    assert s["d2h_copies"] == 0 and s["host_copies"] == 0 and s["borrowed"] == 1
    if not readonly:
        np.asarray(c)[0, 0] = -1.0
        assert np.asarray(b)[0, 0] == -1.0
    else:
        with pytest.raises((ValueError, BufferError)):
            np.asarray(c)[0, 0] = -1.0


def test_borrowed_buffer_keeps_lender_alive_and_locked():
    a = sample((8,), "<i4")
    lender = bytearray(a.tobytes())
    fn, (meta, _) = devbuf.from_host(a).__reduce_ex__(5)
    c = fn(meta, lender)
    assert c.ptr == address_of(lender)
    with pytest.raises(BufferError):
        lender.extend(b"x")  # exported: cannot move
    c.free()
    lender.extend(b"x")  # given back on free()
    d = fn(meta, bytearray(a.tobytes()))
    del fn
    gc.collect()
    np.testing.assert_array_equal(np.asarray(d), a)  # the lender lives as long as d


@STATS_UNSAFE
def test_read_only_payload_for_writable_buffer_is_copied():
    # A transport may hand back read-only memory (bytes) for a writable buffer:
    # the rebuild copies once instead of exporting a writable view of it.
    a = sample((4,), "<f4")
    fn, (meta, _) = devbuf.from_host(a).__reduce_ex__(5)
    payload = a.tobytes()
    _devbuf._pickle_stats_reset()
    c = fn(meta, payload)
    assert not c.readonly and c.ptr != address_of(payload)
    assert stats()["host_copies"] == 1
    np.asarray(c)[0] = 9
    assert payload == a.tobytes()


def test_payload_size_mismatch():
    fn, (meta, _) = devbuf.from_host(sample()).__reduce_ex__(5)
    with pytest.raises(ValueError, match="payload has 8 bytes"):
        fn(meta, bytearray(8))


def test_unknown_metadata_version():
    fn, (meta, payload) = devbuf.from_host(sample()).__reduce_ex__(5)
    with pytest.raises(pickle.UnpicklingError, match="version 99"):
        fn(dict(meta, v=99), payload)


# ---- device memory: exactly one device->host copy ------------------------------------------

@STATS_UNSAFE
@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them; tracemalloc is process-wide: another thread's start, stop or allocations change what it measures")
def test_device_memory_copied_exactly_once(sim):
    n = 8 << 20
    a = np.random.default_rng(1).integers(0, 255, n, dtype=np.uint8)
    b = devbuf.from_host(a, device=sim)
    b.synchronize()
    cpu_before = devbuf.plugin_stats("cpu")["total_allocations"]
    sim_before = devbuf.plugin_stats("sim")
    _devbuf._pickle_stats_reset()
    tracemalloc.start()
    try:
        bufs = []
        data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    s = stats()
    # one device->host copy, of exactly the buffer's bytes ...
    assert s["d2h_copies"] == 1 and s["d2h_bytes"] == n
    assert s["host_copies"] == 0
    # ... into host staging memory from the sim plugin (devbuf_host_alloc) ...
    staging = memoryview(bufs[0]).obj
    assert isinstance(staging, devbuf.HostStaging) and staging.device.identifier == "devbuf.sim"
    assert address_of(bufs[0]) == staging.ptr and staging.nbytes == n
    assert devbuf.plugin_stats("sim")["live_host_allocations"] == \
        sim_before["live_host_allocations"] + 1
    # ... and nothing else: no host buffer from to_host(), no Python-heap copy,
    # and the pickle stream holds metadata only.
    assert devbuf.plugin_stats("cpu")["total_allocations"] == cpu_before
    assert peak < n // 8
    assert len(data) < 400
    np.testing.assert_array_equal(np.frombuffer(bufs[0], np.uint8), a)
    c = pickle.loads(data, buffers=bufs)
    assert c.device.identifier == "devbuf.sim" and c.ptr != b.ptr
    s = stats()
    assert s["d2h_copies"] == 1 and s["h2d_copies"] == 1 and s["h2d_bytes"] == n
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)
    del bufs, staging
    gc.collect()
    assert devbuf.plugin_stats("sim")["live_host_allocations"] == \
        sim_before["live_host_allocations"]


@STATS_UNSAFE
@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_device_memory_in_band_copied_once(sim, protocol):
    a = sample((128, 128))
    b = devbuf.from_host(a, device=sim)
    cpu_before = devbuf.plugin_stats("cpu")["total_allocations"]
    _devbuf._pickle_stats_reset()
    data = pickle.dumps(b, protocol=protocol)
    s = stats()
    assert s["d2h_copies"] == 1 and s["d2h_bytes"] == a.nbytes and s["host_copies"] == 0
    assert devbuf.plugin_stats("cpu")["total_allocations"] == cpu_before
    np.testing.assert_array_equal(values(pickle.loads(data)), a)


@STATS_UNSAFE
def test_staging_cache_off_by_default():
    if os.environ.get("DEVBUF_PICKLE_STAGING_CACHE_MB"):
        pytest.skip("DEVBUF_PICKLE_STAGING_CACHE_MB is set")
    assert _devbuf._pickle_staging_cache() == 0


@STATS_UNSAFE
@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_staging_cache_reuses_one_block(sim):
    n = 4 << 20
    a = np.random.default_rng(2).integers(0, 255, n, dtype=np.uint8)
    b = devbuf.from_host(a, device=sim)
    b.synchronize()
    live = lambda: devbuf.plugin_stats("sim")["live_host_allocations"]  # noqa: E731
    base = live()
    old = _devbuf._pickle_staging_cache(64 << 20)
    try:
        _devbuf._pickle_stats_reset()
        bufs = []
        pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
        first = memoryview(bufs[0]).obj.ptr
        del bufs
        gc.collect()
        assert stats()["staging_cached_bytes"] == n and live() == base + 1  # kept, not freed
        bufs = []
        pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
        st = memoryview(bufs[0]).obj
        assert st.ptr == first and stats()["staging_cache_hits"] == 1
        assert stats()["staging_cached_bytes"] == 0 and live() == base + 1
        np.testing.assert_array_equal(np.frombuffer(bufs[0], np.uint8), a)
        assert stats()["d2h_copies"] == 2  # still one copy per pickle
        # a payload under half the block's size does not take it
        del bufs, st
        gc.collect()
        small = devbuf.from_host(a[: n // 4], device=sim)
        small.synchronize()  # frees the upload's own staging memory
        bufs = []
        pickle.dumps(small, protocol=5, buffer_callback=bufs.append)
        assert memoryview(bufs[0]).obj.ptr != first and stats()["staging_cache_hits"] == 1
        del bufs
        gc.collect()
    finally:
        _devbuf._pickle_staging_cache(old)  # 0 gives the cached block back
    assert stats()["staging_cached_bytes"] == 0 and live() == base


def test_staging_cache_env(devbuf_env):
    env = dict(devbuf_env, DEVBUF_PICKLE_STAGING_CACHE_MB="16")
    code = "from devbuf import _devbuf; print(_devbuf._pickle_staging_cache())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.decode().strip() == str(16 << 20), r.stderr
    env["DEVBUF_PICKLE_STAGING_CACHE_MB"] = "lots"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert r.returncode != 0 and b"DEVBUF_PICKLE_STAGING_CACHE_MB='lots'" in r.stderr


def test_pickle_waits_for_pending_upload(sim):
    # The upload into sim is asynchronous; the download must honour its event.
    a = np.arange(1 << 20, dtype=np.uint32)
    for _ in range(3):
        b = devbuf.from_host(a, device=sim)
        bufs = []
        pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
        np.testing.assert_array_equal(np.frombuffer(bufs[0], np.uint32), a)


def test_threads_pickle_one_buffer(device):
    """Downloads release the GIL with the buffer pinned: concurrent pickles of
    one buffer all see its contents, and free() is refused meanwhile or after."""
    a = np.arange(1 << 16, dtype="<f8")
    b = devbuf.from_host(a, device=device)
    errors = []

    def work():
        try:
            for _ in range(50):
                bufs = []
                c = pickle.loads(pickle.dumps(b, protocol=5, buffer_callback=bufs.append),
                                 buffers=bufs)
                np.testing.assert_array_equal(values(c), a)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)


@STATS_UNSAFE
def test_device_view_out_of_band(sim):
    a = sample((16, 8), "<f4")
    v = devbuf.view(devbuf.from_host(a, device=sim))
    _devbuf._pickle_stats_reset()
    bufs = []
    data = pickle.dumps(v, protocol=5, buffer_callback=bufs.append)
    assert stats()["d2h_copies"] == 1
    assert isinstance(memoryview(bufs[0]).obj, devbuf.HostStaging)
    w = pickle.loads(data, buffers=bufs)
    assert w.identifier == "devbuf.sim" and w.shape == (16, 8)
    np.testing.assert_array_equal(np.asarray(w.to_host()), a)


# ---- metadata: custom dtypes, formats ------------------------------------------------------

@pytest.mark.parametrize("fmt, shape", [
    ("[devbuf$bfloat16]", (4, 2)),
    ("[acme$x;devbuf$float8_e4m3fn]", (6,)),
    ("T{<i:a:<d:b:}", (3,)),
    ("[struct$<hh]", (5,)),
    (">Q", (2, 2)),
])
@pytest.mark.parametrize("protocol", [2, 5])
def test_custom_dtype_formats_preserved(device, fmt, shape, protocol):
    itemsize = devbuf.parse_format(fmt).itemsize
    raw = np.random.default_rng(0).integers(0, 255, itemsize * int(np.prod(shape)), np.uint8)
    # raw bytes on the device, labelled with `fmt` through the rebuild function
    fn, (meta, payload) = devbuf.from_host(raw, device=device).__reduce_ex__(5)
    b = fn(dict(meta, format=fmt, shape=shape, itemsize=itemsize), payload)
    assert (b.format, b.shape, b.itemsize) == (fmt, shape, itemsize)
    bufs = []
    kw = {"buffer_callback": bufs.append} if protocol == 5 else {}
    c = pickle.loads(pickle.dumps(b, protocol=protocol, **kw), buffers=bufs or None)
    same_metadata(b, c)
    got = np.frombuffer(memoryview(c.to_host()).cast("B"), np.uint8)
    np.testing.assert_array_equal(got, raw)


def test_unknown_custom_dtype_round_trips_in_another_process(devbuf_env):
    """A namespace registered only in the dumping process: the loader keeps
    the format verbatim and uses the pickled item size."""
    ns = f"acmepk{threading.get_ident()}"  # one per thread: run-parallel runs it in several
    devbuf.register_dtype_namespace(
        ns, lambda p: {"kind": "uint", "itemsize": 3, "alignment": 1, "bits": 24}
        if p == "u24" else None)
    try:
        b = devbuf.empty((2, 4), f"[{ns}$u24]", device="cpu")
        np.frombuffer(memoryview(b).cast("B"), np.uint8)[:] = np.arange(24, dtype=np.uint8)
        data = pickle.dumps(b, protocol=5)
    finally:
        devbuf.unregister_dtype_namespace(ns)
    code = (
        "import pickle, sys, devbuf\n"
        "b = pickle.loads(sys.stdin.buffer.read())\n"
        f"assert not any(n['id'] == {ns!r} for n in devbuf.dtype_namespaces())\n"
        "print(b.format, b.shape, b.itemsize, bytes(memoryview(b).cast('B')).hex())\n")
    r = subprocess.run([sys.executable, "-c", code], input=data, env=devbuf_env,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().split() == [f"[{ns}$u24]", "(2,", "4)", "3", bytes(range(24)).hex()]


# ---- the unpickle policy ------------------------------------------------------------------

class _Relabel:
    """Pickles as the reduce tuple of `obj` with metadata fields replaced:
    the loader then sees a device that may not exist here."""

    def __init__(self, obj, **fields):
        self.obj, self.fields = obj, fields

    def __reduce_ex__(self, protocol):
        fn, (meta, payload) = self.obj.__reduce_ex__(protocol)
        return fn, (dict(meta, **self.fields), payload)


@pytest.mark.parametrize("kind", ["buffer", "view"])
@pytest.mark.parametrize("protocol", [2, 5])
def test_missing_identifier_error_policy(device, kind, protocol):
    b = devbuf.from_host(sample(), device=device)
    obj = devbuf.view(b) if kind == "view" else b
    data = pickle.dumps(_Relabel(obj, identifier="example.absent", ordinal=2), protocol=protocol)
    assert devbuf.get_unpickle_policy() == "error"
    with pytest.raises(devbuf.MissingDeviceError) as ei:
        pickle.loads(data)
    e = ei.value
    assert isinstance(e, pickle.UnpicklingError) and isinstance(e, devbuf.Error)
    assert e.identifier == "example.absent" and e.ordinal == 2
    msg = str(e)
    assert "'example.absent:2'" in msg and "not registered in this process" in msg
    assert "set_unpickle_policy('host')" in msg and "devbuf.sim" in msg


@pytest.mark.parametrize("kind", ["buffer", "view"])
@pytest.mark.parametrize("readonly", [False, True])
def test_missing_identifier_host_policy(device, kind, readonly):
    a = sample((5, 2), "<i2")
    b = devbuf.from_host(a, device=device, readonly=readonly)
    obj = devbuf.view(b) if kind == "view" else b
    bufs = []
    data = pickle.dumps(_Relabel(obj, identifier="example.absent"), protocol=5,
                        buffer_callback=bufs.append)
    with devbuf.unpickle_policy("host"):
        c = pickle.loads(data, buffers=bufs)
    assert c.device.identifier == "cpu"
    assert (c.shape, c.format, c.readonly) == ((5, 2), b.format, readonly)
    np.testing.assert_array_equal(np.asarray(c), a)
    assert devbuf.get_unpickle_policy() == "error"  # the block ended


@POLICY_UNSAFE
def test_missing_ordinal_follows_policy(sim):
    b = devbuf.from_host(sample(), device=sim)
    data = pickle.dumps(_Relabel(b, ordinal=63), protocol=5)
    with pytest.raises(devbuf.MissingDeviceError, match="'devbuf.sim' has no device 63"):
        pickle.loads(data)
    devbuf.set_unpickle_policy("host")
    c = pickle.loads(data)
    assert c.device.identifier == "cpu"
    np.testing.assert_array_equal(np.asarray(c), sample())


@POLICY_UNSAFE
def test_policy_api():
    assert devbuf.set_unpickle_policy("host") == "error"
    assert devbuf.get_unpickle_policy() == "host"
    with devbuf.unpickle_policy("error"):
        assert devbuf.get_unpickle_policy() == "error"
        with devbuf.unpickle_policy("host"):
            assert devbuf.get_unpickle_policy() == "host"
        assert devbuf.get_unpickle_policy() == "error"
    assert devbuf.get_unpickle_policy() == "host"
    for bad in ("device", "", None):
        with pytest.raises(ValueError, match="unknown unpickle policy"):
            devbuf.set_unpickle_policy(bad)
        with pytest.raises(ValueError):
            with devbuf.unpickle_policy(bad):
                pass


def test_policy_context_is_per_thread():
    seen = {}
    inside = threading.Event()
    done = threading.Event()

    def other():
        inside.wait(5)
        seen["other"] = devbuf.get_unpickle_policy()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with devbuf.unpickle_policy("host"):
        inside.set()
        done.wait(5)
    t.join(5)
    assert seen["other"] == "error"


def _run_loader(data, env, policy=None, extra=""):
    env = dict(env)
    env["DEVBUF_NO_DEFAULT_PLUGINS"] = "1"  # no plugin at all: only the host
    env.pop("DEVBUF_PLUGINS", None)
    env.pop("DEVBUF_PLUGIN_PATH", None)
    if policy:
        env["DEVBUF_UNPICKLE_POLICY"] = policy
    code = (
        "import pickle, sys, devbuf, numpy as np\n"
        "assert not devbuf.plugins(), devbuf.plugins()\n"
        "try:\n"
        "    b = pickle.loads(sys.stdin.buffer.read())\n"
        "except devbuf.MissingDeviceError as e:\n"
        "    print('MissingDeviceError', e.identifier, e.ordinal)\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
        "print(b.device.identifier, b.format, b.shape, b.readonly, np.asarray(b).tolist())\n"
        + extra)
    return subprocess.run([sys.executable, "-c", code], input=data, env=env,
                          capture_output=True, timeout=60)


@pytest.mark.parametrize("readonly", [False, True])
def test_missing_device_in_another_process(sim, devbuf_env, readonly):
    """The real case: pickled on devbuf.sim, loaded where no plugin is loaded."""
    b = devbuf.from_host(np.arange(6, dtype="<i4").reshape(2, 3), device=sim, readonly=readonly)
    data = pickle.dumps(b, protocol=5)
    r = _run_loader(data, devbuf_env)  # default policy: error
    assert r.returncode == 3, r.stderr.decode()
    out = r.stdout.decode()
    assert out.startswith("MissingDeviceError devbuf.sim 0")
    assert "'devbuf.sim' is not registered in this process" in out and "registered here: cpu" in out
    r = _run_loader(data, devbuf_env, policy="host")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == f"cpu {b.format} (2, 3) {readonly} [[0, 1, 2], [3, 4, 5]]"
    r = _run_loader(data, devbuf_env, policy="bogus")
    assert r.returncode != 0 and b"DEVBUF_UNPICKLE_POLICY='bogus'" in r.stderr


def test_same_device_in_another_process(sim, devbuf_env):
    b = devbuf.from_host(np.arange(4, dtype="<f8"), device=sim)
    code = ("import pickle, sys, numpy as np\n"
            "b = pickle.loads(sys.stdin.buffer.read())\n"
            "print(b.device.identifier, b.device.ordinal, np.asarray(b.to_host()).tolist())\n")
    r = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(b, protocol=5),
                       env=devbuf_env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == "devbuf.sim 0 [0.0, 1.0, 2.0, 3.0]"
