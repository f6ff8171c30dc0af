"""Plugins shipped as Python packages: the "devbuf.plugins"
entry-point group, read by `import devbuf` under the rules of DEVBUF_PLUGINS,
the runtime's devbuf_plugin_load_from (a source label that cannot claim
devbuf's own privileges), and devbuf-info's --plugin-from.

A fake installed distribution (a *.dist-info folder with entry_points.txt)
on PYTHONPATH stands for a plugin wheel; the real wheel round trip
(docs/examples/plugin-hostmem) is in scripts/test-pip-install.sh.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import devbuf
from devbuf import _devbuf, _plugins


@pytest.fixture(scope="module")
def good_so(devbuf_build):
    p = devbuf_build / "tests" / "broken_plugins" / "devbuf_plugin_good.so"
    if not p.is_file():
        pytest.skip(f"{p} not built (tests/broken)")
    return p


def _fake_dist(root: pathlib.Path, entries: dict, module_src: str, name="fakeplug", version="1.2"):
    site = root / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(module_src)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = ["[devbuf.plugins]"] + [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


PROBE = r"""
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as w:
    import devbuf
out = {
    "plugins": [(p.name, p.source, p.state) for p in devbuf.plugins() if p.name == "broken17"],
    "eps": [(e.name, e.distribution, e.path, e.source, e.error) for e in devbuf.entry_point_plugins()],
    "warnings": [str(x.message) for x in w],
}
print(json.dumps(out))
"""


def _probe(devbuf_env, site, **extra):
    env = dict(devbuf_env)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    env.pop("DEVBUF_NO_PLUGIN_ENTRY_POINTS", None)
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_entry_point_plugin_is_loaded_with_its_origin(devbuf_env, tmp_path, good_so):
    site = _fake_dist(tmp_path, {"good": "fakeplug:PATH"}, f"PATH = {str(good_so)!r}\n")
    out = _probe(devbuf_env, site)
    assert out["plugins"] == [["broken17", "entry point fakeplug 1.2", "loaded"]]
    assert out["eps"] == [["good", "fakeplug", str(good_so), "entry point fakeplug 1.2", ""]]
    assert out["warnings"] == []


def test_callable_entry_point_and_bad_ones_warn_without_breaking_import(devbuf_env, tmp_path, good_so):
    src = (f"def path():\n    return {str(good_so)!r}\n"
           "def rel():\n    return 'plugins/devbuf_plugin_x.so'\n"
           "def boom():\n    raise RuntimeError('no plugin here')\n")
    site = _fake_dist(tmp_path, {"a_good": "fakeplug:path", "b_rel": "fakeplug:rel",
                                 "c_boom": "fakeplug:boom", "d_missing": "fakeplug.nosuch:x"}, src)
    out = _probe(devbuf_env, site)
    assert out["plugins"] == [["broken17", "entry point fakeplug 1.2", "loaded"]]
    errors = {name: err for name, _, _, _, err in out["eps"]}
    assert errors["a_good"] == ""
    assert "relative path: refused" in errors["b_rel"] and "absolute path" in errors["b_rel"]
    assert "RuntimeError: no plugin here" in errors["c_boom"]
    assert "ModuleNotFoundError" in errors["d_missing"]
    assert len(out["warnings"]) == 3
    assert all("devbuf.plugins" in w and "fakeplug" in w for w in out["warnings"])


def test_a_failing_plugin_file_is_recorded_by_the_runtime(devbuf_env, tmp_path):
    site = _fake_dist(tmp_path, {"gone": "fakeplug:PATH"}, "PATH = '/nonexistent/devbuf_plugin_gone.so'\n")
    out = _probe(devbuf_env, site)
    (name, _, path, source, error), = out["eps"]
    assert path == "/nonexistent/devbuf_plugin_gone.so" and "dlopen" in error
    assert any("not loaded" in w for w in out["warnings"])


def test_switched_off_by_environment(devbuf_env, tmp_path, good_so):
    site = _fake_dist(tmp_path, {"good": "fakeplug:PATH"}, f"PATH = {str(good_so)!r}\n")
    out = _probe(devbuf_env, site, DEVBUF_NO_PLUGIN_ENTRY_POINTS="1")
    assert out["plugins"] == [] and out["eps"] == []
    out = _probe(devbuf_env, site, DEVBUF_NO_PLUGIN_ENTRY_POINTS="0")
    assert out["plugins"] == [["broken17", "entry point fakeplug 1.2", "loaded"]]


def test_secure_execution_reads_no_entry_point(monkeypatch):
    # As DEVBUF_PLUGINS: in a setuid/setgid process nothing is loaded from
    # sys.path's packages (tests/core/secure_setuid.sh covers the C side).
    monkeypatch.setattr(_devbuf, "_secure_execution", lambda: True)
    monkeypatch.setattr(_plugins, "_group", lambda g: pytest.fail("entry points read in secure mode"))
    assert _plugins.discover_entry_points(load=False) == []


@pytest.mark.parametrize("label", ["install", "build tree", "DEVBUF_PLUGINS", "DEVBUF_PLUGIN_PATH",
                                   "registered", "explicit", "", "tab\there", "x" * 201])
def test_load_from_refuses_the_runtimes_own_labels(label, good_so):
    with pytest.raises(devbuf.Error) as e:
        _devbuf._load_plugin(str(good_so), label)
    assert "devbuf_plugin_load_from" in str(e.value)
    assert not any(p.path == str(good_so) and p.source == label for p in devbuf.plugins())


def test_devbuf_info_plugin_from(devbuf_build, good_so):
    exe = devbuf_build / "bin" / "devbuf-info"
    env = dict(os.environ, DEVBUF_NO_DEFAULT_PLUGINS="1")
    label = "entry point fakeplug 1.2"
    r = subprocess.run([str(exe), "--no-probe", f"--plugin-from={label}={good_so}"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"+  {label}" in r.stdout and f"source: {label}" in r.stdout, r.stdout
    r = subprocess.run([str(exe), "--no-probe", "--json", f"--plugin-from={label}={good_so}"],
                       env=env, capture_output=True, text=True, timeout=60)
    rec = [p for p in json.loads(r.stdout)["plugins"] if p["name"] == "broken17"]
    assert rec and rec[0]["source"] == label, r.stdout
    r = subprocess.run([str(exe), "--plugin-from", "no-equals-sign"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "LABEL=PATH" in r.stderr
