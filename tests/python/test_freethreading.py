"""Concurrency stress suite: devbuf without the GIL.

Every scenario runs at least 8 threads released together by a barrier, for a
bounded time (DEVBUF_STRESS_SECONDS, default 0.6 s) and a bounded number of
iterations, with a printed seed that fixes which operation each thread does
on each step (rerun one with DEVBUF_STRESS_SEED=<seed>). Failures are
collected from the threads, from threading.excepthook and from
sys.unraisablehook (where an export ledger reports a release it did not
expect), and each scenario ends by checking the shared objects' own counts:
no export left alive, memory freed once.

The suite runs on every build: with the GIL the interleavings are coarser but
the invariants are the same. scripts/python-ft.sh runs it on free-threaded
3.13t with PYTHON_GIL=0, with DEVBUF_STRESS_ROUNDS=20 for the nine-thread
ledger scenario, and again under a ThreadSanitizer interpreter.
"""
import gc
import itertools
import os
import pickle
import random
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import devbuf

SECONDS = float(os.environ.get("DEVBUF_STRESS_SECONDS", "0.6"))
ROUNDS = int(os.environ.get("DEVBUF_STRESS_ROUNDS", "3"))
MAX_STEPS = 20000  # per thread: bounded in count as well as time
CHURN_REGISTRATIONS = 24  # per run of the Python-plugin churn scenario
_RUN_IDS = itertools.count()  # names unique to one run of a scenario
FREE_THREADED = bool(getattr(sys, "_is_gil_enabled", lambda: True)() is False)


def _seed():
    s = os.environ.get("DEVBUF_STRESS_SEED")
    return int(s) if s else random.SystemRandom().randrange(2**32)


class Hazards:
    """Collects what any thread, hook or unraisable report says went wrong.

    The hooks are process-wide, and scenarios may run at once (the suite
    under pytest-run-parallel): the first active Hazards installs one pair of
    hooks that reports to every active one, and the last restores what was
    there, so no scenario restores another's hook or loses a report."""

    _active = []
    _saved = None
    _hooks_lock = threading.Lock()

    def __init__(self):
        self.errors = []
        self.lock = threading.Lock()

    def add(self, what):
        with self.lock:
            self.errors.append(what)

    @classmethod
    def _report(cls, what):
        with cls._hooks_lock:
            active = list(cls._active)
        for hz in active:
            hz.add(what)

    def __enter__(self):
        cls = Hazards
        with cls._hooks_lock:
            if not cls._active:
                cls._saved = (sys.unraisablehook, threading.excepthook)
                sys.unraisablehook = lambda u: cls._report(
                    f"unraisable: {u.exc_type.__name__}: {u.exc_value}")
                threading.excepthook = lambda a: cls._report(
                    f"thread {a.thread.name}: {a.exc_type.__name__}: {a.exc_value}")
            cls._active.append(self)
        return self

    def __exit__(self, *exc):
        cls = Hazards
        with cls._hooks_lock:
            cls._active.remove(self)
            if not cls._active:
                sys.unraisablehook, threading.excepthook = cls._saved
                cls._saved = None


def hammer(name, workers, *, threads=8, seconds=SECONDS, seed=None):
    """Run workers[i % len(workers)](rng, step) on `threads` threads until the
    deadline; returns the number of steps done. Raises with every hazard."""
    seed = _seed() if seed is None else seed
    print(f"[stress] {name}: {threads} threads, {seconds}s, seed {seed}")
    barrier = threading.Barrier(threads)
    steps = [0] * threads
    with Hazards() as hz:
        def run(i):
            rng = random.Random(seed * 1000 + i)
            fn = workers[i % len(workers)]
            barrier.wait()
            end = time.monotonic() + seconds
            n = 0
            try:
                while n < MAX_STEPS and time.monotonic() < end:
                    fn(rng, n)
                    n += 1
            except BaseException as e:  # noqa: BLE001 - report, never lose it
                hz.add(f"{name} worker {i} ({fn.__name__}) step {n}: {type(e).__name__}: {e}")
            steps[i] = n

        ts = [threading.Thread(target=run, args=(i,), name=f"{name}-{i}") for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60 + seconds)
        hung = [t.name for t in ts if t.is_alive()]
        gc.collect()
    assert not hung, f"{name}: threads still running after the deadline: {hung} (seed {seed})"
    assert not hz.errors, f"{name} (seed {seed}): " + "\n".join(hz.errors[:20])
    return sum(steps)


@pytest.fixture(scope="module")
def sim():
    try:
        return devbuf.device("devbuf.sim:0")
    except devbuf.Error as e:
        pytest.skip(f"devbuf.sim is not available: {e}")


def test_build_reports_its_gil_state():
    """On a free-threaded build importing devbuf must leave the GIL off."""
    if hasattr(sys, "_is_gil_enabled") and "free-threading" in sys.version:
        if os.environ.get("PYTHON_GIL") != "1":
            assert not sys._is_gil_enabled(), "a devbuf module re-enabled the GIL"


# ---- the nine-thread ledger scenario, ROUNDS times -------------------------------------

def _acme(payload):
    return {"kind": "uint", "itemsize": 3, "alignment": 1, "canonical": "st.u24"} if payload == "u24" else None


@pytest.mark.parametrize("rnd", range(ROUNDS))
def test_nine_threads_share_one_buffer(rnd):
    """Views, memoryviews, np.from_dlpack, pickling, namespace registration and
    parse_format on one host DeviceBuffer: its export ledger must stay exact."""
    buf = devbuf.from_host(np.arange(64, dtype=np.float32))
    expect = np.arange(64, dtype=np.float32)
    ns = f"stress{rnd}"

    def views(rng, n):
        with devbuf.view(buf) as v:
            assert v.shape == (64,)

    def memoryviews(rng, n):
        with memoryview(buf) as m:
            assert m.nbytes == 256

    def numpy_dlpack(rng, n):
        a = np.from_dlpack(buf)
        assert a[5] == 5.0
        del a

    def pickling(rng, n):
        b = pickle.loads(pickle.dumps(buf, protocol=5))
        assert bytes(memoryview(b))[:8] == expect.tobytes()[:8]

    def registering(rng, n):
        name = f"{ns}_{threading.get_ident()}"  # unique to the thread, whichever run it is in
        devbuf.register_dtype_namespace(name, _acme)
        assert devbuf.parse_format(f"[{name}$u24]").itemsize == 3
        devbuf.unregister_dtype_namespace(name)

    def parsing(rng, n):
        assert devbuf.parse_format("T{<h:a:[devbuf$bfloat16]:b:2i:c:}").itemsize == 12

    def nested(rng, n):
        with devbuf.view(buf) as v, memoryview(buf) as m:
            a = np.from_dlpack(buf)
            assert v.shape == m.shape == a.shape

    def to_host(rng, n):
        assert np.asarray(buf.to_host())[63] == 63.0

    def array_views(rng, n):
        with devbuf.view(np.asarray(memoryview(buf))) as v:
            assert v.shape == (64,)

    hammer("nine threads, one DeviceBuffer",
           [views, memoryviews, numpy_dlpack, pickling, registering, parsing, nested, to_host,
            array_views], threads=9)
    assert buf.exports == 0, f"{buf.exports} exports still alive after every thread released"
    buf.free()  # refused if the ledger thought anything was still exported


def test_exports_race_free():
    """Exports and releases of host DeviceBuffers (the fast path, which without
    the GIL takes no lock: one compare-exchange of one of the buffer's solo
    export words each) against free() and
    the getters (the buffer's critical section): free() succeeds only while no
    export is alive, so no export ever sees its buffer freed, and a buffer
    freed first refuses the export."""
    lock = threading.Lock()
    cur = [devbuf.from_host(np.full(16, 7, dtype=np.int64))]
    retired = []

    def export(rng, n):
        b = cur[0]
        try:
            if n % 2:
                with memoryview(b) as m:
                    assert not b.freed and b.exports >= 1 and m[rng.randrange(16)] == 7
            else:
                with devbuf.view(b) as v:
                    assert not b.freed and b.exports >= 1 and v.shape == (16,)
        except BufferError as e:
            assert "freed" in str(e), e  # freed before the export asked: refused

    def free(rng, n):
        with lock:
            retired.append(cur[0])
            cur[0] = devbuf.from_host(np.full(16, 7, dtype=np.int64))
            todo = list(retired)
        for b in todo:
            try:
                b.free()
            except BufferError as e:
                assert "while it is exported" in str(e), e
                continue
            assert b.freed and b.exports == 0
            with lock:  # another free() worker may have freed it too
                if b in retired:
                    retired.remove(b)

    hammer("exports vs free()", [export, export, export, free], threads=8)
    for b in retired + cur:
        assert b.exports == 0, f"{b.exports} exports still alive after every thread released"
        b.free()


@pytest.mark.parametrize("held", [1, 2, 3, 4, 5, 6])
def test_free_refused_while_any_export_word_is_live(held):
    """Without the GIL a DeviceBuffer keeps up to four exports in lock-free
    words (one a thread, the next free one when it is taken) and the rest in
    its ledger. free() must find a live export in any word, give the words it
    had already cleared their state back, and refuse; the exports then still
    read the memory, release in any order, and the fast path still serves the
    next ones. With the GIL the same sequence goes through the ledger alone."""
    buf = devbuf.from_host(np.arange(16, dtype=np.int64))
    views = [memoryview(buf) if i % 2 else devbuf.view(buf) for i in range(held)]
    assert buf.exports == held
    with pytest.raises(BufferError, match=f"while it is exported \\({held} live export"):
        buf.free()
    assert not buf.freed
    for v in views:  # still readable: nothing was freed
        assert np.asarray(v.to_host() if isinstance(v, devbuf.DeviceView) else v)[15] == 15
    for i in random.Random(held).sample(range(held), held):
        views[i].release()
    assert buf.exports == 0
    for _ in range(3):  # served again after the refused free()
        with memoryview(buf) as m:
            assert m[3] == 3 and buf.exports == 1
    buf.free()
    assert buf.freed and buf.exports == 0
    with pytest.raises(BufferError, match="freed"):
        memoryview(buf)


# ---- device memory: exports, views and downloads of one buffer on devbuf.sim -------------

def test_device_buffer_on_sim_shared(sim):
    host = np.arange(4096, dtype=np.int32)
    buf = devbuf.from_host(host, device=sim)  # async upload: the first readers race it

    def view_sync(rng, n):
        with devbuf.view(buf) as v:
            assert v.identifier == "devbuf.sim"
            if rng.random() < 0.1:
                assert np.asarray(v.to_host())[4095] == 4095

    def download(rng, n):
        assert np.asarray(buf.to_host())[rng.randrange(4096)] >= 0

    def copy_back(rng, n):
        if rng.random() < 0.2:
            c = buf.copy_to(sim)
            assert np.array_equal(np.asarray(c.to_host()), host)

    def dlpack(rng, n):
        t = devbuf.from_dlpack(buf)
        assert t.shape == (4096,)

    hammer("one buffer on devbuf.sim", [view_sync, download, copy_back, dlpack])
    assert buf.exports == 0
    buf.free()


# ---- one NumPy array shared: views, DLPack both ways ------------------------------------

def test_numpy_array_shared():
    a = np.arange(1000, dtype=np.float64)
    base_refs = sys.getrefcount(a)

    def view(rng, n):
        with devbuf.view(a) as v:
            assert v.shape == (1000,)

    def dl_in(rng, n):
        t = devbuf.from_dlpack(a)
        assert t.shape == (1000,)
        del t

    def dl_round_trip(rng, n):
        b = np.from_dlpack(devbuf.from_dlpack(a))
        assert b[999] == 999.0

    def buffer_copy(rng, n):
        b = devbuf.from_host(a)
        assert np.from_dlpack(b)[10] == 10.0

    hammer("one NumPy array", [view, dl_in, dl_round_trip, buffer_copy])
    gc.collect()
    assert sys.getrefcount(a) == base_refs, "a thread leaked a reference to the shared array"


def test_from_dlpack_of_shared_devbuf_producers():
    producers = [devbuf.from_host(np.full(16, i, dtype=np.uint8)) for i in range(4)]

    def consume(rng, n):
        i = rng.randrange(4)
        t = devbuf.from_dlpack(producers[i])
        assert np.from_dlpack(t)[0] == i

    def consume_np(rng, n):
        i = rng.randrange(4)
        assert np.from_dlpack(producers[i])[15] == i

    hammer("devbuf.from_dlpack of shared producers", [consume, consume_np])
    assert [p.exports for p in producers] == [0, 0, 0, 0]


# ---- registries: namespaces and Python plugins change while others parse and export ----

def test_namespace_register_unregister_while_parsing():
    shared = f"stressshared{next(_RUN_IDS)}"  # shared by this run's threads, no other run's
    flips = [0]

    def flip(rng, n):
        try:
            devbuf.register_dtype_namespace(shared, _acme)
        except devbuf.Error:
            pass  # another flipper registered it first
        try:
            devbuf.unregister_dtype_namespace(shared)
        except KeyError:
            pass  # ... or removed it first
        flips[0] += 1

    def parse(rng, n):
        try:
            assert devbuf.parse_format(f"T{{[{shared}$u24]:a:}}").itemsize == 3
        except devbuf.FormatError as e:
            assert shared in str(e)  # unknown at that instant: a clean error naming it
        assert devbuf.parse_format("[devbuf$bfloat16;struct$e]").itemsize == 2

    def listing(rng, n):
        assert isinstance(devbuf.dtype_namespaces(), (list, tuple, dict))

    hammer("namespace churn", [flip, parse, parse, listing])
    assert flips[0] > 0
    with pytest.raises(devbuf.FormatError):
        devbuf.parse_format(f"[{shared}$u24]")


def test_python_plugin_register_unregister_while_exporting(sim):
    P = pytest.importorskip("devbuf.plugin")
    from pyplugin_helpers import MmapDevice, fresh_id

    buf = devbuf.from_host(np.arange(256, dtype=np.uint16), device=sim)
    churned = [0]
    lock = threading.Lock()

    def churn(rng, n):
        # Plugin records are never freed (4096 per process, docs/failure-modes.md):
        # a bounded number per run, whatever the speed, the thread count or
        # how often the test is repeated in one process.
        with lock:
            if churned[0] >= CHURN_REGISTRATIONS:
                return
            churned[0] += 1
        ident = fresh_id("stress.pymmap")
        r = P.register_plugin(MmapDevice(identifiers=(ident,), name=ident.replace(".", "_")))
        try:
            b = devbuf.from_host(np.arange(32, dtype=np.uint8), device=devbuf.device(ident))
            assert np.asarray(b.to_host())[31] == 31
            b.free()
        finally:
            r.unregister()

    def export(rng, n):
        with devbuf.view(buf) as v:
            assert v.shape == (256,)

    def listing(rng, n):
        assert any(p.name for p in devbuf.plugins())

    hammer("Python-plugin churn", [churn, export, listing, export], seconds=max(SECONDS, 0.8))
    assert churned[0] > 0 and buf.exports == 0


# ---- lifetimes: a view's release racing its owner's deletion -----------------------------

def test_view_release_races_owner_deletion(sim):
    def race(rng, n):
        owner = devbuf.from_host(np.arange(8, dtype=np.int64), device=sim if rng.random() < 0.5 else None)
        dead = weakref.ref(owner)
        views = [devbuf.view(owner) for _ in range(3)]
        barrier = threading.Barrier(2)

        def release():
            barrier.wait()
            for v in views:
                v.release()

        t = threading.Thread(target=release)
        t.start()
        barrier.wait()
        del owner  # the views hold it: freed when the last one lets go
        t.join()
        del views
        assert dead() is None, "the owner outlived every view of it"

    hammer("view release vs owner deletion", [race], seconds=SECONDS)


def test_pickling_shared_buffers(sim):
    host = devbuf.from_host(np.arange(100, dtype=np.int16))
    dev = devbuf.from_host(np.arange(100, dtype=np.int16), device=sim)

    def oob(rng, n):
        bufs = []
        data = pickle.dumps(host if rng.random() < 0.5 else dev, protocol=5, buffer_callback=bufs.append)
        back = pickle.loads(data, buffers=bufs)
        del bufs
        assert np.asarray(back.to_host())[99] == 99

    def inband(rng, n):
        back = pickle.loads(pickle.dumps(dev, protocol=5))
        assert back.shape == (100,)

    hammer("pickling", [oob, inband])
    assert host.exports == 0 and dev.exports == 0


# ---- the header backport's supported-flags cache from many threads ------------------------

def test_header_cache_from_threads(sim):
    consumer = pytest.importorskip("devbuf_consumer", reason="test extension not built")
    buf = devbuf.from_host(np.arange(16, dtype=np.float32), device=sim)
    arr = np.arange(16, dtype=np.float32)

    def get_ex(rng, n):
        obj = buf if rng.random() < 0.5 else arr
        d = consumer.inspect(obj)  # DevbufPy_GetBufferEx(RECORDS_RO | DEVICE), then release
        assert d["shape"] == (16,)

    hammer("DevbufPy_GetBufferEx cache", [get_ex])
    assert buf.exports == 0
