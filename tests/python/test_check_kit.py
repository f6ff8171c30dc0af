"""devbuf.check as its users meet it: devbuf's own types pass every rule, the
three known third-party bugs are found, the command line's output and exit
status, and the pytest plugin from a project outside the repository."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devbuf
import devbuf.check as kit
from devbuf.check import ArraySpec


def run_cli(args, env, cwd=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "devbuf.check", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout)


# ---- devbuf's own types pass everything ------------------------------------------------------

def test_devbuf_passes_every_rule_it_can_be_asked():
    reports = kit.run_target(kit.target("devbuf"))
    for rep in reports:
        assert rep.ok, rep.format()
    passed = {rid for rep in reports for rid, r in rep.results.items() if r.status == kit.PASS}
    # Everything but the CUDA Array Interface (devbuf.cuda only) is exercised on this machine.
    missing = {rid for rid in kit.RULES if not rid.startswith("cai.")} - passed
    if "c.device" in missing or "dx.plain_refused" in missing:
        pytest.skip("devbuf.sim not available")  # the non-host rules need it
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:  # free-threaded 3.13t: no ml_dtypes wheel yet
        missing.discard("dtypes.format")  # its case's values are a bfloat16 array from ml_dtypes
    assert not missing, f"rules no devbuf object was checked against: {sorted(missing)}"


def test_request_table_is_cpythons():
    tb = pytest.importorskip("_testbuffer")
    names = ("INDIRECT", "STRIDES", "ND", "SIMPLE", "C_CONTIGUOUS", "F_CONTIGUOUS",
             "ANY_CONTIGUOUS", "FULL", "FULL_RO", "RECORDS", "RECORDS_RO", "STRIDED",
             "STRIDED_RO", "CONTIG", "CONTIG_RO")
    assert kit.TEST_BUFFER_REQUESTS == tuple(getattr(tb, "PyBUF_" + n) for n in names)
    assert len(kit.ALL_REQUESTS) == 28


# ---- the known bugs ----------------------------------------------------------------------------

def test_finds_pyarrow_copy_true_keeping_the_old_strides():
    pa = pytest.importorskip("pyarrow")
    rep = kit.producer(lambda spec: pa.Tensor.from_numpy(spec.numpy()), checks=("dlpack",),
                       cases=[ArraySpec("int8", (3,), "strided")])
    r = rep.results["dl.copy"]
    if pa.__version__ != "26.0.1" and r.status == kit.PASS:
        pytest.skip(f"fixed in pyarrow {pa.__version__}")
    assert r.status == kit.FAIL and "strides" in r.reason, rep.format()
    assert "np.from_dlpack(obj, copy=True)" in r.reproducer


def test_finds_read_only_pyarrow_tensor_answering_writable_requests():
    pa = pytest.importorskip("pyarrow")
    rep = kit.producer(lambda spec: pa.Tensor.from_numpy(spec.numpy()), checks=("buffer",),
                       cases=[ArraySpec("int32", (3, 4), readonly=True)])
    r = rep.results["bp.writable_readonly"]
    assert r.status == kit.FAIL and "readonly=1" in r.reason, rep.format()


@pytest.mark.parametrize("dtype,fmt", [("record_offsets", "T{T{h:i:B:j:}:o:xxxxxd:k:}"),
                                       ("record_subarray", "T{(2,3)f:p:?:q:}")])
def test_finds_numpy_formats_that_disagree_with_the_itemsize(dtype, fmt):
    rep = kit.producer(lambda spec: spec.numpy(), checks=("buffer",),
                       cases=[ArraySpec(dtype, ()), ArraySpec(dtype, (1,))])
    r = rep.results["bp.format_itemsize"]
    assert r.status == kit.FAIL and fmt in r.reason, rep.format()


def test_a_report_names_rule_spec_and_reproducer():
    pytest.importorskip("pyarrow")
    tensor = kit.target("pyarrow").factories["pyarrow.Tensor"]
    rep = kit.producer(tensor, checks=("buffer",),
                       cases=[ArraySpec("int32", (3, 4), readonly=True)])
    text = rep.format()
    assert "FAIL bp.writable_readonly" in text and "spec: CPython C API" in text
    d = rep.as_dict()
    (r,) = [r for r in d["results"] if r["rule"] == "bp.writable_readonly"]
    assert r["status"] == "fail" and r["citation"] and r["reproducer"]
    # The reproducer runs on its own and shows the bug.
    code = r["reproducer"].replace("# answers, should raise BufferError", "")
    ns = {}
    exec(code, ns)  # noqa: S102 - the kit's own output
    assert kit.getbuffer(ns["obj"], 0x1).readonly == 1


# ---- the command line ------------------------------------------------------------------------

def test_cli_numpy_reports_and_fails(devbuf_env):
    r = run_cli(["numpy", "--no-consumers"], devbuf_env)
    assert r.returncode == 1, r.stderr
    assert "FAIL bp.format_itemsize" in r.stdout and "PASS dl.deleter" in r.stdout


def test_cli_json(devbuf_env):
    r = run_cli(["--json", "array_api_strict"], devbuf_env)
    d = json.loads(r.stdout)
    assert r.returncode == (0 if d["ok"] else 1), r.stdout[-3000:] + r.stderr
    assert {rep["role"] for rep in d["reports"]} == {"producer", "consumer"}
    failing = {res["rule"] for rep in d["reports"] for res in rep["results"]
               if res["status"] not in ("pass", "skip")}
    if sys.version_info < (3, 12):
        # Before PEP 688 an array_api_strict Array has no C-level buffer export.
        assert d["ok"] and not failing, failing
    else:
        # From 3.12 its __buffer__ forwards NumPy's, and with it NumPy's
        # ValueError for a refused request (docs/conformance-report.md).
        assert failing <= {"bp.error_type"}, failing


def test_cli_factory_form_and_usage_errors(devbuf_env, tmp_path):
    (tmp_path / "mylib.py").write_text(textwrap.dedent("""
        import devbuf
        def good(spec):
            if spec.layout != "C" or spec.np_dtype.fields:
                return None
            return devbuf.from_host(spec.numpy(), readonly=spec.readonly)
        def zeros(spec):
            import numpy as np
            return np.zeros(spec.shape, spec.np_dtype)
    """))
    env = dict(devbuf_env, PYTHONPATH=f"{tmp_path}:{devbuf_env['PYTHONPATH']}")
    r = run_cli(["mylib:good"], env)
    assert r.returncode == 0, r.stdout[-3000:]
    r = run_cli(["mylib:zeros", "--json"], env)
    assert r.returncode == 1
    bad = {res["rule"] for rep in json.loads(r.stdout)["reports"] for res in rep["results"]
           if res["status"] == "fail"}
    assert "bp.values" in bad and "dl.values" in bad
    assert run_cli([], env).returncode == 2
    r = run_cli(["nosuchlib"], env)
    assert r.returncode == 2 and "built in:" in r.stderr
    r = run_cli(["mylib:nothere"], env)
    assert r.returncode != 0 and "has no 'nothere'" in r.stderr
    assert "bp.writable_readonly" in run_cli(["--list-rules"], env).stdout


def test_cli_skips_a_library_that_imports_too_slowly(devbuf_env):
    r = run_cli(["--json", "--import-timeout", "0.001", "jax"], devbuf_env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert "took over" in d["skipped"]["jax"] and d["reports"] == []


def test_cli_consumer_form(devbuf_env):
    r = run_cli(["--consumer", "numpy:from_dlpack", "--protocol", "dlpack"], devbuf_env)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "PASS c.consumed_capsule" in r.stdout


# ---- the pytest plugin, from a project outside the repository -----------------------------------

def test_pytest_plugin_from_an_outside_project(devbuf_env, tmp_path):
    proj = tmp_path / "outside"
    proj.mkdir()
    (proj / "conftest.py").write_text('pytest_plugins = ["devbuf.check.pytest_plugin"]\n')
    (proj / "test_mylib.py").write_text(textwrap.dedent("""
        import numpy as np
        import pytest
        from devbuf.check import ArraySpec

        CASES = [ArraySpec("int32", (3, 4)), ArraySpec("int32", (3, 4), readonly=True),
                 ArraySpec("float64", (3, 4), "strided")]

        def test_numpy_with_its_known_failures_allowed(devbuf_check):
            devbuf_check.producer(lambda spec: spec.numpy(), cases=CASES,
                                  allow=["bp.error_type", "bp.simple_format", "bp.answer"])

        @pytest.mark.devbuf_check_allow("bp.*")
        def test_allowed_by_marker(devbuf_check):
            devbuf_check.producer(lambda spec: spec.numpy(), cases=CASES)

        def test_numpy_consumer(devbuf_check):
            devbuf_check.consumer(np.from_dlpack, "dlpack")

        def test_a_broken_library_fails(devbuf_check):
            devbuf_check.producer(lambda spec: np.zeros(spec.shape, spec.np_dtype),
                                  cases=CASES)
    """))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        "-rf"], cwd=proj, env=devbuf_env, capture_output=True, text=True,
                       timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 failed, 3 passed" in out, out
    assert "test_a_broken_library_fails" in out and "FAIL bp.values" in out, out
    assert "devbuf.check: devbuf" in out  # the report header


# ---- scripts/conformance_report.py: the CI stage's comparison ------------------------------------

def test_report_check_notices_new_and_fixed_failures(tmp_path, monkeypatch, capsys):
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "conformance_report.py"
    spec = importlib.util.spec_from_file_location("conformance_report", path)
    cr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cr)
    t = kit.Target("fake", "1", {})
    rep = kit.producer(lambda s: np.zeros(s.shape, s.np_dtype), name="fake.zeros",
                       cases=[ArraySpec("int32", (3,))], checks=("buffer",))
    good = kit.producer(lambda s: devbuf.from_host(s.numpy()), name="devbuf.ok",
                        cases=[ArraySpec("int32", (3,))], checks=("buffer",))
    monkeypatch.setattr(cr, "run", lambda: ({"fake": (t, [rep]), "devbuf": (t, [good])}, {}))
    doc = tmp_path / "report.md"
    doc.write_text(f"# triage\n\n{cr.BEGIN}\n{cr.END}\n")
    monkeypatch.setattr(cr, "DOC", doc)
    monkeypatch.setattr(cr, "ROOT", tmp_path)
    assert cr.main(["--write"]) == 0
    assert "fake.zeros\tbp.values" in doc.read_text() and doc.read_text().startswith("# triage")
    assert cr.main(["--check"]) == 0
    doc.write_text(doc.read_text().replace("fake.zeros\tbp.values",
                                           "fake.zeros\tbp.fixed_meanwhile"))
    assert cr.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "NEW failure" in err and "bp.values" in err and "no longer fails" in err
    # devbuf's own types failing is always an error
    monkeypatch.setattr(cr, "run", lambda: ({"devbuf": (t, [rep])}, {}))
    assert cr.main(["--write"]) == 1


def test_docs_list_every_rule_and_only_those():
    import pathlib
    import re
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "conformance-kit.md").read_text()
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z_]+)` \|", doc, re.M))
    rules = set(kit.RULES)
    assert listed == rules, (sorted(rules - listed), sorted(listed - rules))


# ---- the CUDA targets (cupy, torch), on NumPy stand-ins ------------------------------------------
# No GPU here: each stand-in mimics exactly the part of its library's API the
# factory calls, over host memory, so that the factory's layout logic (and any
# typo in it) is exercised; scripts/gpu-check.sh runs the real ones on a GPU.

class _FakeCupyArray(np.ndarray):
    def get(self):  # cupy.ndarray.get(): a NumPy copy on the host
        return np.array(self)


def _fake_cupy():
    import types

    def as_strided(x, shape=None, strides=None):
        assert isinstance(x, _FakeCupyArray), type(x)
        return np.lib.stride_tricks.as_strided(x, shape, strides).view(_FakeCupyArray)
    return types.SimpleNamespace(
        __version__="0-standin",
        asarray=lambda a: np.array(a).view(_FakeCupyArray),  # (a packed copy, as CuPy's)
        lib=types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=as_strided)))


class _FakeTensor(np.ndarray):
    device = "cpu"

    def to(self, device):
        assert device == "cuda", device
        t = np.array(self).view(_FakeTensor)
        t.device = device
        return t

    def cpu(self):
        return np.array(self).view(_FakeTensor)

    def numpy(self):
        assert self.device == "cpu", "torch: can't convert cuda tensor to numpy"
        return np.asarray(self)


def _fake_torch():
    import types

    def from_numpy(a):
        if a.dtype == np.uint16:  # older torch takes no unsigned type but uint8
            raise TypeError("can't convert np.ndarray of type numpy.uint16")
        return a.view(_FakeTensor)

    def as_strided(t, size, stride, storage_offset=0):
        assert t.device == "cuda" and t.flags.c_contiguous and t.ndim == 1
        if any(s < 0 for s in stride):
            raise RuntimeError("as_strided: Negative strides are not supported")
        out = np.lib.stride_tricks.as_strided(
            t[storage_offset:], tuple(size), tuple(s * t.itemsize for s in stride))
        out = out.view(_FakeTensor)
        out.device = t.device
        return out
    return types.SimpleNamespace(__version__="0-standin", from_numpy=from_numpy,
                                 as_strided=as_strided)


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_cuda_target_factories_keep_values_and_layout(lib):
    from devbuf.check._factories import cupy_factory, torch_factory
    factory = cupy_factory(_fake_cupy()) if lib == "cupy" else torch_factory(_fake_torch())
    made = set()
    for spec in kit.default_cases():
        x = factory(spec)
        if x is None:
            continue
        if x.size > 1:  # (an empty or one-item array has every layout)
            made.add((spec.dtype, spec.layout))
        assert not spec.readonly and not spec.np_dtype.fields, spec  # neither can make those
        want = spec.numpy()
        assert x.shape == spec.shape and x.dtype == want.dtype, spec
        np.testing.assert_array_equal(factory.read(x), spec.values, err_msg=str(spec))
        if x.size:
            assert x.strides == want.strides, (spec, x.strides, want.strides)
        if spec.layout == "offset" and x.size:
            # the array starts one item into its allocation, as the spec's does
            root = x
            while root.base is not None:
                root = root.base
            start = x.__array_interface__["data"][0]
            assert start - np.asarray(root).__array_interface__["data"][0] == x.itemsize, spec
        assert "obj = " in factory.source(spec) and lib in factory.source(spec)
    layouts = {lay for _, lay in made}
    # (the kit asks 'broadcast' only read-only, which neither library has)
    want_layouts = set(kit.LAYOUTS) - {"broadcast"} - ({"reversed"} if lib == "torch" else set())
    assert layouts == want_layouts, layouts
    assert ("uint16", "C") in made or lib == "torch"
    assert ("uint16", "C") not in made or lib == "cupy"  # torch's TypeError: not offered


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_cuda_target_factories_pass_the_kit_over_host_stand_ins(lib):
    # Over host memory the stand-ins' arrays are NumPy's: the kit's DLPack
    # checks see NumPy's export of exactly the layout the factory built.
    from devbuf.check._factories import cupy_factory, torch_factory
    factory = cupy_factory(_fake_cupy()) if lib == "cupy" else torch_factory(_fake_torch())
    rep = kit.producer(factory, cases=[s for s in kit.default_cases()
                                       if s.dtype in ("int32", "float64", "bool")],
                       checks=("dlpack", "pickle"))
    assert rep.ok, rep.format()
    d = {r["rule"]: r for r in rep.as_dict()["results"]}
    assert d["dl.values"]["status"] == "pass" and d["pickle.roundtrip"]["status"] == "pass"


def test_cli_cuda_targets_without_their_library(devbuf_env, tmp_path):
    # A cupy/torch that cannot be imported (shadowed here, so the test holds
    # where either is installed): exit 2, a clear message, no traceback.
    for name in ("cupy", "torch"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError(\"No module named {name!r}\")\n")
    env = dict(devbuf_env, PYTHONPATH=f"{tmp_path}:{devbuf_env['PYTHONPATH']}")
    for name in ("cupy", "torch"):
        r = run_cli([name], env, timeout=120)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"devbuf.check: {name}: not installed: No module named '{name}'" in r.stderr
        assert "nothing was checked" in r.stderr and "Traceback" not in r.stderr
        r = run_cli(["--json", name], env, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        d = json.loads(r.stdout)
        assert not d["ok"] and d["reports"] == [] and "not installed" in d["skipped"][name]


def test_cli_cuda_target_without_a_gpu(devbuf_env, tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(textwrap.dedent("""
        __version__ = "0-standin"
        class _Runtime:
            @staticmethod
            def getDeviceCount():
                raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        class cuda:
            runtime = _Runtime
    """))
    env = dict(devbuf_env, PYTHONPATH=f"{tmp_path}:{devbuf_env['PYTHONPATH']}")
    r = run_cli(["cupy"], env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "CuPy 0-standin cannot reach a GPU: cudaErrorNoDevice" in r.stderr
    # named with a target that runs, the missing one is a skip, not a usage error
    r = run_cli(["--json", "--no-consumers", "cupy", "array_api_strict"], env, timeout=300)
    d = json.loads(r.stdout)
    assert r.returncode == (0 if d["ok"] else 1) and "cannot reach a GPU" in d["skipped"]["cupy"]


def test_device_memory_values_are_read_not_passed(sim):
    # A producer on memory the host cannot read whose capsule holds other
    # values than it should: the kit reads them through devbuf (devbuf.sim
    # here, devbuf.cuda on a GPU) and fails dl.values, where it used to pass
    # unread.
    class Liar:
        def __init__(self, spec):
            self.buf = devbuf.from_host(np.zeros(spec.shape, spec.np_dtype), device=sim)

        def __dlpack__(self, **kw):
            return self.buf.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.buf.__dlpack_device__()

    cases = [ArraySpec("int32", (3, 4))]
    rep = kit.producer(Liar, cases=cases, checks=("dlpack",))
    d = {r["rule"]: r for r in rep.as_dict()["results"]}
    assert d["dl.values"]["status"] == "fail", rep.format()
    assert "copied to the host by devbuf" in d["dl.values"]["reason"]
    honest = kit.producer(lambda s: devbuf.from_host(s.numpy(), device=sim), cases=cases,
                          checks=("dlpack",))
    h = {r["rule"]: r for r in honest.as_dict()["results"]}
    assert h["dl.values"]["status"] == "pass", honest.format()


# ---- an unchecked run is never ok; every finding printed; reasons that fit the answer -----------

SIM_CASES = [ArraySpec("int32", (3, 4)), ArraySpec("float64", (3, 4)), ArraySpec("uint8", (7,)),
             ArraySpec("int16", ())]


def test_device_memory_is_checked_through_pyBUF_DEVICE_requests(sim):
    rep = kit.producer(lambda spec: devbuf.from_host(spec.numpy(), device=sim),
                       cases=SIM_CASES, checks=("buffer",))
    for rid in ("bp.answer", "bp.refuse", "bp.satisfiable", "bp.values", "bp.exports",
                "dx.answer"):
        assert rep.status(rid) == kit.PASS, (rid, rep.format())
    assert rep.ok and rep.unchecked is None, rep.format()
    assert "|PyBUF_DEVICE" not in rep.format()  # nothing failed


def test_a_run_in_which_no_rule_applied_is_not_ok():
    rep = kit.producer(lambda spec: spec.numpy(), cases=SIM_CASES, checks=("cai",))
    c = rep.counts()
    assert c["pass"] == c["fail"] == 0
    assert not rep.ok
    assert rep.unchecked.startswith("no rule applied: nothing was checked")
    assert "NOT OK: no rule applied" in rep.format()
    assert rep.as_dict()["ok"] is False and rep.as_dict()["unchecked"] == rep.unchecked


def test_a_run_whose_answers_could_not_be_checked_is_not_ok(sim):
    broken = pytest.importorskip("devbuf_broken", reason="test extension not built")
    # device memory that refuses PyBUF_DEVICE too: every buffer rule applies, none is checked
    rep = kit.producer(lambda spec: broken.DeviceExporter(
        devbuf.from_host(spec.numpy(), device=sim), refuse=devbuf.PyBUF_DEVICE),
        cases=SIM_CASES, checks=("buffer",))
    assert not rep.failures
    assert not rep.ok, rep.format()
    assert "PyBUF_FULL_RO refused" in rep.unchecked
    assert rep.results["bp.answer"].applies


def test_most_rules_skipped_is_not_ok():
    rep = kit.Report("t", "producer", [kit.RULES[r] for r in ("bp.answer", "bp.values",
                                                              "bp.refuse")])
    rep.passed("bp.answer")
    rep.skipped("bp.values", "values on a device no plugin reads", applies=True)
    assert rep.ok  # one checked, one could not be: not most
    rep.skipped("bp.refuse", "refused", applies=True)
    assert not rep.ok
    assert rep.unchecked.startswith("most rules were skipped: 2 rules that apply could not be "
                                    "checked, 1 were")


def test_every_finding_of_a_rule_is_printed():
    # NumPy's packed sub-array record and its record with explicit offsets: two findings of
    # bp.format_itemsize, both printed (they differ by format, not by size)
    rep = kit.producer(lambda spec: spec.numpy(), checks=("buffer",), cases=[
        ArraySpec("record_offsets", (7,)), ArraySpec("record_subarray", ())])
    r = rep.results["bp.format_itemsize"]
    assert r.status == kit.FAIL
    text = rep.format()
    assert "T{T{h:i:B:j:}:o:xxxxxd:k:}" in text
    assert "T{(2,3)f:p:?:q:}" in text, text
    # the same problem for other requests is one finding, not one per request
    err = rep.results["bp.error_type"]
    kinds = [err.reason] + [o for o, _ in err.others]
    assert len(kinds) == len(set(kit._report._kind(k) for k in kinds))


def test_simple_format_says_what_the_answer_had():
    pa = pytest.importorskip("pyarrow")
    rep = kit.producer(lambda spec: pa.Tensor.from_numpy(spec.numpy()), checks=("buffer",),
                       cases=[ArraySpec("int32", (7,))])
    r = rep.results["bp.simple_format"]
    assert r.status == kit.FAIL
    assert "with no shape" not in r.reason
    assert "(no PyBUF_ND) answered format '=i' with shape (7,)" in r.reason
    np_rep = kit.producer(lambda spec: spec.numpy(), checks=("buffer",),
                          cases=[ArraySpec("int32", (7,))])
    assert "answered format 'i' with no shape" in np_rep.results["bp.simple_format"].reason


def test_the_standard_library_targets_find_their_known_bugs():
    cases = [ArraySpec("int32", (3, 4)), ArraySpec("record_packed", (7,)),
             ArraySpec("int16", (7,)), ArraySpec("uint8", (7,))]
    rep = kit.producer(kit.target("ctypes").factories["ctypes arrays and Structures"],
                       cases=cases, checks=("buffer",))
    assert "PyBUF_ND|PyBUF_STRIDES|PyBUF_F_CONTIGUOUS answered a layout" in \
        rep.results["bp.refuse"].reason
    # Packed Structures export format 'B' with itemsize 15 on 3.11; newer CPythons (3.13,
    # 3.14, 3.15 seen) export a struct format of the right size, and the rule passes.
    reason = rep.results["bp.format_itemsize"].reason
    if sys.version_info < (3, 12):
        assert "format 'B' with itemsize 15" in reason
    else:
        assert reason == "" or "format 'B' with itemsize 15" in reason, reason
    rep = kit.producer(kit.target("array").factories["array.array"], cases=cases,
                       checks=("buffer",))
    assert rep.failures == [rep.results["bp.simple_format"]]
    assert "with no shape" in rep.results["bp.simple_format"].reason
    rep = kit.producer(kit.target("mmap").factories["mmap.mmap"], cases=cases,
                       checks=("buffer",))
    assert rep.ok, rep.format()


def test_the_pillow_target_checks_the_array_interface():
    pytest.importorskip("PIL")
    rep = kit.producer(kit.target("pillow").factories["PIL.Image.Image"],
                       cases=[ArraySpec("uint8", (3, 4)), ArraySpec("float32", (2, 5))],
                       checks=("array_interface",))
    for rid in ("ai.version", "ai.typestr", "ai.data", "ai.strides", "ai.values"):
        assert rep.status(rid) == kit.PASS, rep.format()  # values read through its bytes
    assert rep.ok, rep.format()
