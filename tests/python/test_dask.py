"""dask.distributed: DeviceBuffers scattered to two worker processes on this
machine (loopback only), read there, results gathered; and dask's own
serialization shows the payload as a separate out-of-band frame."""
import logging
import os
import pathlib

import numpy as np
import pytest

import devbuf
from devbuf import _devbuf

distributed = pytest.importorskip("distributed",
                                  reason="dask[distributed] is not installed (requirements.txt)")
from distributed import Client, LocalCluster, wait  # noqa: E402
from distributed.protocol import deserialize, dumps, loads, serialize, to_serialize  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT = 120  # seconds, for every wait on the cluster


@pytest.fixture(params=["cpu", "devbuf.sim"])
def device(request, sim):
    return devbuf.device(request.param)


def address_of(buf):
    return np.frombuffer(memoryview(buf).cast("B"), np.uint8).ctypes.data


# ---- dask's serialization, in this process -------------------------------------------------

@pytest.mark.parametrize("serializers", [None, ("pickle",)], ids=["default", "pickle"])
def test_dask_serialize_puts_payload_in_its_own_frame(device, serializers):
    a = np.arange(1 << 17, dtype="<f8")  # 1 MiB
    b = devbuf.from_host(a, device=device)
    _devbuf._pickle_stats_reset()
    header, frames = serialize(b, serializers=serializers, on_error="raise")
    assert header["serializer"] == "pickle"
    # frames[0]: the pickle stream (metadata only); frames[1]: the payload
    assert len(frames) == 2
    assert len(frames[0]) < 400
    payload = memoryview(frames[1])
    assert payload.nbytes == a.nbytes
    assert a.tobytes()[8:72] not in bytes(frames[0])
    if device.identifier == "cpu":
        assert address_of(payload) == b.ptr  # the buffer's own memory: zero copies
        assert _devbuf._pickle_stats()["d2h_copies"] == 0
    else:
        assert isinstance(payload.obj, devbuf.HostStaging)  # the one staging copy
        assert _devbuf._pickle_stats()["d2h_copies"] == 1
    c = deserialize(header, frames)
    assert c.device.identifier == device.identifier and c.format == b.format
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)


def test_dask_wire_message_frames(device):
    """distributed.protocol.dumps is what goes on the socket: the payload is a
    frame of its own, the rest is small."""
    a = np.arange(1 << 18, dtype="<i4")
    b = devbuf.from_host(a, device=device, readonly=True)
    frames = dumps({"op": "update-data", "data": {"x": to_serialize(b)}})
    sizes = sorted(memoryview(f).nbytes for f in frames)
    assert sizes[-1] == a.nbytes
    assert sum(sizes[:-1]) < 2048
    msg = loads(frames)
    c = msg["data"]["x"]
    assert c.readonly and c.device.identifier == device.identifier
    np.testing.assert_array_equal(np.asarray(c.to_host()), a)


# ---- a real cluster: two worker processes ------------------------------------------------

@pytest.fixture(scope="module")
def client(devbuf_env):
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "DEVBUF_BUILD_DIR")}
    # The workers are new processes: they must import the same devbuf, and
    # this module (the task functions are pickled by reference).
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), devbuf_env["PYTHONPATH"]])
    os.environ["DEVBUF_BUILD_DIR"] = devbuf_env["DEVBUF_BUILD_DIR"]
    cluster = client = None
    try:
        cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                               host="127.0.0.1", dashboard_address=None,
                               silence_logs=logging.ERROR)
        client = Client(cluster, timeout=f"{TIMEOUT}s")
        client.wait_for_workers(2, timeout=TIMEOUT)
        yield client
    finally:
        if client is not None:
            client.close(timeout=30)
        if cluster is not None:
            cluster.close(timeout=30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def read_on_worker(b):
    """A task: read a DeviceBuffer through to_host() on a worker."""
    a = np.asarray(b.to_host())
    return {"pid": os.getpid(), "identifier": b.device.identifier, "format": b.format,
            "shape": b.shape, "readonly": b.readonly, "sum": float(a.sum()),
            "head": a.ravel()[:3].tolist()}


def scale_on_worker(b, k):
    """A task that makes a new DeviceBuffer on the input's device."""
    return devbuf.from_host(np.asarray(b.to_host()) * k, device=b.device)


def worker_stats():
    return _devbuf._pickle_stats()


def test_cluster_scatter_compute_gather(client, sim):
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    for w in workers:
        assert w.startswith("tcp://127.0.0.1:")
    a = np.arange(3 * 65536, dtype="<f8").reshape(3, 65536)
    inputs = {
        "cpu": devbuf.from_host(a, device="cpu"),
        "sim": devbuf.from_host(a, device="devbuf.sim"),
        "sim-ro": devbuf.from_host(a, device="devbuf.sim", readonly=True),
    }
    futs = client.scatter(inputs, broadcast=True, timeout=TIMEOUT)
    reads = {(name, w): client.submit(read_on_worker, futs[name], workers=[w], pure=False,
                                      allow_other_workers=False)
             for name in inputs for w in workers}
    wait(list(reads.values()), timeout=TIMEOUT)
    got = client.gather(reads)
    pids = {r["pid"] for r in got.values()}
    assert len(pids) == 2 and os.getpid() not in pids  # two other processes read them
    for (name, _), r in got.items():
        src = inputs[name]
        assert r["identifier"] == src.device.identifier
        assert (r["format"], tuple(r["shape"]), r["readonly"]) == (src.format, src.shape,
                                                                   src.readonly)
        assert r["sum"] == float(a.sum()) and r["head"] == [0.0, 1.0, 2.0]
    # results that are DeviceBuffers come back to the client the same way
    scaled = client.submit(scale_on_worker, futs["sim"], 3, workers=[workers[0]])
    wait([scaled], timeout=TIMEOUT)
    out = scaled.result(timeout=TIMEOUT)
    assert type(out) is devbuf.DeviceBuffer and out.device.identifier == "devbuf.sim"
    np.testing.assert_array_equal(np.asarray(out.to_host()), a * 3)
    # On the workers: each sim buffer was rebuilt with one host->device copy
    # from the received frame, each cpu buffer borrowed the received frame
    # (no host copy at all).
    st = client.run(worker_stats)
    for s in st.values():
        assert s["h2d_copies"] >= 2 and s["borrowed"] >= 1 and s["host_copies"] == 0, st
