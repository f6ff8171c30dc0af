"""Interop with the libraries users already have: JAX (CPU) through DLPack,
and ml_dtypes' bfloat16/float8 arrays through the custom-dtype formats and
DLPack. Versions tested are pinned in requirements.txt and named in
docs/interop.md; a missing package skips its tests."""
import gc

import numpy as np
import pytest

import devbuf

ml_dtypes = pytest.importorskip("ml_dtypes")


# ---- ml_dtypes ------------------------------------------------------------------

ML_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
            "float8_e4m3b11fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4"]


@pytest.mark.parametrize("name", ML_TYPES)
def test_ml_dtypes_view_gives_devbuf_custom_format(name):
    dt = getattr(ml_dtypes, name)
    a = np.array([1, 2, 3, 0], dtype=dt).reshape(2, 2)
    v = devbuf.view(a)
    assert v.format == f"[devbuf${name}]"
    assert v.itemsize == a.itemsize and v.shape == a.shape and v.strides == a.strides
    assert v.ptr == a.ctypes.data
    assert v.dtype.fields[0].custom.desc.canonical == name


def test_ml_dtypes_through_a_device_and_back(sim):
    a = np.linspace(-2, 2, 7).astype(ml_dtypes.bfloat16)
    s = devbuf.from_host(devbuf.view(a), device=sim)
    assert s.format == "[devbuf$bfloat16]"
    h = s.to_host()
    raw = np.frombuffer(bytes(memoryview(h).cast("B")), dtype=ml_dtypes.bfloat16)
    assert np.array_equal(raw, a)


def test_ml_dtypes_strided_and_readonly():
    a = np.arange(12).astype(ml_dtypes.float8_e4m3fn).reshape(3, 4)[:, ::2]
    a.flags.writeable = False
    v = devbuf.view(a)
    assert v.readonly and v.strides == a.strides and v.shape == (3, 2)


# ---- JAX --------------------------------------------------------------------------

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def test_jax_to_devbuf_and_back():
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    v = devbuf.from_dlpack(x)
    assert v.shape == (3, 4) and v.format == "f"
    assert np.array_equal(np.asarray(v), np.asarray(x))
    y = jax.dlpack.from_dlpack(devbuf.from_host(np.asarray(x)))
    assert np.array_equal(np.asarray(y), np.asarray(x))


def test_jax_view():
    x = jnp.arange(5, dtype=jnp.int32)
    v = devbuf.view(x)  # CPU JAX arrays export the plain buffer protocol
    assert np.array_equal(np.asarray(v), np.arange(5))
    w = devbuf.from_dlpack(x)  # and DLPack (JAX 0.10 answers with a legacy capsule)
    assert w.imported.kind.startswith("dlpack") and w.obj is x


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_jax_ml_dtypes_both_ways(name):
    dt = getattr(jnp, name)
    x = jnp.arange(6).astype(dt)
    v = devbuf.from_dlpack(x)
    assert v.format == f"[devbuf${name}]"
    b = devbuf.from_host(devbuf.view(np.asarray(x)))
    y = jax.dlpack.from_dlpack(b)
    assert y.dtype == dt and np.array_equal(np.asarray(y), np.asarray(x))


def test_jax_from_strided_and_readonly_devbuf():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    transposed = devbuf.from_dlpack(a.T)
    y = jax.dlpack.from_dlpack(transposed)
    assert np.array_equal(np.asarray(y), a.T)
    # JAX takes only compact (possibly permuted) strides; a gapped view is
    # refused by JAX itself, with its own message.
    with pytest.raises(Exception, match="striding"):
        jax.dlpack.from_dlpack(devbuf.from_dlpack(a[:, ::3]))
    ro = devbuf.from_host(a, readonly=True)
    asked = {}

    class Recorder:  # what JAX asks the producer for
        def __dlpack_device__(self):
            return ro.__dlpack_device__()

        def __dlpack__(self, **kw):
            asked.update(kw)
            return ro.__dlpack__(**kw)

    try:
        y = jax.dlpack.from_dlpack(Recorder())
        refused = None
    except BufferError as e:
        refused = e
    if asked.get("max_version") is None:
        # JAX 0.10 (the pin up to CPython 3.14) asks without max_version,
        # i.e. for a legacy capsule, which cannot say read-only: devbuf
        # refuses rather than hand out writable memory (as NumPy does), and
        # says what to do.
        assert refused is not None and "max_version" in str(refused), (asked, refused)
    else:
        # JAX 0.12 (the first with cp315 wheels) asks for a versioned
        # capsule, which carries the read-only flag: nothing to refuse.
        assert refused is None, (asked, refused)
        assert np.array_equal(np.asarray(y), a)
    z = jax.dlpack.from_dlpack(devbuf.from_dlpack(ro, copy=True))
    assert np.array_equal(np.asarray(z), a)


def test_jax_from_sim_buffer_via_copy(sim):
    a = np.arange(4, dtype=np.float32)
    s = devbuf.from_host(a, device=sim)
    v = devbuf.from_dlpack(s, device="cpu")
    y = jax.dlpack.from_dlpack(v)
    assert np.array_equal(np.asarray(y), a)


def test_jax_exports_are_released():
    b = devbuf.from_host(np.arange(3, dtype=np.float32))
    y = jax.dlpack.from_dlpack(b)
    del y
    gc.collect()
    assert b.exports == 0 or b.exports == 1  # JAX may keep the buffer while it aliases it
