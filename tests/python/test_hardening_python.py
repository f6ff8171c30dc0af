"""Hardening of the Python surface: nothing devbuf hands out describes more
memory than it owns. Each test here crashed, tripped a sanitizer or let an
unsafe object through before its fix, and gives a clean error after it.
docs/failure-modes.md lists the same cases with the error a user sees."""
import os
import subprocess
import sys

import threading

import pytest

import devbuf
from devbuf import _pickle


def _child(code, **env):
    """Run `code` in a fresh interpreter seeing the same build."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120)


# ---- pickle reconstruction ---------------------------------------------------

def test_rebuild_length_mismatch_message_is_read_before_free():
    # The error path used to read the memoryview's len after dropping it. With
    # PYTHONMALLOC=debug freed memory is filled with 0xDD, so the stale read
    # showed a garbage byte count (ASan: heap-use-after-free).
    r = _child(
        "from devbuf import _pickle\n"
        "meta = {'identifier': 'cpu', 'ordinal': 0, 'shape': (4,), 'format': 'B',\n"
        "        'itemsize': 1, 'readonly': False, 'v': 1}\n"
        "try:\n"
        "    _pickle._rebuild_buffer(meta, bytearray(3))\n"
        "except ValueError as e:\n"
        "    print(e)\n",
        PYTHONMALLOC="debug")
    assert r.returncode == 0, r.stderr
    assert "has 3 bytes; shape and item size say 4" in r.stdout


def _meta(**kw):
    m = {"identifier": "cpu", "ordinal": 0, "shape": (4,), "format": "B", "itemsize": 1,
         "readonly": False, "v": 1}
    m.update(kw)
    return m


def test_rebuild_refuses_itemsize_that_disagrees_with_format():
    # format 'd' over 1-byte items: consumers sizing by the format overran.
    with pytest.raises(ValueError, match="itemsize 1 does not match format 'd'"):
        _pickle._rebuild_buffer(_meta(format="d"), bytearray(4))


@pytest.mark.parametrize("fmt", ["O", "P", "T{O:a:}", "&d", "2O"])
def test_rebuild_refuses_object_and_pointer_formats(fmt):
    from devbuf import parse_format
    size = parse_format(fmt).itemsize
    with pytest.raises(ValueError, match="object or pointer items"):
        _pickle._rebuild_buffer(_meta(format=fmt, itemsize=size), bytearray(4 * size))


def test_rebuild_unknown_custom_dtype_still_round_trips():
    # A namespace this process does not know: the pickle's item size stands.
    b = _pickle._rebuild_buffer(_meta(format="[nosuchns_rebuild$x]", itemsize=2), bytearray(8))
    assert b.nbytes == 8 and b.itemsize == 2


# ---- devbuf's own memory ----------------------------------------------------

@pytest.mark.parametrize("fmt", ["O", "P", "T{i:a:O:b:}"])
def test_empty_refuses_object_formats(fmt):
    with pytest.raises(ValueError, match="object or pointer items"):
        devbuf.empty(4, format=fmt)


def test_from_host_refuses_object_arrays():
    np = pytest.importorskip("numpy")
    a = np.array([object(), object()], dtype=object)
    with pytest.raises(ValueError, match="object or pointer items"):
        devbuf.from_host(a)


def test_view_of_foreign_object_array_is_still_allowed():
    np = pytest.importorskip("numpy")
    a = np.array([1, "x"], dtype=object)
    v = devbuf.view(a)
    assert v.format == "O"
    v.release()




# ---- borrowed fields after release --------------------------------------------

@pytest.mark.parametrize("use", ["to_host", "sync", "device", "host_accessible", "synchronize"])
def test_released_view_does_not_read_the_producers_fields(use):
    # Once resolved, a view skipped its liveness check: after release it read
    # the producer's shape/strides/identifier, which may be gone by then.
    b = devbuf.empty((2, 3), format="i")
    v = devbuf.view(b)
    v.device  # resolves
    v.release()
    del b
    with pytest.raises(ValueError, match="released"):
        r = getattr(v, use)
        if callable(r):
            r()


# ---- dtype-namespace descriptions ----------------------------------------------

@pytest.mark.parametrize("desc, why", [
    # itemsize 1 with a 64-bit DLPack dtype: a 0-d buffer went out through
    # __dlpack__ as float64 over a 1-byte allocation.
    ({"kind": "float", "itemsize": 1, "alignment": 1, "bits": 8, "dlpack": (2, 64)},
     "does not fill its itemsize 1"),
    ({"kind": "float", "itemsize": 2, "alignment": 1, "bits": 64}, "more than its itemsize 2"),
    ({"kind": "float", "itemsize": 2, "alignment": 4, "bits": 16}, "not a multiple of its alignment"),
    ({"kind": "float", "itemsize": 4, "alignment": 3, "bits": 32}, "not a power of two"),
])
def test_inconsistent_namespace_description_is_refused(desc, why):
    ns = f"badns{threading.get_ident()}"  # one per thread: run-parallel runs it in several
    devbuf.register_dtype_namespace(ns, lambda payload: dict(desc))
    try:
        with pytest.raises(ValueError, match=ns + ".*" + why):
            devbuf.parse_format(f"[{ns}$x]")
        with pytest.raises(ValueError, match=ns):
            devbuf.empty((), format=f"[{ns}$x]")
    finally:
        devbuf.unregister_dtype_namespace(ns)


def test_consistent_namespace_description_is_accepted():
    ns = f"goodns{threading.get_ident()}"
    devbuf.register_dtype_namespace(
        ns, lambda p: {"kind": "float", "itemsize": 2, "alignment": 2, "bits": 16,
                       "dlpack": (2, 16)})
    try:
        assert devbuf.empty((), format=f"[{ns}$x]").nbytes == 2
    finally:
        devbuf.unregister_dtype_namespace(ns)


# ---- imported arrays: DLPack, CUDA Array Interface, __array_interface__ ------------

def test_empty_dlpack_tensor_with_wrapping_data_pointer():
    # data + byte_offset wrapped for an empty tensor: UB (UBSan aborted).
    from dlpack_ctypes import Producer
    p = Producer(None, dtype=(2, 32, 1), shape=(0,), strides=None, data=2**64 - 16,
                 byte_offset=64)
    with pytest.raises(BufferError, match="wraps around the address space"):
        devbuf.from_dlpack(p)
    p.settle()


def test_empty_dlpack_tensor_without_wrap_is_fine():
    from dlpack_ctypes import Producer
    p = Producer(None, dtype=(2, 32, 1), shape=(0,), strides=None, data=4096, byte_offset=64)
    a = devbuf.from_dlpack(p)
    assert a.nbytes == 0


class _Iface:
    def __init__(self, d, cuda=False):
        if cuda:
            self.__cuda_array_interface__ = d
        else:
            self.__array_interface__ = d


@pytest.mark.parametrize("ptr", [-1, -(2**63), -4096])
def test_negative_data_pointer_in_array_interface(ptr):
    d = {"shape": (1,), "typestr": "<f4", "data": (ptr, False), "version": 3}
    with pytest.raises(BufferError, match="'data' pointer .* is negative"):
        devbuf.view(_Iface(d))


def test_negative_data_pointer_in_cuda_array_interface():
    d = {"shape": (1,), "typestr": "<f4", "data": (-8, False), "version": 3}
    with pytest.raises(BufferError, match="is negative"):
        devbuf.view(_Iface(d, cuda=True))


@pytest.mark.parametrize("typestr", ["<f4junk", "<f4 ", "<f 4", "<f+4", "<f04x", "<f", "<i8\x00"])
def test_typestr_with_trailing_junk_is_refused(typestr):
    buf = bytearray(64)
    import ctypes
    addr = ctypes.addressof((ctypes.c_char * 64).from_buffer(buf))
    d = {"shape": (1,), "typestr": typestr, "data": (addr, False), "version": 3}
    with pytest.raises((BufferError, ValueError), match="typestr"):
        devbuf.view(_Iface(d))


def test_good_typestr_still_accepted():
    np = pytest.importorskip("numpy")
    a = np.arange(4, dtype=np.float32)
    d = dict(a.__array_interface__)
    v = devbuf.view(_Iface(d))
    assert v.format == "f" and v.nbytes == 16


# ---- to_host() of a sparse view -----------------------------------------------------

def test_to_host_of_sparse_view_copies_only_the_items():
    # It allocated the whole span (34 GB for 108 bytes in the report); here a
    # 16 MiB span holds 16 bytes, and the host copy must not cost the span.
    np = pytest.importorskip("numpy")
    import tracemalloc
    a = np.arange(16 << 20, dtype=np.uint8)
    sparse = a[:: 1 << 20]
    v = devbuf.view(sparse)
    tracemalloc.start()
    try:
        h = v.to_host()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20), peak
    assert bytes(memoryview(h)) == bytes(sparse)
    v.release()


def test_to_host_of_negative_and_2d_strided_views():
    np = pytest.importorskip("numpy")
    a = np.arange(6 * 8, dtype=np.int32).reshape(6, 8)
    for s in (a[::-1], a[:, ::-2], a[::2, 1::3], a.T):
        v = devbuf.view(s)
        assert np.array_equal(np.asarray(v.to_host()).reshape(s.shape), s)
        v.release()


def test_to_host_of_sparse_device_view_copies_run_by_run(sim):
    # Device memory the host cannot read is copied run by run when sparse.
    np = pytest.importorskip("numpy")
    from dlpack_ctypes import Producer
    src = np.arange(4 << 20, dtype=np.uint8).reshape(4, 1 << 20)
    b = devbuf.from_host(src, device=sim)
    b.synchronize()
    step = 1 << 19
    p = Producer(None, device=(12, 0), dtype=(1, 8, 1), shape=(4, 2, 3),
                 strides=(1 << 20, step, 1), data=b.ptr)
    f = devbuf.from_dlpack(p)
    h = np.asarray(f.to_host())
    want = np.stack([src[i].reshape(2, step)[:, :3] for i in range(4)])
    assert np.array_equal(h.reshape(want.shape), want)
    del f
    p.settle()


def test_empty_dlpack_tensor_with_huge_other_dimensions():
    # Found by pyfuzz (dlpack target): an empty tensor skips the extent check,
    # and the C-order strides of (0, 2**31, 2**32) bytes overflowed int64 in
    # readers/dlpack_import.c (UBSan: signed integer overflow; this test fails in the
    # build-asan-py stage of scripts/test.sh without the fix).
    from dlpack_ctypes import Producer
    p = Producer(None, dtype=(1, 8, 1), shape=(0, 2 ** 31, 2 ** 32), strides=None, data=4096)
    a = devbuf.from_dlpack(p)
    v = devbuf.view(a)
    assert v.nbytes == 0 and v.shape == (0, 2 ** 31, 2 ** 32)
    v.release()
    del a
    p.settle()


def test_rebuild_refuses_empty_format_with_itemsize():
    # Found by pyfuzz (pickle target) against the pre-fix build: format ''
    # (0-byte items) with item size 2 was accepted.
    with pytest.raises(ValueError, match="itemsize 2 does not match format ''"):
        _pickle._rebuild_buffer(_meta(format="", itemsize=2), bytearray(8))
