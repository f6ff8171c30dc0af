"""Property tests of the C format engine against the references it claims to match.

* struct mode == CPython's struct module: same item size for thousands of
  generated formats, and an error exactly where struct raises.
* NumPy mode == numpy's own PEP 3118 parser (_dtype_from_pep3118): same item
  size and field offsets.
* default mode == the C compiler's layout, as ctypes computes it.
* the devbuf namespace == ml_dtypes: same item size and alignment.
* the canonical printer round-trips.

libdevbuf is found through $DEVBUF_LIB, else $DEVBUF_BUILD_DIR/lib, else the newest
build*/lib/libdevbuf.so.
Generation uses fixed seeds, so a failure reproduces.
"""

import ctypes
import glob
import os
import random
import re
import struct
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _find_lib():
    env = os.environ.get("DEVBUF_LIB")
    if env:
        return env
    bd = os.environ.get("DEVBUF_BUILD_DIR")  # the build tests/python/conftest.py uses
    if bd and os.path.exists(os.path.join(bd, "lib", "libdevbuf.so")):
        return os.path.join(bd, "lib", "libdevbuf.so")
    cands = glob.glob(os.path.join(ROOT, "build*", "lib", "libdevbuf.so"))
    return max(cands, key=os.path.getmtime) if cands else None


LIBPATH = _find_lib()
pytestmark = pytest.mark.skipif(LIBPATH is None, reason="libdevbuf.so not built")

DEFAULT, STRUCT, NUMPY = 0, 1, 2
ALLOW_UNKNOWN = 0x20


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("backend_code", ctypes.c_int),
                ("message", ctypes.c_char * 512)]


class Field(ctypes.Structure):
    pass


Field._fields_ = [
    ("name", ctypes.c_char_p), ("offset", ctypes.c_uint64), ("size", ctypes.c_uint64),
    ("elem_size", ctypes.c_uint64), ("count", ctypes.c_uint64), ("alignment", ctypes.c_uint32),
    ("kind", ctypes.c_uint16), ("dtype_kind", ctypes.c_uint8), ("byteorder", ctypes.c_char),
    ("code", ctypes.c_char * 4), ("big_endian", ctypes.c_uint8), ("bit_offset", ctypes.c_uint8),
    ("ndim", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_uint64)),
    ("children", ctypes.POINTER(Field)), ("pointee", ctypes.POINTER(Field)),
    ("next", ctypes.POINTER(Field)), ("parent", ctypes.POINTER(Field)),
    ("custom", ctypes.c_void_p), ("src_offset", ctypes.c_uint32), ("nchildren", ctypes.c_uint32),
]
FIELD_PADDING = 1


class FormatHead(ctypes.Structure):
    """The public head of devbuf_format (the arena behind it is not mirrored)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("itemsize", ctypes.c_uint64), ("alignment", ctypes.c_uint64),
                ("fields", ctypes.POINTER(Field)), ("nfields", ctypes.c_uint32),
                ("info", ctypes.c_uint32), ("error_offset", ctypes.c_uint64)]


@pytest.fixture(scope="module")
def lib():
    L = ctypes.CDLL(LIBPATH)
    L.devbuf_format_itemsize.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Error)]
    L.devbuf_format_parse_alloc.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.POINTER(FormatHead)),
        ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(Error)]
    L.devbuf_format_free.argtypes = [ctypes.POINTER(FormatHead)]
    L.devbuf_format_print.argtypes = [ctypes.POINTER(FormatHead), ctypes.c_char_p, ctypes.c_size_t]
    L.devbuf_format_print.restype = ctypes.c_size_t
    return L


def itemsize(lib, fmt, mode=DEFAULT):
    """(itemsize, alignment) or raises ValueError(message, offset)."""
    b = fmt.encode("latin-1") if isinstance(fmt, str) else fmt
    s, a, o, e = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_size_t(), Error()
    rc = lib.devbuf_format_itemsize(b, len(b), mode, ctypes.byref(s), ctypes.byref(a),
                                    ctypes.byref(o), ctypes.byref(e))
    if rc:
        raise ValueError(e.message.decode(), o.value)
    return s.value, a.value


class Parsed:
    def __init__(self, lib, fmt, mode=DEFAULT):
        self.lib = lib
        b = fmt.encode("latin-1")
        self.p = ctypes.POINTER(FormatHead)()
        off, e = ctypes.c_size_t(), Error()
        rc = lib.devbuf_format_parse_alloc(b, len(b), mode, ctypes.byref(self.p), ctypes.byref(off),
                                           ctypes.byref(e))
        if rc:
            raise ValueError(e.message.decode(), off.value)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.lib.devbuf_format_free(self.p)

    @property
    def head(self):
        return self.p.contents

    def top_fields(self):
        out, f = [], self.head.fields
        while f:
            out.append(f.contents)
            f = f.contents.next
        return out

    def canonical(self):
        n = self.lib.devbuf_format_print(self.p, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.devbuf_format_print(self.p, buf, n + 1)
        return buf.value.decode()


# ---- struct mode vs the struct module -------------------------------------------
NATIVE_ONLY = "nNP"
# Struct mode follows CPython 3.15's struct: 3.14's F/D and 3.15's Zf/Zd too.
STRUCT_CODES = list("xcbB?hHiIlLqQnNefdspPFD") + ["Zf", "Zd"]
_COMPLEX = re.compile(r"(\d*)(Zf|Zd|F|D)")


def calcsize(f):
    """struct.calcsize as CPython 3.15 answers it, on any interpreter: each
    complex item has the size and native alignment of two of its floats."""
    if sys.version_info >= (3, 15):
        return struct.calcsize(f)

    def two_floats(m):
        n = int(m.group(1)) if m.group(1) else 1
        return f"{2 * n}{'f' if m.group(2) in ('F', 'Zf') else 'd'}"

    return struct.calcsize(_COMPLEX.sub(two_floats, f))
WS = " \t\n\r\x0b\x0c"


def gen_struct_format(r):
    prefix = r.choice(["", "", "@", "=", "<", ">", "!"])
    codes = STRUCT_CODES if prefix in ("", "@") else [c for c in STRUCT_CODES if c not in NATIVE_ONLY]
    parts = [prefix]
    if not prefix and r.random() < 0.2:
        parts.append(r.choice(WS))
    for _ in range(r.randint(0, 8)):
        if r.random() < 0.4:
            parts.append(str(r.choice([0, 1, 2, 3, 5, 7, 16, 100])))
        parts.append(r.choice(codes))
        if r.random() < 0.25:
            parts.append(r.choice(WS) * r.randint(1, 2))
    return "".join(parts)


def test_struct_mode_matches_calcsize(lib):
    r = random.Random(3118)
    n = 0
    for _ in range(6000):
        f = gen_struct_format(r)
        want = calcsize(f)
        got, _ = itemsize(lib, f, STRUCT)
        assert got == want, f"{f!r}: engine {got}, struct.calcsize {want}"
        n += 1
    assert n == 6000


def mutate(r, f):
    pos = r.randint(0, len(f))
    ch = r.choice("xcbB?hHiIlLqQnNefdspPgZFDT{}()[]:$;0123456789 @=<>!^&Xtwu\t\x00\x7f")
    op = r.random()
    if op < 0.4 or not f:
        return f[:pos] + ch + f[pos:]
    if op < 0.7:
        return f[:pos] + f[pos + 1:]
    return f[:pos] + ch + f[pos + 1:]


def test_struct_mode_errors_where_struct_raises(lib):
    """Random edits of valid formats: the engine refuses exactly what struct refuses."""
    r = random.Random(574)
    refused = 0
    for _ in range(6000):
        f = gen_struct_format(r)
        for _ in range(r.randint(1, 3)):
            f = mutate(r, f)
        try:
            want = calcsize(f)
        except (struct.error, ValueError, OverflowError):
            want = None
        try:
            got = itemsize(lib, f, STRUCT)[0]
        except ValueError:
            got = None
        assert got == want, f"{f!r}: engine {got}, struct {want}"
        refused += want is None
    assert refused > 500  # the mutations do produce invalid formats


def test_struct_mode_reserved_payload(lib):
    """[struct$...] inside a format takes struct's size."""
    r = random.Random(2)
    for _ in range(500):
        f = gen_struct_format(r)
        if any(c in f for c in "\t\n\r\x0b\x0c"):
            continue  # payloads are printable ASCII
        size, _ = itemsize(lib, f"[struct${f}]")
        assert size == calcsize(f), f


# ---- NumPy mode vs numpy ----------------------------------------------------------
np = pytest.importorskip("numpy")
try:
    from numpy._core._internal import _dtype_from_pep3118
except ImportError:  # numpy 1.x
    from numpy.core._internal import _dtype_from_pep3118

NP_NATIVE = ["?", "c", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "g",
             "Zf", "Zd", "Zg", "s", "w", "x"]
NP_STD = [c for c in NP_NATIVE if c not in ("g", "Zg")]


class NpGen:
    """Generates well-formed formats, tracking NumPy's leaking byte-order state."""

    def __init__(self, r):
        self.r = r
        self.bo = "@"

    def items(self, depth):
        r = self.r
        out, names = [], set()
        for _ in range(r.randint(1, 5)):
            s = ""
            if r.random() < 0.15:
                s += "(" + ",".join(str(r.randint(1, 3)) for _ in range(r.randint(1, 2))) + ")"
            if r.random() < 0.3:
                b = r.choice("@=<>^!")
                s += b
                self.bo = ">" if b == "!" else b
            if r.random() < 0.3:
                s += str(r.randint(1, 4))
            if depth < 3 and r.random() < 0.2:
                s += "T{" + self.items(depth + 1) + "}"
            else:
                s += r.choice(NP_NATIVE if self.bo in "@^" else NP_STD)
            if r.random() < 0.5:
                while True:
                    nm = r.choice("abcdefgh") + str(r.randint(0, 9))
                    if nm not in names:
                        break
                names.add(nm)
                s += f":{nm}:"
            out.append(s)
        return "".join(out)


def _np_offsets(dt):
    if dt.names is None:
        return None
    return [dt.fields[n][1] for n in dt.names]


def test_numpy_mode_matches_numpy(lib):
    r = random.Random(1234)
    checked = 0
    for _ in range(3000):
        f = NpGen(r).items(0)
        try:
            dt = _dtype_from_pep3118(f)
        except (ValueError, TypeError, NotImplementedError, RuntimeError):
            dt = None
        if dt is None:
            with pytest.raises(ValueError):
                itemsize(lib, f, NUMPY)
            continue
        with Parsed(lib, f, NUMPY) as p:
            assert p.head.itemsize == dt.itemsize, f"{f!r}: engine {p.head.itemsize}, numpy {dt.itemsize}"
            offs = _np_offsets(dt)
            if offs is not None:
                top = p.top_fields()
                # numpy unwraps a lone unnamed field that fills the item
                if (len(top) == 1 and not top[0].name and top[0].children
                        and top[0].size == p.head.itemsize and top[0].count == 1 and top[0].ndim == 0):
                    top = _children(top[0])
                ours = [x.offset for x in top if not (x.kind == FIELD_PADDING and not x.name)]
                assert ours == offs, f"{f!r}: offsets {ours}, numpy {offs}"
            # canonical spelling means the same to numpy
            c = p.canonical()
            assert _dtype_from_pep3118(c).itemsize == dt.itemsize, (f, c)
        checked += 1
    assert checked > 2000


# ---- default mode vs the C layout (ctypes) ------------------------------------------
CT = [(ctypes.c_int8, "b"), (ctypes.c_uint8, "B"), (ctypes.c_int16, "h"), (ctypes.c_uint16, "H"),
      (ctypes.c_int32, "i"), (ctypes.c_uint32, "I"), (ctypes.c_int64, "q"), (ctypes.c_uint64, "Q"),
      (ctypes.c_float, "f"), (ctypes.c_double, "d"), (ctypes.c_bool, "?"), (ctypes.c_void_p, "P"),
      (ctypes.c_longdouble, "g"), (ctypes.c_long, "l")]


def gen_ctypes(r, depth=0):
    fields, fmt = [], []
    for i in range(r.randint(1, 5)):
        name = f"f{i}"
        if depth < 3 and r.random() < 0.2:
            t, s = gen_ctypes(r, depth + 1)
            s = "T{" + s + "}"
        else:
            t, s = r.choice(CT)
        if r.random() < 0.25:
            n = r.randint(1, 4)
            t, s = t * n, f"({n}){s}"
        fields.append((name, t))
        fmt.append(f"{s}:{name}:")
    cls = type(f"S{depth}_{r.random()}", (ctypes.Structure,), {"_fields_": fields})
    return cls, "".join(fmt)


def test_default_mode_matches_c_layout(lib):
    r = random.Random(99)
    for _ in range(1500):
        cls, f = gen_ctypes(r)
        with Parsed(lib, f) as p:
            assert p.head.itemsize == ctypes.sizeof(cls), f
            assert p.head.alignment == ctypes.alignment(cls), f
            assert [x.offset for x in p.top_fields()] == [getattr(cls, n).offset for n, _ in cls._fields_], f
        # wrapping in T{} changes nothing
        assert itemsize(lib, "T{" + f + "}") == (ctypes.sizeof(cls), ctypes.alignment(cls))


# ---- the devbuf namespace vs ml_dtypes ------------------------------------------------
ML_NAMES = ["bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
            "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
            "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"]


@pytest.mark.parametrize("name", ML_NAMES)
def test_devbuf_namespace_matches_ml_dtypes(lib, name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    dt = np.dtype(getattr(ml_dtypes, name))
    assert itemsize(lib, f"[devbuf${name}]") == (dt.itemsize, dt.alignment)
    # and as a field of an aligned structured array
    st = np.dtype([("a", "i1"), ("b", dt), ("c", "i4")], align=True)
    with Parsed(lib, f"T{{b:a:[devbuf${name}]:b:i:c:}}") as p:
        assert p.head.itemsize == st.itemsize
        inner = [x.offset for x in _children(p.top_fields()[0])]
        assert inner == [st.fields[n][1] for n in "abc"]
    arr = np.zeros(7, dtype=dt)
    assert arr.nbytes == 7 * itemsize(lib, f"[devbuf${name}]")[0]


def _children(field):
    out, c = [], field.children
    while c:
        out.append(c.contents)
        c = c.contents.next
    return out


def test_numpy_float16_and_complex_aliases(lib):
    for name, np_t in [("float16", "e"), ("float32", "f"), ("float64", "d"), ("int8", "b"),
                       ("uint64", "Q"), ("complex64", "F"), ("complex128", "D"), ("bool", "?")]:
        dt = np.dtype(np_t)
        assert itemsize(lib, f"[devbuf${name}]") == (dt.itemsize, dt.alignment), name
    # datetime64 of numpy: 8 bytes, 8-aligned
    assert itemsize(lib, "[devbuf$datetime64(ns)]") == (np.dtype("M8[ns]").itemsize,
                                                         np.dtype("M8[ns]").alignment)


# ---- printer round trip on generated formats ---------------------------------------
def test_canonical_round_trip(lib):
    r = random.Random(7)
    for _ in range(2000):
        cls, f = gen_ctypes(r)
        if r.random() < 0.5:
            f = r.choice(["<", ">", "=", "^", "@"] if "g" not in f else ["^", "@"]) + f
        if r.random() < 0.3:
            f += "[torch$x;devbuf$bfloat16]:z:"
        with Parsed(lib, f) as p:
            c = p.canonical()
            with Parsed(lib, c) as q:
                assert (q.head.itemsize, q.head.alignment) == (p.head.itemsize, p.head.alignment), (f, c)
                assert q.canonical() == c


def test_error_offsets_point_at_the_culprit(lib):
    for f, off in [("iiy", 2), ("T{i:a:i:a:}", 8), ("[numpy$x]", 0), ("(2,)i", 3), ("3 i", 1)]:
        with pytest.raises(ValueError) as ei:
            itemsize(lib, f)
        assert ei.value.args[1] == off, (f, ei.value.args)


def test_unknown_allowed_flag(lib):
    assert itemsize(lib, "i[numpy$whatever]", ALLOW_UNKNOWN) == (0, 0)
    with pytest.raises(ValueError, match="defined by the 'numpy' package"):
        itemsize(lib, "i[numpy$whatever]")
