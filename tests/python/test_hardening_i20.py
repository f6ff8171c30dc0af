"""Issue 20 (hardening round 2): nothing devbuf hands out describes more
memory than it owns. Each test here crashed, tripped a sanitizer or let an
unsafe object through before its fix, and gives a clean error after it.
docs/failure-modes.md lists the same cases with the error a user sees."""
import os
import subprocess
import sys

import pytest

import devbuf
from devbuf import _devbuf
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
    b = _pickle._rebuild_buffer(_meta(format="[nosuchns_i20$x]", itemsize=2), bytearray(8))
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
    devbuf.register_dtype_namespace("i20bad", lambda payload: dict(desc))
    try:
        with pytest.raises(ValueError, match=r"i20bad.*" + why):
            devbuf.parse_format("[i20bad$x]")
        with pytest.raises(ValueError, match="i20bad"):
            devbuf.empty((), format="[i20bad$x]")
    finally:
        devbuf.unregister_dtype_namespace("i20bad")


def test_consistent_namespace_description_is_accepted():
    devbuf.register_dtype_namespace(
        "i20good", lambda p: {"kind": "float", "itemsize": 2, "alignment": 2, "bits": 16,
                              "dlpack": (2, 16)})
    try:
        assert devbuf.empty((), format="[i20good$x]").nbytes == 2
    finally:
        devbuf.unregister_dtype_namespace("i20good")
