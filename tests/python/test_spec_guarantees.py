"""Spec guarantees (DLPack, the buffer protocol, format strings, streams): each
test here failed before its fix (or guards a statement of the seeds that no
other test checked)."""
import ctypes

import numpy as np
import pytest

import devbuf
from dlpack_ctypes import capsule_name, to_py_object

KDLCPU, KDLCUDA, KDLOPENCL, KDLEXTDEV = 1, 2, 4, 12


# ---- 0-d buffers keep ndim 0 through DLPack and the array interfaces ---------------

@pytest.mark.parametrize("make", [devbuf.view, devbuf.from_host])
def test_zero_d_exports_as_zero_d(make):
    a = np.array(1.5)
    b = make(a)
    assert b.shape == ()
    x = np.from_dlpack(b)
    assert x.shape == () and x == 1.5
    legacy = np.from_dlpack(_Legacy(b))
    assert legacy.shape == ()
    if isinstance(b, devbuf.DeviceBuffer):
        assert b.__array_interface__["shape"] == ()


class _Legacy:
    """Asks its wrapped producer for an unversioned capsule only."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, stream=None, **kw):
        return self.inner.__dlpack__()

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


# ---- dl_device that cannot be served is a BufferError ------------------------------

def test_dl_device_unreachable_is_buffer_error():
    b = devbuf.from_host(np.arange(3.0))
    for dev in [(KDLCUDA, 0), (KDLCUDA, 7), (KDLOPENCL, 99), (3, 0), (999, 0)]:
        try:
            cap = b.__dlpack__(max_version=(1, 0), dl_device=dev)
        except BufferError:
            continue
        # A reachable device answered: it must be the device asked for.
        v = devbuf.from_dlpack(_Capsuled(cap, dev))
        assert v.__dlpack_device__() == dev


def test_dl_device_cpu_ordinal_other_than_zero_refused():
    b = devbuf.from_host(np.arange(3.0))
    with pytest.raises(BufferError, match=r"\(1, 1\)|device_id 1"):
        b.__dlpack__(max_version=(1, 0), dl_device=(KDLCPU, 1))
    with pytest.raises(BufferError):
        b.__dlpack__(max_version=(1, 0), dl_device=(KDLCPU, 1), copy=True)
    b.__dlpack__(max_version=(1, 0), dl_device=(KDLCPU, 0))  # the right one works


class _Capsuled:
    def __init__(self, cap, dev):
        self.cap, self.dev = cap, dev

    def __dlpack__(self, **kw):
        return self.cap

    def __dlpack_device__(self):
        return self.dev


# ---- legacy (unversioned) imports are read-only unless the caller vouches ----------

def test_legacy_import_is_read_only_by_default():
    from dlpack_ctypes import Producer
    a = np.arange(4, dtype=np.int32)
    v = devbuf.from_dlpack(Producer(a, legacy_only=True))
    assert v.imported.kind == "dlpack_legacy"
    assert v.readonly
    with pytest.raises(BufferError, match="read-only"):
        _writable(v)
    with pytest.raises(BufferError, match="marked it read-only"):
        devbuf.view(Producer(a, legacy_only=True), writable=True)
    # Re-exported read-only too: NumPy cannot write through it.
    x = np.from_dlpack(v)
    assert not x.flags.writeable
    # The explicit opt-in, for a producer known to allow writes.
    w = devbuf.from_dlpack(Producer(a, legacy_only=True), legacy_writable=True)
    assert not w.readonly
    y = np.from_dlpack(w)
    y[0] = 7
    assert a[0] == 7


def _writable(obj):
    # A writable request: refused for a read-only export.
    ctypes.pythonapi.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    buf = (ctypes.c_byte * 256)()
    PyBUF_WRITABLE = 1
    rc = ctypes.pythonapi.PyObject_GetBuffer(obj, buf, PyBUF_WRITABLE)
    if rc == 0:
        ctypes.pythonapi.PyBuffer_Release.argtypes = [ctypes.c_void_p]
        ctypes.pythonapi.PyBuffer_Release(buf)


def test_versioned_import_without_read_only_flag_stays_writable():
    from dlpack_ctypes import Producer
    a = np.arange(4, dtype=np.int32)
    v = devbuf.from_dlpack(Producer(a))
    assert not v.readonly


# ---- supported flags: advertise what you serve, and require all of them -------------

PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND = 0x1, 0x4, 0x8
PyBUF_STRIDES = 0x10 | PyBUF_ND
PyBUF_INDIRECT = 0x100 | PyBUF_STRIDES
PyBUF_FULL_RO = PyBUF_INDIRECT | PyBUF_FORMAT


def _exporters():
    from dlpack_ctypes import Producer
    b = devbuf.from_host(np.arange(4, dtype=np.float32))
    return [b, devbuf.view(b), to_py_object(devbuf.ForeignArray, Producer(np.arange(3.0)))]


def test_exporters_advertise_what_they_serve():
    for obj in _exporters():
        t = type(obj)
        assert t.__buffer_supported_flags__ == devbuf.PyBUF_CLASSIC_FLAGS | devbuf.PyBUF_DEVICE, t
        # memoryview asks PyBUF_FULL_RO: the advertisement must agree with it.
        mv = memoryview(obj)
        assert mv.suboffsets == ()
        assert devbuf.check_buffer_supports(obj, PyBUF_FULL_RO), t
        assert devbuf.check_buffer_supports(obj, PyBUF_FULL_RO | devbuf.PyBUF_DEVICE), t
    assert devbuf.check_buffer_supports(bytearray(), PyBUF_FULL_RO)


def test_check_buffer_supports_requires_every_flag():
    class Nd(bytearray):
        __buffer_supported_flags__ = PyBUF_ND | PyBUF_FORMAT

    x = Nd(b"ab")
    assert devbuf.check_buffer_supports(x, PyBUF_ND)
    assert devbuf.check_buffer_supports(x, PyBUF_ND | PyBUF_FORMAT)
    # one flag supported and one not: the answer is no (all, not any)
    assert not devbuf.check_buffer_supports(x, PyBUF_ND | PyBUF_WRITABLE)
    assert not devbuf.check_buffer_supports(x, PyBUF_FORMAT | devbuf.PyBUF_DEVICE)
    assert not devbuf.check_buffer_supports(x, PyBUF_STRIDES)  # 0x10 missing


# ---- custom dtype ids: the draft's character set, a stricter rule only as lint ---------

@pytest.mark.parametrize("fmt", ["[my pkg$x]", "[a[b$x]", "[ $x]", "[x[$x]"])
def test_id_with_space_or_bracket_is_skippable_in_allow_unknown(fmt):
    f = devbuf.parse_format(fmt + "i", allow_unknown=True)
    assert f.has_unknown
    assert f.fields[0].custom.chosen == -1
    assert f.fields[0].custom.alternatives[0]["id"] == fmt[1:fmt.index("$")]
    assert f.fields[-1].code == "i"  # parsing went on after the unknown item


def test_later_alternative_with_space_in_id_after_an_understood_one():
    f = devbuf.parse_format("[devbuf$bfloat16;other pkg$x]")
    assert f.fields[0].custom.chosen == 0 and f.itemsize == 2
    f = devbuf.parse_format("[a[b$x;devbuf$bfloat16]")  # unknown first, then understood
    assert f.fields[0].custom.chosen == 1


def test_lint_names_the_offending_character():
    with pytest.raises(devbuf.FormatError, match="a space") as e:
        devbuf.parse_format("[my pkg$x]", allow_unknown=True, lint=True)
    assert e.value.offset == 3
    with pytest.raises(devbuf.FormatError, match=r"'\['") as e:
        devbuf.parse_format("[devbuf$bfloat16;a[b$x]", lint=True)
    assert e.value.offset == 18
    devbuf.parse_format("[devbuf$bfloat16]", lint=True)  # a clean id passes lint


@pytest.mark.parametrize("bad", ["[a]b$x]", "[a;b$x]", "[a\tb$x]", "[a\x7fb$x]"])
def test_ids_still_refuse_what_the_draft_refuses(bad):
    with pytest.raises(devbuf.FormatError):
        devbuf.parse_format(bad, allow_unknown=True)


def test_allow_unknown_keeps_parsing_after_an_unknown_item():
    f = devbuf.parse_format("T{i:a:[nopkg$x]:b:d:c:}", allow_unknown=True)
    names = [x.name for x in f.fields[0].children]
    assert names == ["a", "b", "c"]
    assert f.fields[0].children[2].code == "d"


# ---- calcsize takes bytes, as struct.calcsize does ------------------------------------

def test_calcsize_accepts_bytes():
    import struct
    for fmt in [b"<ih", b"@ib", b"=q", b"3s2x"]:
        assert devbuf.calcsize(fmt, "struct") == struct.calcsize(fmt)
        assert devbuf.calcsize(fmt) == devbuf.calcsize(fmt.decode())
    with pytest.raises(TypeError, match="str or bytes"):
        devbuf.calcsize(bytearray(b"i"), "struct")


# ---- NumPy mode: what np.asarray accepts, and np.dtype's unsized-base rule -----------

def _np_import_reader():
    try:
        from numpy._core._internal import _dtype_from_pep3118
    except ImportError:  # NumPy 1.x
        from numpy.core._internal import _dtype_from_pep3118
    return _dtype_from_pep3118


def _np_strip(fmt):
    # What NumPy's buffer import does before its PEP 3118 reader runs.
    out, in_name = [], False
    for c in fmt:
        if c == ":":
            in_name = not in_name
        elif not in_name and c in " \t\n\r\v\f":
            continue
        out.append(c)
    return "".join(out)


NUMPY_CASES = ["(0)0c", "(0)i", "(2)0i", "0i", "(0,2)i", "T{(0)i:a:}", "(3)0x", "0x", "(0)3x",
               "(0)0s", "(2)0s", "0s", "(0)s", "(0)T{i:a:}", "(2)0T{i:a:}", "(2)T{}",
               "(2)T{(0)i:a:}", "(2)0x", "(2)3x", "(2)0c", "(2)c", "(2)0?", "0c", "(0)0T{}",
               "i i", "3 i", "T{i :a: d:b:}", " < i", "Z f", "( 2 , 3 ) i", "T{i:a b:}",
               "T {i:a:}", "1 2i", "i\ti\n", "T{i:a:} :x:"]


@pytest.mark.parametrize("fmt", NUMPY_CASES)
def test_numpy_mode_matches_numpys_buffer_import(fmt):
    reader = _np_import_reader()
    try:
        want = reader(_np_strip(fmt)).itemsize
    except (ValueError, TypeError):
        want = None
    try:
        got = devbuf.calcsize(fmt, "numpy")
    except devbuf.FormatError:
        got = None
    assert got == want, fmt


def test_numpy_asarray_reads_a_format_with_spaces():
    b = devbuf.empty(2, format="i i", device="cpu")
    assert np.asarray(b).dtype.itemsize == devbuf.calcsize("i i", "numpy") == 8


def test_numpy_mode_offsets_are_the_callers():
    with pytest.raises(devbuf.FormatError) as e:
        devbuf.parse_format("i  y", "numpy")
    assert e.value.offset == 3
    f = devbuf.parse_format("i  d:x y:", "numpy")
    assert f.fields[1].src_offset == 3 and f.fields[1].name == "x y"
    # an error at the end of a reserved payload maps to the caller's ']'
    for fmt, off in [(" [struct$3]", 10), (" i [buffer$T{i]", 14)]:
        with pytest.raises(devbuf.FormatError) as e:
            devbuf.parse_format(fmt, "numpy")
        assert e.value.offset == off, fmt


# ---- every exporter: plain requests for device memory refused, extended fields untouched -

PLAIN = [0, 0x1c, 0x11c, 0x3c]


def _consumer():
    return pytest.importorskip("devbuf_consumer", reason="test extension not built")


@pytest.mark.parametrize("flags", PLAIN)
def test_dlpack_import_exporter_refuses_plain_requests_for_device_memory(sim, flags):
    consumer = _consumer()
    s = devbuf.from_host(np.arange(4.0), device=sim)
    fa = to_py_object(devbuf.ForeignArray, s)
    assert isinstance(fa, devbuf.ForeignArray) and fa.dl_device == (KDLEXTDEV, 0)
    assert type(fa).__buffer_supported_flags__ & devbuf.PyBUF_DEVICE
    with pytest.raises(BufferError, match="PyBUF_DEVICE"):
        consumer.canary(fa, flags)  # fails too if it wrote an extended field
    with pytest.raises(BufferError):
        memoryview(fa)
    # With PyBUF_DEVICE it answers, and says where the memory is.
    d = consumer.inspect(fa, 0x1c | devbuf.PyBUF_DEVICE)
    assert d["device"] == "devbuf.sim"


@pytest.mark.parametrize("flags", PLAIN)
def test_dlpack_import_exporter_of_host_memory_leaves_extended_fields_alone(flags):
    consumer = _consumer()
    from dlpack_ctypes import Producer
    fa = to_py_object(devbuf.ForeignArray, Producer(np.arange(4.0)))
    assert consumer.canary(fa, flags) == []


@pytest.mark.parametrize("flags", PLAIN)
def test_view_of_device_memory_refuses_plain_requests(sim, flags):
    consumer = _consumer()
    v = devbuf.view(devbuf.from_host(np.arange(4.0), device=sim))
    with pytest.raises(BufferError, match="PyBUF_DEVICE"):
        consumer.canary(v, flags)


def test_from_host_of_device_memory_is_a_buffer_error(sim):
    import gc
    s = devbuf.from_host(np.arange(4.0), device=sim)
    for make in (lambda: s, lambda: devbuf.view(s), lambda: to_py_object(devbuf.ForeignArray, s)):
        src = make()
        with pytest.raises(BufferError, match="host cannot read"):
            devbuf.from_host(src)
        del src
    gc.collect()
    assert s.exports == 0  # the refused requests left no export behind


# ---- byte order and size state reach custom items and [struct$...] payloads -------------

def test_byte_order_state_carries_into_struct_payloads():
    import struct
    f = devbuf.parse_format(">[struct$l]")
    assert f.itemsize == struct.calcsize(">l") == 4
    assert f.fields[0].children[0].big_endian and f.fields[0].children[0].byteorder == ">"
    f = devbuf.parse_format("<[struct$lq]")
    assert f.itemsize == 12 and not f.fields[0].children[0].big_endian
    assert devbuf.parse_format("[struct$l]").itemsize == struct.calcsize("@l")
    assert devbuf.parse_format("=[struct$l]").itemsize == 4
    assert devbuf.parse_format("![struct$h]").fields[0].children[0].big_endian


def _host_opposite():
    import sys
    return ">" if sys.byteorder == "little" else "<"


def test_custom_items_record_their_byte_order():
    opp = _host_opposite()
    for bo in "<>!=":
        f = devbuf.parse_format(bo + "[devbuf$bfloat16]")
        fld = f.fields[0]
        assert fld.byteorder == (">" if bo == "!" else bo)
        assert fld.big_endian == (bo in ">!" or (bo == "=" and _host_opposite() == "<"))
    assert devbuf.parse_format(opp + "[devbuf$bfloat16]").non_native
    assert not devbuf.parse_format("[devbuf$bfloat16]").non_native


@pytest.mark.parametrize("fmt", ["{o}[devbuf$bfloat16]", "{o}[struct$f]", "{o}T{{[devbuf$bfloat16]}}",
                                 "{o}f"])
def test_dlpack_refuses_non_native_custom_items(fmt):
    fmt = fmt.format(o=_host_opposite())
    b = devbuf.empty(2, format=fmt, device="cpu")
    with pytest.raises(BufferError, match="native byte order"):
        b.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError, match="native byte order"):
        b.__dlpack__()


# ---- stream hand-off, both directions (sim with latency, OpenCL on PoCL) ---------------

STREAM_DEVICES = ["devbuf.sim:0", "devbuf.opencl:0"]


def _device_or_skip(spec):
    try:
        return devbuf.device(spec)
    except devbuf.Error as e:
        pytest.skip(f"{spec} is not available: {e}")


@pytest.mark.parametrize("spec", STREAM_DEVICES)
def test_producer_makes_the_consumers_stream_wait(spec, devbuf_env, devbuf_build):
    """devbuf as producer: __dlpack__(stream=S) orders S after the pending
    copy. The consumer (a C extension) waits only on its own stream."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent(f"""
        import numpy as np, devbuf, devbuf_capi_consumer as c
        d = devbuf.device({spec!r})
        a = np.arange(4096, dtype=np.int64)
        s = devbuf.from_host(a, device=d)   # queued: the copy runs later
        out, done = c.dlpack_on_own_stream(s, {spec!r}, s.event)
        print(done, np.array_equal(np.frombuffer(out, np.int64), a))
    """)
    _device_or_skip(spec)
    env = dict(devbuf_env, DEVBUF_SIM_LATENCY_US="100000")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # True: by the time the consumer's stream drained, the producer's event had
    # completed, which only the hand-off guarantees (however slow the copy).
    assert r.stdout.split() == ["True", "True"]


class _StreamRecorder:
    """A DLPack producer in front of a devbuf buffer that records the stream
    its consumer asked for."""

    def __init__(self, inner):
        self.inner, self.streams = inner, []

    def __dlpack__(self, stream=None, **kw):
        self.streams.append(stream)
        return self.inner.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


@pytest.mark.parametrize("spec", STREAM_DEVICES)
def test_consumer_passes_its_stream_and_orders_reads_after_it(spec, devbuf_env):
    import subprocess
    import sys
    import textwrap
    _device_or_skip(spec)
    code = textwrap.dedent(f"""
        import numpy as np, devbuf, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_spec_guarantees import _StreamRecorder
        d = devbuf.device({spec!r})
        a = np.arange(4096, dtype=np.int64)
        p = _StreamRecorder(devbuf.from_host(a, device=d))
        v = devbuf.from_dlpack(p)
        ok = np.array_equal(np.asarray(v.to_host()), a)
        st = p.streams[0]
        info = v.sync
        print(ok, type(st).__name__, st == info.stream if st is not None else info.stream)
    """)
    env = dict(devbuf_env, DEVBUF_SIM_LATENCY_US="100000")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    ok, kind, same = r.stdout.split()
    assert ok == "True"
    if spec.startswith("devbuf.opencl"):
        # A real cl_command_queue: devbuf's default queue, the one the
        # imported view's device_info names beside its event.
        assert kind == "int" and same == "True"
    else:
        assert kind == "NoneType"  # sim: None is devbuf's default stream



# ---- a DLPack deleter run after the interpreter finalized must not crash --------------

@pytest.mark.parametrize("where", ["cpu", "devbuf.sim:0"])
def test_dlpack_deleter_after_finalization(where, devbuf_env):
    import subprocess
    import sys
    import textwrap
    if where != "cpu":
        _device_or_skip(where)
    code = textwrap.dedent(f"""
        import numpy as np, devbuf, devbuf_capi_consumer as c
        b = devbuf.from_host(np.arange(16.0), device={where!r})
        c.delete_at_exit(b.__dlpack__(max_version=(1, 3)))   # versioned
        c.delete_at_exit(b.__dlpack__())                      # legacy
        c.delete_at_exit(devbuf.view(b).__dlpack__(max_version=(1, 0)))
        print("exports", b.exports)
    """)
    r = subprocess.run([sys.executable, "-c", code], env=devbuf_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.split("\n")[:2] == ["exports 3", "deleters ran after finalization"]


def test_cai_v3_producer_stream_reaches_device_info(devbuf_env, devbuf_build):
    """A CUDA Array Interface v3 producer that names its `stream`: devbuf
    records an event on it, and the view's device_info names both the event
    and that stream. devbuf.cuda as producer hands off to a consumer stream
    too. Runs on the fake libcuda (tests/gpu/fake_cuda.c) when there is no
    GPU: the plugin's real code paths, with synchronous copies."""
    import subprocess
    import sys
    import textwrap
    fake = devbuf_build / "lib" / "libdevbuf_fake_cuda.so"
    if not fake.exists():
        pytest.skip("the fake libcuda was not built (CUDA headers missing)")
    code = textwrap.dedent("""
        import numpy as np, devbuf, devbuf_capi_consumer as c
        spec = "devbuf.cuda:0"
        b = devbuf.from_host(np.arange(8.0), device=spec)
        S = c.stream_create(spec)
        class CAI:
            def __init__(self, st):
                self.st = st
            @property
            def __cuda_array_interface__(self):
                d = dict(b.__cuda_array_interface__)
                d["stream"] = self.st
                return d
        v = devbuf.view(CAI(S))
        sy = v.sync
        ok = np.array_equal(np.asarray(v.to_host()), np.arange(8.0))
        out, done = c.dlpack_on_own_stream(b, spec, b.event)
        print(v.imported.kind, sy.stream == S, sy.event is not None, ok, done,
              np.array_equal(np.frombuffer(out), np.arange(8.0)))
        v.release()
        del v
        c.stream_destroy(spec, S)
    """)
    env = dict(devbuf_env, DEVBUF_CUDA_LIBRARY=str(fake))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cuda_array_interface", "True", "True", "True", "True", "True"]


@pytest.mark.parametrize("flags", PLAIN)
def test_producer_helper_never_writes_extended_fields_unasked(flags):
    """DevbufPy_BufferSetDevice is what producers call: docs/producers.md
    promises it checks the request, so a producer may call it unconditionally."""
    consumer = _consumer()
    assert consumer.set_device_helper(flags) == (0, False)
    assert consumer.set_device_helper(flags | devbuf.PyBUF_DEVICE) == (1, True)


def test_cuda_stream_values_follow_the_dlpack_spec(devbuf_env, devbuf_build):
    """CUDA: 0 is refused as ambiguous, 1 is the legacy default stream, 2 the
    per-thread default, -1 'do not synchronize' (fake libcuda without a GPU)."""
    import subprocess
    import sys
    import textwrap
    fake = devbuf_build / "lib" / "libdevbuf_fake_cuda.so"
    if not fake.exists():
        pytest.skip("the fake libcuda was not built (CUDA headers missing)")
    code = textwrap.dedent("""
        import numpy as np, devbuf
        b = devbuf.from_host(np.arange(4.0), device="devbuf.cuda:0")
        try:
            b.__dlpack__(max_version=(1, 0), stream=0)
            print("accepted-0")
        except ValueError as e:
            print("refused-0" if "ambiguous" in str(e) else "other-0")
        for s in (None, 1, 2, -1):
            b.__dlpack__(max_version=(1, 0), stream=s)
        print("ok")
    """)
    env = dict(devbuf_env, DEVBUF_CUDA_LIBRARY=str(fake))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["refused-0", "ok"]
