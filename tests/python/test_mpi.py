"""MPI with mpi4py: `mpirun -n 2` on this machine only (loopback TCP or shared
memory), bounded in time. The ranks' work is in mpi_devbuf_sendrecv.py."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "mpi_devbuf_sendrecv.py"
CHECKS = ["cpu-buffer-protocol", "sim-via-to_host", "pkl5-out-of-band", "done"]

mpi4py = pytest.importorskip("mpi4py", reason="mpi4py is not installed (requirements.txt)")
MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None,
                                reason="mpirun not found (Debian: openmpi-bin, libopenmpi-dev)")


@pytest.mark.parametrize("btl", [
    # TCP, but only over the loopback interface
    ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
    # shared memory between the two ranks
    ["--mca", "btl", "self,vader"],
], ids=["tcp-loopback", "shared-memory"])
def test_mpirun_two_ranks(sim, devbuf_env, btl):
    env = dict(devbuf_env)
    # Open MPI refuses to run as root unless told (containers and CI run as root).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [MPIRUN, "-n", "2", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo", *btl,
           sys.executable, str(SCRIPT)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, timeout=180)
    except subprocess.TimeoutExpired as e:  # pragma: no cover - a hung rank
        pytest.fail(f"mpirun did not finish in 180 s: {e.stdout!r} {e.stderr!r}")
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, f"mpirun failed ({r.returncode}):\n{out}\n{err}"
    got = [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("ok ")]
    assert got == CHECKS, f"{out}\n{err}"
