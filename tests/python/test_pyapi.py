"""The Python API as a NumPy user meets it: dtype names wherever a format is
taken, DeviceBuffer's array attributes, filling a buffer in place, "did you
mean" for device identifiers, text signatures, short reprs, clean public
namespaces (docs/python-api.md)."""
import inspect
import os
import subprocess
import sys
import threading
import types

import pytest

import devbuf

np = pytest.importorskip("numpy")

SIM = "devbuf.sim"


# ---- formats: NumPy names, types, dtypes ------------------------------------------------

@pytest.mark.parametrize("spec, fmt", [
    ("float32", "f"), ("float64", "d"), ("int8", "b"), ("uint16", "H"), ("int64", "q"),
    ("bool", "?"), ("complex64", "Zf"), ("complex128", "Zd"), ("bfloat16", "[devbuf$bfloat16]"),
    ("float8_e4m3fn", "[devbuf$float8_e4m3fn]"),
])
def test_numpy_names_without_numpy_table(spec, fmt):
    b = devbuf.empty((2, 3), spec, SIM)
    assert b.format == fmt and b.shape == (2, 3)
    assert devbuf.calcsize(spec) == devbuf.calcsize(fmt)
    assert devbuf.parse_format(spec) == devbuf.parse_format(fmt)


def test_numpy_types_and_dtypes():
    assert devbuf.empty(4, np.float32).format == "f"
    assert devbuf.empty(4, np.dtype("f8")).itemsize == 8
    assert devbuf.empty(4, np.dtype(">i4")).format == ">i"
    assert devbuf.empty(4, "<i8").itemsize == 8  # a typestr: not struct grammar
    assert devbuf.empty(4, "datetime64[D]").format == "[devbuf$datetime64(D)]"
    st = np.dtype([("a", "<f4"), ("b", "<i8", (2,))])
    b = devbuf.empty(3, st)
    assert b.itemsize == st.itemsize and b.dtype == st
    assert devbuf.calcsize(np.int16) == 2


def test_ml_dtypes_types():
    ml = pytest.importorskip("ml_dtypes")
    b = devbuf.empty((2,), ml.bfloat16, SIM)
    assert b.format == "[devbuf$bfloat16]" and b.dtype == np.dtype(ml.bfloat16)
    assert devbuf.empty(1, ml.float8_e5m2).format == "[devbuf$float8_e5m2]"


def test_struct_strings_stay_struct():
    # The struct grammar first: these are struct formats, not NumPy names.
    assert devbuf.empty(1, "f").format == "f"
    assert devbuf.empty(1, "c").itemsize == 1  # struct's char (NumPy's 'c' is S1 too)
    assert devbuf.empty(1, "T{f:x:i:y:}").format == "T{f:x:i:y:}"
    assert devbuf.empty(1, "2i").itemsize == 8


@pytest.mark.parametrize("bad", ["flaot32", "foo", "T{i"])
def test_unknown_format_lists_accepted_forms(bad):
    with pytest.raises(devbuf.FormatError) as e:
        devbuf.empty(2, bad)
    msg = str(e.value)
    # the struct parser's own error (offset and caret), then the accepted forms
    assert bad in msg and "NumPy dtype name" in msg and "struct" in msg, msg
    assert e.value.format == bad and e.value.offset > 0
    if bad == "flaot32":
        assert "did you mean 'float32'" in msg
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("bad", [",", "f4,i8", "(2)f4"])
def test_numpy_grammar_beyond_names_is_not_read(bad):
    # Only names and typestrs are NumPy's here: its comma strings (and the
    # SyntaxError its parser raises for ',') stay out.
    with pytest.raises(devbuf.FormatError):
        devbuf.parse_format(bad)


def test_unknown_object_is_a_type_error():
    with pytest.raises(TypeError, match="NumPy dtype"):
        devbuf.empty(2, object())


# ---- DeviceBuffer: len, size, ndim, dtype, format_info ---------------------------------

def test_array_attributes():
    b = devbuf.empty((4, 5), "float32", SIM)
    assert len(b) == 4 and b.size == 20 and b.ndim == 2
    assert b.dtype == np.dtype("float32")
    assert isinstance(b.format_info, devbuf.Format) and b.format_info.itemsize == 4
    z = devbuf.empty((), "d")
    assert z.size == 1 and z.ndim == 0
    with pytest.raises(TypeError, match="0-d"):
        len(z)
    ns = f"pyapi_test{threading.get_ident()}"  # one per thread: run-parallel runs it in several
    devbuf.register_dtype_namespace(ns, lambda payload: {"itemsize": 4})
    try:
        assert devbuf.empty(3, f"[{ns}$w]").dtype is None  # no NumPy dtype for it
    finally:
        devbuf.unregister_dtype_namespace(ns)
    with devbuf.view(b) as v:
        assert v.format_info == b.format_info == v.dtype


# ---- filling in place ----------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", SIM])
def test_copy_from_host(device):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    b = devbuf.empty((3, 4), "q", device)
    assert b.copy_from(a) is None
    assert np.array_equal(np.asarray(b.to_host()), a)
    for src in (np.asfortranarray(a), a[::-1], np.arange(24, dtype=np.int64).reshape(3, 8)[:, ::2]):
        b.copy_from(src)  # gathered through one contiguous temporary
        assert np.array_equal(np.asarray(b.to_host()), src)
    b[...] = a * 2
    assert np.array_equal(np.asarray(b.to_host()), a * 2)
    with pytest.raises(ValueError, match="bytes"):
        b.copy_from(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="format"):
        b.copy_from(np.zeros((3, 4), np.float64))
    with pytest.raises(TypeError, match="buffer protocol"):
        b.copy_from(object())


def test_copy_from_device_buffer():
    a = np.arange(6, dtype=np.float32)
    src = devbuf.from_host(a, SIM)
    dst = devbuf.empty(6, "f", SIM)
    dst.copy_from(src)
    assert np.array_equal(np.asarray(dst.to_host()), a)


@pytest.mark.thread_unsafe(reason="tracemalloc's peak is the process's: other threads' copies count in it")
def test_copy_from_makes_no_host_copy_for_contiguous_sources():
    # tracemalloc sees PyMem_RawMalloc: the gather temporary of a strided
    # source is counted; a contiguous source is uploaded from where it is.
    import tracemalloc
    a = np.ones(1 << 20, dtype=np.uint8)
    b = devbuf.empty(a.shape, "B", SIM)
    b.copy_from(a)  # warm up
    tracemalloc.start()
    try:
        b.copy_from(a)
        _, peak_contig = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        b.copy_from(np.ones(2 << 20, dtype=np.uint8)[::2])
        _, peak_strided = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_contig < a.nbytes // 4, peak_contig
    assert peak_strided >= a.nbytes, peak_strided


@pytest.mark.parametrize("device", ["cpu", SIM])
def test_fill_and_scalar_assignment(device):
    b = devbuf.empty((2, 3), "float32", device)
    b.fill(2.5)
    assert np.array_equal(np.asarray(b.to_host()), np.full((2, 3), 2.5, np.float32))
    b[...] = 7
    assert np.array_equal(np.asarray(b.to_host()), np.full((2, 3), 7, np.float32))
    b[:] = np.float32(1)
    assert np.asarray(b.to_host()).sum() == 6
    with pytest.raises(IndexError, match="whole-buffer"):
        b[0] = 1
    with pytest.raises(TypeError):
        del b[...]


def test_read_only_and_freed_refuse_copy_from():
    b = devbuf.empty(4, "B", SIM, readonly=True)
    with pytest.raises(BufferError):
        b.copy_from(bytes(4))
    c = devbuf.empty(4, "B", SIM)
    c.free()
    with pytest.raises(BufferError):
        c.copy_from(bytes(4))


# ---- identifiers: did you mean -----------------------------------------------------------

def _registered_identifiers():
    return {i for p in devbuf.plugins() for i in p.identifiers}

@pytest.mark.parametrize("typed, meant", [("sim", "devbuf.sim"), ("cuda", "devbuf.cuda"),
                                          ("sim:0", "devbuf.sim:0"), ("devbuf.smi", "devbuf.sim")])
def test_identifier_typos_suggest(typed, meant):
    if meant.split(":")[0] not in _registered_identifiers():
        pytest.skip(f"{meant} is not registered here (its plugin was not built)")
    with pytest.raises(devbuf.PluginError) as e:
        devbuf.device(typed)
    assert f"did you mean '{meant}'" in str(e.value) or f"'{meant}'" in str(e.value).split(
        "did you mean")[-1], str(e.value)
    with pytest.raises(devbuf.PluginError, match="did you mean"):
        devbuf.empty(2, "B", typed)


def test_no_suggestion_for_nothing_close():
    with pytest.raises(devbuf.PluginError) as e:
        devbuf.device("zzzzqqqq")
    assert "did you mean" not in str(e.value)


# ---- signatures and docstrings -----------------------------------------------------------

_DUNDERS = ("__init__", "__new__", "__enter__", "__exit__", "__dlpack__", "__dlpack_device__",
            "__array__", "__arrow_c_array__", "__arrow_c_device_array__")


def _public_callables():
    import devbuf.check
    import devbuf.plugin
    seen = set()
    for mod in (devbuf, devbuf.plugin, devbuf.check):
        for name in mod.__all__:
            obj = getattr(mod, name)
            where = f"{mod.__name__}.{name}"
            if isinstance(obj, type):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                for an, av in vars(obj).items():
                    if an.startswith("_") and an not in _DUNDERS:
                        continue
                    if isinstance(av, (types.BuiltinFunctionType, types.MethodDescriptorType,
                                       types.FunctionType, classmethod, staticmethod)):
                        yield f"{where}.{an}", getattr(obj, an)
            elif callable(obj):
                yield where, obj


def test_every_public_callable_has_a_signature():
    missing = []
    n = 0
    for where, obj in _public_callables():
        n += 1
        try:
            inspect.signature(obj)
        except (ValueError, TypeError) as e:
            missing.append(f"{where}: {e}")
    assert n > 100, n
    assert not missing, "\n".join(missing)
    # the classes made from C that users construct
    assert str(inspect.signature(devbuf.DeviceView)) == "(obj, *, writable=False)"
    assert "shape" in inspect.signature(devbuf.empty).parameters


@pytest.mark.parametrize("name, params", [
    ("view", ["obj", "writable"]), ("from_host", ["obj", "device", "readonly"]),
    ("empty", ["shape", "format", "device", "readonly"]), ("device", ["spec"]),
    ("from_dlpack", ["x", "device", "copy", "legacy_writable"]),
    ("check_buffer_supports", ["obj", "flags"]),
])
def test_key_signatures(name, params):
    assert list(inspect.signature(getattr(devbuf, name)).parameters) == params


def test_docstrings_describe_parameters():
    for f in (devbuf.empty, devbuf.parse_format, devbuf.DeviceBuffer.copy_from):
        doc = inspect.getdoc(f) or ""
        for p in inspect.signature(f).parameters:
            if p not in ("self",):
                assert p in doc, (f, p)


# ---- reprs and namespaces -------------------------------------------------------------------

def test_short_reprs():
    with devbuf.view(np.zeros(3, dtype=[("x", "f4"), ("y", "i8")])) as v:
        assert len(repr(v.dtype)) < 120, repr(v.dtype)
        assert len(repr(v.dtype.fields[0])) < 120
    assert len(repr(devbuf.parse_format("T{T{d:a:d:b:}:p:i:q:}"))) < 120


def test_public_namespaces_are_clean():
    import devbuf.check
    import devbuf.plugin
    for mod in (devbuf, devbuf.check, devbuf.plugin):
        extra = [n for n in dir(mod) if not n.startswith("_") and n not in mod.__all__
                 and not isinstance(getattr(mod, n), types.ModuleType)]
        assert not extra, f"{mod.__name__} has public names outside __all__: {extra}"
        assert all(hasattr(mod, n) for n in mod.__all__)


def test_missing_device_error_is_public():
    assert devbuf.MissingDeviceError.__module__ == "devbuf"
    assert issubclass(devbuf.MissingDeviceError, devbuf.Error)
    assert "MissingDeviceError" in devbuf.__all__


def test_check_and_plugin_load_lazily(devbuf_env):
    code = ("import sys, devbuf\n"
            "assert 'devbuf.check' not in sys.modules\n"
            "assert callable(devbuf.check.producer)\n"
            "assert devbuf.plugin.OK == 0\n"
            "try:\n    devbuf.nosuch\nexcept AttributeError as e:\n    assert 'nosuch' in str(e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=devbuf_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("value, ok", [("host", "host"), (" Host ", "host"), ("ERROR", "error"),
                                       ("", "error"), ("hots", None)])
def test_unpickle_policy_variable(devbuf_env, value, ok):
    env = dict(devbuf_env, DEVBUF_UNPICKLE_POLICY=value)
    r = subprocess.run([sys.executable, "-c", "import devbuf; print(devbuf.get_unpickle_policy())"],
                       env=env, capture_output=True, text=True, timeout=120)
    if ok is None:
        assert r.returncode != 0 and "DEVBUF_UNPICKLE_POLICY" in r.stderr
    else:
        assert r.returncode == 0 and r.stdout.strip() == ok, r.stderr


def test_freed_buffer_raises_buffer_error_on_export():
    b = devbuf.empty(4, "B")
    b.free()
    for f in (devbuf.view, np.asarray, lambda x: x.__dlpack__()):
        with pytest.raises(BufferError):
            f(b)
    with pytest.raises(ValueError):
        b.to_host()


def test_numpy_recipes():
    b = devbuf.from_host(np.arange(6, dtype=np.float32), SIM)
    assert np.asarray(b.to_host()).tolist() == list(range(6))
    assert np.from_dlpack(b, device="cpu").tolist() == list(range(6))
    # as python-api.md says: RuntimeError up to NumPy 2.4, BufferError from 2.5
    with pytest.raises((RuntimeError, BufferError), match="Unsupported device"):
        np.from_dlpack(b)
    out = np.empty(6, np.float32)
    assert b.to_host(out=out) is out and out.tolist() == list(range(6))
