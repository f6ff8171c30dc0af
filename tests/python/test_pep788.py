"""Exports given back from a C thread during and after interpreter finalization.

devbuf's DLPack deleters and Arrow release callbacks may be called by any
thread of the process at any time: a consumer's worker thread can drop its
last tensor while the main thread is already finalizing, or after Python is
gone. devbuf enters Python there through one helper (bindings/python/src/base/
dbp_enter.h): on CPython 3.15 and later with PEP 788's PyInterpreterView and
PyThreadState_EnsureFromView, which refuse atomically once the interpreter
finalizes; before 3.15 with PyGILState_Ensure behind a Py_IsFinalizing /
Py_IsInitialized check. Refused, a deleter touches nothing of Python and
leaks the export.

The test extension devbuf_late_deleter (consumer_ext/late_deleter.c) runs the
threads and reports each outcome on stderr; the script below runs in a
subprocess with a timeout, so that a hang fails the test instead of the suite.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys
import sysconfig

import pytest

pytest.importorskip("numpy")
pytest.importorskip("devbuf_late_deleter", reason="test extension not built")

pytestmark = pytest.mark.thread_unsafe(reason="one subprocess per test; nothing shared to race on")

CHILD = r"""
import sys
import numpy as np
import devbuf
import devbuf._devbuf as C
import devbuf_late_deleter as L

L.set_refused_counter(C._dlpack_deleters_refused)
# A dtype namespace whose interpreter is Python: devbuf's C trampoline.
devbuf.register_dtype_namespace("late_ns", lambda payload: None)
# A device plugin written in Python (libffi closures), kept registered past
# exit by memory still allocated through it.
import devbuf.plugin
sys.path.insert(0, sys.argv[3])
from python_plugin_mmap import MmapDevice
devbuf.plugin.register_plugin(MmapDevice(identifiers=("test.late",)))
keep = [devbuf.from_host(b"kept", device="test.late")]
for when in sys.argv[1].split(","):
    b = devbuf.from_host(np.arange(6.0))
    L.take_dlpack(b.__dlpack__(max_version=(1, 0)), when)  # "dltensor_versioned"
    L.take_dlpack(b.__dlpack__(), when)                      # legacy "dltensor"
    L.take_arrow(b.__arrow_c_array__()[1], when)
    keep.append(b)  # module teardown frees it, while the exports are still out
    L.interpret("late_ns", when)
    L.sync_device("test.late:0", when)
if sys.argv[2]:
    L.raw_gilstate(sys.argv[2])
L.arm()
print("child: main exits", flush=True)
"""

LINE = re.compile(r"^late: (\w+) (during|after): (returned .*|ended|still blocked.*)$")


EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples"


def run_child(devbuf_env, when, raw="", timeout=60):
    # The child waits up to 5 s per stage for its threads, longer on a loaded
    # machine (DEVBUF_TEST_TIME_SCALE, which scripts/run-parallel.sh sets).
    timeout *= float(os.environ.get("DEVBUF_TEST_TIME_SCALE", "1"))
    args = (when, raw, str(EXAMPLES))
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, *args], env=devbuf_env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child hung for {timeout} s (args {args}); stderr so far:\n{e.stderr}")
    out = {}
    for line in p.stderr.splitlines():
        m = LINE.match(line)
        if m:
            out[(m.group(1), m.group(2))] = m.group(3)
    return p, out


def refused(outcome):
    m = re.match(r"returned refused=(\d+)$", outcome or "")
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("when", ["during", "after"])
def test_deleters_from_a_c_thread_while_finalizing(devbuf_env, when):
    p, out = run_child(devbuf_env, when)
    where = f"(exit {p.returncode}; stderr:\n{p.stderr})"
    # No crash, no hang: the interpreter finalizes and the process exits 0.
    assert p.returncode == 0, where
    assert "child: main exits" in p.stdout, where
    if when == "during":
        # The thread ran while the main thread was finalizing, and the main
        # thread (holding the GIL) waited for it.
        assert "late: waiter: finalizing" in p.stderr, where
    for what in ("dlpack_versioned", "dlpack", "arrow"):
        assert (what, when) in out, f"no report from the {what} thread {where}"
        # Every call came back, on every version: refused, not blocked on the
        # GIL that the finalizing thread holds, nor ended inside it.
        assert out[(what, when)].startswith("returned"), f"{what} {when}: {out[(what, when)]} {where}"
    # Both DLPack deleters took the error path (counted by devbuf): by the
    # time both returned, the count is 2.
    counts = [refused(out[(k, when)]) for k in ("dlpack_versioned", "dlpack")]
    assert max(counts) == 2, f"refused counts {counts} {where}"
    # The dtype trampoline answered with an error instead of entering Python.
    answer = out.get(("interpret", when), "")
    assert answer.startswith("returned status=") and "status=0 " not in answer, where
    assert "late_ns': its Python interpreter is finalizing or gone" in answer, where
    # So did the Python plugin's libffi closure (stream_synchronize).
    answer = out.get(("sync", when), "")
    assert answer.startswith("returned status=") and "status=0 " not in answer, where
    assert "stream_synchronize" in answer and "interpreter is finalizing" in answer, where


def test_pyGILState_Ensure_itself_while_finalizing(devbuf_env):
    """What a C thread meets without devbuf's helper: PyGILState_Ensure
    called from a thread Python has never seen while the main thread
    finalizes (holding the GIL). CPython 3.9-3.13 end the thread inside the
    call (PyThread_exit_thread: it never returns to its caller, whose C
    locks stay held); 3.14 and later leave it blocked there for good, and
    free-threaded 3.13 does either, from run to run.
    Exit does not wait for that thread, but on 3.14 CPython's own teardown
    may then trip over the thread state the blocked call made: a fatal
    error in gilstate_tss_set (release build) or an assertion in
    Python/pystate.c (debug build: unbind_gilstate_tstate,
    PyThreadState_Clear), some runs and not others. This is
    the case PEP 788 exists for, and why devbuf's deleters do not call
    PyGILState_Ensure once finalization has begun."""
    p, out = run_child(devbuf_env, "during", "during")
    where = f"(exit {p.returncode}; stderr:\n{p.stderr})"
    raw = out.get(("raw_gilstate", "during"))
    if sys.version_info < (3, 14) and not sysconfig.get_config_var("Py_GIL_DISABLED"):
        assert p.returncode == 0, where
        assert raw == "ended", where
    elif sys.version_info < (3, 14):
        # Free-threaded 3.13: either, from run to run. Alone the thread is
        # usually ended; with other processes busy it was left blocked (for 20 s
        # and more, so not merely slow), which is what 3.14 always does.
        assert p.returncode == 0, where
        assert raw is not None and (raw == "ended" or raw.startswith("still blocked")), where
    else:
        assert raw is not None and raw.startswith("still blocked"), where
        if p.returncode != 0:
            # Only CPython's own abort over that thread state, after the
            # main thread was done: nothing else may end the process.
            assert p.returncode == -signal.SIGABRT, where
            assert re.search(r"Fatal Python error: gilstate_tss_set|pystate\.c:\d+: \w+: Assertion", p.stderr), where
            assert "child: main exits" in p.stdout, where
    # devbuf's own deleters, in the same process, were refused cleanly.
    assert refused(out.get(("dlpack", "during"))) is not None, where
