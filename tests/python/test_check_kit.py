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
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and {rep["role"] for rep in d["reports"]} == {"producer", "consumer"}
    assert all(res["status"] in ("pass", "skip") for rep in d["reports"]
               for res in rep["results"])


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
