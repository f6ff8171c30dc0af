"""Shared pytest set-up for tests/python: find the build, nothing more.

The build directory is $DEVBUF_BUILD_DIR, else <repo>/build. Its python/
folder (the devbuf package, laid out by bindings/python/CMakeLists.txt) and
python_tests/ folder (test-only extensions from tests/python/CMakeLists.txt)
go on sys.path, so both of these work:

    DEVBUF_BUILD_DIR=$PWD/build python -m pytest tests/python
    DEVBUF_BUILD_DIR=$PWD/build PYTHONPATH=$PWD/build/python python -m pytest tests/python

Fixtures for everyone: `devbuf_build` (the Path), `devbuf_env` (an os.environ
copy that makes a subprocess see the same build), `sim` (the devbuf.sim:0
Device, or a skip saying why there is none).
"""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DEVBUF_BUILD_DIR", REPO / "build")).resolve()

for _p in (BUILD / "python", BUILD / "python_tests"):
    if _p.is_dir() and str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def pytest_configure(config):
    # pytest-run-parallel's marker (scripts/run-parallel.sh), known without it too.
    config.addinivalue_line(
        "markers", "thread_unsafe(reason=None): run in one thread only under pytest-run-parallel")
    config.addinivalue_line(
        "markers", "child_process(reason): the test's work runs in a child process; under "
        "pytest-run-parallel it runs in one thread")
    # scripts/refleak.py's marker (the leak hunt of the debug-interpreter stage).
    config.addinivalue_line(
        "markers", "refleak_unrepeated(reason): the leak hunt does not repeat this test: its growth "
        "is a library's own, not devbuf's")
    if not (BUILD / "python" / "devbuf").is_dir():
        raise pytest.UsageError(
            f"no devbuf package under {BUILD}/python: build with -DDEVBUF_BUILD_PYTHON=ON "
            f"(cmake -S . -B build -DPython3_EXECUTABLE={sys.executable} && cmake --build build) "
            "or point DEVBUF_BUILD_DIR at your build directory")


def in_child_process(item):
    """A test whose work runs in a child process: it asks for `devbuf_env`
    (the environment of a child that imports this build) or is marked
    child_process. Under pytest-run-parallel it runs in one thread: four
    threads would run four children, none of devbuf's code in threads of one
    process (scripts/run_parallel_count.py counts these apart)."""
    return "devbuf_env" in getattr(item, "fixturenames", ()) or \
        item.get_closest_marker("child_process") is not None


def pytest_collection_modifyitems(config, items):
    if config.pluginmanager.get_plugin("_run-parallel") is None:
        return
    for item in items:
        if in_child_process(item) and item.get_closest_marker("thread_unsafe") is None:
            # The marker, also where devbuf_env said it: what the count reads.
            if item.get_closest_marker("child_process") is None:
                item.add_marker(pytest.mark.child_process(reason="asks for devbuf_env"))
            item.add_marker(pytest.mark.parallel_threads(1))


@pytest.fixture(scope="session")
def devbuf_build():
    return BUILD


@pytest.fixture(scope="session")
def devbuf_env():
    """Environment for a subprocess that must import the same devbuf."""
    env = dict(os.environ)
    paths = [str(BUILD / "python"), str(BUILD / "python_tests")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["DEVBUF_BUILD_DIR"] = str(BUILD)
    return env


@pytest.fixture(scope="session")
def sim():
    import devbuf
    try:
        return devbuf.device("devbuf.sim:0")
    except devbuf.Error as e:  # plugin missing or configured without devices
        pytest.skip(f"devbuf.sim is not available: {e}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # test_buffer_differential.py counts its comparisons here, so that every
    # run's log says how much of CPython's buffer rules it held devbuf to.
    cases = getattr(config, "devbuf_differential_cases", None)
    if cases:
        detail = ", ".join(f"{k} {v}" for k, v in cases.items())
        terminalreporter.write_line(
            f"buffer differential stage: {sum(cases.values())} cases vs memoryview/_testbuffer "
            f"({detail})")
