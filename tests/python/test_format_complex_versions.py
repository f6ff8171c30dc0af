"""The complex format codes, differential against the running interpreter.

What CPython does differs by version (checked on Debian sid's 3.14.10 and
3.15.2 by scripts/python-sid.sh, which runs this module there):

- struct: 3.14 knows 'F' and 'D'; 3.15 also 'Zf' and 'Zd'; neither 'G' nor 'Zg'.
- memoryview.cast: 3.14 none of them; 3.15 'Zf' and 'Zd' (not 'F'/'D').
- ctypes' complex types (3.14+) export '<F'/'<D'/'<G' on 3.14 and
  '<Zf'/'<Zd'/'<Zg' on 3.15.

devbuf's struct mode is CPython 3.15's struct; its default mode reads every
one of these, except long double complex with standard sizes ('<G', '<Zg'),
which it refuses saying so (the layout is the platform's)."""
import ctypes
import struct
import sys

import pytest

import devbuf

CODES = ["F", "D", "G", "Zf", "Zd", "Zg"]
PREFIXES = ["", "@", "<", "="]


def _struct_size(fmt):
    try:
        return struct.calcsize(fmt)
    except struct.error:
        return None


def _devbuf_size(fmt, mode):
    try:
        return devbuf.calcsize(fmt, mode)
    except devbuf.FormatError:
        return None


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("code", CODES)
def test_struct_mode_agrees_with_this_struct(code, prefix):
    fmt = prefix + code
    want = _struct_size(fmt)
    got = _devbuf_size(fmt, "struct")
    if want is not None:
        # What this interpreter's struct accepts, devbuf's struct mode
        # accepts with the same size, on every version.
        assert got == want, f"{fmt!r}: struct.calcsize {want}, devbuf struct mode {got}"
    elif sys.version_info >= (3, 15):
        # 3.15's struct is the model: what it refuses, struct mode refuses.
        assert got is None, f"{fmt!r}: refused by struct {sys.version_info[:2]}, devbuf says {got}"


@pytest.mark.parametrize("code", CODES)
def test_memoryview_cast_agrees(code):
    try:
        mv = memoryview(bytearray(64)).cast(code)
    except (ValueError, TypeError):
        pytest.skip(f"memoryview of CPython {sys.version.split()[0]} does not cast to {code!r}")
    v = devbuf.view(mv)
    assert v.format == mv.format and v.itemsize == mv.itemsize
    assert devbuf.calcsize(mv.format) == mv.itemsize == struct.calcsize(mv.format)


@pytest.mark.parametrize("name", ["c_float_complex", "c_double_complex", "c_longdouble_complex"])
def test_ctypes_complex_arrays(name):
    t = getattr(ctypes, name, None)
    if t is None:
        pytest.skip(f"ctypes.{name} is new in 3.14")
    a = (t * 3)()
    fmt = memoryview(a).format
    long_double = name == "c_longdouble_complex"
    try:
        v = devbuf.view(a)
    except (BufferError, devbuf.FormatError, devbuf.Error) as e:
        # Only long double complex may be refused, and the refusal says so.
        assert long_double, f"ctypes.{name} ({fmt!r}) refused: {e}"
        assert "long double complex" in str(e), f"{fmt!r}: {e}"
        return
    assert v.itemsize == ctypes.sizeof(t), (fmt, v.itemsize)
    assert v.nbytes == 3 * ctypes.sizeof(t)


@pytest.mark.parametrize("fmt", ["<G", "=G", "<Zg", ">Zg"])
def test_long_double_complex_with_standard_sizes_is_refused_by_name(fmt):
    with pytest.raises(devbuf.FormatError, match="long double complex"):
        devbuf.calcsize(fmt)


def test_native_long_double_complex_has_the_platforms_size():
    assert devbuf.calcsize("Zg") == devbuf.calcsize("@Zg") == 2 * ctypes.sizeof(ctypes.c_longdouble)
