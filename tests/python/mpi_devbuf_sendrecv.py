"""Run under `mpirun -n 2` by test_mpi.py (and by hand: see
docs/pickle-and-distributed.md). Rank 0 sends, rank 1 receives and checks;
each check prints one "ok <name>" line on rank 1, which the test counts.

1. host-accessible DeviceBuffer (cpu): Send/Recv straight through the buffer
   protocol, no copy on either side (Recv writes into a DeviceBuffer);
2. devbuf.sim buffer: Send(buf.to_host()) on rank 0, Recv into a cpu
   DeviceBuffer and copy_to(sim) on rank 1 (a non-CUDA-aware MPI can only
   touch host memory; the sim buffer itself refuses a plain export);
3. pickle protocol 5 through mpi4py.util.pkl5: DeviceBuffers (cpu and sim)
   with their payloads sent as separate out-of-band messages.
"""
import sys

import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

import devbuf

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if comm.Get_size() != 2:
    sys.exit("run with mpirun -n 2")
N = (1 << 20) + 3  # items: over a MiB, not a round size
ref = np.arange(N, dtype="<f8") * 0.5


def ok(name):
    print(f"ok {name}", flush=True)


# 1. cpu: the buffer protocol, both ways zero-copy ------------------------------------
if rank == 0:
    b = devbuf.from_host(ref, device="cpu")
    comm.Send([b, MPI.DOUBLE], dest=1, tag=1)
else:
    b = devbuf.empty(N, "<d", device="cpu")
    before = b.ptr
    comm.Recv([b, MPI.DOUBLE], source=0, tag=1)
    assert b.ptr == before and b.device.identifier == "cpu"
    np.testing.assert_array_equal(np.asarray(b), ref)
    ok("cpu-buffer-protocol")

# 2. sim: through the host -------------------------------------------------------------
if rank == 0:
    s = devbuf.from_host(ref, device="devbuf.sim")
    try:
        memoryview(s)
    except BufferError:
        pass  # device memory: MPI cannot be handed the pointer
    else:
        raise AssertionError("a devbuf.sim buffer exported a plain buffer")
    h = s.to_host()  # one device->host copy, after the upload's event
    comm.Send([h, MPI.BYTE], dest=1, tag=2)
else:
    h = devbuf.empty(N, "<d", device="cpu")
    comm.Recv([h, MPI.BYTE], source=0, tag=2)
    s = h.copy_to("devbuf.sim")  # one host->device copy
    assert s.device.identifier == "devbuf.sim" and s.format == "<d" and s.shape == (N,)
    np.testing.assert_array_equal(np.asarray(s.to_host()), ref)
    ok("sim-via-to_host")

# 3. pickle protocol 5, out-of-band, with mpi4py.util.pkl5 ----------------------------
pcomm = pkl5.Intracomm(comm)
if rank == 0:
    objs = {"cpu": devbuf.from_host(ref, device="cpu", readonly=True),
            "sim": devbuf.from_host(ref.reshape(-1, 1)[:1024 * 1024].reshape(1024, 1024),
                                    device="devbuf.sim"),
            "view": devbuf.view(ref[::2])}
    pcomm.send(objs, dest=1, tag=3)
else:
    objs = pcomm.recv(source=0, tag=3)
    c, s, v = objs["cpu"], objs["sim"], objs["view"]
    assert c.device.identifier == "cpu" and c.readonly
    np.testing.assert_array_equal(np.asarray(c), ref)
    assert s.device.identifier == "devbuf.sim" and s.shape == (1024, 1024)
    np.testing.assert_array_equal(np.asarray(s.to_host()).ravel(), ref[:1024 * 1024])
    assert isinstance(v, devbuf.DeviceView)
    np.testing.assert_array_equal(np.asarray(v), ref[::2])
    ok("pkl5-out-of-band")

comm.Barrier()
if rank == 1:
    ok("done")
