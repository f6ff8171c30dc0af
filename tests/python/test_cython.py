"""`cimport devbuf` (bindings/python/devbuf/__init__.pxd): a small Cython
consumer, tests/python/cython_consumer/devbuf_cy_consumer.pyx, is compiled
here with Cython from PyPI into a temporary folder and imported
(docs/consumers.md, "From Cython")."""
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import devbuf

Cython = pytest.importorskip("Cython", reason="Cython is pinned in requirements.txt")
ml_dtypes = pytest.importorskip("ml_dtypes")

HERE = os.path.dirname(os.path.abspath(__file__))
PYX = os.path.join(HERE, "cython_consumer", "devbuf_cy_consumer.pyx")


def _compiler():
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    if shutil.which(cc[0]) is None:
        cc = [shutil.which("cc") or shutil.which("gcc") or "cc"]
    return cc


@pytest.fixture(scope="module")
def cy(tmp_path_factory):
    out = tmp_path_factory.mktemp("cython_consumer")
    c_file = out / "devbuf_cy_consumer.c"
    # Cython finds `devbuf/__init__.pxd` beside the imported package.
    pkg_root = os.path.dirname(os.path.dirname(devbuf.__file__))
    r = subprocess.run([sys.executable, "-m", "cython", "-3", "-I", pkg_root, PYX, "-o",
                        str(c_file)], capture_output=True, text=True)
    assert r.returncode == 0, f"cython failed:\n{r.stdout}\n{r.stderr}"
    so = out / ("devbuf_cy_consumer" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = _compiler() + ["-shared", "-fPIC", "-O2", "-Wall", "-Werror=implicit-function-declaration",
                         "-I", sysconfig.get_paths()["include"],
                         # an uninstalled build tree keeps pyconfig.h here
                         "-I", sysconfig.get_paths()["platinclude"], "-I", devbuf.get_include(),
                         str(c_file), "-o", str(so)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
    spec = importlib.util.spec_from_file_location("devbuf_cy_consumer", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_headers_and_pxd_ship_with_the_package():
    inc = devbuf.get_include()
    for h in ("devbuf_buffer.h", "devbuf_capi.h", "devbuf_dlpack_import.h",
              os.path.join("devbuf", "runtime.h"),
              os.path.join("devbuf", "format.h")):
        assert os.path.isfile(os.path.join(inc, h)), h
    assert os.path.isfile(os.path.join(os.path.dirname(devbuf.__file__), "__init__.pxd"))


def test_sum_float32_from_any_producer(cy):
    vals = np.arange(10, dtype=np.float32) / 4
    want = float(vals.sum())
    assert cy.sum_f32(vals) == want  # NumPy (plain buffer)
    assert cy.sum_f32(devbuf.from_host(vals)) == want  # DeviceBuffer on the host
    assert cy.sum_f32(memoryview(vals)) == want
    assert cy.sum_f32(devbuf.view(vals)) == want
    pa = pytest.importorskip("pyarrow")
    assert cy.sum_f32(pa.array(vals)) == want  # the Arrow door


def test_device_memory_is_refused_helpfully(cy):
    sim = devbuf.from_host(np.ones(4, np.float32), device="devbuf.sim")
    with pytest.raises(BufferError, match=r"host cannot read.*to_host\(\)"):
        cy.sum_f32(sim)
    assert sim.exports == 0  # nothing left held
    assert cy.sum_f32(sim.to_host()) == 4.0  # what the message says to do


def test_wrong_format_is_refused(cy):
    with pytest.raises(TypeError, match="expected float32 items.*'d'"):
        cy.sum_f32(np.ones(3))


def test_reads_bfloat16(cy):
    vals = np.array([1.5, -2.0, 0.25, 3.0], dtype=ml_dtypes.bfloat16)
    buf = devbuf.from_host(devbuf.view(vals))
    assert buf.format == "[devbuf$bfloat16]"
    assert cy.read_bfloat16(buf) == [1.5, -2.0, 0.25, 3.0]
    with pytest.raises(TypeError, match="bfloat16"):
        cy.read_bfloat16(np.ones(2, np.float16))


def test_typed_view_fields(cy):
    sim = devbuf.from_host(np.arange(6, dtype=np.int16).reshape(2, 3), device="devbuf.sim")
    d = cy.describe(sim)
    assert d["ptr"] == sim.ptr and d["nbytes"] == 12 and d["itemsize"] == 2
    assert d["ndim"] == 2 and d["shape"] == (2, 3) and d["strides"] == (6, 2)
    assert d["format"] == "h" and d["device"] == "devbuf.sim" and d["is_device"]
    assert not d["host_accessible"] and d["ordinal"] == 0
    assert d["event"] == sim.event
    assert cy.extended(sim) == (True, "devbuf.sim")
    assert cy.extended(np.zeros(2)) == (False, None)
    assert sim.exports == 0
