"""scripts/gpu_check_report.py on what only a real GPU run produces (failed
and recorded tests, bench goals, a step out of time), so that the report of
the one scarce GPU run is not its first test. The dry run of
scripts/gpu-check.sh --fake (a stage of scripts/test.sh) covers the rest."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check_report.py"
# Each test runs the report script (or the check script's steps) in a child process.
pytestmark = pytest.mark.child_process(reason="each test runs scripts/gpu_check_report.py in a child process")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="t" name="test_ok" time="0.5">
  <properties><property name="producer_running_at_handoff" value="True"/></properties>
</testcase>
<testcase classname="t" name="test_bad" time="0.1">
  <failure message="AssertionError: devbuf read before the producer finished">trace | here</failure>
</testcase>
<testcase classname="t" name="test_skip" time="0"><skipped message="CuPy is not installed"/></testcase>
</testsuite></testsuites>
"""

BENCH = {"tool": "bench_cuda", "device": "NVIDIA H100 80GB HBM3",
         "d2h": [{"bytes": 1 << 30, "plugin_pinned_gbs": 50.0, "raw_pinned_gbs": 51.0}],
         "goals_d2h": {"at_bytes": 1 << 30, "pinned_ratio_ge_0_95": True,
                       "pinned_ge_0_85_of_63gbs": False},
         "goals_alloc": {"pooled_le_1us_every_size": True}}


def test_report_of_a_real_run(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "steps.tsv").write_text(
        "environment\tpass\t1\t\nbuild\tpass\t30\t\ninterop_tests\tfail\t40\texit status 1\n"
        "bench_cuda\tpass\t60\t\nbench_cuda_interop\tout_of_time\t0\tnot run: budget spent\n")
    (work / "interop.xml").write_text(JUNIT)
    (work / "bench_cuda.json").write_text(json.dumps(BENCH))
    (work / "bench_cuda.md").write_text("## CUDA\n\n| size | x |\n")
    (work / "notes.txt").write_text("libffi not found: devbuf._pyplugin not built\n")
    (work / "interop_tests.log").write_text("E   AssertionError\n")
    r = subprocess.run([sys.executable, str(SCRIPT), "report", "--work", str(work), "--out",
                        str(out), "--mode", "real", "--elapsed", "200"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files), files
    s = json.loads((out / "gpu-check.json").read_text())
    assert s["failed_steps"] == ["interop_tests", "bench_cuda_interop"]
    assert s["notes"] == ["libffi not found: devbuf._pyplugin not built"]
    outcomes = {t["name"]: t for t in s["interop_tests"]}
    assert outcomes["test_ok"]["recorded"] == {"producer_running_at_handoff": "True"}
    assert outcomes["test_bad"]["outcome"] == "failed"
    assert "devbuf read before" in outcomes["test_bad"]["message"]
    assert outcomes["test_skip"]["message"] == "CuPy is not installed"
    assert "d2h pinned_ge_0_85_of_63gbs: NOT met" in s["bench_cuda_goals"]
    md = (out / "gpu-check.md").read_text()
    assert "FAILED: interop_tests, bench_cuda_interop" in md and "| test_bad" not in md
    assert "| `test_bad` | failed |" in md and "trace / here" not in md  # table kept whole
    log = (out / "log.md").read_text()
    assert "E   AssertionError" in log and "(not run: budget spent)" in log
    assert "Note: libffi not found" in r.stdout


def test_env_without_a_gpu(tmp_path):
    p = tmp_path / "env.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "env", str(p),
                        "--fake-lib", "/nonexistent/libcuda.so.1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    env = json.loads(p.read_text())
    assert env["mode"] == "fake" and env["cuDriverGetVersion"].startswith("unavailable")
    assert "python" in env and isinstance(env["packages"], dict)


KIT_TORCH = {"ok": False, "skipped": {}, "reports": [
    {"target": "torch.Tensor (cuda)", "role": "producer", "ok": False,
     "counts": {"pass": 20, "fail": 1, "skip": 13}, "notes": [],
     "results": [{"rule": "dl.values", "status": "pass"},
                 {"rule": "dl.readonly", "status": "fail"}]},
    {"target": "torch.from_dlpack (dlpack)", "role": "consumer", "ok": True,
     "counts": {"pass": 15, "fail": 0, "skip": 0}, "notes": [], "results": []}]}


def test_report_of_the_kit_on_cuda_arrays(tmp_path):
    # torch's kit ran (one finding), cupy's was skipped: both say so, and a
    # finding is not a failed step.
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "steps.tsv").write_text(
        "build\tpass\t30\t\nkit_cupy\tskipped\t0\tcupy is not installed for /usr/bin/python3\n"
        "kit_torch\tpass\t40\t\n")
    (work / "kit_torch.json").write_text(json.dumps(KIT_TORCH))
    r = subprocess.run([sys.executable, str(SCRIPT), "report", "--work", str(work), "--out",
                        str(out), "--mode", "real", "--elapsed", "100"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(list(out.iterdir())) <= 8
    md = (out / "gpu-check.md").read_text()
    assert "## Conformance kit on CUDA arrays (devbuf.check)" in md
    assert "| torch | producer: `torch.Tensor (cuda)` | 20 | 1 | 13 | `dl.readonly` |" in md
    assert "| torch | consumer: `torch.from_dlpack (dlpack)` | 15 | 0 | 0 | none |" in md
    assert "| cupy | no results (skipped: cupy is not installed for /usr/bin/python3) |" in md
    assert "no step failed" in md
    s = json.loads((out / "gpu-check.json").read_text())
    assert s["conformance_kit"]["cupy"] is None
    assert s["conformance_kit"]["torch"][0][-1] == ["dl.readonly"]
    assert json.loads((out / "conformance_kit.json").read_text())["torch"] == KIT_TORCH


def test_fake_run_reports_the_kit_skipped_with_its_reason(tmp_path):
    # The steps.tsv lines scripts/gpu-check.sh --fake writes for the kit
    # (its skip() format): visible skips in the report, never a pass.
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    r = subprocess.run(["bash", "-c", 'set -u; STEPS="$1"; FAKE=1; PY="$2"; '
                        + SKIP_AND_KIT_LOOP, "sh", str(work / "steps.tsv"), sys.executable],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "report", "--work", str(work), "--out",
                        str(out), "--mode", "fake", "--elapsed", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    md = (out / "gpu-check.md").read_text()
    for lib in ("cupy", "torch"):
        assert f"| kit_{lib} | skipped | 0 | dry run: the fake libcuda is no GPU for {lib}'s " \
            "CUDA arrays" in md, md
        assert f"| {lib} | no results (skipped: dry run: the fake libcuda is no GPU" in md
    assert "| kit_" not in md.split("## Conformance kit")[1]  # (no pass row anywhere)
    assert "pass" not in [s["status"] for s in json.loads(
        (out / "gpu-check.json").read_text())["steps"]]


def _script_part(start, end):
    """Lines of scripts/gpu-check.sh from the one starting with `start` up to
    (not including) the one starting with `end`: the test runs the script's
    own code, not a copy of it."""
    text = (REPO / "scripts" / "gpu-check.sh").read_text().splitlines()
    i = next(n for n, line in enumerate(text) if line.startswith(start))
    j = next(n for n, line in enumerate(text) if n > i and line.startswith(end))
    return "\n".join(text[i:j]) + "\n"


SKIP_AND_KIT_LOOP = (_script_part("say()", "note()") + _script_part("skip()", "}") + "}\n"
                     + _script_part("for lib in cupy torch", "# ---- report"))


def test_kit_step_without_the_library(tmp_path, devbuf_env):
    # The kit subcommand where the library cannot be imported (shadowed):
    # the kit's exit status 2 and its reason, the JSON written, no traceback.
    (tmp_path / "cupy.py").write_text('raise ImportError("No module named \'cupy\'")\n')
    env = dict(devbuf_env, PYTHONPATH=f"{tmp_path}:{devbuf_env['PYTHONPATH']}")
    p = tmp_path / "kit_cupy.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "kit", "cupy", str(p)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "cupy: not installed" in r.stderr
    assert "devbuf.check cupy: skipped: not installed" in r.stdout
    d = json.loads(p.read_text())
    assert d["ok"] is False and d["reports"] == []


TORCH_STANDIN = '''
import numpy as np
__version__ = "0-standin"


class cuda:
    @staticmethod
    def is_available():
        return True


class Tensor(np.ndarray):
    def to(self, device):
        return np.array(self).view(Tensor)

    def cpu(self):
        return np.array(self).view(Tensor)

    def numpy(self):
        return np.asarray(self)


def from_numpy(a):
    return a.view(Tensor)


def as_strided(t, size, stride, storage_offset=0):
    return np.lib.stride_tricks.as_strided(
        t[storage_offset:], tuple(size), tuple(s * t.itemsize for s in stride)).view(Tensor)


from_dlpack = np.from_dlpack
'''


def test_kit_step_that_ran(tmp_path, devbuf_env):
    # A torch stand-in over host memory (NumPy's exports: some rules fail):
    # the step passes, its JSON and summary hold the findings.
    (tmp_path / "torch.py").write_text(TORCH_STANDIN)
    env = dict(devbuf_env, PYTHONPATH=f"{tmp_path}:{devbuf_env['PYTHONPATH']}")
    p = tmp_path / "kit_torch.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "kit", "torch", str(p)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(p.read_text())
    targets = [rep["target"] for rep in d["reports"]]
    assert targets == ["torch.Tensor (cuda)", "torch.from_dlpack (dlpack)"], targets
    assert "torch 0-standin (CUDA device 0" in d["reports"][0]["notes"][0]
    assert "producer: `torch.Tensor (cuda)`: " in r.stdout and " pass, " in r.stdout
    if not d["ok"]:
        assert "; failing: " in r.stdout
