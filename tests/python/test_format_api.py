"""devbuf.parse_format, FormatError, and dtype namespaces defined in Python."""
import struct
import threading

import numpy as np
import pytest

import devbuf


def test_parse_plain_and_struct_like():
    f = devbuf.parse_format("<ih2d")
    assert f.itemsize == struct.calcsize("<ih2d") and f.mode == "default"
    assert [x.code for x in f.fields] == ["i", "h", "d"]
    assert f.fields[2].count == 2 and f.fields[2].offset == 6
    assert f.canonical == "<ih2d"
    s = devbuf.parse_format("T{i:a:d:b:}")
    assert s.itemsize == 16 and s.fields[0].kind == "struct"
    assert [c.name for c in s.fields[0].children] == ["a", "b"]


def test_parse_custom_dtypes():
    f = devbuf.parse_format("[acme$x;devbuf$bfloat16]")
    c = f.fields[0].custom
    assert f.has_custom and f.itemsize == 2
    assert c.chosen == 1 and c.id == "devbuf" and c.payload == "bfloat16"
    assert c.alternatives[0]["state"] == "unknown_id"
    assert c.desc.kind == "float" and c.desc.dlpack == (4, 16)
    u = devbuf.parse_format("[acme$x]", allow_unknown=True)
    assert u.has_unknown and u.itemsize == 0 and u.fields[0].custom.chosen == -1


@pytest.mark.parametrize("fmt, offset, code", [
    ("iiZ", 3, "DEVBUF_EFORMAT"),
    ("T{i:a", 3, "DEVBUF_EFORMAT"),
    ("[numpy$foo]", 0, "DEVBUF_ENOTFOUND"),
])
def test_format_error(fmt, offset, code):
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.parse_format(fmt)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, devbuf.Error)
    assert e.offset == offset and e.code == code and e.format == fmt
    lines = str(e).splitlines()
    assert lines[1].strip() == fmt and lines[2].index("^") - 2 == offset


def test_unknown_id_names_its_package():
    with pytest.raises(devbuf.FormatError, match="'numpy' package"):
        devbuf.parse_format("[numpy$foo]")


def test_modes():
    assert devbuf.parse_format("ii", mode="struct").itemsize == 8
    with pytest.raises(devbuf.FormatError):
        devbuf.parse_format("T{i}", mode="struct")
    with pytest.raises(ValueError, match="mode"):
        devbuf.parse_format("i", mode="nope")


def _acme(payload):
    if payload == "u24":
        return {"kind": "uint", "itemsize": 3, "alignment": 1, "bits": 24, "canonical": "acme.u24"}
    if payload == "boom":
        raise RuntimeError("acme exploded")
    if payload == "bad":
        return {"kind": "uint"}  # no itemsize
    return None  # not understood


@pytest.fixture
def acme():
    devbuf.register_dtype_namespace("acme", _acme, provider="acme-dtypes", description="test")
    yield
    devbuf.unregister_dtype_namespace("acme")


def test_python_namespace(acme):
    f = devbuf.parse_format("2[acme$u24]")
    assert f.itemsize == 6
    d = f.fields[0].custom.desc
    assert d.kind == "uint" and d.itemsize == 3 and d.bits == 24 and d.canonical == "acme.u24"
    assert any(n["id"] == "acme" and n["provider"] == "acme-dtypes" and n["source"] == "registered"
               for n in devbuf.dtype_namespaces())
    # first understood alternative wins; "not understood" moves on
    g = devbuf.parse_format("[acme$zzz;devbuf$float8_e4m3fn]")
    assert g.fields[0].custom.chosen == 1
    assert g.fields[0].custom.alternatives[0]["state"] == "refused"
    b = devbuf.empty(4, "[acme$u24]", device="cpu")
    assert b.itemsize == 3 and b.nbytes == 12


def test_python_namespace_exceptions_do_not_cross(acme):
    with pytest.raises(devbuf.FormatError, match="RuntimeError: acme exploded"):
        devbuf.parse_format("[acme$boom]")
    with pytest.raises(devbuf.FormatError, match="itemsize"):
        devbuf.parse_format("[acme$bad]")
    # an exception the caller was handling survives the callback
    try:
        raise KeyError("outer")
    except KeyError:
        assert devbuf.parse_format("[acme$u24]").itemsize == 3
        import sys
        assert sys.exc_info()[0] is KeyError


def test_python_namespace_registration_rules(acme):
    with pytest.raises(devbuf.Error, match="already registered"):
        devbuf.register_dtype_namespace("acme", _acme)
    with pytest.raises(devbuf.Error, match="reserved"):
        devbuf.register_dtype_namespace("struct", _acme)
    with pytest.raises(TypeError):
        devbuf.register_dtype_namespace("other", 42)
    with pytest.raises(KeyError):
        devbuf.unregister_dtype_namespace("never-registered")


def test_python_namespace_from_threads(acme):
    errors = []

    def work():
        try:
            for _ in range(200):
                assert devbuf.parse_format("T{[acme$u24]:a:i:b:}").itemsize == 8
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_unregister_then_unknown():
    ns = f"tmpns{threading.get_ident()}"  # one per thread: run-parallel runs it in several
    devbuf.register_dtype_namespace(ns, lambda p: {"itemsize": 1})
    assert devbuf.parse_format(f"[{ns}$x]").itemsize == 1
    devbuf.unregister_dtype_namespace(ns)
    with pytest.raises(devbuf.FormatError, match=ns):
        devbuf.parse_format(f"[{ns}$x]")


def test_dtype_namespaces_lists_a_namespace_while_others_come_and_go():
    # Listing by index missed a namespace that stayed registered whenever
    # another thread unregistered one listed before it (free-threaded builds).
    me = threading.get_ident()
    stable = f"stable{me}"
    devbuf.register_dtype_namespace(stable, lambda p: {"itemsize": 1})
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            for i in range(4):
                devbuf.register_dtype_namespace(f"churn{me}x{i}", lambda p: {"itemsize": 1})
                devbuf.unregister_dtype_namespace(f"churn{me}x{i}")

    t = threading.Thread(target=churn)
    t.start()
    try:
        missed = sum([x["id"] for x in devbuf.dtype_namespaces()].count(stable) != 1
                     for _ in range(2000))
    finally:
        stop.set()
        t.join()
        devbuf.unregister_dtype_namespace(stable)
    assert missed == 0, f"{missed} of 2000 listings did not list {stable!r} exactly once"


def test_view_dtype_of_custom_format():
    b = devbuf.empty((2, 2), "[devbuf$bfloat16]", device="cpu")
    v = devbuf.view(b)
    assert v.format == "[devbuf$bfloat16]" and v.itemsize == 2
    assert v.dtype.fields[0].custom.desc.canonical == "bfloat16"
    assert v.dtype is v.dtype  # parsed once
    np_view = devbuf.view(np.zeros(3, dtype=np.complex64))
    assert np_view.dtype.itemsize == 8


def test_calcsize_matches_struct_and_caches_only_plain_formats():
    import struct

    for f in ["i", "<iq", "=bhl", "3s2x", "?dQ", "@ib"]:
        assert devbuf.calcsize(f, "struct") == struct.calcsize(f)
        assert devbuf.calcsize(f, "struct") == struct.calcsize(f)  # cached path
    assert devbuf.calcsize("@ib") == 8  # default mode pads a native struct at its end
    assert devbuf.calcsize("[devbuf$bfloat16]") == 2
    with pytest.raises(devbuf.FormatError) as ei:
        devbuf.calcsize("iiy")
    assert ei.value.offset == 2
    with pytest.raises(devbuf.FormatError):
        devbuf.calcsize("iiy")  # errors are never cached
    with pytest.raises(ValueError):
        devbuf.calcsize("i", "fortran")
    assert devbuf.calcsize(b"<ih", "struct") == struct.calcsize(b"<ih")  # bytes, as struct
    with pytest.raises(TypeError):
        devbuf.calcsize(1)


def test_format_objects_are_c_types_with_dataclass_manners():
    # Format and Field are C objects over the engine's result; they
    # keep the dataclasses' attribute names, repr, equality, hash and pickle.
    import pickle
    f = devbuf.parse_format("T{i:a:(2)d:b:}")
    assert type(f) is devbuf.Format and type(f.fields[0]) is devbuf.Field
    assert f.fields is f.fields and f.fields[0].children is f.fields[0].children
    a, b = f.fields[0].children
    assert (a.name, a.code, a.offset, b.name, b.shape, b.offset, b.size) == \
        ("a", "i", 0, "b", (2,), 8, 16)
    g = devbuf.parse_format("T{i:a:(2)d:b:}")
    assert f == g and hash(f) == hash(g) and f != devbuf.parse_format("T{i:a:d:b:}")
    assert f.fields[0] == g.fields[0] and f.fields[0] != f
    assert repr(f) == "Format(format='T{i:a:(2)d:b:}', mode='default', itemsize=24)"
    assert repr(f.fields[0].children[0]) == \
        "Field(name='a', kind='scalar', code='i', offset=0, size=4)"
    assert pickle.loads(pickle.dumps(f)) == f
    assert pickle.loads(pickle.dumps(devbuf.parse_format("ii", "struct"))).mode == "struct"
    # a Field outlives its Format (it keeps the engine's result alive)
    fld = devbuf.parse_format("&T{h:x:}").fields[0]
    assert fld.pointee.children[0].name == "x" and fld.pointee.children[0].code == "h"
    with pytest.raises(AttributeError):
        f.itemsize = 3
    # bytes are a format too, as calcsize and struct take them
    assert devbuf.parse_format(b"i") == devbuf.parse_format("i")
    with pytest.raises(TypeError, match="'fmt' must be str or bytes"):
        devbuf.parse_format(1)
    with pytest.raises(ValueError, match="mode must be"):
        devbuf.parse_format("i", "c")
    with pytest.raises(TypeError, match="unexpected or repeated keyword argument 'bogus'"):
        devbuf._devbuf.parse_format("i", bogus=1)  # the C parser under devbuf.parse_format
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        devbuf.parse_format("i", bogus=1)
    assert devbuf.parse_format(fmt="i", mode="numpy", allow_unknown=True).mode == "numpy"
    assert devbuf._devbuf._parse_format("i", "struct", plugins=False).mode == "struct"
