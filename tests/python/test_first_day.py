"""A plugin author's and a dtype owner's first day: devbuf.*
identifiers stay devbuf's, shutdown is seen at exit, dtype-only plugins, and
messages that say what to do. Each case runs in a fresh interpreter, since
plugin discovery happens once per process."""
import shutil
import subprocess
import sys
import textwrap

import pytest


def run_py(env, code, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_third_party_devbuf_sim_never_displaces_devbufs_own(devbuf_env, devbuf_build, tmp_path):
    """A copy of the sim plugin outside devbuf's directory, first on
    DEVBUF_PLUGINS, claims devbuf.sim: devbuf's own keeps it, and the loser's
    record names both files."""
    own = devbuf_build / "lib" / "devbuf" / "plugins" / "devbuf_plugin_sim.so"
    if not own.exists():
        pytest.skip("no sim plugin in this build")
    impostor = tmp_path / "devbuf_plugin_sim.so"
    shutil.copy(own, impostor)
    env = dict(devbuf_env, DEVBUF_PLUGINS=str(impostor))
    env.pop("DEVBUF_NO_DEFAULT_PLUGINS", None)
    r = run_py(env, f"""
        import devbuf
        ps = devbuf.plugins()
        mine = [p for p in ps if p.path == {str(impostor)!r}]
        owner = [p for p in ps if "devbuf.sim" in p.identifiers]
        assert len(owner) == 1 and owner[0].path == {str(own.resolve())!r}, owner
        assert len(mine) == 1 and mine[0].state == "failed", mine
        print(mine[0].reason)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    reason = r.stdout
    assert str(impostor) in reason and str(own.resolve()) in reason, reason
    assert "identifier 'devbuf.sim' is already implemented by plugin 'sim'" in reason
    assert "devbuf.* identifiers belong to devbuf's own plugins" in reason


def test_a_stand_in_for_an_absent_devbuf_plugin_is_noted(devbuf_env, devbuf_build, tmp_path):
    """Without devbuf's own plugins, the same file serves devbuf.sim, and its
    record says so rather than passing silently."""
    own = devbuf_build / "lib" / "devbuf" / "plugins" / "devbuf_plugin_sim.so"
    if not own.exists():
        pytest.skip("no sim plugin in this build")
    standin = tmp_path / "devbuf_plugin_sim.so"
    shutil.copy(own, standin)
    env = dict(devbuf_env, DEVBUF_PLUGINS=str(standin), DEVBUF_NO_DEFAULT_PLUGINS="1")
    r = run_py(env, """
        import devbuf
        [p] = [p for p in devbuf.plugins() if "devbuf.sim" in p.identifiers]
        print(p.state, p.reason)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("loaded ")
    assert "serves 'devbuf.sim', an identifier reserved for devbuf's own plugins" in r.stdout


@pytest.mark.parametrize("how", ["return", "sys.exit", "exception"])
def test_shutdown_is_seen_when_python_exits(devbuf_env, devbuf_build, tmp_path, how):
    """A C plugin's shutdown runs once when the interpreter exits, however it
    exits, in reverse load order, with a buffer still alive at exit."""
    exit_dir = devbuf_build / "tests" / "core" / "exit"
    a, b = exit_dir / "devbuf_plugin_exit_a.so", exit_dir / "devbuf_plugin_exit_b.so"
    if not (a.exists() and b.exists()):
        pytest.skip("exit trace plugins not built (tests/core)")
    log = tmp_path / "trace"
    env = dict(devbuf_env, DEVBUF_PLUGINS=f"{a}:{b}", DEVBUF_NO_DEFAULT_PLUGINS="1",
               DEVBUF_TEST_EXIT_LOG=str(log))
    end = {"return": "", "sys.exit": "sys.exit(0)", "exception": "raise SystemExit(3)"}[how]
    r = run_py(env, f"""
        import sys
        import numpy as np
        import devbuf
        keep = devbuf.from_host(np.arange(8.0), device="test.exit_a")
        assert bytes(memoryview(keep.to_host())) == np.arange(8.0).tobytes()
        devbuf.from_host(np.arange(4.0), device="test.exit_b")
        {end}
    """)
    assert r.returncode == (3 if how == "exception" else 0), r.stdout + r.stderr
    assert log.read_text().splitlines() == ["init a", "init b", "shutdown b", "shutdown a"], \
        log.read_text() + r.stderr


def test_a_dtype_only_plugin_is_loaded_and_listed(devbuf_env, devbuf_build):
    """A plugin with no device identifier that only provides the 'mypkg'
    namespace loads in every process, devbuf-info lists the namespace with
    the plugin's file, and an unknown id says how a namespace is provided."""
    so = devbuf_build / "tests" / "core" / "dtype_only" / "devbuf_plugin_mypkg_dtypes.so"
    if not so.exists():
        pytest.skip("dtype-only test plugin not built (tests/core)")
    env = dict(devbuf_env, DEVBUF_PLUGINS=str(so))
    r = run_py(env, """
        import devbuf
        [p] = [p for p in devbuf.plugins() if p.name == "mypkg_dtypes"]
        assert p.state == "loaded" and p.identifiers == (), p
        [ns] = [n for n in devbuf.dtype_namespaces() if n["id"] == "mypkg"]
        assert ns["source"] == "mypkg_dtypes", ns
        f = devbuf.parse_format("(4)[mypkg$int4x2]")
        assert f.itemsize == 4, f
        try:
            devbuf.parse_format("[otherpkg$x]")
        except devbuf.FormatError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "'otherpkg' is not a known dtype id" in r.stdout
    assert "devbuf.register_dtype_namespace() in Python" in r.stdout
    assert "plugin's dtype_namespaces" in r.stdout

    import json
    info = devbuf_build / "bin" / "devbuf-info"
    out = subprocess.run([str(info), "--json"], env=env, capture_output=True, text=True, timeout=60)
    doc = json.loads(out.stdout)
    [ns] = [n for n in doc["dtype_namespaces"] if n["id"] == "mypkg"]
    assert ns["source"] == "mypkg_dtypes" and ns["file"] == str(so.resolve()), ns
    text = subprocess.run([str(info)], env=env, capture_output=True, text=True, timeout=60).stdout
    # (a long path may wrap: check the label and the file name)
    assert "    file: " in text and "devbuf_plugin_mypkg_dtypes.so" in text.split("Dtype namespaces")[1]


def test_unknown_identifier_names_the_plugin_that_failed(devbuf_env, devbuf_build):
    """Using an identifier whose plugin failed to load gives the loader's
    reason in the exception, not only 'no plugin implements ...'."""
    so = devbuf_build / "tests" / "broken_plugins" / "devbuf_plugin_init_fail.so"
    if not so.exists():
        pytest.skip("broken plugin corpus not built")
    env = dict(devbuf_env, DEVBUF_PLUGINS=str(so), DEVBUF_NO_DEFAULT_PLUGINS="1")
    r = run_py(env, """
        import numpy as np
        import devbuf
        try:
            devbuf.from_host(np.zeros(2), device="test.kind15")
        except devbuf.Error as e:
            print(type(e).__name__, e)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no plugin implements device identifier 'test.kind15'" in r.stdout, r.stdout
    assert "1 plugin failed to load" in r.stdout and str(so) in r.stdout, r.stdout
    assert "init failed" in r.stdout, r.stdout


def test_the_dask_snippet_runs_as_a_script(devbuf_env, tmp_path):
    """docs/pickle-and-distributed.md's dask example, pasted into a script."""
    pytest.importorskip("distributed")
    import pathlib
    import re
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "pickle-and-distributed.md").read_text()
    [code] = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "LocalCluster" in b]
    script = tmp_path / "snippet.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], env=devbuf_env, capture_output=True,
                       text=True, timeout=240, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("523776.0"), r.stdout + r.stderr[-3000:]
