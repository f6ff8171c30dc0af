"""`devbuf-info` where the README says it is: `python -m devbuf info`, the
venv's `devbuf-info` after scripts/setup.sh, and devbuf._info.executable()
finding the native tool next to the build's libdevbuf. (The wheel's console
script is checked by scripts/test-pip-install.sh.)"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(args, env):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_executable_is_the_tool_next_to_libdevbuf(devbuf_env):
    """The build's build/bin/devbuf-info for a build tree, the package's
    devbuf/bin/devbuf-info for a wheel, <prefix>/bin for a CMake install."""
    import devbuf
    from devbuf import _info
    from devbuf.__main__ import _libdir
    exe = _info.executable()
    assert exe is not None, "devbuf._info.executable() found no devbuf-info"
    pkg = os.path.dirname(os.path.abspath(devbuf.__file__))
    expected = {os.path.realpath(os.path.join(pkg, "bin", "devbuf-info")),
                os.path.realpath(os.path.join(os.path.dirname(_libdir()), "bin", "devbuf-info"))}
    assert os.path.realpath(exe) in expected
    r = run([exe, "--version"], devbuf_env)
    assert r.returncode == 0 and r.stdout.startswith("devbuf-info %s " % devbuf.__version__), r.stdout


def test_python_m_devbuf_info(devbuf_env):
    r = run([sys.executable, "-m", "devbuf", "info", "--version"], devbuf_env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("devbuf-info "), r.stdout
    r = run([sys.executable, "-m", "devbuf", "info", "--json", "format", "<i"], devbuf_env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["format"], got["itemsize"], got["ok"]) == ("<i", 4, True), got


def test_python_m_devbuf_info_lists_devices(devbuf_env):
    r = run([sys.executable, "-m", "devbuf", "info", "--no-probe"], devbuf_env)
    assert "devbuf.sim" in r.stdout, r.stdout + r.stderr


def test_devbuf_config_options_still_work(devbuf_env, devbuf_build):
    r = run([sys.executable, "-m", "devbuf", "--cflags", "--version"], devbuf_env)
    assert r.returncode == 0, r.stderr
    cflags, version = r.stdout.split()
    assert cflags.startswith("-I") and os.path.isfile(os.path.join(cflags[2:], "devbuf_capi.h"))
    r = run([sys.executable, "-m", "devbuf", "--no-such-option"], devbuf_env)
    assert r.returncode == 2 and "devbuf-config" in r.stderr


def test_missing_tool_is_named(monkeypatch, capsys):
    from devbuf import _info
    monkeypatch.setattr(_info, "executable", lambda: None)
    assert _info.main(["--version"]) == 4
    assert "native tool is not installed" in capsys.readouterr().err


@pytest.mark.skipif(os.path.realpath(sys.prefix) != os.path.realpath(REPO / ".venv"),
                    reason="only the checkout's own .venv gets devbuf-info from scripts/setup.sh")
def test_venv_devbuf_info_after_setup():
    exe = REPO / ".venv" / "bin" / "devbuf-info"
    assert exe.is_file(), "scripts/setup.sh did not write .venv/bin/devbuf-info"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEVBUF_BUILD_DIR")}
    r = run([str(exe), "--version"], env)     # as a user runs it: no PYTHONPATH
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("devbuf-info "), r.stdout
