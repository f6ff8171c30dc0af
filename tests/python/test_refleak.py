"""scripts/refleak.py, the reference-leak hunt of the debug-interpreter stage,
can fail: leaks planted in throw-away test modules are reported (by module
and by test), a clean module and the harness itself are not, and a module
whose tests cannot run twice fails the hunt too.

On a release interpreter the hunt counts the reference counts held on live
objects, allocated blocks and file descriptors; on a debug one
(python3.14-dbg in scripts/python-sid.sh) also sys.gettotalrefcount(), which
this test then checks as well."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

# Each test runs scripts/refleak.py in a child process.
pytestmark = pytest.mark.child_process(reason="each test runs scripts/refleak.py in a child process")

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "refleak.py"
DEBUG = hasattr(sys, "gettotalrefcount")

MODULES = {
    "test_clean.py": """
        import warnings

        def test_warns_each_run():
            # pytest records every DeprecationWarning of a test: not a leak of its.
            warnings.warn("a warning in every run", DeprecationWarning)

        def test_allocates_and_frees():
            x = [object() for _ in range(100)]
            d = {i: str(i) for i in range(100)}
            del x, d

        def test_nothing():
            pass
    """,
    "test_leaks_objects.py": """
        _kept = []

        def test_keeps_one_more_each_run():
            _kept.append(object())

        def test_clean_neighbour():
            pass
    """,
    "test_leaks_c_reference.py": """
        import ctypes

        def test_increfs_without_decref():
            # A C-level Py_IncRef with no matching decref: never freed.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(bytearray(64)))
    """,
    "test_leaks_held_reference.py": """
        import ctypes

        _kept = bytearray(64)

        def test_increfs_a_global_without_decref():
            # A reference leaked to an object that lives on anyway: nothing
            # is allocated (blocks stay flat); its count grows.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(_kept))
    """,
    "test_leaks_fd.py": """
        import os

        def test_opens_without_closing():
            os.open(os.devnull, os.O_RDONLY)
    """,
    "test_not_repeatable.py": """
        _seen = []

        def test_runs_once_only():
            assert not _seen
            _seen.append(1)
    """,
}


def hunt(tmp_path, names, *args):
    for n in names:
        (tmp_path / n).write_text(textwrap.dedent(MODULES[n]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    p = subprocess.run([sys.executable, str(SCRIPT), *args, *(str(tmp_path / n) for n in names)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok ", "LEAK ", "UNMEASURED ", "  leaking test"))]
    verdict = [ln for ln in p.stdout.splitlines() if ln.startswith("refleak: ")]
    assert verdict, p.stdout + p.stderr
    return p.returncode, lines, verdict[-1], p.stdout


def line(lines, module):
    got = [ln for ln in lines if not ln.startswith(" ") and ln.split()[1].rstrip(":").endswith(module)]
    assert len(got) == 1, lines
    return got[0]


def test_planted_leaks_are_reported(tmp_path):
    rc, lines, verdict, out = hunt(tmp_path, list(MODULES))
    assert rc == 1, out
    assert line(lines, "test_clean.py").startswith("ok "), out
    assert line(lines, "test_leaks_objects.py").startswith("LEAK "), out
    assert "blocks" in line(lines, "test_leaks_objects.py").split("]")[0], out
    assert line(lines, "test_leaks_c_reference.py").startswith("LEAK "), out
    assert line(lines, "test_leaks_fd.py").startswith("LEAK ") and "[fds]" in line(lines, "test_leaks_fd.py"), out
    assert line(lines, "test_not_repeatable.py").startswith("UNMEASURED "), out
    # The leaking test is named, its clean neighbour is not.
    named = [ln.split()[2].rstrip(":") for ln in lines if ln.startswith("  leaking test")]
    assert any(n.endswith("::test_keeps_one_more_each_run") for n in named), out
    assert not any(n.endswith("::test_clean_neighbour") for n in named), out
    held = line(lines, "test_leaks_held_reference.py")
    assert held.startswith("LEAK ") and "[held]" in held and "blocks +0 +0 +0" in held, out
    assert verdict.startswith("refleak: 6 modules, 4 leaking, 1 unmeasured"), verdict


def test_a_clean_module_passes(tmp_path):
    rc, lines, verdict, out = hunt(tmp_path, ["test_clean.py"])
    assert rc == 0, out
    assert verdict.startswith("refleak: 1 modules, 0 leaking, 0 unmeasured"), out
    # The harness alone (the baseline: the same runs with empty bodies) is flat.
    assert "(baseline +0 +0 +0)" in line(lines, "test_clean.py"), out


@pytest.mark.skipif(not DEBUG, reason="sys.gettotalrefcount exists on a debug interpreter only")
def test_planted_reference_leak_counted_in_references(tmp_path):
    rc, lines, verdict, out = hunt(tmp_path, ["test_clean.py", "test_leaks_c_reference.py"],
                                   "--gauges=references,blocks,fds")
    assert rc == 1, out
    assert "references" in line(lines, "test_leaks_c_reference.py").split("]")[0], out
    assert line(lines, "test_clean.py").startswith("ok "), out
    assert verdict.startswith("refleak: 2 modules, 1 leaking, 0 unmeasured"), out


@pytest.mark.skipif(not DEBUG, reason="sys.gettotalrefcount exists on a debug interpreter only")
def test_references_gated_in_the_named_modules_only(tmp_path):
    # The leak of test_leaks_c_reference.py frees nothing and allocates, so
    # blocks and held see it anyway: gate nothing else, to see references.
    rc, lines, verdict, out = hunt(tmp_path, ["test_leaks_c_reference.py"], "--gauges=fds",
                                   "--references=test_leaks_c_reference.py")
    assert rc == 1 and "[references]" in line(lines, "test_leaks_c_reference.py"), out
    rc, lines, verdict, out = hunt(tmp_path, ["test_leaks_c_reference.py"], "--gauges=fds",
                                   "--references=")
    assert rc == 0 and "not gated: references" in line(lines, "test_leaks_c_reference.py"), out
