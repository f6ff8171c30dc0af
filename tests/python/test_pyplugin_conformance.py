"""The plugin conformance suite against Python plugins.

devbuf.plugin.run_conformance runs tests/conformance/conformance.c compiled
into devbuf._pyplugin (its main renamed), inside this process, where Python
plugins exist. The first tests show it is the same suite as the
devbuf_conformance executable; the rest run it against Python plugins."""
import os
import subprocess

import pytest

import devbuf
import devbuf.plugin as P
from pyplugin_helpers import BUILD, MmapDevice, Runtime, fresh_id

EXE = BUILD / "bin" / "devbuf_conformance"
# The forked run's per-check deadline: long enough for a good check on a busy
# machine (scripts/run-parallel.sh sets DEVBUF_TEST_TIME_SCALE to its thread
# count), short enough that the hanging plugin below costs seconds.
CHECK_TIMEOUT = 2 * float(os.environ.get("DEVBUF_TEST_TIME_SCALE", "1"))


def _exe(*args):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def check_names():
    rc, out = P._pyplugin.run_conformance(["--list"])
    names = out.split()
    assert rc == 0 and len(names) >= 18 and "threads" in names and "no_leaks" in names
    return names


def test_in_process_runner_is_the_executable_suite(check_names):
    """Same checks, same verdicts, on the C cpu plugin, both ways."""
    if not EXE.exists():
        pytest.skip(f"{EXE} not built (testing an installed devbuf?)")
    assert _exe("--list").stdout.split() == check_names
    inproc = P.run_conformance("cpu")
    exe = _exe("cpu")
    assert inproc.returncode == exe.returncode == 0, inproc.output
    assert list(inproc.results) == check_names
    verdicts = {k: v[0] for k, v in inproc.results.items()}
    assert verdicts == {k: v[0] for k, v in P.ConformanceResult(0, exe.stdout).results.items()}
    # Runs repeat cleanly (the suite keeps its context in statics).
    again = P.run_conformance("cpu", ["copy_roundtrip"])
    assert again.passed and again.results["copy_roundtrip"][0] == "PASS"
    assert again.results["threads"] == ("SKIP", "not selected")


def test_mmap_example_passes_every_check(check_names):
    ident = fresh_id("example.mmap")
    with P.register_plugin(MmapDevice(identifiers=(ident,), name=ident.replace(".", "_"))) as reg:
        r = P.run_conformance(ident)
        assert r.passed, r.output
        assert list(r.results) == check_names
        assert all(v == "PASS" for v, _ in r.results.values()), r.output
        assert "4 threads x 25 iterations" in r.results["threads"][1]
        # The second device too.
        assert P.run_conformance(f"{ident}:1").passed
        assert reg.table.inflight == 0
    assert not reg.registered


def test_devbuf_layout_checks_run_on_the_python_importer(check_names):
    """Under a devbuf.* identifier the suite also mutates the devbuf_device_info
    layout and requires the (Python) importer to refuse each corruption."""
    ident = fresh_id("devbuf.pytest_mmap")
    with P.register_plugin(MmapDevice(identifiers=(ident,), name=ident.replace(".", "_"))):
        r = P.run_conformance(ident, ["device_info_roundtrip", "device_info_invalid"])
        assert r.passed, r.output
        assert r.results["device_info_invalid"] == ("PASS", "12 corruptions refused")


class _WrongCopies(MmapDevice):
    """copy_d2h forgets the offset: the suite must notice."""

    def copy_d2h(self, device, dst, src, src_offset, stream):
        super().copy_d2h(device, dst, src, 0, stream)


class _LeakyFree(MmapDevice):
    """mem_free refuses (while `refuse` is set): allocations stay alive."""

    refuse = True

    def mem_free(self, device, ptr, stream):
        if self.refuse:
            raise P.CallbackError("refusing to free", status=P.EBACKEND)
        super().mem_free(device, ptr, stream)


@pytest.mark.parametrize("cls, failing", [
    (_WrongCopies, {"copy_offsets"}),
    (_LeakyFree, {"alloc_free", "no_leaks"}),
])
def test_the_suite_catches_broken_python_plugins(check_names, cls, failing):
    ident = fresh_id("test.broken")
    plugin = cls(identifiers=(ident,), name=ident.replace(".", "_"))
    reg = P.register_plugin(plugin)
    r = P.run_conformance(ident)
    assert not r.passed
    failed = {k for k, (v, _) in r.results.items() if v == "FAIL"}
    assert failing <= failed, r.output
    if cls is _LeakyFree:
        assert "refusing to free" in r.output
        # What it would not free is still counted: unregistering is refused...
        with pytest.raises(devbuf.PluginError, match="allocation"):
            reg.unregister()
        assert reg.registered
        # ... until it is freed for real.
        plugin.refuse = False
        rt = Runtime(ident)
        for (addr, m) in list(plugin._maps.items()):
            rt.free(addr)
    reg.unregister()


# ---- isolation --------------------------------------------------------------------------------

class _AbortingCopy(MmapDevice):
    """copy_h2d kills the process, as an unwinding panic across a C boundary does."""

    def copy_h2d(self, device, dst, dst_offset, src, stream):
        import os
        os.abort()


class _HangingSync(MmapDevice):
    """event_synchronize waits for an event nothing will complete."""

    def event_synchronize(self, device, event):
        import time
        while True:
            time.sleep(3600)


@pytest.mark.thread_unsafe(reason="forks this process for each check: a fork while other "
                                   "threads run Python may deadlock the child")
def test_isolated_run_of_a_good_python_plugin_passes(check_names):
    """isolate=True: the same verdicts, each check in a forked copy of this process."""
    ident = fresh_id("example.mmapiso")
    with P.register_plugin(MmapDevice(identifiers=(ident,), name=ident.replace(".", "_"))):
        r = P.run_conformance(ident, isolate=True)
        assert r.passed, r.output
        assert list(r.results) == check_names
        assert all(v == "PASS" for v, _ in r.results.values()), r.output
        assert "(in this process)" not in r.output.splitlines()[0]


@pytest.mark.parametrize("cls, want, failing", [
    (_AbortingCopy, r"crashed: SIGABRT \(.*\), while doing line \d+: devbuf_copy_h2d\(",
     {"alloc_free", "copy_roundtrip", "copy_offsets", "stream_ordering"}),
    (_HangingSync, r"did not finish within [\d.]+ s \(its process was killed\), while doing line \d+: "
                   r"devbuf_event_synchronize\(",
     {"events_across_streams", "sync_before_host_read"}),
])
@pytest.mark.thread_unsafe(reason="forks this process for each check: a fork while other "
                                   "threads run Python may deadlock the child")
def test_isolated_run_survives_a_crashing_python_plugin(check_names, cls, want, failing):
    """A plugin that aborts or hangs costs each broken check its FAIL line; the
    run ends with its summary and this interpreter goes on."""
    import re
    ident = fresh_id("test.crashy")
    with P.register_plugin(cls(identifiers=(ident,), name=ident.replace(".", "_"))):
        r = P.run_conformance(ident, ["properties", "error_free", *sorted(failing)],
                              isolate=True, timeout=CHECK_TIMEOUT)
    assert r.returncode == 1
    lines = r.output.splitlines()
    assert re.fullmatch(r"\d+ passed, \d+ failed, \d+ skipped", lines[-1]), r.output
    for name in failing:
        verdict, why = r.results[name]
        assert verdict == "FAIL" and re.match(want, why), r.output
    assert r.results["properties"][0] == "PASS" and r.results["error_free"][0] == "PASS"
    assert r.results["no_leaks"][0] == "PASS", r.output
