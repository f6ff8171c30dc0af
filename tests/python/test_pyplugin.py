"""Python plugins through libffi (devbuf.plugin): registration, use through the
bindings and the runtime, the rules at the boundary (exceptions, lifetimes,
refcounts, threads)."""
import gc
import pickle
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import devbuf
import devbuf.plugin as P
from pyplugin_helpers import (
    Faulty,
    MmapDevice,
    Runtime,
    RuntimeError_,
    device_count,
    fresh_id,
    stats,
)

_pp = P._pyplugin


@pytest.fixture
def reg():
    """A freshly registered MmapDevice under a new identifier and name."""
    ident = fresh_id()
    plugin = MmapDevice(identifiers=(ident,), name=ident.replace(".", "_"))
    r = P.register_plugin(plugin)
    r.ident = ident
    yield r
    if r.registered:
        gc.collect()
        r.unregister()


def test_registration_is_a_runtime_record(reg):
    info = reg.info
    assert info.state == "loaded" and info.source == "registered"
    assert info.path == "<registered: python:python_plugin_mmap.MmapDevice>"
    assert info.identifiers == (reg.ident,) and info.abi == devbuf.runtime_version()["abi"]
    assert info.name == reg.name and info.version == "1.0.0"
    assert info.device_count == 2 and info.device_error is None
    assert [p.index for p in devbuf.plugins() if p.name == reg.name] == [reg.index]
    assert reg in P.registrations() and reg.plugin.identifiers == (reg.ident,)
    # Every slot the class implements is a closure with its own C address.
    names = [c.name for c in reg.table.closures]
    assert set(P.MANDATORY_SLOTS) <= set(names)
    assert {"device_info_export", "device_info_import", "ext:mapping_info"} <= set(names)
    assert "init" not in names and "host_alloc" not in names
    addrs = [c.address for c in reg.table.closures]
    assert all(isinstance(a, int) and a for a in addrs) and len(set(addrs)) == len(addrs)


def test_device_buffer_round_trip(reg):
    dev = devbuf.device(f"{reg.ident}:1")
    assert dev.name == "mmap device 1"
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = devbuf.from_host(a, device=dev)
    assert b.device is dev and b.shape == (4, 6) and b.format == "f"
    np.testing.assert_array_equal(np.asarray(b.to_host()), a)
    c = b.copy_to(dev)  # copy_d2d through the closure
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)
    # The memory really is the mapping the plugin handed out.
    assert P.call_ext(reg.name, "mapping_info", b.ptr) == (a.nbytes, 1)
    assert P.call_ext(reg.name, "mapping_info", c.ptr + 7) == (a.nbytes, 1)
    st = devbuf.plugin_stats(reg.name)
    assert st["live_allocations"] >= 2
    b.free()
    c.free()


def test_views_and_dlpack(reg):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = devbuf.from_host(a, device=reg.ident)
    v = devbuf.view(b)
    assert v.device.identifier == reg.ident and v.shape == (3, 4) and v.format == "i"
    np.testing.assert_array_equal(np.asarray(v.to_host()), a)
    v.release()
    # Identifiers outside the runtime's built-in table (core/src/dlpack.c) take
    # their DLPack device type from the plugin's device_props: the mmap plugin
    # says kDLCPU (its memory is host memory), so NumPy can import it.
    assert b.device.dlpack_device == (1, 0)
    n = np.from_dlpack(b)
    np.testing.assert_array_equal(n, a)
    del n
    b.free()


def test_python_plugin_stands_in_for_a_c_one(devbuf_env, tmp_path):
    """Without the default plugins, the Python example registers under the C
    sim plugin's identifier: the runtime cannot tell, DLPack maps it (kDLExtDev)
    and devbuf.from_dlpack imports it back; the conformance suite checks the
    devbuf.* device_info layout on the Python importer."""
    script = tmp_path / "standin.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(__import__('pyplugin_helpers').REPO / 'docs' / 'examples')!r})
        import devbuf, devbuf.plugin
        from python_plugin_mmap import MmapDevice
        assert "devbuf.sim" not in [i for p in devbuf.plugins() for i in p.identifiers]
        reg = devbuf.plugin.register_plugin(MmapDevice(identifiers=("devbuf.sim",), name="pysim"))
        a = np.arange(20, dtype=np.float64)
        b = devbuf.from_host(a, device="devbuf.sim")
        assert b.device.plugin == "pysim", b.device.plugin
        v = devbuf.from_dlpack(b)
        assert v.device.identifier == "devbuf.sim" and v.shape == (20,), v
        np.testing.assert_array_equal(np.asarray(v.to_host()), a)
        assert b.__dlpack_device__() == (12, 0)
        v.release(); b.free(); del v, b
        r = devbuf.plugin.run_conformance("devbuf.sim")
        print(r.output)
        assert r.passed
        assert r.results["device_info_invalid"] == ("PASS", "12 corruptions refused"), r.results
        reg.unregister()
        print("OK")
    """))
    env = dict(devbuf_env, DEVBUF_NO_DEFAULT_PLUGINS="1")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("OK")


def test_pickle_round_trip(reg):
    b = devbuf.from_host(np.arange(10, dtype=np.int64), device=reg.ident)
    try:
        data = pickle.dumps(b, protocol=5)
    except TypeError as e:
        pytest.skip(f"the bindings do not pickle DeviceBuffer yet: {e}")
    c = pickle.loads(data)
    assert c.device.identifier == reg.ident
    np.testing.assert_array_equal(np.asarray(c.to_host()), np.arange(10))


@pytest.mark.thread_unsafe(reason="counts what one registration holds, and pytest-run-parallel gives the threads of a test one set of fixtures")
def test_unregister_refused_while_memory_is_alive(reg):
    b = devbuf.empty(64, device=reg.ident)
    with pytest.raises(devbuf.PluginError) as ei:
        reg.unregister()
    assert ei.value.code == "DEVBUF_EBUSY" and "1 allocation(s)" in str(ei.value)
    assert reg.registered and reg.info.state == "loaded"
    b2 = devbuf.from_host(b"still works", device=reg.ident)  # nothing was torn down
    assert bytes(b2.to_host()) == b"still works"
    b.free()
    b2.free()
    rt = Runtime(reg.ident)
    s, e = rt.stream_create(), rt.event_create()
    with pytest.raises(devbuf.PluginError, match=r"0 allocation\(s\), 1 stream\(s\), 1 event\(s\)"):
        reg.unregister()
    rt.stream_destroy(s)
    with pytest.raises(devbuf.PluginError, match=r"0 stream\(s\), 1 event\(s\)"):
        reg.unregister()
    rt.event_destroy(e)
    reg.unregister()
    assert not reg.registered and reg.info.state == "unregistered"
    assert reg.table.closures == () and reg.table.plugin is None and reg.plugin is None
    # The identifier no longer resolves, and a stale device handle is refused.
    rc, _, msg = device_count(reg.ident)
    assert rc == P.ENOTFOUND and reg.ident in msg
    with pytest.raises(RuntimeError_) as ei:
        rt.alloc(16)
    assert ei.value.code == P.ENODEV and "no longer registered" in ei.value.message


@pytest.mark.thread_unsafe(reason="counts the live closures of the whole process, which other threads' registrations add to")
def test_refcounts_back_to_baseline():
    gc.collect()
    live0 = _pp._live_closures()
    class Probe(MmapDevice):  # its own function objects: no other test shares them
        def device_count(self):
            return 2

    ident = fresh_id()
    plugin = Probe(identifiers=(ident,), name="refcount_probe")
    base = sys.getrefcount(plugin)
    dev_count_ref = sys.getrefcount(Probe.device_count)
    reg = P.register_plugin(plugin)
    assert _pp._live_closures() == live0 + len(reg.table.closures) + 1  # + the namespace
    assert sys.getrefcount(plugin) > base  # bound methods held by closures
    b = devbuf.from_host(b"x" * 100, device=ident)
    assert bytes(b.to_host()) == b"x" * 100
    b.free()
    del b
    closures = reg.table.closures
    reg.unregister()
    gc.collect()
    assert all(c.address is None and c.callable is None for c in closures)
    del closures
    # (computed outside `assert`: pytest's rewriting holds the operands)
    now, now_fn = sys.getrefcount(plugin), sys.getrefcount(Probe.device_count)
    assert now == base and now_fn == dev_count_ref
    assert _pp._live_closures() == live0
    assert ("plugin", reg.index) not in _pp._registry
    w = weakref.ref(plugin)
    del plugin
    gc.collect()
    assert w() is None


def test_registry_keeps_the_plugin_alive_while_registered():
    ident = fresh_id()
    plugin = MmapDevice(identifiers=(ident,), name=ident.replace(".", "_"))
    w = weakref.ref(plugin)
    reg = P.register_plugin(plugin)
    del plugin
    gc.collect()
    assert w() is not None  # C can still call it: it must not die
    assert bytes(devbuf.from_host(b"abc", device=ident).to_host()) == b"abc"
    gc.collect()
    reg.unregister()
    gc.collect()
    assert w() is None


def test_missing_operations_are_refused_before_registration():
    class Half(P.PythonPlugin):
        name = "half"
        identifiers = ("test.half",)

        def device_count(self):
            return 1

    with pytest.raises(TypeError, match="lacks the mandatory plugin operation.*mem_alloc"):
        P.register_plugin(Half())


@pytest.mark.thread_unsafe(reason="counts the live closures of the whole process, which other threads' registrations add to")
def test_refused_tables_leave_nothing_behind():
    live0 = _pp._live_closures()
    n0 = len(devbuf.plugins())
    taken = MmapDevice(identifiers=("devbuf.sim",), name="dup_sim")
    with pytest.raises(devbuf.Error) as ei:
        P.register_plugin(taken)
    assert ei.value.code == "DEVBUF_EEXIST" and "already implemented by plugin 'sim'" in str(ei.value)
    with pytest.raises(devbuf.PluginError) as ei:
        P.register_plugin(MmapDevice(identifiers=("cpu",), name="not_cpu"))
    assert ei.value.code == "DEVBUF_EABI" and "reserved" in str(ei.value)
    # A refused in-memory table gets its error back and leaves no record (the
    # runtime's records are never freed: a retry loop must not exhaust them).
    assert len(devbuf.plugins()) == n0
    assert _pp._live_closures() == live0
    assert P.registrations() == [r for r in P.registrations() if r.name not in ("dup_sim", "not_cpu")]


def test_init_and_shutdown_run_once():
    calls = []

    class Lifecycle(MmapDevice):
        def init(self):
            calls.append("init")

        def shutdown(self):
            calls.append("shutdown")

    ident = fresh_id()
    reg = P.register_plugin(Lifecycle(identifiers=(ident,), name=ident.replace(".", "_")))
    assert calls == ["init"]
    reg.unregister()
    assert calls == ["init", "shutdown"]


@pytest.mark.thread_unsafe(reason="counts the live closures of the whole process, which other threads' registrations add to")
def test_init_failure_is_the_registration_error():
    class BadInit(MmapDevice):
        def init(self):
            raise RuntimeError("no licence for this device")

    live0 = _pp._live_closures()
    with pytest.raises(devbuf.PluginError) as ei:
        P.register_plugin(BadInit(identifiers=(fresh_id(),), name="badinit"))
    msg = str(ei.value)
    assert ei.value.code == "DEVBUF_EINIT"
    assert "init failed" in msg and "RuntimeError: no licence for this device" in msg
    assert _pp._live_closures() == live0


# ---- exceptions in every operation ----------------------------------------------------

def _drive(rt, op, state):
    """Run the one runtime call that reaches plugin slot `op`."""
    if op == "device_props":
        return rt.props()
    if op == "mem_alloc":
        return rt.alloc(64)
    if op == "mem_free":
        return rt.free(state["ptr"])
    if op == "copy_h2d":
        return rt.h2d(state["ptr"], 0, b"abcd")
    if op == "copy_d2h":
        return rt.d2h(state["ptr"], 0, 4)
    if op == "copy_d2d":
        return rt.d2d(state["ptr"], 0, state["ptr"], 8, 4)
    if op == "stream_create":
        return rt.stream_create()
    if op == "stream_destroy":
        return rt.stream_destroy(state["stream"])
    if op == "stream_synchronize":
        return rt.stream_synchronize(state["stream"])
    if op == "event_create":
        return rt.event_create()
    if op == "event_destroy":
        return rt.event_destroy(state["event"])
    if op == "event_record":
        return rt.event_record(state["event"], state["stream"])
    if op == "stream_wait_event":
        return rt.stream_wait_event(state["stream"], state["event"])
    if op == "event_synchronize":
        return rt.event_synchronize(state["event"])
    if op == "event_query":
        return rt.event_query(state["event"])
    if op == "device_info_export":
        return rt.info_export(state["event"], state["stream"])
    if op == "device_info_import":
        return rt.info_import(state["blob"])
    raise AssertionError(op)


OPS = ["device_props", "mem_alloc", "mem_free", "copy_h2d", "copy_d2h", "copy_d2d",
       "stream_create", "stream_destroy", "stream_synchronize", "event_create", "event_destroy",
       "event_record", "stream_wait_event", "event_synchronize", "event_query",
       "device_info_export", "device_info_import"]


@pytest.fixture(scope="module")
def faulty_reg():
    # One registration for the many cases below: the runtime's plugin records
    # are never freed (256 per process).
    ident = fresh_id("test.faulty")
    plugin = Faulty(identifiers=(ident,), name=ident.replace(".", "_"))
    reg = P.register_plugin(plugin)
    yield plugin, reg, Runtime(ident)
    gc.collect()
    reg.unregister()


@pytest.fixture
def faulty(faulty_reg):
    plugin, reg, rt = faulty_reg
    plugin.faults.clear()
    plugin.replace.clear()
    state = {"ptr": rt.alloc(4096), "stream": rt.stream_create(), "event": rt.event_create()}
    state["blob"] = rt.info_export(state["event"], state["stream"])
    yield plugin, reg, rt, state
    plugin.faults.clear()
    plugin.replace.clear()
    rt.stream_synchronize(None)
    for k, f in (("ptr", rt.free), ("stream", rt.stream_destroy), ("event", rt.event_destroy)):
        try:
            f(state[k])
        except RuntimeError_:
            pass  # already gone (the op under test destroyed it)
    st = stats(reg.index)
    assert (st.live_allocations, st.live_streams, st.live_events) == (0, 0, 0)


# The threads of a run-parallel test share its fixtures, and so one pointer:
# while one thread's failing mem_free of it is in flight, another thread's free
# of the same pointer is refused as already freed, rightly.
OPS_ONE_POINTER = [pytest.param(op, marks=pytest.mark.thread_unsafe(
    reason="the threads share the fixture's one pointer, which only one can be freeing"))
    if op == "mem_free" else op for op in OPS]


@pytest.mark.parametrize("op", OPS_ONE_POINTER)
@pytest.mark.parametrize("exc, code, text", [
    (RuntimeError("boom"), P.ECALLBACK, "raised RuntimeError: boom"),
    (ZeroDivisionError("division by zero"), P.ECALLBACK, "raised ZeroDivisionError: division by zero"),
    (MemoryError("device full"), P.ENOMEM, "raised MemoryError: device full"),
    (KeyError("no such handle"), P.EINVAL, "raised KeyError: 'no such handle'"),
    (NotImplementedError("later"), P.ENOTSUP, "raised NotImplementedError: later"),
    (P.CallbackError("vendor said no", status=P.EBACKEND), P.EBACKEND, "vendor said no"),
])
def test_an_exception_in_any_operation_is_a_clean_error(faulty, op, exc, code, text):
    plugin, reg, rt, state = faulty
    plugin.faults[op] = exc
    with pytest.raises(RuntimeError_) as ei:
        _drive(rt, op, state)
    e = ei.value
    assert e.code == code, e
    assert text in e.message and f"{op}: " in e.message
    if not isinstance(exc, P.CallbackError):
        # The type, the text and where it was raised, and whose it was.
        assert f"python plugin '{reg.name}'" in e.message
        assert "pyplugin_helpers.py:" in e.message
    else:
        assert "CallbackError" not in e.message  # a deliberate status: the text alone
    # Nothing leaked into this thread, and the plugin still works.
    assert sys.exc_info() == (None, None, None)
    plugin.faults.clear()
    buf = rt.h2d(state["ptr"], 0, b"ok!!")
    rt.stream_synchronize(None)
    assert rt.d2h(state["ptr"], 0, 4).raw == b"ok!!"
    del buf


def test_device_count_reasons():
    class NoDev(MmapDevice):
        def device_count(self):
            raise P.NoDevice("the mmap driver is switched off")

    ident = fresh_id("test.nodev")
    reg = P.register_plugin(NoDev(identifiers=(ident,), name=ident.replace(".", "_")))
    rc, n, msg = device_count(ident)
    assert rc == P.ENODEV and n == 0 and msg.endswith("the mmap driver is switched off")
    assert reg.info.device_count == 0 and "switched off" in reg.info.device_error
    r = P.run_conformance(ident, allow_no_device=True)
    assert r.passed and "no device, because device_count: the mmap driver is switched off" in r.output
    reg.unregister()

    class Crashy(MmapDevice):
        def device_count(self):
            return {}["missing"]

    ident = fresh_id("test.crashy")
    reg = P.register_plugin(Crashy(identifiers=(ident,), name=ident.replace(".", "_")))
    rc, n, msg = device_count(ident)
    assert rc == P.EINVAL and "raised KeyError: 'missing'" in msg
    reg.unregister()


@pytest.mark.parametrize("op, value, code, text", [
    ("mem_alloc", "0x10", P.ECALLBACK, "expected an int handle or None, got str"),
    ("mem_alloc", 0, P.ECALLBACK, "a non-zero int handle is required"),
    ("mem_alloc", -5, P.ECALLBACK, "is not a pointer-sized unsigned value"),
    ("mem_alloc", 1 << 70, P.ECALLBACK, "is not a pointer-sized unsigned value"),
    ("event_create", None, P.ECALLBACK, "a non-zero int handle is required"),
    ("device_props", {"flags": {"fast"}}, P.EINVAL, "unknown flag 'fast'"),
    ("device_props", {"total_memory": -1}, P.ECALLBACK, "'total_memory' must be a non-negative int"),
    ("device_props", {"name": 7}, P.ECALLBACK, "'name' must be a str"),
    ("device_info_export", b"x" * 1000, P.EINVAL, "the device_info is 1000 bytes, the buffer holds 512"),
    ("device_info_export", 42, P.ECALLBACK, "must return a bytes-like object"),
    ("device_info_import", "nonsense", P.ECALLBACK, "no device_ordinal in the answer"),
    ("device_info_import", (0, 0, "e"), P.ECALLBACK, "expected an int handle or None"),
    ("event_query", type("Bad", (), {"__bool__": lambda s: 1 / 0})(), P.ECALLBACK, "ZeroDivisionError"),
])
def test_bad_return_values_are_clean_errors(faulty, op, value, code, text):
    plugin, reg, rt, state = faulty
    plugin.replace[op] = lambda self, *a: value
    with pytest.raises(RuntimeError_) as ei:
        _drive(rt, op, state)
    assert ei.value.code == code, ei.value
    assert text in ei.value.message, ei.value.message
    assert sys.exc_info() == (None, None, None)


def test_event_query_busy_is_ebusy(faulty):
    plugin, reg, rt, state = faulty
    plugin.replace["event_query"] = lambda self, device, event: False
    with pytest.raises(RuntimeError_) as ei:
        rt.event_query(state["event"])
    assert ei.value.code == P.EBUSY and "not complete yet" in ei.value.message


def test_host_memory_is_only_lent_for_the_call(faulty):
    plugin, reg, rt, state = faulty
    kept = []

    def keeps_an_export(self, device, dst, off, src, stream):
        kept.append(np.frombuffer(src, dtype=np.uint8))  # an export outliving the call

    def keeps_the_view(self, device, dst, off, src, stream):
        kept.append(src)
        MmapDevice.copy_h2d(self, device, dst, off, src, stream)

    plugin.replace["copy_h2d"] = keeps_an_export
    with pytest.raises(RuntimeError_) as ei:
        rt.h2d(state["ptr"], 0, b"abcd")
    assert ei.value.code == P.ECALLBACK
    assert "kept an export of the host memoryview past the call" in ei.value.message
    kept.clear()
    plugin.replace["copy_h2d"] = keeps_the_view
    rt.h2d(state["ptr"], 0, b"abcd")
    with pytest.raises(ValueError, match="released"):
        bytes(kept[0])  # the view it kept was released when the call returned
    assert rt.d2h(state["ptr"], 0, 4).raw == b"abcd"


def test_unregister_from_inside_an_operation_is_refused():
    seen = []

    class SelfDestruct(MmapDevice):
        def device_props(self, device):
            try:
                P.unregister(self)
            except RuntimeError as e:
                seen.append(str(e))
            return super().device_props(device)

    ident = fresh_id("test.selfdestruct")
    reg = P.register_plugin(SelfDestruct(identifiers=(ident,), name=ident.replace(".", "_")))
    Runtime(ident).props()
    assert seen and "from inside one of its own operations" in seen[0]
    reg.unregister()


# ---- threads ---------------------------------------------------------------------------------

@pytest.mark.thread_unsafe(reason="counts what one registration holds, and pytest-run-parallel gives the threads of a test one set of fixtures")
def test_threads_call_a_python_plugin_concurrently(reg):
    """Python threads through the bindings and ctypes threads through the C API
    (GIL released by ctypes: every trampoline takes it itself), at once."""
    errors = []
    rng = np.random.default_rng(7)
    payloads = [rng.integers(0, 255, 10000 + i, dtype=np.uint8) for i in range(8)]

    def through_bindings(k):
        try:
            for it in range(20):
                b = devbuf.from_host(payloads[k], device=f"{reg.ident}:{k % 2}")
                np.testing.assert_array_equal(np.asarray(b.to_host()), payloads[k])
                b.free()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def through_c(k):
        try:
            rt = Runtime(f"{reg.ident}:{k % 2}")
            s = rt.stream_create()
            e = rt.event_create()
            for it in range(20):
                p = rt.alloc(4096, 0, s)
                data = bytes([k, it]) * 2048
                keep = rt.h2d(p, 0, data, s)
                rt.event_record(e, s)
                rt.event_synchronize(e)
                assert rt.d2h(p, 0, 4096, s).raw == data
                rt.free(p, s)
                del keep
            rt.event_destroy(e)
            rt.stream_destroy(s)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=f, args=(k,)) for k in range(4)
               for f in (through_bindings, through_c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    st = stats(reg.index)
    assert st.live_allocations == 0 and st.live_streams == 0 and st.live_events == 0
    assert reg.table.inflight == 0


def test_exit_with_a_plugin_still_in_use(devbuf_env, tmp_path):
    """At exit the plugin cannot be unregistered (memory alive): its closures
    stop entering Python and answer an error instead; the process exits 0."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(__import__('pyplugin_helpers').REPO / 'docs' / 'examples')!r})
        import devbuf, devbuf.plugin
        from python_plugin_mmap import MmapDevice
        devbuf.plugin.register_plugin(MmapDevice(identifiers=("test.atexit",)))
        keep = devbuf.from_host(b"left behind", device="test.atexit")
        print(bytes(keep.to_host()).decode(), flush=True)
    """))
    r = subprocess.run([sys.executable, str(script)], env=devbuf_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "left behind"
    assert "Traceback" not in r.stderr and "Fatal" not in r.stderr
