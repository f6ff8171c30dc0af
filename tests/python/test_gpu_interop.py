"""Real GPU interop of devbuf.cuda: PyTorch, CuPy and JAX tensors
on the GPU into devbuf.view / devbuf.from_dlpack and back out, streams,
read-only, 0-d and strided tensors, bfloat16/float8, pickle-5, and devbuf's
own DeviceBuffer consumed by torch.

scripts/gpu-check.sh runs this file on a GPU machine. Everywhere else each
test skips and says why: no devbuf.cuda device (no libcuda), devbuf.cuda over
the fake libcuda (tests/gpu/fake_cuda.c, whose "device memory" is host
memory no framework can use; `gpu-check.sh --fake`), or a framework that is
not installed or sees no GPU. The tests that need devbuf.cuda alone (pickle,
DeviceBuffer exports) also run over the fake.

What a framework does where devbuf cannot decide for it (a read-only tensor
handed to torch, float8 through DLPack) is recorded with `record_property`
(gpu-check.sh puts it in its report) rather than asserted.
"""
import gc
import os
import pickle

import numpy as np
import pytest

import devbuf
from devbuf import _devbuf

# Long enough that the producer is certainly still running when the consumer
# is handed the data (about half a second at the H100's clocks); only the
# data is checked, never the time.
SPIN_CYCLES = 1_000_000_000

FAKE_REASON = ("devbuf.cuda runs over the fake libcuda (tests/gpu/fake_cuda.c): its device "
               "memory is host memory that no framework can use; the real run is "
               "scripts/gpu-check.sh on a machine with a GPU")


# ---- fixtures: what is there, or a skip saying what is not ---------------------------

@pytest.fixture(scope="module")
def cuda():
    """devbuf.cuda:0, real or fake."""
    try:
        return devbuf.device("devbuf.cuda:0")
    except devbuf.Error as e:
        pytest.skip(f"devbuf.cuda has no device here: {e}")


@pytest.fixture(scope="module")
def gpu(cuda):
    """devbuf.cuda:0 on a real GPU."""
    if "fake" in cuda.name.lower():
        pytest.skip(FAKE_REASON)
    return cuda


@pytest.fixture(scope="module")
def torch(gpu):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip(f"PyTorch {torch.__version__} sees no CUDA GPU")
    return torch


@pytest.fixture(scope="module")
def cupy(gpu):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy raises its own CUDARuntimeError
        pytest.skip(f"CuPy {cupy.__version__} cannot reach the GPU: {e}")
    if n < 1:
        pytest.skip(f"CuPy {cupy.__version__} sees no GPU")
    return cupy


@pytest.fixture(scope="module")
def jax(gpu):
    # JAX takes 75% of GPU memory at first use unless told not to; torch and
    # CuPy share the GPU in this process.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        devs = jax.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"JAX {jax.__version__} has no GPU backend: {e}")
    if not devs:
        pytest.skip(f"JAX {jax.__version__} sees no GPU")
    return jax


def host(v):
    """The contents of any devbuf buffer or view, as a NumPy array on the host."""
    return np.asarray(v.to_host())


def spin_torch(torch, cycles=SPIN_CYCLES):
    """A kernel that runs for `cycles` GPU clocks on torch's current stream
    (torch.cuda._sleep is private: if it goes, matrix products stand in)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)
        return
    a = torch.ones((4096, 4096), device="cuda")
    for _ in range(50):
        a = a @ a / 4096


_SPIN_SRC = r"""
extern "C" __global__ void devbuf_spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
"""


def spin_cupy(cupy, cycles=SPIN_CYCLES):
    """The same on CuPy's current stream (NVRTC compiles it once)."""
    k = cupy.RawKernel(_SPIN_SRC, "devbuf_spin")
    k((1,), (1,), (np.int64(cycles),))


# ---- devbuf.cuda alone (also over the fake) ------------------------------------------

def test_device_buffer_exports(cuda):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = devbuf.from_host(a, device=cuda)
    assert b.__dlpack_device__() == (2, 0)
    cai = b.__cuda_array_interface__
    assert cai["data"][0] == b.ptr and cai["shape"] == (3, 4) and cai["typestr"] == "<f4"
    v = devbuf.view(b)
    assert v.identifier == "devbuf.cuda" and v.ptr == b.ptr and not v.readonly
    np.testing.assert_array_equal(host(v), a)


def test_pickle5_device_buffer_one_d2h_copy(cuda):
    n = 4 << 20
    a = np.random.default_rng(17).integers(0, 255, n, dtype=np.uint8)
    b = devbuf.from_host(a, device=cuda)
    _devbuf._pickle_stats_reset()
    bufs = []
    data = pickle.dumps(b, protocol=5, buffer_callback=bufs.append)
    s = _devbuf._pickle_stats()
    assert s["d2h_copies"] == 1 and s["d2h_bytes"] == n and s["host_copies"] == 0
    staging = memoryview(bufs[0]).obj
    assert isinstance(staging, devbuf.HostStaging)
    assert staging.device.identifier == "devbuf.cuda"
    assert len(data) < 400  # metadata only: the bytes went out of band
    c = pickle.loads(data, buffers=bufs)
    assert c.device.identifier == "devbuf.cuda" and c.ptr != b.ptr
    s = _devbuf._pickle_stats()
    assert s["d2h_copies"] == 1 and s["h2d_copies"] == 1 and s["h2d_bytes"] == n
    np.testing.assert_array_equal(host(c), a)


def test_readonly_device_buffer(cuda):
    ro = devbuf.from_host(np.arange(4, dtype=np.int32), device=cuda, readonly=True)
    assert devbuf.view(ro).readonly
    with pytest.raises(BufferError):
        devbuf.view(ro, writable=True)
    # The versioned capsule carries the flag: devbuf's own import sees it.
    assert devbuf.from_dlpack(ro).readonly


# ---- PyTorch ----------------------------------------------------------------------------

@pytest.mark.parametrize("importer", ["from_dlpack", "view"])
def test_torch_into_devbuf_and_back(torch, importer):
    x = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    v = getattr(devbuf, importer)(x)
    assert v.identifier == "devbuf.cuda" and v.device.ordinal == x.device.index
    assert v.ptr == x.data_ptr() and v.shape == (4, 6) and v.strides == (24, 4)
    assert v.format == "f" and not v.readonly
    np.testing.assert_array_equal(host(v), x.cpu().numpy())
    y = torch.from_dlpack(v)
    assert y.device == x.device and y.data_ptr() == x.data_ptr() and torch.equal(y, x)


def test_device_buffer_consumed_by_torch(torch, gpu):
    a = np.arange(1 << 16, dtype=np.float32)
    b = devbuf.from_host(a, device=gpu)
    t = torch.from_dlpack(b)
    assert t.is_cuda and t.data_ptr() == b.ptr and t.shape == (1 << 16,)
    t.add_(1)  # torch writes devbuf's memory ...
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(b), a + 1)  # ... and devbuf reads it back
    with pytest.raises(BufferError):  # torch still holds it
        b.free()
    del t
    gc.collect()
    b.free()
    e = devbuf.empty((3, 5), "d", device=gpu)
    u = torch.from_dlpack(e)
    u.fill_(2.5)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(e), np.full((3, 5), 2.5))


def test_torch_producer_on_side_stream_is_waited_for(torch, record_property):
    """torch -> devbuf: a long kernel on a side stream, then the write that
    devbuf must see; devbuf's read must wait for it."""
    n = 1 << 22
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        spin_torch(torch)
        x.fill_(7)
        v = devbuf.from_dlpack(x)
    record_property("producer_running_at_handoff", not side.query())
    h = host(v)
    assert (h == 7).all(), f"devbuf read before torch's side stream finished ({(h != 7).sum()} stale)"


def test_stream_handoff_both_ways_through_devbuf(torch, record_property):
    """torch (stream A, long producer) -> devbuf -> torch (stream B): B's read
    must wait for A through devbuf's event, with no host wait between."""
    n = 1 << 22
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        spin_torch(torch)
        x.fill_(5)
        v = devbuf.from_dlpack(x)
    with torch.cuda.stream(b):
        y = torch.from_dlpack(v)
        z = y.clone()
    record_property("producer_running_at_handoff", not a.query())
    b.synchronize()
    assert (z == 5).all().item(), "torch on stream B read before stream A's producer finished"


def test_devbuf_upload_then_torch_on_side_stream(torch, gpu):
    """devbuf -> torch: from_host returns before its upload lands; torch on a
    side stream must be made to wait for devbuf's event."""
    a = np.random.default_rng(3).standard_normal(16 << 20).astype(np.float32)
    b = devbuf.from_host(a, device=gpu)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.from_dlpack(b)
        c = t.clone()
    side.synchronize()
    np.testing.assert_array_equal(c.cpu().numpy(), a)


def test_torch_zero_d(torch, gpu):
    x = torch.tensor(2.5, dtype=torch.float64, device="cuda")
    v = devbuf.from_dlpack(x)
    assert v.ndim == 0 and v.shape == () and v.format == "d"
    assert host(v)[()] == 2.5
    assert torch.from_dlpack(v).shape == ()
    b = devbuf.from_host(np.array(4.0, dtype=np.float32), device=gpu)
    t = torch.from_dlpack(b)
    assert t.shape == () and t.item() == 4.0


@pytest.mark.parametrize("case", ["cols", "transpose", "offset"])
def test_torch_strided(torch, case):
    x = torch.arange(48, dtype=torch.float32, device="cuda").reshape(6, 8)
    s = {"cols": x[:, ::2], "transpose": x.t(), "offset": x[1::2, 3:]}[case]
    v = devbuf.from_dlpack(s)
    assert v.ptr == s.data_ptr() and v.shape == tuple(s.shape)
    assert v.strides == tuple(st * 4 for st in s.stride())
    np.testing.assert_array_equal(host(v), s.cpu().numpy())
    y = torch.from_dlpack(v)
    assert y.data_ptr() == s.data_ptr() and y.stride() == s.stride() and torch.equal(y, s)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_torch_ml_dtypes(torch, name, record_property):
    dt = getattr(torch, name, None)
    if dt is None:
        pytest.skip(f"PyTorch {torch.__version__} has no torch.{name}")
    x = torch.linspace(-2, 2, 64, device="cuda").to(dt)
    try:
        v = devbuf.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError) as e:
        record_property("torch_export", f"refused: {e}")
        pytest.skip(f"PyTorch {torch.__version__} does not export {name} through DLPack: {e}")
    assert v.format == f"[devbuf${name}]" and v.itemsize == x.element_size()
    raw = x.view(torch.uint8).cpu().numpy().tobytes()
    assert bytes(memoryview(v.to_host()).cast("B")) == raw
    try:
        y = torch.from_dlpack(v)
    except (BufferError, RuntimeError, TypeError) as e:
        record_property("torch_import", f"refused: {e}")
        pytest.skip(f"PyTorch {torch.__version__} does not import {name} through DLPack: {e}")
    assert y.dtype == dt and y.data_ptr() == x.data_ptr()


def test_readonly_devbuf_into_torch(torch, gpu, record_property):
    a = np.arange(8, dtype=np.float32)
    ro = devbuf.from_host(a, device=gpu, readonly=True)
    try:
        t = torch.from_dlpack(ro)
    except (BufferError, RuntimeError, TypeError) as e:
        record_property("torch_on_read_only", f"refused: {e}")
        return
    # torch has no read-only tensors: it either copies or aliases; either way
    # the data must be right.
    record_property("torch_on_read_only",
                    "aliased" if t.data_ptr() == ro.ptr else "copied")
    np.testing.assert_array_equal(t.cpu().numpy(), a)


def test_pickle5_of_torch_tensor_one_d2h_copy(torch):
    x = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    v = devbuf.from_dlpack(x)
    _devbuf._pickle_stats_reset()
    bufs = []
    data = pickle.dumps(v, protocol=5, buffer_callback=bufs.append)
    s = _devbuf._pickle_stats()
    assert s["d2h_copies"] == 1 and s["d2h_bytes"] == x.numel() * 4 and s["host_copies"] == 0
    c = pickle.loads(data, buffers=bufs)
    assert c.device.identifier == "devbuf.cuda"
    assert torch.equal(torch.from_dlpack(c), x)


def test_torch_into_cupy_through_devbuf(torch, cupy):
    x = torch.arange(30, dtype=torch.int64, device="cuda").reshape(5, 6)[:, 1:]
    y = cupy.from_dlpack(devbuf.from_dlpack(x))
    assert y.data.ptr == x.data_ptr() and y.strides == tuple(st * 8 for st in x.stride())
    np.testing.assert_array_equal(y.get(), x.cpu().numpy())


def test_torch_into_jax_through_devbuf(torch, jax):
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    y = jax.dlpack.from_dlpack(devbuf.from_dlpack(x))
    assert y.devices() == {jax.devices("gpu")[0]}
    np.testing.assert_array_equal(np.asarray(y), x.cpu().numpy())


# ---- CuPy -------------------------------------------------------------------------------

def test_cupy_into_devbuf_and_back(cupy, gpu):
    x = cupy.arange(24, dtype=cupy.float64).reshape(4, 6)
    for importer in (devbuf.from_dlpack, devbuf.view):
        v = importer(x)
        assert v.identifier == "devbuf.cuda" and v.ptr == x.data.ptr and v.strides == x.strides
        np.testing.assert_array_equal(host(v), x.get())
    y = cupy.from_dlpack(devbuf.from_dlpack(x))
    assert y.data.ptr == x.data.ptr and bool((y == x).all())
    # devbuf's own buffer, through DLPack and through the CUDA Array Interface
    b = devbuf.from_host(np.arange(10, dtype=np.int16), device=gpu)
    for z in (cupy.from_dlpack(b), cupy.asarray(b)):
        assert z.data.ptr == b.ptr
        np.testing.assert_array_equal(z.get(), np.arange(10, dtype=np.int16))


def test_cupy_negative_strides(cupy, record_property):
    x = cupy.arange(20, dtype=cupy.float32)[::-2]
    try:  # CuPy's own export first: whether it allows them is CuPy's call
        x.__dlpack__()
    except (BufferError, ValueError, RuntimeError) as e:
        pytest.skip(f"CuPy {cupy.__version__} does not export negative strides: {e}")
    v = devbuf.from_dlpack(x)
    assert v.strides == (-8,) and v.ptr == x.data.ptr
    np.testing.assert_array_equal(host(v), x.get())
    try:
        y = cupy.from_dlpack(v)
    except (BufferError, ValueError, RuntimeError) as e:
        record_property("cupy_import_negative_strides", f"refused: {e}")
        return
    record_property("cupy_import_negative_strides", "accepted")
    assert bool((y == x).all())


def test_cupy_cai_on_non_default_stream(cupy, record_property):
    """CuPy's __cuda_array_interface__ taken on a non-blocking stream while a
    long kernel runs there: devbuf must wait on that stream."""
    n = 1 << 22
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.zeros(n, dtype=cupy.float32)
    s.synchronize()
    with s:
        spin_cupy(cupy)
        x.fill(3)
        cai = dict(x.__cuda_array_interface__)
    record_property("cupy_cai_stream", repr(cai.get("stream")))
    if cai.get("stream") is None:  # a CuPy configured not to say: say it ourselves
        cai["stream"] = s.ptr

    class CAIOnly:  # only CAI, so that devbuf cannot take DLPack instead
        __cuda_array_interface__ = cai
        keep = x

    v = devbuf.view(CAIOnly())
    assert v.imported.kind == "cuda_array_interface"
    assert v.sync is not None and v.sync.stream == cai["stream"]
    h = host(v)
    assert (h == 3).all(), f"devbuf read before CuPy's stream finished ({(h != 3).sum()} stale)"


def test_cupy_producer_side_stream_then_cupy_consumer(cupy):
    """CuPy (stream A, long) -> devbuf.from_dlpack -> CuPy (stream B)."""
    n = 1 << 22
    a = cupy.cuda.Stream(non_blocking=True)
    b = cupy.cuda.Stream(non_blocking=True)
    with a:
        x = cupy.zeros(n, dtype=cupy.float32)
    a.synchronize()
    with a:
        spin_cupy(cupy)
        x.fill(9)
        v = devbuf.from_dlpack(x)
    with b:
        y = cupy.from_dlpack(v)
        z = y.copy()
    b.synchronize()
    assert bool((z == 9).all()), "CuPy on stream B read before stream A's producer finished"


def test_cupy_zero_d(cupy):
    x = cupy.array(3.25, dtype=cupy.float32)
    v = devbuf.from_dlpack(x)
    assert v.shape == () and host(v)[()] == np.float32(3.25)
    assert cupy.from_dlpack(v).shape == ()


# ---- JAX --------------------------------------------------------------------------------

def test_jax_both_ways(jax, gpu, record_property):
    jnp = jax.numpy
    x = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), jax.devices("gpu")[0])
    v = devbuf.from_dlpack(x)
    assert v.identifier == "devbuf.cuda" and v.shape == (3, 4)
    record_property("jax_capsule", f"{v.imported.kind}, read-only {v.readonly}")
    if v.imported.kind == "dlpack_legacy":  # no read-only flag: devbuf assumes read-only
        assert v.readonly
    np.testing.assert_array_equal(host(v), np.asarray(x))
    b = devbuf.from_host(np.arange(6, dtype=np.int32), device=gpu)
    y = jax.dlpack.from_dlpack(b)
    assert y.devices() == {jax.devices("gpu")[0]}
    np.testing.assert_array_equal(np.asarray(y), np.arange(6, dtype=np.int32))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_jax_ml_dtypes(jax, gpu, name):
    jnp = jax.numpy
    dt = getattr(jnp, name)
    x = jax.device_put(jnp.linspace(-2, 2, 16).astype(dt), jax.devices("gpu")[0])
    v = devbuf.from_dlpack(x)
    assert v.format == f"[devbuf${name}]"
    assert bytes(memoryview(v.to_host()).cast("B")) == np.asarray(x).tobytes()
    b = devbuf.from_dlpack(v, copy=True)  # a writable devbuf copy, on the GPU
    y = jax.dlpack.from_dlpack(b)
    assert y.dtype == dt and np.asarray(y).tobytes() == np.asarray(x).tobytes()
