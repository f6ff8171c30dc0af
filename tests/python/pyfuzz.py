"""Fuzzing the Python surface, with hypothesis.

Targets, each a property that must hold for every input:

  parse_format    devbuf.parse_format in every mode (and allow_unknown): a
                  Format or a clean exception, never a crash; a parsed
                  itemsize agrees with struct.calcsize in struct mode.
  interface       devbuf.view of objects with crafted __cuda_array_interface__
                  and __array_interface__ dicts (huge shapes, negative strides,
                  overflowing shape * itemsize, bogus typestr, wrong types).
  dlpack          crafted DLPack capsules built with ctypes
                  (tests/python/dlpack_ctypes.py): any dtype, shape, strides,
                  offset and data pointer. When the description fits the real
                  memory behind it, to_host() must equal NumPy's gather.
  pickle          the pickle reconstructors (_rebuild_buffer, _rebuild_view)
                  with mutated metadata and payloads: a clean exception, or a
                  buffer whose format, itemsize and nbytes agree, read back
                  whole through memoryview and NumPy.

Run from pytest (tests/python/test_pyfuzz.py, a few examples per target) or
as a script for a bounded time per target, the way scripts/test.sh's fuzz
stage does it (against the ASan build of the extension):

    python tests/python/pyfuzz.py --seconds 20 [target ...]

Every input that ever crashed is an @example of its target and a test in
tests/python/test_hardening_python.py.
"""
import argparse
import ctypes
import math
import os
import pickle
import re
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import devbuf  # noqa: E402
from devbuf import _pickle  # noqa: E402

# What a clean refusal looks like. Anything else (a crash, a sanitizer
# report, SystemError) is a finding.
CLEAN = (ValueError, TypeError, OverflowError, BufferError, MemoryError, RecursionError,
         KeyError, devbuf.Error, pickle.UnpicklingError, _pickle.MissingDeviceError)

# No shrinking: a finding is reported as drawn (with its reproduce blob) in
# bounded time; shrinking a crash can take minutes.
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck),
                print_blob=True, phases=[Phase.explicit, Phase.generate])

# ---- parse_format ---------------------------------------------------------------

_CODES = "xcbB?hHiIlLqQnNefdspPOZgw"
_PIECES = list(_CODES) + ["T{", "}", ":a:", "(2,3)", "3", "<", ">", "@", "=", "!", "^", "&",
                          "X{}", "[devbuf$bfloat16]", "[devbuf$int4_x2]", "[struct$ih]",
                          "[buffer$d]", "[nosuch$x]", "[devbuf$", "$", ";", "]", "[", " ",
                          "0", "4294967296", "999999999999999999999"]

format_strings = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=127), max_size=40),
    st.lists(st.sampled_from(_PIECES), max_size=16).map("".join),
)


@given(fmt=format_strings, mode=st.sampled_from(["default", "struct", "numpy"]),
       allow_unknown=st.booleans())
@example(fmt="T{O:a:}", mode="default", allow_unknown=False)
@example(fmt="[devbuf$int4_x2]", mode="default", allow_unknown=False)
def fuzz_parse_format(fmt, mode, allow_unknown):
    try:
        f = devbuf.parse_format(fmt, mode, allow_unknown=allow_unknown)
    except CLEAN:
        return
    assert f.itemsize >= 0
    if mode == "struct":
        try:
            want = struct.calcsize(fmt)
        except struct.error:
            return  # devbuf is stricter or looser than struct in places it documents
        assert f.itemsize == want, (fmt, f.itemsize, want)


# ---- CUDA Array Interface / __array_interface__ ----------------------------------

_MEM = (ctypes.c_uint8 * 4096)()
_MEM_ADDR = ctypes.addressof(_MEM)


class _Iface:
    def __init__(self, d, cuda):
        if cuda:
            self.__cuda_array_interface__ = d
        else:
            self.__array_interface__ = d


_ints = st.one_of(st.integers(-4, 64), st.integers(-(2 ** 64), 2 ** 64),
                  st.sampled_from([2 ** 31, 2 ** 62, 2 ** 63 - 1, -(2 ** 63)]))
_typestrs = st.one_of(
    st.sampled_from(["<f4", "<f8", "|u1", "<i2", ">f4", "|b1", "<c8", "<f2", "<V2", "<f4junk",
                     "<f", "", "<i16", "|O8", "<M8[ns]", "<f 4", "<f+4", "<f04x"]),
    st.text(max_size=8))
_any = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.floats(), st.booleans(),
                 st.lists(st.integers(), max_size=3))


@st.composite
def interface_dicts(draw):
    nd = draw(st.integers(0, 5))
    shape = draw(st.one_of(st.lists(_ints, min_size=nd, max_size=nd).map(tuple),
                           _any))
    d = {"shape": shape, "typestr": draw(st.one_of(_typestrs, _any)), "version": draw(
        st.one_of(st.just(3), _ints, _any))}
    ptr = draw(st.one_of(st.just(_MEM_ADDR), st.integers(-(2 ** 65), 2 ** 65),
                         st.sampled_from([0, -1, -4096, 2 ** 64 - 1, 2 ** 64])))
    d["data"] = draw(st.one_of(st.tuples(st.just(ptr), st.booleans()), _any,
                               st.tuples(_any, _any)))
    if draw(st.booleans()):
        d["strides"] = draw(st.one_of(st.none(),
                                      st.lists(_ints, min_size=nd, max_size=nd).map(tuple), _any))
    if draw(st.booleans()):
        d["offset"] = draw(st.one_of(_ints, _any))
    if draw(st.booleans()):
        d["mask"] = draw(_any)
    if draw(st.booleans()):
        d["stream"] = draw(st.one_of(_ints, _any))
    drop = draw(st.sampled_from([None, "shape", "typestr", "data"]))
    if drop:
        d.pop(drop, None)
    return d


@given(d=interface_dicts(), cuda=st.booleans())
@example(d={"shape": (1,), "typestr": "<f4", "data": (-1, False), "version": 3}, cuda=False)
@example(d={"shape": (1,), "typestr": "<f4junk", "data": (_MEM_ADDR, False), "version": 3},
         cuda=False)
@example(d={"shape": (2 ** 62, 4), "typestr": "<f8", "data": (_MEM_ADDR, False), "version": 3},
         cuda=False)
@example(d={"shape": (3,), "typestr": "<f4", "strides": (-(2 ** 63),), "data": (_MEM_ADDR, False),
            "version": 3}, cuda=False)
def fuzz_interface(d, cuda):
    try:
        v = devbuf.view(_Iface(d, cuda))
    except CLEAN:
        return
    # What was accepted must have been well-formed: a non-negative int
    # pointer, a typestr with nothing after its size (the hardening tests found both).
    ptr = d["data"][0]
    assert type(ptr) is int and ptr >= 0, ptr
    assert re.fullmatch(r"[<>|=][iufcb][0-9]+", d["typestr"]), d["typestr"]
    # Metadata only: the producer's word on its memory is not ours to test.
    assert v.itemsize >= 1
    assert v.nbytes == math.prod(v.shape) * v.itemsize
    _ = (v.format, v.strides, v.ptr, v.readonly, v.dtype)
    assert v.ptr >= 0
    v.release()


# ---- DLPack capsules built with ctypes -------------------------------------------

_BACKING = np.arange(1 << 12, dtype=np.uint8)
_DTYPES = [(0, 8, 1), (0, 16, 1), (0, 32, 1), (0, 64, 1), (1, 8, 1), (1, 16, 1), (2, 16, 1),
           (2, 32, 1), (2, 64, 1), (5, 64, 1), (6, 8, 1), (4, 16, 1), (2, 32, 4), (0, 4, 1),
           (1, 4, 1), (2, 32, 0), (7, 8, 1), (200, 8, 1)]


@st.composite
def dlpack_producers(draw):
    from dlpack_ctypes import Producer
    nd = draw(st.integers(0, 4))
    shape = draw(st.lists(st.one_of(st.integers(0, 6), _ints), min_size=nd, max_size=nd))
    strides = draw(st.one_of(st.none(), st.lists(st.one_of(st.integers(-8, 8), _ints),
                                                 min_size=nd, max_size=nd)))
    dtype = draw(st.one_of(st.sampled_from(_DTYPES),
                           st.tuples(st.integers(0, 255), st.integers(0, 255),
                                     st.integers(0, 65535))))
    base = _BACKING.ctypes.data
    data = draw(st.one_of(st.just(base + 2048), st.just(base),
                          st.sampled_from([0, 2 ** 64 - 16, 2 ** 63, 1]),
                          st.integers(0, 2 ** 64 - 1)))
    offset = draw(st.one_of(st.integers(0, 64), st.sampled_from([2 ** 63, 2 ** 64 - 1]),
                            st.integers(0, 2 ** 64 - 1)))
    device = draw(st.sampled_from([(1, 0), (1, 0), (3, 0), (12, 0), (1, 5), (99, 0)]))
    flags = draw(st.sampled_from([0, 1, 2, 4, 0x200]))
    versioned = draw(st.booleans())
    major = draw(st.sampled_from([1, 1, 1, 0, 2]))
    return Producer(None, dtype=dtype, shape=shape, strides=strides, data=data,
                    byte_offset=offset, device=device, flags=flags, versioned=versioned,
                    major=major)


def _producer(**kw):
    from dlpack_ctypes import Producer
    return Producer(None, **kw)


def _fits(p):
    """Does p's description stay inside _BACKING? (then to_host may read it)"""
    code, bits, lanes = p.dtype
    if bits % 8 or lanes != 1 or bits == 0:
        return False
    item = bits // 8
    lo = hi = p.data + p.byte_offset
    strides = p.strides if p.strides is not None else None
    if any(s <= 0 for s in p.shape) or math.prod(p.shape) * item > _BACKING.nbytes:
        return False  # empty, or more data than the backing (stride-0 broadcasts)
    if strides is None:
        strides, acc = [], 1
        for s in reversed(p.shape):
            strides.insert(0, acc)
            acc *= s
    for n, s in zip(p.shape, strides):
        ext = (n - 1) * s * item
        lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
    base = _BACKING.ctypes.data
    return base <= lo and hi + item <= base + _BACKING.nbytes


@given(p=dlpack_producers())
@example(p=_producer(dtype=(1, 8, 1), shape=[0, 2 ** 31, 2 ** 32], strides=None, data=4096))
@example(p=_producer(dtype=(2, 32, 1), shape=[0], strides=None, data=2 ** 64 - 16,
                     byte_offset=64))
def fuzz_dlpack(p):
    try:
        a = devbuf.from_dlpack(p)
    except CLEAN:
        p.settle()
        return
    try:
        assert a.ptr >= 0
        v = devbuf.view(a)
        assert v.nbytes == math.prod(v.shape) * v.itemsize
        if p.device == (1, 0) and _fits(p) and p.dtype in _DTYPES[:12]:
            h = v.to_host()
            assert h.nbytes == v.nbytes
        v.release()
    finally:
        del a
        p.settle()


# ---- pickle reconstructors --------------------------------------------------------

_FORMATS = ["B", "b", "d", "f", "e", "i", "q", "?", "c", "O", "P", "2d", "T{i:a:d:b:}",
            "[devbuf$bfloat16]", "[devbuf$int4_x2]", "[nosuch$x]", "3s", "x", "", "@d", "<d",
            "Zd", "&d", "T{O:a:}", "[struct$ih]", "d{", "\x00"]


@st.composite
def pickle_metadata(draw):
    fmt = draw(st.one_of(st.sampled_from(_FORMATS), format_strings))
    try:
        good = devbuf.parse_format(fmt).itemsize
    except Exception:
        good = 1
    itemsize = draw(st.one_of(st.just(good), st.integers(-2, 20), _ints))
    nd = draw(st.integers(0, 4))
    shape = draw(st.one_of(st.lists(st.integers(0, 5), min_size=nd, max_size=nd).map(tuple),
                           st.lists(_ints, min_size=nd, max_size=nd).map(tuple), _any))
    meta = {"v": draw(st.sampled_from([1, 1, 1, 2, None])), "identifier": draw(
        st.sampled_from(["cpu", "cpu", "devbuf.sim", "no.such", ""])),
        "ordinal": draw(st.one_of(st.just(0), _ints)), "shape": shape, "format": fmt,
        "itemsize": itemsize, "readonly": draw(st.booleans())}
    if draw(st.booleans()):
        k = draw(st.sampled_from(list(meta)))
        meta[k] = draw(_any)
    ok = (isinstance(shape, tuple) and all(type(x) is int for x in shape)
          and type(itemsize) is int)
    want = math.prod(shape) * itemsize if ok else 0
    n = draw(st.one_of(st.just(max(0, min(want, 1 << 12))), st.integers(0, 256)))
    payload = draw(st.sampled_from([bytearray, bytes, memoryview]))(bytes(n))
    return meta, payload


def _check_buffer(b):
    assert b.nbytes == math.prod(b.shape) * b.itemsize, (b.shape, b.itemsize, b.nbytes)
    fmt = b.format
    try:
        size = struct.calcsize(fmt)
    except struct.error:
        size = None
    if size is not None:
        # Safety: a consumer sizing items with struct never reads past one.
        # (Exact equality differs on trailing struct padding, 'IIqI' is 20
        # for struct and 24 in C layout: only the bound is checked here.)
        assert size <= b.itemsize, (fmt, size, b.itemsize)
    if b.device.identifier == "cpu":
        try:
            m = memoryview(b)
        except CLEAN:
            return
        # tolist() makes a list per index of every outer dimension, also
        # when a later one is 0: a legal zero-byte (2**31, 0) buffer would
        # build 2**31 lists (an OOM kill seen in CI, not a finding).
        lists, outer = 0, 1
        for d in b.shape[:-1]:
            outer *= d
            lists += outer
        try:
            if lists <= 1 << 16:
                m.tolist()  # reads every item, sized by the format
        except (NotImplementedError, TypeError, ValueError):
            pass
        try:
            np.asarray(m).copy()
        except (ValueError, TypeError, RuntimeError):
            pass
        m.release()


@given(mp=pickle_metadata(), view=st.booleans())
@example(mp=({"v": 1, "identifier": "cpu", "ordinal": 0, "shape": (4,), "format": "B",
              "itemsize": 1, "readonly": False}, bytearray(3)), view=False)
@example(mp=({"v": 1, "identifier": "cpu", "ordinal": 0, "shape": (4,), "format": "d",
              "itemsize": 1, "readonly": False}, bytearray(4)), view=False)
@example(mp=({"v": 1, "identifier": "cpu", "ordinal": 0, "shape": (2,), "format": "O",
              "itemsize": 8, "readonly": False}, bytearray(16)), view=True)
@example(mp=({"v": 1, "identifier": "cpu", "ordinal": 0, "shape": (4,), "format": "",
              "itemsize": 2, "readonly": False}, bytearray(8)), view=False)
def fuzz_pickle(mp, view):
    meta, payload = mp
    fn = _pickle._rebuild_view if view else _pickle._rebuild_buffer
    try:
        out = fn(meta, payload)
    except CLEAN:
        return
    b = out
    if view:
        b = out.obj
        out.release()
    _check_buffer(b)


TARGETS = {"parse_format": fuzz_parse_format, "interface": fuzz_interface,
           "dlpack": fuzz_dlpack, "pickle": fuzz_pickle}


_DECORATED = {}
_DECORATED_LOCK = threading.Lock()  # two threads must not decorate one target twice


def run(target, seconds, examples=200):
    """Run one target in rounds of `examples` until `seconds` have passed
    (at least one round): bounded time, fresh random inputs each round."""
    key = (target, examples)
    with _DECORATED_LOCK:
        if key not in _DECORATED:  # hypothesis takes one settings object per function
            _DECORATED[key] = settings(max_examples=examples, **SETTINGS)(TARGETS[target])
        fn = _DECORATED[key]
    t0, rounds = time.monotonic(), 0
    while True:
        fn()
        rounds += 1
        if time.monotonic() - t0 >= seconds:
            break
    return rounds * examples


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("DEVBUF_PYFUZZ_SECONDS", "20")))
    ap.add_argument("targets", nargs="*", default=list(TARGETS))
    a = ap.parse_args(argv)
    for t in a.targets:
        t0 = time.monotonic()
        n = run(t, a.seconds)
        print(f"pyfuzz {t}: {n} inputs in {time.monotonic() - t0:.0f} s, no finding", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
