"""The complex format codes: CPython 3.14's struct F/D,
CPython 3.15's Zf/Zd (gh-148675), and PEP 3118/NumPy's Zf/Zd/Zg, in every
mode of the engine, mapped to DLPack complex64/complex128 and round-tripped
through NumPy."""
import numpy as np
import pytest

import devbuf

ALL = ["F", "D", "Zf", "Zd"]


@pytest.mark.parametrize("mode", ["default", "struct"])
@pytest.mark.parametrize("code,size,align", [("F", 8, 4), ("D", 16, 8), ("Zf", 8, 4), ("Zd", 16, 8)])
def test_codes_in_default_and_struct_mode(mode, code, size, align):
    f = devbuf.parse_format(code, mode=mode)
    assert (f.itemsize, f.alignment) == (size, align)
    assert f.fields[0].code == code
    # Standard sizes: same size, no alignment; '!' reads as '>'.
    for prefix in "<>=!":
        g = devbuf.parse_format(prefix + code, mode=mode)
        assert (g.itemsize, g.alignment) == (size, 1)
    # Native alignment inside a struct, as C's float/double complex.
    assert devbuf.parse_format("b" + code, mode=mode).itemsize == align + size
    assert devbuf.parse_format("3" + code, mode=mode).itemsize == 3 * size


@pytest.mark.parametrize("code", ["Zg", "Ze", "Z", "Zx", "Z[devbuf$bfloat16]"])
def test_struct_mode_takes_only_zf_and_zd(code):
    with pytest.raises(ValueError, match="knows only 'Zf' and 'Zd'"):
        devbuf.parse_format(code, mode="struct")


def test_numpy_mode_follows_numpy():
    try:
        from numpy._core._internal import _dtype_from_pep3118
    except ImportError:  # NumPy 1.x
        from numpy.core._internal import _dtype_from_pep3118
    for code in ("Zf", "Zd", "Zg", ">Zf", "2Zd", "iZd"):
        assert devbuf.parse_format(code, mode="numpy").itemsize == _dtype_from_pep3118(code).itemsize
    for code, z in (("F", "Zf"), ("D", "Zd")):
        with pytest.raises(ValueError):
            _dtype_from_pep3118(code)
        with pytest.raises(ValueError, match=f"NumPy writes complex as '{z}'"):
            devbuf.parse_format(code, mode="numpy")


@pytest.mark.parametrize("code,dt", [("F", np.complex64), ("D", np.complex128),
                                     ("Zf", np.complex64), ("Zd", np.complex128)])
def test_dlpack_and_numpy_round_trip(code, dt):
    b = devbuf.empty(3, code)
    # Exported as NumPy, PEP 3118 and CPython 3.15 spell it.
    assert b.format == ("Zf" if dt is np.complex64 else "Zd")
    x = np.from_dlpack(b)
    assert x.dtype == dt and x.shape == (3,)
    x[:] = [1 + 2j, -3.5j, 4]
    assert np.asarray(b).dtype == dt
    np.testing.assert_array_equal(np.asarray(b), x)
    # and back: NumPy -> devbuf -> NumPy, by the buffer protocol and by DLPack
    a = np.array([1 - 1j, 2 + 0.5j], dtype=dt)
    h = devbuf.from_host(a)
    np.testing.assert_array_equal(np.asarray(h), a)
    np.testing.assert_array_equal(np.from_dlpack(devbuf.from_dlpack(a)), a)
    v = devbuf.view(a)
    assert v.dtype.itemsize == a.itemsize and v.dtype.fields[0].code == v.format.lstrip("<=")


def test_standard_size_complex_to_dlpack():
    b = devbuf.empty(2, "<D")
    assert b.format == "<Zd" and np.from_dlpack(b).dtype == np.complex128
