"""The conformance kit is guarded: for every rule devbuf.check knows there is a
deliberately broken producer or consumer here that the kit must catch, and
the unbroken thing it was broken from passes that rule. A rule without a
broken case fails test_every_rule_has_a_broken_case.

Broken buffer exporters come from the test extension devbuf_broken
(tests/python/check_ext/broken.c); broken DLPack producers are NumPy
subclasses that spoil NumPy's own capsules; broken consumers are a small
ctypes DLPack consumer with one mistake switched on at a time.
"""
import sys
import ctypes
import pickle
import weakref

import numpy as np
import pytest

import devbuf
import devbuf.check as kit
from devbuf.check import ArraySpec
from devbuf.check import _capi as C
from devbuf.check import _dlpack as D

broken = pytest.importorskip("devbuf_broken", reason="test extension devbuf_broken not built")
consumer_ext = pytest.importorskip("devbuf_consumer", reason="test extension not built")

SMALL = [ArraySpec("int32", (3, 4), "C"), ArraySpec("float64", (3, 4), "F"),
         ArraySpec("int16", (3, 4), "strided"), ArraySpec("int32", (3, 4), "C", readonly=True),
         ArraySpec("uint8", (7,), "C"), ArraySpec("float64", (), "C")]


def produce(factory, cases=SMALL, checks=("buffer",)):
    return kit.producer(factory, cases=cases, checks=checks, name=getattr(
        factory, "__name__", "broken"))


# ---- buffer protocol: devbuf_broken.Exporter over a NumPy array ---------------------------

def exporter(**breaks):
    def factory(spec):
        return broken.Exporter(spec.numpy(), **breaks)
    return factory


BUFFER_CASES = {
    "bp.answer": lambda: produce(exporter(always_format=True)),
    "bp.refuse": lambda: produce(exporter(ignore_contig=True)),
    "bp.writable_readonly": lambda: produce(exporter(lie_readonly=True)),
    "bp.error_type": lambda: produce(exporter(error=ValueError)),
    "bp.satisfiable": lambda: produce(exporter(refuse=0x20)),  # PyBUF_C_CONTIGUOUS's own bit
    "bp.simple_format": lambda: produce(exporter(simple_format=True)),
    "bp.format_itemsize": lambda: produce(exporter(format="q"), cases=[ArraySpec("int32",
                                                                                 (7,))]),
    "bp.values": lambda: produce(lambda spec: broken.Exporter(np.zeros_like(spec.numpy()))),
    "bp.exports": lambda: produce(exporter(leak_ref=True)),
}


def test_the_unbroken_exporter_passes_every_buffer_rule():
    rep = produce(exporter())
    assert rep.ok, rep.format()
    for rid in BUFFER_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


# ---- DLPack: NumPy arrays whose capsules are spoiled one way at a time ----------------------

_set_destructor = C._Api.make("PyCapsule_SetDestructor", ctypes.c_int, ctypes.py_object,
                              ctypes.c_void_p)


class DL(np.ndarray):
    """NumPy's own DLPack export, with the break named in `self.brk`."""

    brk = None

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        brk = self.brk
        base = self  # (the capsule then holds this very object, as NumPy's own does)
        kw = {}
        if max_version is not None:
            kw["max_version"] = max_version
        if copy is not None:
            kw["copy"] = copy
        if dl_device is not None and brk != "dl_device":
            kw["dl_device"] = dl_device
        if stream is not None:
            kw["stream"] = stream
        if brk == "names" and max_version is None:
            kw["max_version"] = (1, 0)
        if brk == "copy_false" and copy is False:
            base = base.copy()
            kw.pop("copy")
        cap = np.ndarray.__dlpack__(base, **kw)
        if brk in ("version", "readonly", "copy", "values") and D.capsule_name(cap) in (
                "dltensor_versioned", "dltensor"):
            info = D.read_capsule(cap)
            m, t = info["managed"], info["tensor"]
            if brk == "version" and info["versioned"]:
                m.major = 2
            if brk == "readonly" and info["versioned"]:
                m.flags &= ~D.FLAG_READ_ONLY
            if brk == "copy" and copy and t.strides and self.ndim:
                for i, s in enumerate(self.strides):  # the source's strides, pyarrow's bug
                    t.strides[i] = s // self.itemsize
            if brk == "values" and t.ndim:
                t.shape = None
        if brk == "deleter":
            _set_destructor(cap, None)  # dropped unconsumed: never deleted
        return cap

    def __dlpack_device__(self):
        return (2, 0) if self.brk == "device" else (1, 0)


def dl(brk, cases=None):
    def factory(spec):
        a = spec.numpy().view(DL)
        a.brk = brk
        return a
    factory.__name__ = f"DL(brk={brk!r})"
    return kit.producer(factory, cases=cases or SMALL, checks=("dlpack",))


class StreamRefused(DL):
    """Refuses stream=None, which every producer must take on its own device."""

    def __dlpack__(self, **kw):
        if "stream" in kw:
            raise ValueError("stream refused (broken on purpose)")
        return super().__dlpack__(**kw)


DLPACK_CASES = {
    "dl.device": lambda: dl("device"),
    "dl.names": lambda: dl("names"),
    "dl.version": lambda: dl("version"),
    "dl.values": lambda: dl("values"),
    "dl.readonly": lambda: dl("readonly"),
    "dl.copy": lambda: dl("copy"),
    "dl.copy_false": lambda: dl("copy_false"),
    "dl.dl_device": lambda: dl("dl_device"),
    "dl.stream": lambda: kit.producer(_stream_factory, cases=SMALL, checks=("dlpack",)),
    "dl.deleter": lambda: dl("deleter"),
}


def _stream_factory(spec):
    a = spec.numpy().view(StreamRefused)
    a.brk = None
    return a


def test_numpy_unbroken_passes_every_dlpack_rule():
    rep = dl(None)
    for rid in DLPACK_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


# ---- the array interfaces: dicts over NumPy's own __array_interface__ -----------------------

def _spoil(d, a, brk, cuda):
    """NumPy's interface dict d (of array a), broken one way."""
    if brk == "version":
        d["version"] = 1
    if brk == "typestr":
        d["typestr"] = "<f2"
    if brk == "descr":
        d["descr"] = [("x", "<i2")] if a.itemsize != 2 else [("x", "<i4")]
    if brk == "data":
        d["data"] = (d["data"][0], 0)  # read_only an int, not a bool
    if brk == "strides":
        # CAI v3: None for C order; the array interface: a bool is not a stride
        d["strides"] = a.strides if cuda else tuple(True for _ in a.shape) or None
    if brk == "mask":  # CAI: host memory; the array interface: another shape
        d["mask"] = np.ones(a.shape if cuda else a.shape + (2,), bool)
    if brk == "stream":
        d["stream"] = 0
    if brk == "values":
        d["offset"] = a.itemsize  # one item too far
    return d


class CAI:
    def __init__(self, a, brk=None):
        self.a, self.brk = a, brk

    @property
    def __cuda_array_interface__(self):
        ai = self.a.__array_interface__
        d = {"shape": ai["shape"], "typestr": ai["typestr"], "data": ai["data"],
             "strides": ai["strides"], "version": 3, "stream": 1, "descr": ai["descr"]}
        return _spoil(d, self.a, self.brk, True)


class AI:
    def __init__(self, a, brk=None):
        self.a, self.brk = a, brk

    @property
    def __array_interface__(self):
        return _spoil(dict(self.a.__array_interface__), self.a, self.brk, False)


def cai(brk):
    return kit.producer(lambda spec: CAI(spec.numpy(), brk), cases=SMALL, checks=("cai",))


def ai(brk):
    return kit.producer(lambda spec: AI(spec.numpy(), brk), cases=SMALL,
                        checks=("array_interface",))


CAI_CASES = {f"cai.{b}": (lambda b=b: cai(b)) for b in
             ("version", "typestr", "descr", "data", "strides", "mask", "stream")}
AI_CASES = {f"ai.{b}": (lambda b=b: ai(b)) for b in
            ("version", "typestr", "descr", "data", "strides", "mask", "values")}


def test_unbroken_cai_passes():
    rep = cai(None)
    assert rep.ok, rep.format()
    for rid in CAI_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


def test_unbroken_array_interface_passes():
    rep = ai(None)
    assert rep.ok, rep.format()
    for rid in AI_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


def test_an_array_interface_whose_data_is_a_buffer_is_read_through_it():
    # The interface allows data to be an object exposing the buffer (Pillow gives bytes).
    class BytesData:
        def __init__(self, a):
            self.a = a

        @property
        def __array_interface__(self):
            d = dict(self.a.__array_interface__)
            d["data"], d["strides"] = self.a.tobytes(), None
            return d
    rep = kit.producer(lambda spec: BytesData(spec.numpy()),
                       cases=[x for x in SMALL if x.layout == "C"], checks=("array_interface",))
    assert rep.status("ai.data") == kit.PASS, rep.format()
    assert rep.ok, rep.format()


# ---- Arrow: pyarrow's capsules, spoiled ----------------------------------------------------

_NOOP_RELEASE = C.RELEASE_ARRAY(lambda p: None)  # forgets to mark the struct released


class Arrow:
    def __init__(self, arr, brk=None):
        self.arr, self.brk = arr, brk

    def __arrow_c_device_array__(self, requested_schema=None, **kw):
        schema, array = self.arr.__arrow_c_device_array__()
        dev = C.capsule_struct(array, C.ArrowDeviceArray)
        if self.brk == "names":
            return array, schema
        if self.brk == "device":
            dev.device_type = 2
        if self.brk == "values":
            dev.array.offset += 1
        if self.brk == "release":
            dev.array.release = ctypes.cast(_NOOP_RELEASE, ctypes.c_void_p).value
        return schema, array


def arrow(brk):
    pa = pytest.importorskip("pyarrow")

    def factory(spec):
        if len(spec.shape) != 1 or spec.layout != "C" or spec.dtype == "bool":
            return None
        return Arrow(pa.array(spec.numpy()), brk)
    cases = [ArraySpec("int32", (7,)), ArraySpec("float64", (7,)), ArraySpec("uint8", (9,))]
    return kit.producer(factory, cases=cases, checks=("arrow",))


ARROW_CASES = {f"arrow.{b}": (lambda b=b: arrow(b)) for b in
               ("names", "release", "device", "values")}


def test_unbroken_arrow_passes():
    rep = arrow(None)
    for rid in ARROW_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


# ---- pickle 5 -------------------------------------------------------------------------------

def _rebuild(buf, dtype, shape, brk):
    if brk == "out_of_band" and isinstance(buf, memoryview):
        return np.zeros(shape, dtype)  # mishandles the buffer it was handed out-of-band
    return np.frombuffer(buf, dtype).reshape(shape)


class Pick(np.ndarray):
    brk = None

    def __reduce_ex__(self, protocol):
        if self.brk == "roundtrip":
            return (np.zeros, (self.shape, self.dtype))
        a = np.array(self.view(np.ndarray), order="C")  # (0-d stays 0-d)
        return (_rebuild, (pickle.PickleBuffer(a), a.dtype, a.shape, self.brk))


def pick(brk):
    def factory(spec):
        a = spec.numpy().view(Pick)
        a.brk = brk
        return a
    return kit.producer(factory, cases=SMALL, checks=("pickle",),
                        read=lambda x: np.asarray(x).view(np.ndarray))


PICKLE_CASES = {"pickle.roundtrip": lambda: pick("roundtrip"),
                "pickle.out_of_band": lambda: pick("out_of_band")}


def test_unbroken_pickle_passes():
    rep = pick(None)
    for rid in PICKLE_CASES:
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


# ---- the device extension and custom dtypes ---------------------------------------------------

def device(**breaks):
    def factory(spec):
        if breaks.pop("_host", False):
            return broken.DeviceExporter(spec.numpy(), **breaks)
        return broken.DeviceExporter(devbuf.from_host(spec.numpy(), device="devbuf.sim"),
                                     **breaks)
    return factory


def dx(factory, cases=(ArraySpec("int32", (3, 4)),)):
    return kit.producer(factory, cases=list(cases), checks=("buffer", "device"))


def _sim_or_skip():
    try:
        devbuf.device("devbuf.sim")
    except devbuf.Error as e:
        pytest.skip(f"devbuf.sim not available: {e}")


DEVICE_CASES = {
    "dx.plain_refused": lambda: (_sim_or_skip(), dx(device(plain_device=True)))[1],
    "dx.no_unasked_fields": lambda: dx(lambda spec: consumer_ext.Exporter(
        spec.numpy().tobytes(), mode="host", misbehave=True), [ArraySpec("uint8", (9,))]),
    "dx.advertised": lambda: dx(lambda spec: broken.DeviceExporter(
        spec.numpy(), refuse=devbuf.PyBUF_DEVICE)),
    "dx.answer": lambda: (_sim_or_skip(), dx(device(no_device_flag=True)))[1],
    "dtypes.format": lambda: dx(lambda spec: broken.Exporter(
        spec.numpy(), format="[devbuf$bfloat16]", itemsize=4), [ArraySpec("uint32", (5,))]),
}


def test_unbroken_device_exporters_pass():
    _sim_or_skip()
    rep = dx(device())
    assert rep.status("dx.plain_refused") == kit.PASS, rep.format()
    assert rep.status("dx.advertised") == kit.PASS, rep.format()
    assert rep.status("dx.answer") == kit.PASS, rep.format()
    rep = dx(lambda spec: consumer_ext.Exporter(spec.numpy().tobytes(), mode="host"),
             [ArraySpec("uint8", (9,))])
    assert rep.status("dx.no_unasked_fields") == kit.PASS, rep.format()
    rep = dx(lambda spec: broken.Exporter(spec.numpy(), format="[devbuf$bfloat16]"),
             [ArraySpec("uint16", (5,))])
    assert rep.status("dtypes.format") == kit.PASS, rep.format()


# ---- consumers: a small ctypes DLPack consumer, one mistake at a time --------------------------

class _Holder:
    pass


def naive_from_dlpack(p, *, brk=None):
    """A DLPack consumer written with ctypes; `brk` switches on one mistake."""
    cap = p.__dlpack__() if brk == "max_version" else p.__dlpack__(max_version=(1, 0))
    name = D.capsule_name(cap)
    if brk != "capsule_name" and brk != "consumed_capsule" and \
            name not in ("dltensor", "dltensor_versioned"):
        raise BufferError(f"capsule named {name}")
    if brk == "capsule_name" and name.startswith("used_"):
        raise BufferError("consumed")
    info = D.read_capsule(cap, any_name=True, versioned=None if name.startswith(
        ("dltensor", "used_")) else brk != "max_version")
    dt = {(0, 32): "<i4", (2, 64): "<f8", (1, 8): "u1", (0, 8): "i1"}[info["dtype"][:2]]
    itemsize = np.dtype(dt).itemsize
    shape = info["shape"]
    strides = info["strides"]
    st = tuple(s * itemsize for s in strides) if strides is not None else None
    ro = bool(info["flags"] & D.FLAG_READ_ONLY)
    if brk != "rename":
        used = b"used_dltensor_versioned" if info["versioned"] else b"used_dltensor"
        D._api.PyCapsule_SetName(cap, D.NAMES[used])
    off = 0 if brk == "byte_offset" else info["byte_offset"]
    h = _Holder()
    h.__array_interface__ = {"shape": shape, "typestr": dt, "strides": st, "version": 3,
                             "data": (info["data"] + off, ro and brk != "readonly")}
    if brk != "keepalive":
        h.keep = (p, cap)
    deleter, addr = info["managed"].deleter, info["address"]
    if brk not in ("release", "rename"):  # (not renamed: the capsule's destructor deletes)
        if brk == "keepalive":
            deleter(addr)  # lets go at once
        else:
            weakref.finalize(h, deleter, addr)
    if info["device"][0] != 1:
        if brk == "device":
            return np.zeros(shape, dt)  # garbage instead of refusing
        raise BufferError("not host memory")
    x = np.asarray(h)
    if brk == "values":
        return x + 1
    if brk == "negative_strides" and any(s < 0 for s in x.strides):
        return x[::-1]
    if brk == "zero_strides" and x.size and 0 in x.strides:
        return np.zeros_like(x)
    if brk == "zero_d" and x.ndim == 0:
        return x.reshape(1)
    if brk == "empty" and x.size == 0:
        return np.empty((0,), x.dtype)
    if brk == "noncontiguous" and not x.flags.c_contiguous:
        return np.ascontiguousarray(x).T.copy().T * 0
    return x


def consume(brk):
    return kit.consumer(lambda p: naive_from_dlpack(p, brk=brk), "dlpack",
                        name=f"naive_from_dlpack(brk={brk!r})")


CONSUMER_CASES = {f"c.{b}": (lambda b=b: consume(b)) for b in (
    "values", "negative_strides", "zero_strides", "zero_d", "empty", "byte_offset",
    "noncontiguous", "readonly", "device", "keepalive", "release", "consumed_capsule",
    "capsule_name", "rename", "max_version")}


def test_the_unbroken_consumer_passes_every_consumer_rule():
    rep = consume(None)
    assert rep.ok, rep.format()
    for rid in CONSUMER_CASES:
        if rid == "c.device" and rep.status(rid) == kit.SKIP:
            continue  # no devbuf.sim here
        assert rep.status(rid) == kit.PASS, (rid, rep.format())


# ---- every rule, caught ---------------------------------------------------------------------

BROKEN = {**BUFFER_CASES, **DLPACK_CASES, **CAI_CASES, **AI_CASES, **ARROW_CASES, **PICKLE_CASES,
          **DEVICE_CASES, **CONSUMER_CASES}


def test_a_host_answer_to_a_device_request_after_a_plain_refusal_fails_dx_answer():
    """What a consumer on an interpreter with the extension built in sees of
    an answer without the flag: host memory, after the plain request was
    refused. dx.answer fails on it; it is never only a skip."""
    _sim_or_skip()
    rep = dx(device(host_answer=True))
    res = rep.results["dx.answer"]
    assert res.status == kit.FAIL, rep.format()
    assert "PyBUF_FULL_RO was refused" in res.reason and "answered host memory" in res.reason
    assert not rep.ok


def test_every_rule_has_a_broken_case():
    missing = sorted(set(kit.RULES) - set(BROKEN))
    assert not missing, f"rules with no broken producer or consumer: {missing}"
    assert not set(BROKEN) - set(kit.RULES), "broken cases for rules the kit does not have"


@pytest.mark.parametrize("rule_id", sorted(kit.RULES))
def test_the_kit_catches_the_broken_case(rule_id):
    if rule_id not in BROKEN:
        pytest.fail(f"{rule_id}: no broken case")
    if rule_id in ("c.device", "dx.answer"):
        _sim_or_skip()
    if rule_id == "c.consumed_capsule" and hasattr(sys, "gettotalrefcount"):
        # The broken consumer reads a tensor whose capsule was already used,
        # i.e. freed memory; a debug interpreter scribbles over freed memory,
        # so there it crashes before the kit can report it.
        pytest.skip("the broken consumer's read of freed memory crashes a debug interpreter")
    rep = BROKEN[rule_id]()
    res = rep.results[rule_id]
    assert res.status == kit.FAIL, f"{rule_id} not caught:\n{rep.format()}"
    assert res.reason and res.rule.citation  # names what was wrong, and where the rule is
    if res.rule.role == "producer" or res.reproducer:
        assert res.reproducer, f"{rule_id}: no reproducer"
