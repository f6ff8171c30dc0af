"""Leaks and lifetimes: loops that create, export, view and release,
then check reference counts, allocator statistics, live objects and Python
memory return to their baseline; a release that happens twice, and a free
while exported, are caught and reported."""
import ctypes
import gc
import pickle
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

import devbuf

consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")

STATS = ("live_allocations", "live_bytes", "live_streams", "live_events",
         "live_host_allocations")


class Py_buffer(ctypes.Structure):
    # CPython's Py_buffer (Include/pybuffer.h), enough to fill and release one.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_api = ctypes.pythonapi
_api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
_api.PyObject_GetBuffer.restype = ctypes.c_int
_api.PyBuffer_Release.argtypes = [ctypes.POINTER(Py_buffer)]
_api.PyBuffer_Release.restype = None
_api.Py_IncRef.argtypes = [ctypes.py_object]


def _stats(name):
    s = devbuf.plugin_stats(name)
    return {k: s[k] for k in STATS}


_hook_lock = threading.Lock()
_hook_sinks = {}  # thread id -> that thread's list
_hook_saved = []


class _unraisable_on_this_thread:
    """Collects the sys.unraisablehook reports made on this thread (a
    release's report is made on the releasing thread) as `fmt(u)`; reports
    of other threads go to the hook that was there. The hook is
    process-wide: the first active collector installs one dispatcher and
    the last restores the saved hook, so tests run on several threads at
    once (pytest-run-parallel) neither swap it under each other nor see
    each other's reports."""

    def __init__(self, fmt):
        self.fmt, self.seen = fmt, []

    def __enter__(self):
        with _hook_lock:
            if not _hook_sinks:
                _hook_saved.append(sys.unraisablehook)
                sys.unraisablehook = _dispatch_unraisable
            _hook_sinks[threading.get_ident()] = self
        return self.seen

    def __exit__(self, *exc):
        with _hook_lock:
            del _hook_sinks[threading.get_ident()]
            if not _hook_sinks:
                sys.unraisablehook = _hook_saved.pop()


def _dispatch_unraisable(u):
    with _hook_lock:
        sink = _hook_sinks.get(threading.get_ident())
        fallback = _hook_saved[-1] if _hook_saved else sys.__unraisablehook__
    if sink is not None:
        sink.seen.append(sink.fmt(u))
    else:
        fallback(u)


def _release_twice(obj):
    """A careless consumer: releases a copy of its Py_buffer as well.
    Returns what sys.unraisablehook saw on this thread."""
    # Keep no reference to the object or the traceback (refcounts are checked).
    with _unraisable_on_this_thread(lambda u: (u.exc_type, str(u.exc_value), id(u.object))) as seen:
        v1 = Py_buffer()
        assert _api.PyObject_GetBuffer(obj, ctypes.byref(v1), 0) == 0
        v2 = Py_buffer.from_buffer_copy(v1)
        _api.Py_IncRef(obj)  # PyBuffer_Release drops one reference per call
        _api.PyBuffer_Release(ctypes.byref(v1))
        _api.PyBuffer_Release(ctypes.byref(v2))
    return seen


@pytest.mark.parametrize("kind", ["DeviceBuffer", "DeviceView"])
def test_double_release_is_caught_and_reported(kind):
    b = devbuf.from_host(bytearray(b"x" * 64), device="cpu")
    obj = b if kind == "DeviceBuffer" else devbuf.view(b)
    m = memoryview(obj)  # a well-behaved consumer holds an export meanwhile
    before = sys.getrefcount(obj)
    seen = _release_twice(obj)
    assert len(seen) == 1, seen
    exc_type, message, who = seen[0]
    assert exc_type is BufferError and who == id(obj)
    assert f"devbuf.{kind}: a buffer export was released twice" in message
    assert "1 export is still alive" in message
    assert sys.getrefcount(obj) == before
    # The memoryview's export still counts: nothing can free the memory under it.
    if kind == "DeviceBuffer":
        assert b.exports == 1
        with pytest.raises(BufferError, match="exported"):
            b.free()
        assert not b.freed
    else:
        with pytest.raises(BufferError, match="export"):
            obj.release()
    assert m.tobytes() == b"x" * 64
    m.release()
    if kind == "DeviceView":
        obj.release()
    assert b.exports == 0
    b.free()
    assert b.freed


def test_double_release_of_the_only_export_is_reported():
    # No other export alive: the first export is the one released twice
    # (without the GIL, the lock-free one).
    b = devbuf.from_host(bytearray(b"y" * 32), device="cpu")
    before = sys.getrefcount(b)
    seen = _release_twice(b)
    assert len(seen) == 1, seen
    exc_type, message, who = seen[0]
    assert exc_type is BufferError and who == id(b)
    assert "devbuf.DeviceBuffer: a buffer export was released twice" in message
    assert "0 exports are still alive" in message
    assert sys.getrefcount(b) == before
    assert b.exports == 0
    # A later export is not mistaken for the released one.
    m = memoryview(b)
    seen = _release_twice(b)
    assert len(seen) == 1 and "1 export is still alive" in seen[0][1]
    assert b.exports == 1
    m.release()
    b.free()
    assert b.freed


@pytest.mark.parametrize("order", ["lifo", "fifo"])
def test_exports_counted_in_any_release_order(order):
    b = devbuf.from_host(bytearray(range(48)), device="cpu")
    ms = [memoryview(b), devbuf.view(b), memoryview(b)]
    assert b.exports == 3
    with pytest.raises(BufferError, match=r"\(3 live exports\)"):
        b.free()
    for i, m in enumerate(ms if order == "fifo" else ms[::-1]):
        m.release()
        assert b.exports == 2 - i
        if i < 2:
            with pytest.raises(BufferError, match="exported"):
                b.free()
            assert not b.freed
    b.free()
    assert b.freed
    with pytest.raises(BufferError, match="freed"):
        memoryview(b)
    assert b.exports == 0


def test_release_of_a_foreign_py_buffer_is_reported():
    # A Py_buffer filled by bytearray, handed to a DeviceBuffer's release.
    b = devbuf.from_host(bytearray(8), device="cpu")
    other = bytearray(8)
    v = Py_buffer()
    assert _api.PyObject_GetBuffer(other, ctypes.byref(v), 0) == 0
    try:
        with _unraisable_on_this_thread(lambda u: str(u.exc_value)) as seen:
            fake = Py_buffer.from_buffer_copy(v)
            fake.obj = id(b)
            _api.Py_IncRef(b)
            _api.PyBuffer_Release(ctypes.byref(fake))
    finally:
        _api.PyBuffer_Release(ctypes.byref(v))
    assert len(seen) == 1 and "not filled by this object" in seen[0]
    assert b.exports == 0


def _cycle(dev, data, producer):
    """One round of everything that creates, exports and releases."""
    b = devbuf.from_host(data, device=dev)
    v = devbuf.view(b)
    w = devbuf.view(v)                    # a view of a view
    r = consumer.inspect(b)               # a C consumer, PyBUF_DEVICE request
    assert r["ptr"] == b.ptr
    h = w.to_host()
    assert bytes(h) == bytes(data)
    if v.host_accessible:
        with memoryview(v) as m:
            assert m.nbytes == len(data)
    p = pickle.loads(pickle.dumps(b, protocol=5))
    assert bytes(p.to_host()) == bytes(data)
    pv = devbuf.view(producer)            # a third-party producer, kept alive
    pv.release()
    w.release()
    v.release()
    c = b.copy_to(dev)
    b.free()
    refs = [weakref.ref(x) for x in (b, c, p, h)]
    return refs


@pytest.mark.parametrize("dev", ["cpu", "devbuf.sim"])
@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them; tracemalloc is process-wide: another thread's start, stop or allocations change what it measures")
def test_loops_return_to_baseline(dev, request):
    if dev != "cpu":
        request.getfixturevalue("sim")
    name = "cpu" if dev == "cpu" else "sim"
    data = bytearray(range(256)) * 4
    producer = consumer.Exporter(bytes(data))
    for _ in range(20):  # warm up: arenas, staging pools, worker threads, caches
        _cycle(dev, data, producer)
    gc.collect()
    base_stats = _stats(name)
    base_refs = sys.getrefcount(producer)
    tracemalloc.start()
    # Free-threaded builds keep growing for a while before they level off
    # (memory freed through QSBR's delayed frees, per-thread caches; more so
    # after other tests ran many threads): measured on 3.13t, 17-22 KB over
    # rounds 50-450 but under 300 bytes over the next 1200. There the window
    # starts later and is three times as long, with the same bound: a leak of
    # 16 bytes per round still shows.
    # Even so, after a suite that ran many threads one window has been seen
    # to grow 23 KB; so without the GIL up to three windows are measured and
    # the smallest growth is judged: a steady leak grows every window alike,
    # a settling allocator does not.
    ft = not getattr(sys, "_is_gil_enabled", lambda: True)()
    warm, rounds, windows = (850, 1200, 3) if ft else (50, 400, 1)
    growth = []
    try:
        for _ in range(warm):
            _cycle(dev, data, producer)
        for _ in range(windows):
            gc.collect()
            mid, _ = tracemalloc.get_traced_memory()
            for _ in range(rounds):
                _cycle(dev, data, producer)
            gc.collect()
            end, _ = tracemalloc.get_traced_memory()
            growth.append(end - mid)
            if end - mid < 400 * 48:
                break
    finally:
        tracemalloc.stop()
    dead = []
    for _ in range(50):
        dead.extend(_cycle(dev, data, producer))
    gc.collect()
    # Every object of every round is gone, the producer has no extra
    # reference and no export, the plugin holds nothing more.
    assert all(r() is None for r in dead)
    assert sys.getrefcount(producer) == base_refs
    assert producer.counts["exports"] == 0
    assert _stats(name) == base_stats
    # 400 more rounds (1200 without the GIL) may not keep Python memory: a
    # leak of one small block per round (>= 48 bytes) would show.
    assert min(growth) < 400 * 48, (growth, rounds)


@pytest.mark.thread_unsafe(reason="the plugin's statistics are the whole process's: other threads' buffers count in them")
def test_threads_loop_and_return_to_baseline(sim):
    data = np.arange(512, dtype=np.int32)
    shared = devbuf.from_host(data, device=sim)
    base_refs = sys.getrefcount(shared)
    gc.collect()
    base_stats = _stats("sim")
    errors = []

    def work(tid):
        try:
            for i in range(60):
                with devbuf.view(shared) as v:
                    if (i + tid) % 4 == 0:
                        np.testing.assert_array_equal(np.asarray(v.to_host()), data)
                    w = devbuf.view(v)
                    w.release()
                own = devbuf.from_host(data[: 64 + tid], device=sim)
                with devbuf.view(own) as ov:
                    assert ov.nbytes == 4 * (64 + tid)
                own.free()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    gc.collect()
    assert shared.exports == 0
    assert sys.getrefcount(shared) == base_refs
    assert _stats("sim") == base_stats
