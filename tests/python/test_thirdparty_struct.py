"""Third-party format cases, ported: what CPython's struct tests
(Lib/test/test_struct.py) and memoryview/buffer tests (test_memoryview.py,
test_buffer.py) check of format strings, asked of devbuf's struct mode
(which promises to match `struct.calcsize` exactly) and of devbuf.view() of
memoryviews. Written for devbuf from what those suites check; struct itself
is the oracle, so every case holds on any interpreter and CPU."""
import array
import ctypes
import struct
import sys

import pytest

import devbuf

NATIVE_CODES = "xcbB?hHiIlLqQnNefdPs"
STANDARD_CODES = "xcbB?hHiIlLqQefds"  # no n, N, P outside native mode
PREFIXES = ["", "@", "=", "<", ">", "!"]


def same_as_struct(fmt):
    """(devbuf struct-mode size or None, struct.calcsize or None)."""
    try:
        want = struct.calcsize(fmt)
    except struct.error:
        want = None
    try:
        got = devbuf.calcsize(fmt, "struct")
    except devbuf.FormatError:
        got = None
    return got, want


# ---- sizes of every code under every prefix -----------------------------------------

@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("code", NATIVE_CODES + "pZjyO")
def test_single_code_under_each_prefix(prefix, code):
    got, want = same_as_struct(prefix + code)
    assert got == want, prefix + code


def test_standard_sizes():
    # The sizes struct documents for '<', '>', '!', '='.
    std = {"x": 1, "c": 1, "b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "l": 4,
           "L": 4, "q": 8, "Q": 8, "e": 2, "f": 4, "d": 8, "s": 1, "p": 1}
    for prefix in "<>!=":
        for code, size in std.items():
            assert devbuf.calcsize(prefix + code, "struct") == size, prefix + code


def test_native_sizes_are_ordered_like_c():
    c = lambda f: devbuf.calcsize(f, "struct")  # noqa: E731
    assert c("b") == c("B") == c("c") == c("?") == 1
    assert 2 <= c("h") <= c("i") <= c("l") <= c("q")
    assert c("q") == c("Q") == 8
    assert c("P") == ctypes.sizeof(ctypes.c_void_p)
    assert c("n") == c("N") == ctypes.sizeof(ctypes.c_ssize_t)


# ---- counts, padding, repeat and alignment ---------------------------------------

COMBOS = ["", "ci", "ic", "cxBH", "cxBHIL", "cxBHILQ", "bhilq", "qlihb", "3s", "0s", "10p",
          "2x", "0x", "xi", "ix", "3i", "0i", "i0q", "c0l", "b3x", "hxq", "?d", "e?f",
          "5c3h", "12345s", "P0P", "ni", "Nc", "q0c", "ll", "dcdc", "sss", "bq0i"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("fmt", COMBOS)
def test_combinations(prefix, fmt):
    got, want = same_as_struct(prefix + fmt)
    assert got == want, prefix + fmt


# ---- whitespace, and what struct refuses --------------------------------------------

WHITESPACE = ["i i", " i", "i ", "\ti\n", "< i", "<  i h", "3 i", "i 3", "i\x0bh", "i\x0ch",
              "\r\ni"]
INVALID = ["Z", "j", "y", "{", "T{i}", "(2)i", "i:a:", "&i", "[devbuf$bfloat16]", "-1i",
           "<>i", "i<", "@@i", "=n", "<P", ">N", "!n", "99999999999999999999b",
           "9223372036854775807q", "t", "3t", "1", "w", "Ze", "Zg", "^i"]
# The complex codes are left out on purpose: struct mode follows CPython
# 3.15 (3.14's F/D, 3.15's Zf/Zd), which this interpreter's struct predates;
# test_format_struct.py checks them against 3.15's rules.


@pytest.mark.parametrize("fmt", WHITESPACE + INVALID)
def test_struct_accepts_and_refuses_the_same(fmt):
    got, want = same_as_struct(fmt)
    assert got == want, repr(fmt)


def test_overflowing_counts_are_errors_not_crashes():
    for fmt in ["%dq" % (sys.maxsize // 4), "%db" % sys.maxsize, "%db%db" % (sys.maxsize, 1)]:
        got, want = same_as_struct(fmt)
        assert got == want, fmt


def test_bytes_formats_as_struct_takes_them():
    for fmt in [b"<ih", b"@3s", b"!q"]:
        assert devbuf.calcsize(fmt, "struct") == struct.calcsize(fmt)


# ---- memoryview, array and ctypes exports ----------------------------------------------

@pytest.mark.parametrize("code", "cbB?hHiIlLqQnNfdP")  # cast() takes no 'e' before 3.12
@pytest.mark.parametrize("at", ["", "@"])
def test_memoryview_cast_formats(code, at):
    fmt = at + code
    size = struct.calcsize(fmt)
    mv = memoryview(bytearray(size * 6)).cast("B").cast(fmt, shape=[2, 3])
    v = devbuf.view(mv)
    assert v.format == mv.format and v.itemsize == mv.itemsize == size
    assert v.shape == mv.shape and v.strides == mv.strides
    assert devbuf.calcsize(v.format, "struct") == size
    assert devbuf.calcsize(v.format) == size


@pytest.mark.parametrize("tc", array.typecodes)
def test_array_module_exports(tc):
    # 'u' (wchar_t) and 'w' (Py_UCS4, 3.13+) hold characters, not numbers,
    # and neither is a struct code.
    text = tc in ("u", "w")
    a = array.array(tc, "abcd") if text else array.array(tc, [0] * 4)
    mv = memoryview(a)
    v = devbuf.view(a)
    assert v.itemsize == a.itemsize and v.nbytes == a.itemsize * 4
    if not text:
        assert devbuf.calcsize(mv.format, "struct") == a.itemsize


def test_ctypes_structure_exports_in_default_mode():
    class Inner(ctypes.Structure):
        _fields_ = [("a", ctypes.c_char), ("b", ctypes.c_double)]

    class Outer(ctypes.Structure):
        _fields_ = [("x", ctypes.c_short), ("y", Inner), ("z", ctypes.c_int * 3),
                    ("p", ctypes.c_void_p)]

    # ctypes writes '<' (standard size, no alignment) into structure formats
    # although the memory is aligned (T{<c:a:<d:b:} with itemsize 16): the
    # view keeps the producer's itemsize, and only the arrays of plain items
    # are compared with the engine.
    for t in (Inner, Outer):
        obj = t()
        assert devbuf.view(obj).itemsize == memoryview(obj).itemsize == ctypes.sizeof(t)
    for t in (ctypes.c_int * 4, (ctypes.c_double * 2) * 3, ctypes.c_short * 0):
        obj = t()
        mv = memoryview(obj)
        v = devbuf.view(obj)
        assert v.itemsize == mv.itemsize and v.shape == mv.shape
        assert devbuf.calcsize(mv.format) == mv.itemsize, mv.format
