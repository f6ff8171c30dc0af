"""Plugin extension functions (devbuf_plugin_table.ext_functions): listing and
calling through libffi with checked conversions, C functions (the test-double
plugin tests/python/pyplugin_extfn_plugin.c) and Python ones (closures)."""
import array
import ctypes
import math
import sys

import pytest

import devbuf
import devbuf.plugin as P
from pyplugin_helpers import BUILD, MmapDevice, fresh_id


def _int_div_by_zero_message():
    # The interpreter's own words: "integer division or modulo by zero" up
    # to 3.13, "division by zero" from 3.14.
    try:
        1 // 0
    except ZeroDivisionError as e:
        return str(e)


INT_DIV_BY_ZERO = _int_div_by_zero_message()

EXT = BUILD / "lib" / "devbuf" / "test-plugins" / "devbuf_plugin_extfn_test.so"
X = "extfn_test"


@pytest.fixture(scope="module")
def extfn_plugin():
    if not EXT.exists():  # a build with DEVBUF_BUILD_TESTS=ON has it; an install has not
        pytest.skip(f"{EXT} not built (the C test double of tests/python/pyplugin_extfn_plugin.c)")
    if not any(p.name == X and p.loaded for p in devbuf.plugins()):
        info = devbuf.load_plugin(EXT)
        assert info.loaded and info.identifiers == ("test.extfn",)


@pytest.mark.usefixtures("extfn_plugin")
def test_listing():
    fns = {f.name: f for f in P.ext_functions(X)}
    assert len(fns) == 24 and all(f.plugin == fns["add_all"].plugin for f in fns.values())
    assert fns["divide"].signature == "i(ii*ie)" and fns["divide"].doc == "a / b; EINVAL when b is 0"
    assert fns["divide"].valid and fns["divide"].error == ""
    assert not fns["bad_signature"].valid and "byte 3: 'x' is not an argument type" in fns["bad_signature"].error
    assert not fns["null_fn"].valid and "NULL function pointer" in fns["null_fn"].error
    # By identifier and by index too.
    assert [f.name for f in P.ext_functions("test.extfn")] == list(fns)
    assert [f.name for f in P.ext_functions(fns["add_all"].plugin)] == list(fns)
    assert P.ext_functions("cpu") == []
    with pytest.raises(LookupError, match="no loaded plugin"):
        P.ext_functions("nonexistent")


LIMITS = {
    "b": (-128, 127), "B": (0, 255), "h": (-2**15, 2**15 - 1), "H": (0, 2**16 - 1),
    "i": (-2**31, 2**31 - 1), "I": (0, 2**32 - 1), "q": (-2**63, 2**63 - 1), "Q": (0, 2**64 - 1),
    "n": (-2**63, 2**63 - 1), "N": (0, 2**64 - 1),
}


@pytest.mark.usefixtures("extfn_plugin")
@pytest.mark.parametrize("letter", sorted(LIMITS))
def test_integer_letters_round_trip_and_are_range_checked(letter):
    lo, hi = LIMITS[letter]
    for v in (lo, hi, 0, 1, (lo + hi) // 2, True):
        assert P.call_ext(X, f"echo_{letter}", v) == int(v)
    for bad in (lo - 1, hi + 1):
        with pytest.raises(OverflowError, match=f"argument 1 \\('{letter}'\\).*out of range"):
            P.call_ext(X, f"echo_{letter}", bad)
    for bad in (1.5, "3", None, b"x"):
        with pytest.raises(TypeError, match="expected an int"):
            P.call_ext(X, f"echo_{letter}", bad)


@pytest.mark.usefixtures("extfn_plugin")
def test_float_letters():
    assert P.call_ext(X, "echo_d", 1.0 / 3) == 1.0 / 3
    assert P.call_ext(X, "echo_d", 7) == 7.0
    assert math.isnan(P.call_ext(X, "echo_d", float("nan")))
    assert P.call_ext(X, "echo_f", 0.5) == 0.5
    assert P.call_ext(X, "echo_f", 0.1) == pytest.approx(0.1, rel=1e-7) and P.call_ext(X, "echo_f", 0.1) != 0.1
    assert P.call_ext(X, "echo_f", float("inf")) == float("inf")
    with pytest.raises(OverflowError, match="out of range for float"):
        P.call_ext(X, "echo_f", 1e39)
    with pytest.raises(TypeError, match="expected a number"):
        P.call_ext(X, "echo_d", "1.0")


@pytest.mark.usefixtures("extfn_plugin")
def test_every_letter_at_once():
    args = (-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, 0.5, 0.25)
    assert P.call_ext(X, "add_all", *args) == sum(args)


@pytest.mark.usefixtures("extfn_plugin")
def test_pointers_and_buffers():
    assert P.call_ext(X, "echo_p", None) is None
    assert P.call_ext(X, "echo_p", 0x1234) == 0x1234
    assert P.call_ext(X, "echo_p", 2**64 - 1) == 2**64 - 1
    with pytest.raises(OverflowError):
        P.call_ext(X, "echo_p", -1)
    # A buffer: its address for the call; writable buffers are written.
    buf = bytearray(16)
    assert P.call_ext(X, "fill", buf, 10, 0xAB) is None
    assert buf == b"\xab" * 10 + b"\x00" * 6
    assert P.call_ext(X, "sum_bytes", b"\x01\x02\x03", 3) == 6  # read-only buffer
    assert P.call_ext(X, "echo_p", buf) == P.address_of(buf)
    a = array.array("i", [5, -3, 9, 0])
    assert P.call_ext(X, "minmax", a, len(a)) == (-3, 9)


@pytest.mark.usefixtures("extfn_plugin")
def test_strings():
    assert P.call_ext(X, "length", "héllo") == len("héllo".encode())
    assert P.call_ext(X, "length", b"abc") == 3
    assert P.call_ext(X, "length", None) == 2**64 - 1
    with pytest.raises(ValueError, match="embedded NUL"):
        P.call_ext(X, "length", "a\0b")
    with pytest.raises(TypeError, match="expected str, bytes or None"):
        P.call_ext(X, "length", 5)
    assert P.call_ext(X, "greeting") == "hello from C"
    assert P.call_ext(X, "nothing") is None


@pytest.mark.usefixtures("extfn_plugin")
def test_status_form_and_out_parameters():
    assert P.call_ext(X, "divide", 17, 5) == 3
    with pytest.raises(devbuf.Error) as ei:
        P.call_ext(X, "divide", 17, 0)
    assert ei.value.code == "DEVBUF_EINVAL" and str(ei.value) == "divide: division of 17 by zero"
    assert P.call_ext(X, "split", 0x123457) == (0x123457 % 7, 0x57, 0x1234, 0x123457 / 2, "odd")


@pytest.mark.usefixtures("extfn_plugin")
def test_call_errors():
    with pytest.raises(TypeError, match=r"extfn_test.divide\(\) takes 2 arguments \(signature 'i\(ii\*ie\)'\), 1 given"):
        P.call_ext(X, "divide", 1)
    with pytest.raises(LookupError, match="has no extension function 'nope'"):
        P.call_ext(X, "nope")
    with pytest.raises(ValueError, match="bad_signature': signature 'i\\(ix': byte 3"):
        P.call_ext(X, "bad_signature", 1)
    with pytest.raises(ValueError, match="NULL function pointer"):
        P.call_ext(X, "null_fn")


@pytest.mark.parametrize("sig, where", [
    ("", "byte 0"), ("x()", "byte 0"), ("i", "byte 1: expected '('"), ("i(ii", "missing ')'"),
    ("i(v)", "'v' is not an argument type"), ("i(*e)", "'e' cannot be an out-parameter"),
    ("i(ee)", "a second 'e'"), ("i()x", "text after ')'"), ("i(" + "i" * 17 + ")", "more than 16"),
    ("i(**i)", "'*' is not an argument type"),
])
def test_signature_errors(sig, where):
    with pytest.raises(ValueError) as ei:
        P.check_signature(sig)
    assert where in str(ei.value)


def test_signature_shapes():
    assert P.check_signature("i(ii*ie)") == {"ret": "i", "inputs": 2, "outputs": 1, "nargs": 4,
                                             "status_form": True}
    assert P.check_signature("v()")["nargs"] == 0


# ---- Python-defined extension functions --------------------------------------------------

class Ext(MmapDevice):
    @P.ext_function("d(bBhHiIqQnNfd)")
    def add_all(self, *args):
        return sum(args)

    @P.ext_function("q(q)", doc="identity")
    def echo(self, v):
        return v

    @P.ext_function("i(ii*ie)")
    def divide(self, a, b):
        return a // b  # ZeroDivisionError becomes the status

    @P.ext_function("v(p*Q*d)")
    def outs(self, p):
        return (p or 0) + 1, 0.5

    @P.ext_function("i(i)")
    def no_status(self, v):
        if v < 0:
            raise RuntimeError("negative")
        return v * 2

    @P.ext_function("B(i)")
    def too_big(self, v):
        return v

    @P.ext_function("v(s)", name="takes_string")
    def _ts(self, s):
        self.last = s


@pytest.fixture(scope="module")
def ext():
    ident = fresh_id("test.pyext")
    plugin = Ext(identifiers=(ident,), name="pyext")
    reg = P.register_plugin(plugin)
    yield plugin, reg
    reg.unregister()


def test_python_ext_functions_round_trip(ext):
    plugin, reg = ext
    names = [f.name for f in P.ext_functions(reg)]
    assert sorted(names) == ["add_all", "divide", "echo", "mapping_info", "no_status", "outs",
                             "takes_string", "too_big"]
    docs = {f.name: f.doc for f in P.ext_functions("pyext")}
    assert docs["echo"] == "identity"
    # C (ffi_call) -> closure -> Python, every conversion both ways.
    args = (-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, 0.5, 0.25)
    assert P.call_ext("pyext", "add_all", *args) == sum(args)
    assert P.call_ext("pyext", "echo", -2**63) == -2**63
    assert P.call_ext("pyext", "divide", 9, 2) == 4
    assert P.call_ext("pyext", "outs", None) == (1, 0.5)
    assert P.call_ext("pyext", "outs", 41) == (42, 0.5)
    assert P.call_ext("pyext", "no_status", 21) == 42
    P.call_ext("pyext", "takes_string", "naïve")
    assert plugin.last == "naïve"


@pytest.mark.thread_unsafe(reason="swaps sys.unraisablehook, which is the whole process's")
def test_python_ext_function_errors(ext):
    with pytest.raises(devbuf.Error) as ei:
        P.call_ext("pyext", "divide", 1, 0)
    assert ei.value.code == "DEVBUF_ECALLBACK"
    assert f"raised ZeroDivisionError: {INT_DIV_BY_ZERO}" in str(ei.value)
    # No 'e' to report through: an unraisable report (as ctypes does) and 0.
    seen = []
    old, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        assert P.call_ext("pyext", "no_status", -1) == 0
        assert P.call_ext("pyext", "too_big", 256) == 0
    finally:
        sys.unraisablehook = old
    assert [type(u.exc_value) for u in seen] == [RuntimeError, OverflowError]
    assert "out of range for uint8" in str(seen[1].exc_value)


def test_python_ext_function_is_a_c_function_pointer(ext):
    plugin, reg = ext
    closure = next(c for c in reg.table.closures if c.name == "ext:divide")
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                          ctypes.POINTER(ctypes.c_int32), ctypes.c_void_p)(closure.address)
    q = ctypes.c_int32()
    assert fn(100, 7, ctypes.byref(q), None) == 0 and q.value == 14
    assert fn(1, 0, ctypes.byref(q), None) == P.ECALLBACK  # err NULL: status only


def test_python_ext_functions_cannot_return_strings():
    class Bad(MmapDevice):
        @P.ext_function("s()")
        def name_of(self):
            return "x"

    with pytest.raises(ValueError, match="cannot return a string"):
        P.register_plugin(Bad(identifiers=(fresh_id(),), name="badext"))
    with pytest.raises(ValueError, match="byte 2"):
        P.ext_function("i(x)")
