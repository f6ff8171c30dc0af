"""Dtype namespaces written in Python, through libffi: the registry calls a
real C function pointer (a closure) around the Python interpreter."""
import ctypes
import gc
import re
import sys
import threading
import time

import pytest

import devbuf
import devbuf.plugin as P
from pyplugin_helpers import Error, MmapDevice, fresh_id, lib


def _int_div_by_zero_message():
    # The interpreter's own words: "integer division or modulo by zero" up
    # to 3.13, "division by zero" from 3.14.
    try:
        1 // 0
    except ZeroDivisionError as e:
        return str(e)


INT_DIV_BY_ZERO = _int_div_by_zero_message()

_pp = P._pyplugin
_ids = iter(range(10**6))


def uint_interp(payload):
    """[ns$uN]: an N-bit unsigned integer, N a multiple of 8."""
    m = re.fullmatch(r"u(\d+)", payload)
    if m is None:
        return None
    bits = int(m.group(1))
    if bits % 8:
        raise ValueError(f"u{bits}: not a whole number of bytes")
    if bits == 0:
        return 1 // 0  # a bug in the interpreter
    return {"kind": "uint", "itemsize": bits // 8, "alignment": 1, "bits": bits,
            "canonical": f"uint{bits}"}


@pytest.fixture
def ns():
    nsid = f"mymodule{next(_ids)}"
    n = P.register_dtype_namespace(nsid, uint_interp, provider="mymodule",
                                   description="N-bit unsigned integers")
    yield nsid, n
    if n.state == "registered":
        n.unregister()


def alt_states(fmt):
    f = devbuf.parse_format(fmt)
    c = f.fields[0].custom
    return c.chosen, [a["state"] for a in c.alternatives], c.desc


def test_resolves_and_is_listed(ns):
    nsid, n = ns
    f = devbuf.parse_format(f"[{nsid}$u24]")
    assert f.itemsize == 3 and f.alignment == 1
    d = f.fields[0].custom.desc
    assert (d.kind, d.itemsize, d.bits, d.canonical) == ("uint", 3, 24, "uint24")
    listed = [x for x in devbuf.dtype_namespaces() if x["id"] == nsid]
    assert listed == [{"id": nsid, "provider": "mymodule", "description": "N-bit unsigned integers",
                       "source": "registered"}]
    # In a struct, with other fields around it.
    f = devbuf.parse_format(f"T{{B:a:[{nsid}$u24]:b:H:c:}}")
    fields = f.fields[0].children
    assert [(x.name, x.offset, x.size) for x in fields] == [("a", 0, 1), ("b", 1, 3), ("c", 4, 2)]


def test_second_alternative_of_a_list(ns):
    nsid, _ = ns
    chosen, states, desc = alt_states(f"[nosuch$x;{nsid}$u40]")
    assert chosen == 1 and states == ["unknown_id", "chosen"] and desc.itemsize == 5
    # Our interpreter declines (None) a payload: the next alternative answers.
    chosen, states, desc = alt_states(f"[{nsid}$float7;devbuf$float16]")
    assert chosen == 1 and states == ["refused", "chosen"] and desc.canonical == "float16"
    # Nobody understands: a FormatError naming both.
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.parse_format(f"[{nsid}$float7;nosuch$x]")
    assert ei.value.code == "DEVBUF_ENOTFOUND"


def test_exceptions_are_clean_errors(ns):
    nsid, _ = ns
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.parse_format(f"[{nsid}$u12]")
    msg = str(ei.value)
    assert "ValueError: u12: not a whole number of bytes" in msg
    assert f"python dtype namespace '{nsid}'" in msg and "test_pyplugin_dtype.py:" in msg
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.parse_format(f"[{nsid}$u0]")
    # The engine reports a failed alternative as not understood, with the
    # interpreter's own error inside; the interpreter itself said ECALLBACK.
    assert f"raised ZeroDivisionError: {INT_DIV_BY_ZERO}" in str(ei.value)
    d, e = DTypeDesc(), Error()
    rc = lib.devbuf_dtype_interpret(nsid.encode(), b"u0", ctypes.c_size_t(2), ctypes.byref(d),
                                    ctypes.byref(e))
    assert rc == P.ECALLBACK and b"ZeroDivisionError" in e.message
    assert sys.exc_info() == (None, None, None)


@pytest.mark.parametrize("answer, text", [
    ({"kind": "uint"}, "no 'itemsize'"),
    ({"itemsize": 0}, "'itemsize' must be at least 1"),
    ({"itemsize": 4, "alignment": 3}, "not a power of two"),
    ({"itemsize": 4, "kind": "quaternion"}, "unknown dtype kind 'quaternion'"),
    ({"itemsize": 4, "canonical": "x" * 80}, "'canonical' must be a str of at most 63 bytes"),
    ({"itemsize": 2, "dlpack": (2,)}, "'dlpack' must be (code, bits)"),
    (42, "no 'itemsize'"),
])
def test_bad_answers_are_clean_errors(answer, text):
    nsid = f"badanswer{next(_ids)}"
    n = P.register_dtype_namespace(nsid, lambda payload: answer)
    try:
        with pytest.raises(devbuf.FormatError) as ei:
            devbuf.parse_format(f"[{nsid}$x]")
        assert text in str(ei.value)
    finally:
        n.unregister()


class DTypeDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_uint32),
                ("itemsize", ctypes.c_uint32), ("alignment", ctypes.c_uint32),
                ("bits", ctypes.c_uint32), ("elements_per_item", ctypes.c_uint32),
                ("dlpack_code", ctypes.c_int32), ("dlpack_bits", ctypes.c_uint32),
                ("canonical", ctypes.c_char * 64), ("plain_format", ctypes.c_char * 32),
                ("reserved", ctypes.c_uint64 * 4)]


INTERPRET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                             ctypes.POINTER(DTypeDesc), ctypes.POINTER(Error))


def test_the_interpreter_is_a_plain_c_function_pointer(ns):
    """Any C caller can call it: here ctypes, with the GIL released, through
    the address the registry holds."""
    nsid, n = ns
    fn = INTERPRET(n.closure.address)
    d, e = DTypeDesc(struct_size=ctypes.sizeof(DTypeDesc)), Error()
    assert fn(None, b"u64xyz", 3, ctypes.byref(d), ctypes.byref(e)) == 0  # len 3: "u64"
    assert (d.itemsize, d.bits, d.kind, d.canonical) == (8, 64, 3, b"uint64")
    assert d.struct_size == ctypes.sizeof(DTypeDesc)
    assert fn(None, b"zzz", 3, ctypes.byref(d), ctypes.byref(e)) == P.ENOTFOUND
    assert fn(None, b"u9", 2, ctypes.byref(d), ctypes.byref(e)) == P.EINVAL
    assert b"ValueError: u9" in e.message
    # The registry's own entry point reaches the same closure.
    d2 = DTypeDesc()
    assert lib.devbuf_dtype_interpret(nsid.encode(), b"u16", ctypes.c_size_t(3), ctypes.byref(d2),
                                      ctypes.byref(e)) == 0
    assert d2.itemsize == 2


def test_unregister_and_refcounts():
    gc.collect()
    live0 = _pp._live_closures()

    def interp(payload):
        return {"itemsize": 2} if payload == "half" else None

    base = sys.getrefcount(interp)
    nsid = f"refs{next(_ids)}"
    n = P.register_dtype_namespace(nsid, interp)
    assert _pp._live_closures() == live0 + 1
    assert devbuf.parse_format(f"[{nsid}$half]").itemsize == 2
    closure = n.closure
    P.unregister_dtype_namespace(nsid)
    assert n.state == "unregistered" and n.closure is None
    assert closure.address is None and closure.callable is None
    del closure
    gc.collect()
    now = sys.getrefcount(interp)
    assert now == base and _pp._live_closures() == live0
    with pytest.raises(devbuf.FormatError, match="not a known dtype id"):
        devbuf.parse_format(f"[{nsid}$half]")
    with pytest.raises(LookupError):
        P.unregister_dtype_namespace(nsid)
    with pytest.raises(RuntimeError, match="not registered"):
        n.unregister()


@pytest.mark.thread_unsafe(reason="counts the live closures of the whole process, which other threads' registrations add to")
def test_refused_ids():
    live0 = _pp._live_closures()
    for taken, code in (("devbuf", "DEVBUF_EEXIST"), ("struct", "DEVBUF_EEXIST"),
                        ("bad$id", "DEVBUF_EINVAL")):
        with pytest.raises(devbuf.Error) as ei:
            P.register_dtype_namespace(taken, uint_interp)
        assert ei.value.code == code, (taken, ei.value)
    assert _pp._live_closures() == live0
    nsid = f"twice{next(_ids)}"
    n = P.register_dtype_namespace(nsid, uint_interp)
    with pytest.raises(devbuf.Error, match="already registered"):
        P.register_dtype_namespace(nsid, uint_interp)
    n.unregister()


def test_namespace_travels_with_its_plugin():
    ident = fresh_id()
    name = ident.replace(".", "_")
    reg = P.register_plugin(MmapDevice(identifiers=(ident,), name=name))
    f = devbuf.parse_format(f"[nosuch$rgb;{name}$rgba8]")
    assert f.itemsize == 4 and f.fields[0].custom.chosen == 1
    listed = [x for x in devbuf.dtype_namespaces() if x["id"] == name]
    assert listed and listed[0]["provider"] == name
    reg.unregister()
    with pytest.raises(devbuf.FormatError):
        devbuf.parse_format(f"[{name}$rgb8]")


def test_threads_parse_concurrently(ns):
    """Python threads, and C callers with the GIL released (ctypes calling
    devbuf_format_itemsize), all resolving through the closure at once."""
    nsid, _ = ns
    errors = []

    def py_thread(k):
        try:
            for i in range(200):
                bits = 8 * (1 + (i + k) % 8)
                assert devbuf.parse_format(f"[nosuch$q;{nsid}$u{bits}]").itemsize == bits // 8
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def c_thread(k):
        try:
            size, e = ctypes.c_uint64(), Error()
            for i in range(200):
                bits = 8 * (1 + (i * k) % 8)
                fmt = f"T{{[{nsid}$u{bits}]B}}".encode()
                rc = lib.devbuf_format_itemsize(fmt, ctypes.c_size_t(len(fmt)), 0,
                                                ctypes.byref(size), None, None, ctypes.byref(e))
                assert rc == 0, e.message
                assert size.value == bits // 8 + 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=f, args=(k,)) for k in range(4) for f in (py_thread, c_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_unregister_waits_for_interpret_calls_in_flight():
    entered, results = threading.Event(), []

    def slow(payload):
        entered.set()
        time.sleep(0.3)
        return {"itemsize": 4}

    nsid = f"slow{next(_ids)}"
    n = P.register_dtype_namespace(nsid, slow)

    def parse():
        size, e = ctypes.c_uint64(), Error()
        fmt = f"[{nsid}$x]".encode()
        rc = lib.devbuf_format_itemsize(fmt, ctypes.c_size_t(len(fmt)), 0, ctypes.byref(size),
                                        None, None, ctypes.byref(e))
        results.append((rc, size.value))

    t = threading.Thread(target=parse)
    t.start()
    assert entered.wait(10)
    n.unregister()  # returns only once the call above has left the closure
    assert n.closure is None
    t.join()
    assert results == [(0, 4)]


# ---- the suite's dtype-namespace checks ------------------------------------------------------

def _int4x2(payload):
    """mypkg's packed pair of 4-bit integers, as tests/core/dtype_only_plugin.c has it."""
    if payload != "int4x2":
        return None
    return {"kind": "int", "itemsize": 1, "alignment": 1, "bits": 4, "elements_per_item": 2,
            "dlpack_code": 0, "dlpack_bits": 4, "canonical": "int4x2"}


@pytest.mark.parametrize("isolate", [False, True])
def test_dtype_conformance_of_a_python_namespace(isolate):
    nsid = f"mypkg{next(_ids)}"
    n = P.register_dtype_namespace(nsid, _int4x2, provider="mypkg")
    try:
        r = P.run_dtype_conformance(nsid, ["int4x2"], isolate=isolate)
    finally:
        n.unregister()
    assert r.passed, r.output
    assert set(r.results) == {"dtype_namespace", "dtype_payloads", "dtype_layout",
                              "dtype_dlpack", "dtype_malformed", "dtype_threads"}
    assert all(v == "PASS" for v, _ in r.results.values()), r.output


def test_dtype_conformance_finds_a_canonical_spelling_its_namespace_refuses(ns):
    """uint_interp answers [ns$u16] with the canonical spelling 'uint16',
    which it does not itself understand: the suite says so."""
    nsid, _ = ns
    r = P.run_dtype_conformance(nsid, ["u16"])
    assert not r.passed
    verdict, why = r.results["dtype_payloads"]
    assert verdict == "FAIL" and "its canonical spelling 'uint16' is refused" in why, r.output
    assert r.results["dtype_layout"][0] == "PASS"
