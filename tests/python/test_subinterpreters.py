"""devbuf in subinterpreters: an isolated subinterpreter (its own
GIL, 3.12+) is refused before any of devbuf's init runs, and nothing it did
survives into the interpreters that can use devbuf (legacy subinterpreters,
which share the main GIL, and the main one). On 3.12 a refused first import
used to leave the static types with dicts from the dead interpreter's
allocator: the next import aborted with `double free or corruption`.

Each sequence runs in a fresh process (a crash must fail one test, not the
run), with `_interpreters` (3.13) or `_xxsubinterpreters` (3.9-3.12)."""
import subprocess
import sys
import textwrap

import pytest

HAVE_OWN_GIL = sys.version_info >= (3, 12)

try:
    import _interpreters  # noqa: F401  (3.13+)
    HAVE_SUBINTERPRETERS = True
except ImportError:
    try:
        import _xxsubinterpreters  # noqa: F401  (3.8-3.12)
        HAVE_SUBINTERPRETERS = True
    except ImportError:
        HAVE_SUBINTERPRETERS = False

pytestmark = pytest.mark.skipif(
    not HAVE_SUBINTERPRETERS,
    reason=f"CPython {sys.version.split()[0]} has neither _interpreters nor _xxsubinterpreters")

# Helpers for the child process: create(isolated) and run(interp, code).
PRELUDE = textwrap.dedent('''
    import sys
    try:
        import _interpreters as interps
        def create(isolated):
            return interps.create("isolated" if isolated else "legacy")
        def run(i, code):
            exc = interps.exec(i, code)
            if exc is not None:
                raise RuntimeError(f"in subinterpreter: {exc.type.__name__}: {exc.msg}")
    except ImportError:
        import _xxsubinterpreters as interps
        def create(isolated):
            return interps.create(isolated=True) if isolated else interps.create(isolated=False) \\
                if sys.version_info >= (3, 12) else interps.create()
        def run(i, code):
            interps.run_string(i, code)

    def in_new(isolated, code):
        i = create(isolated)
        try:
            run(i, code)
        finally:
            interps.destroy(i)
        print("ok", "isolated" if isolated else "legacy", flush=True)

    REFUSED = """
    for name in ("devbuf", "devbuf_consumer"):
        try:
            __import__(name)
        except ImportError as e:
            assert "subinterpreters" in str(e), e
        else:
            raise AssertionError(f"an isolated subinterpreter imported {name}")
    """
    # No NumPy here: it does not load in subinterpreters.
    USE = """
    import pickle, devbuf, devbuf_consumer
    b = devbuf.from_host(bytearray(b"abcdefgh"), device="devbuf.sim")
    with devbuf.view(b) as v:
        assert bytes(memoryview(v.to_host())) == b"abcdefgh"
    c = pickle.loads(pickle.dumps(b, protocol=5))
    assert bytes(memoryview(c.to_host())) == b"abcdefgh"
    assert type(devbuf.parse_format("T{i:x:}")) is devbuf.Format
    assert devbuf_consumer.check_supports(b, devbuf.PyBUF_DEVICE | 0x1c)
    assert not devbuf_consumer.check_supports(devbuf_consumer.SimpleOnly(), 0x1c)
    try:
        devbuf.device("no.such.device")
    except devbuf.Error:
        pass
    """
    ''')

MAIN_USES = textwrap.dedent('''
    exec(USE)
    import numpy as np
    a = np.from_dlpack(devbuf.from_host(np.arange(4, dtype=np.int32), device="cpu"))
    assert a.tolist() == [0, 1, 2, 3]
    print("ok main", flush=True)
    ''')

SEQUENCES = {
    # The sequence that crashed: the refused import is the process's first.
    "isolated-first": ["isolated", "legacy", "main", "legacy", "isolated"],
    "main-first": ["main", "isolated", "legacy", "main", "legacy"],
    "legacy-first": ["legacy", "legacy", "main"],
}


def _script(steps):
    body = [PRELUDE]
    for s in steps:
        if s == "main":
            body.append(MAIN_USES)
        elif s == "legacy":
            body.append("in_new(False, USE)\n")
        else:
            body.append("in_new(True, REFUSED)\n")
    body.append("print('done', flush=True)\n")
    return "".join(body)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_subinterpreter_sequence(name, devbuf_env):
    steps = SEQUENCES[name]
    if "isolated" in steps and not HAVE_OWN_GIL:
        pytest.skip(f"CPython {sys.version.split()[0]} has no isolated (own-GIL) subinterpreters")
    pytest.importorskip("devbuf_consumer", reason="test extension not built")
    r = subprocess.run([sys.executable, "-c", _script(steps)], env=devbuf_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), (
        f"sequence {steps} failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}")
    assert r.stdout.split().count("ok") == len(steps)


def test_pyplugin_is_refused_in_a_subinterpreter(devbuf_env):
    # devbuf.plugin's callbacks can only enter the main interpreter: a clear
    # ImportError in any subinterpreter, then devbuf.plugin works in main.
    code = PRELUDE + textwrap.dedent('''
        in_new(False, """
        try:
            import devbuf.plugin
        except ImportError as e:
            assert "subinterpreters" in str(e), e
        else:
            raise AssertionError("devbuf.plugin imported in a subinterpreter")
        """)
        import devbuf.plugin
        print("done", flush=True)
        ''')
    r = subprocess.run([sys.executable, "-c", code], env=devbuf_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), (
        f"exit {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}")
