"""The header-only DLPack route (bindings/python/include/devbuf_dlpack_import.h):
a C or C++ consumer of a DLPack-only producer, with nothing of
devbuf linked or imported, gets the description devbuf's own reader makes,
with the same checks and messages. The consumer is
tests/python/consumer_ext/dlpack_consumer.c, built as C and as C++; the
producers are NumPy (forwarded, so that they speak only DLPack) and the
hand-made adversarial producer of the conformance kit (dlpack_ctypes.py)."""
import gc
import subprocess
import sys

import numpy as np
import pytest

import devbuf
from dlpack_ctypes import Producer, forwarding_producer_type, live_tensors

c_mod = pytest.importorskip("devbuf_dlpack_consumer", reason="test extension not built")
try:
    import devbuf_dlpack_consumer_cpp as cpp_mod
except ImportError:  # no C++ compiler when the build was configured
    cpp_mod = None

CONSUMERS = [pytest.param(c_mod, id="C"),
             pytest.param(cpp_mod, id="C++", marks=pytest.mark.skipif(
                 cpp_mod is None, reason="devbuf_dlpack_consumer_cpp not built (no C++ compiler)"))]

KDLCPU, KDLCUDA, KDLOPENCL, KDLROCM, KDLEXTDEV = 1, 2, 4, 10, 12




def _producer_type():
    """A subclass of the adversarial Producer: a type of its own, so that no
    other test's imports have cached it as CPU-only."""
    class P(Producer):
        pass
    return P


@pytest.fixture(params=CONSUMERS)
def cm(request):
    return request.param


def test_built_as_c_and_cpp():
    assert c_mod.CPLUSPLUS == 0
    if cpp_mod is not None:
        assert cpp_mod.CPLUSPLUS == 1


def test_numpy_through_a_dlpack_only_producer(cm):
    Fwd, _ = forwarding_producer_type()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = cm.import_(Fwd(a))
    assert d["buf"] == a.ctypes.data and d["data"] == a.ctypes.data
    assert (d["format"], d["itemsize"], d["ndim"]) == ("f", 4, 2)
    assert d["shape"] == (3, 4) and d["strides"] == (16, 4)
    assert d["len"] == 48 and d["nitems"] == 12
    assert d["c_contiguous"] and not d["f_contiguous"]
    assert (d["device_type"], d["device_id"]) == (KDLCPU, 0) and d["host_accessible"]
    # NumPy 2.1 added the versioned capsule (DLPack 1.0); NumPy 2.0, the newest
    # with a wheel for CPython 3.9 (the matrix), answers max_version with a
    # legacy one, which cannot say it is writable.
    versioned = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 1)
    assert d["version"][0] == (1 if versioned else 0) and d["readonly"] == (not versioned)
    assert d["stream"] is None and d["dtype"] == (2, 32, 1) and d["has_tensor"]


GOOD = [
    dict(array=np.arange(6, dtype=np.int8).reshape(2, 3)),
    dict(array=np.arange(6, dtype=np.uint16)),
    dict(array=np.arange(6, dtype=np.int64)[::-1]),             # negative strides
    dict(array=np.arange(12.0).reshape(3, 4)[:, ::2]),           # not contiguous
    dict(array=np.asfortranarray(np.arange(6.0).reshape(2, 3))),  # F order
    dict(array=np.arange(4, dtype=np.complex128)),
    dict(array=np.array([True, False])),
    dict(array=np.zeros((0, 3), dtype=np.float32)),              # empty
    dict(array=np.array(3.0)),                                    # 0-d
    dict(array=np.arange(6, dtype=np.int8).reshape(2, 3), strides=None),   # NULL = C order
    dict(array=np.arange(8, dtype=np.float32), dtype=(2, 32, 4), shape=(2,), strides=(1,)),
    dict(array=np.zeros(4, dtype=np.uint16), dtype=(4, 16, 1)),  # bfloat16
    dict(array=np.zeros(4, dtype=np.uint8), dtype=(17, 4, 1), shape=(8,), strides=(1,)),  # packed
    dict(array=np.zeros(4, dtype=np.uint8), dtype=(17, 4, 1), flags=4),   # padded float4
    dict(array=np.arange(4.0), flags=1),                          # read-only
    dict(array=np.arange(4.0), flags=2),                          # is_copied
    dict(array=np.arange(4.0), device=(3, 0)),                    # kDLCUDAHost: pinned host
]


@pytest.mark.parametrize("kw", GOOD, ids=lambda kw: ",".join(
    f"{k}={v.dtype}{v.shape}" if k == "array" else f"{k}={v}" for k, v in kw.items()))
def test_same_description_as_devbufs_reader(cm, kw):
    kw = dict(kw)
    a = kw.pop("array")
    d = cm.import_(Producer(a, **kw))
    v = devbuf.from_dlpack(Producer(a, **kw))
    assert d["format"] == v.format and d["itemsize"] == v.itemsize
    assert d["shape"] == v.shape and d["strides"] == v.strides
    assert d["len"] == v.nbytes and d["buf"] == v.ptr and bool(d["readonly"]) == v.readonly
    assert bool(d["c_contiguous"]) == v.c_contiguous
    if not {"shape", "strides", "dtype"} & set(kw):  # the array's own layout
        assert bool(d["f_contiguous"]) == a.flags.f_contiguous
    assert d["is_copied"] == (kw.get("flags", 0) & 2) // 2
    v.release()


MALFORMED = [
    dict(ndim=1000), dict(ndim=-1), dict(null_shape=True), dict(shape=(4, -4)),
    dict(strides=(2 ** 62, 1)),                                   # stride overflows in bytes
    dict(shape=(2 ** 40, 2 ** 40), strides=(2 ** 40, 1)),         # element count overflows
    dict(shape=(2 ** 31, 2), strides=(2 ** 60, 1)),               # extent overflows
    dict(byte_offset=2 ** 63), dict(data=2 ** 63, byte_offset=2 ** 63 - 8),
    dict(data=0), dict(data=2 ** 64 - 16),                        # NULL; wraps the address space
    dict(shape=(0,), strides=(1,), data=2 ** 64 - 16, byte_offset=32),   # empty, still wraps
    dict(device=(7, 0)), dict(device=(99, 0)), dict(device=(2, -1)),
    dict(dtype=(3, 64, 1)), dict(dtype=(2, 128, 1)), dict(dtype=(2, 32, 0)), dict(dtype=(2, 0, 1)),
    dict(dtype=(8, 16, 1)),                                       # float8 with 16 bits
    dict(dtype=(17, 4, 2), shape=(4,), strides=(1,)),             # packed with lanes
    dict(dtype=(17, 4, 1), shape=(3,), strides=(1,)),             # packed, odd last dim
    dict(dtype=(17, 4, 1), shape=(4,), strides=(2,)),             # packed, strided last dim
    dict(dtype=(17, 4, 1), shape=(), strides=()),                 # packed 0-d
    dict(shape=(2 ** 62,), strides=(0,)),                         # bytes overflow Py_ssize_t
    dict(shape=(2 ** 61, 2), strides=(0, 0)),
    dict(shape=(2 ** 62, 2 ** 62), strides=(0, 0)),               # items overflow Py_ssize_t
    dict(shape=(2,), strides=(2 ** 60,)),                         # a stride's reach
    dict(shape=(3,), strides=(-(2 ** 60),), data=2 ** 63),
    dict(shape=(2 ** 20, 2 ** 20), strides=(2 ** 40, 2 ** 40)),   # the reaches together
    dict(major=2), dict(major=0), dict(flags=1 << 20),
    dict(name=b"not_a_tensor"),
    dict(device=(KDLOPENCL, 0), byte_offset=8, shape=(4,), strides=(1,)),       # handle + offset
    dict(device=(KDLOPENCL, 0), shape=(4,), strides=(-1,), data=0x1000),        # below a handle
]


@pytest.mark.parametrize("kw", MALFORMED, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_refused_with_devbufs_message(cm, kw):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    P = _producer_type()
    q = P(a, **kw)
    with pytest.raises(BufferError) as theirs:
        devbuf.from_dlpack(q)
    q.settle()  # refused, not consumed: its tensor deleted as its capsule's destructor would
    assert q.deleted == q.made
    before = live_tensors()
    p = P(a, **kw)
    with pytest.raises(BufferError) as ours:
        cm.import_(p)
    # devbuf's layout check (layout.c) names the object it checks; the header
    # says where it is, as for the other refusals.
    assert str(ours.value) == str(theirs.value).replace("devbuf.ForeignArray: ", "dlpack import: ")
    gc.collect()
    p.settle()  # a refused capsule is not consumed: its destructor deletes it
    assert p.deleted == p.made == 1, "a refused tensor is deleted once, by its capsule"
    assert live_tensors() == before


def test_deleter_exactly_once_at_release(cm):
    p = Producer(np.arange(5.0))
    h = cm.hold(p)
    assert p.deleted == 0 and cm.info(h)["shape"] == (5,)
    assert sys.getrefcount(p) >= 3  # the view holds the producer
    cm.release(h)
    assert p.deleted == 1
    assert cm.info(h)["producer"] is None and not cm.info(h)["has_tensor"]
    cm.release(h)  # a second release does nothing
    del h
    gc.collect()
    assert p.deleted == 1 and p.made == 1


def test_release_keeps_a_pending_exception(cm):
    p = Producer(np.arange(3.0))
    e = cm.release_keeps_error(p)
    assert isinstance(e, KeyError) and p.deleted == 1


def test_legacy_capsule(cm):
    a = np.arange(6, dtype=np.uint32).reshape(2, 3)
    p = Producer(a, legacy_only=True)
    d = cm.import_(p)
    assert d["version"] == (0, 0) and d["dl_flags"] == 0
    assert d["readonly"]  # a legacy tensor cannot say it is writable
    assert p.calls[-1]["max_version"] is None  # asked again without max_version
    assert d["shape"] == (2, 3) and d["format"] == "I" and p.deleted == 1
    with pytest.raises(BufferError, match=r"legacy.*read-only.*LEGACY_WRITABLE"):
        cm.import_(Producer(a, legacy_only=True), cm.WRITABLE)
    d = cm.import_(Producer(a, legacy_only=True), cm.WRITABLE | cm.LEGACY_WRITABLE)
    assert not d["readonly"]


def test_writable_request_refuses_a_read_only_tensor(cm):
    p = Producer(np.arange(4.0), flags=1)
    with pytest.raises(BufferError, match=r"the producer \(P?.*\) marked it read-only"):
        cm.import_(p, cm.WRITABLE)
    gc.collect()
    p.settle()
    assert p.deleted == 1  # refused before consuming: the capsule deleted it
    assert cm.import_(Producer(np.arange(4.0), flags=1))["readonly"]
    assert not cm.import_(Producer(np.arange(4.0)), cm.WRITABLE)["readonly"]


def test_max_version_asked(cm):
    p = Producer(np.arange(3.0))
    assert cm.import_(p)["version"] == (1, 3)
    assert p.calls[-1]["max_version"] == (1, 3) and p.calls[-1]["stream"] is None


def test_capsule_already_consumed(cm):
    a = np.arange(3.0)
    cap = Producer(a).__dlpack__(max_version=(1, 3))
    assert cm.import_capsule(cap)["shape"] == (3,)
    with pytest.raises(BufferError, match="already consumed"):
        cm.import_capsule(cap)
    p = Producer(a, reuse_capsule=True)
    cm.import_(p)
    with pytest.raises(BufferError, match="already consumed"):
        cm.import_(p)
    assert p.deleted == 1


@pytest.mark.parametrize("device,stream", [(KDLCUDA, 1), (KDLROCM, 0), (KDLEXTDEV, None)])
def test_device_tensor_gets_the_stream(cm, device, stream):
    P = _producer_type()
    p = P(np.arange(4.0), device=(device, 3))
    d = cm.import_(p)
    assert (d["device_type"], d["device_id"]) == (device, 3) and not d["host_accessible"]
    assert p.calls[-1]["stream"] == stream and d["stream"] == stream
    p = P(np.arange(4.0), device=(device, 3))
    mine = object()
    d = cm.import_(p, 0, mine)  # the caller's own stream
    assert p.calls[-1]["stream"] is mine and d["stream"] is mine
    p = P(np.arange(4.0))  # on the CPU no stream is passed, whatever the caller's
    assert cm.import_(p, 0, mine)["stream"] is None and p.calls[-1]["stream"] is None


def test_device_query_cached_for_a_cpu_only_type(cm):
    Fwd, calls = forwarding_producer_type()
    a = np.arange(6.0)
    for _ in range(3):
        assert cm.import_(Fwd(a))["buf"] == a.ctypes.data
    assert len(calls) == 1  # asked once; then each tensor's device is checked instead


def test_cached_cpu_type_caught_off_the_cpu(cm):
    P = _producer_type()
    cm.import_(P(np.arange(4.0)))
    cm.import_(P(np.arange(4.0)))
    p = P(np.arange(4.0), device=(KDLCUDA, 0))
    d = cm.import_(p)  # skipped the query, saw kDLCUDA, imported again the full way
    assert d["device_type"] == KDLCUDA and p.made == 2
    assert p.calls[0]["stream"] is None and p.calls[1]["stream"] == 1
    gc.collect()
    p.settle()  # the first capsule was left unconsumed: its destructor deletes it
    assert p.deleted == 2
    q = P(np.arange(4.0), device=(KDLCUDA, 0))
    cm.import_(q)  # once seen off the CPU, always asked
    assert q.made == 1 and q.calls[0]["stream"] == 1


def test_sim_device_through_a_forwarding_type(cm, sim):
    Fwd, calls = forwarding_producer_type()
    a = np.arange(4, dtype=np.int32)
    cm.import_(Fwd(a))
    b = devbuf.from_host(a, device=sim)
    d = cm.import_(Fwd(b))
    assert d["device_type"] == KDLEXTDEV and d["buf"] == b.ptr and len(calls) == 2
    gc.collect()
    assert b.exports == 0  # the unconsumed first capsule was deleted


def test_what_is_not_a_dlpack_producer(cm):
    with pytest.raises(TypeError, match="int has no __dlpack__"):
        cm.import_(42)

    class NotCapsule:
        def __dlpack__(self, **kw):
            return 5

        def __dlpack_device__(self):
            return (1, 0)
    with pytest.raises(TypeError, match="__dlpack__ returned int, not a PyCapsule"):
        cm.import_(NotCapsule())

    class BadDevice(NotCapsule):
        def __dlpack_device__(self):
            return "cpu"
    with pytest.raises(TypeError, match=r"must return a \(device_type, device_id\) tuple"):
        cm.import_(BadDevice())

    class Raises(NotCapsule):
        def __dlpack__(self, **kw):
            raise ValueError("the producer's own error")
    with pytest.raises(ValueError, match="the producer's own error"):
        cm.import_(Raises())


def test_without_devbuf_loaded(devbuf_build):
    """Header only: the module imports and works in a process that never
    imports devbuf (only NumPy as the producer)."""
    code = (
        "import sys, numpy as np\n"
        "import devbuf_dlpack_consumer as c\n"
        "class F:\n"
        "    def __init__(self, a): self.a = a\n"
        "    def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)\n"
        "    def __dlpack_device__(self): return self.a.__dlpack_device__()\n"
        "a = np.arange(6.0).reshape(2, 3)\n"
        "d = c.import_(F(a))\n"
        "assert d['buf'] == a.ctypes.data and d['strides'] == (24, 8), d\n"
        "assert not any(m == 'devbuf' or m.startswith('devbuf.') for m in sys.modules)\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(devbuf_build / "python_tests"), "PATH": "/usr/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_random_tensors_same_verdict_as_devbufs_reader(cm):
    """Tensors with any number of faults at once: the header accepts exactly
    what devbuf's reader accepts, with the same description, and names the
    same fault first (a fixed seed: the same tensors every run)."""
    import random
    rng = random.Random(33)
    extents = [0, 1, 2, 3, 7, 2 ** 20, 2 ** 31, 2 ** 40, 2 ** 61, 2 ** 62, -1]
    steps = [0, 1, -1, 2, -3, 5, 2 ** 20, -(2 ** 33), 2 ** 40, 2 ** 59, 2 ** 61, -(2 ** 62)]
    offsets = [0, 8, 2 ** 40, 2 ** 62, 2 ** 63 - 8]
    datas = [None, 0, 2 ** 12, 2 ** 47, 2 ** 63, 2 ** 64 - 64]
    dtypes = [(2, 32, 1), (0, 8, 1), (5, 128, 1), (2, 32, 4), (17, 4, 1), (1, 4, 1)]
    a = np.arange(16, dtype=np.float32)
    # OpenCL tensors only where devbuf has the plugin to name their device (a
    # root without OpenCL's headers builds none): the header-only reader needs
    # no plugin, devbuf's does, and the verdicts would differ for that alone.
    try:
        devbuf.device("devbuf.opencl")
        other = KDLOPENCL
    except Exception:
        other = KDLCPU
    agreed = refused = 0
    for _ in range(400):
        nd = rng.randrange(0, 4)
        kw = dict(shape=[rng.choice(extents) for _ in range(nd)],
                  strides=None if rng.random() < 0.2 else [rng.choice(steps) for _ in range(nd)],
                  byte_offset=rng.choice(offsets), dtype=rng.choice(dtypes),
                  device=(KDLCPU, 0) if rng.random() < 0.8 else (other, 0))
        d = rng.choice(datas)
        if d is not None:
            kw["data"] = d
        try:
            v = devbuf.from_dlpack(Producer(a, **kw))
        except BufferError as e:
            theirs = str(e).replace("devbuf.ForeignArray: ", "dlpack import: ")
            with pytest.raises(BufferError) as ours:
                cm.import_(Producer(a, **kw))
            assert str(ours.value) == theirs, kw
            refused += 1
            continue
        ours = cm.import_(Producer(a, **kw))
        assert (ours["shape"], ours["strides"], ours["format"], ours["itemsize"]) == \
            (v.shape, v.strides, v.format, v.itemsize), kw
        assert ours["buf"] == v.ptr and bool(ours["c_contiguous"]) == v.c_contiguous, kw
        v.release()
        agreed += 1
    assert agreed > 40 and refused > 40  # both sides of the line were exercised
