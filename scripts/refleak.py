"""Reference-leak hunt over devbuf's own test modules, in the manner of
CPython's `regrtest -R`: each module's tests run several times in ONE pytest
run (one process), and what the process holds after each run is compared with what it
held before it.

    python3.14-dbg scripts/refleak.py [--warmups 2] [--repeats 3] [--slow 2] [PATH ...]
    python3.14-dbg -m pytest -p refleak --refleak=default [--refleak-report=F] tests/python

The second form is a pytest plugin (scripts/ on sys.path): the ordinary run
of the tests IS the first run of each hunted module, so the hunt only adds
the further runs. PATH defaults to the modules of DEFAULT; --refleak takes
`default`, `all` (every collected module) or a comma list of file names.
The test command runs the first form, in a process of its own: inside the
whole suite's run every measurement walks the whole suite's heap, and the
hunt costs more than twice the hunted modules' own run and hunt together.

How a module is measured (the -R rules):
  * the module's tests run once as the suite runs them (reported as usual),
    then, unreported, with the module's and the wider fixtures kept (as
    when one test follows another): the baseline's 1 + repeats runs, then
    (warmups - 1) + repeats runs of the tests themselves;
  * tests slower than --slow seconds in the suite's run (subprocesses, long
    stress loops) are not repeated, so that the hunt costs a few runs of the
    quick tests; nor are tests marked `refleak_unrepeated(reason)`, whose
    growth is a library's own (nanoarrow 0.9.0 keeps a reference per call
    of c_array(list) and two per to_pylist(), no devbuf object involved);
    each module's line says how many were left out;
  * before each measurement, the caches that regrtest clears are cleared
    (re, struct, typing, the type cache) and the garbage is collected;
  * four gauges: sys.gettotalrefcount() (`references`, debug interpreters
    only), the reference counts held on live objects (`held`, below),
    sys.getallocatedblocks() (less the interned strings, which live until
    shutdown) and the open file descriptors;
  * the first `warmups` runs (the suite's own is the first) fill caches
    (imports, interned strings, lazily made types) and are not counted. A
    gauge grows when EVERY counted run grows it by at least 1 (regrtest's
    rule: [5, 5, 6] and [10, 1, 1] are leaks, [3, 0, 0] and [8, -8, 1]
    are noise);
  * the baseline, the harness's own growth per run, is measured in the same
    pytest run right before: the same runs with each test's body replaced by
    nothing (its fixtures still set up and torn down), one warm-up and
    `repeats` counted. A gauge leaks only where every counted run also
    exceeds what every counted baseline run grew (the harness's steady
    growth per run), so that a cost of pytest is never blamed on devbuf;
  * the gauges that fail the hunt are held, blocks and fds (--gauges to
    choose), and references in the modules of REFERENCES only. A
    release-built extension in the process (NumPy's, pyarrow's and
    ml_dtypes' wheels on python3.14-dbg) increments and decrements without
    telling the debug interpreter's total, so that total drifts with every
    call into it (np.testing.assert_array_equal: +55 a call, memoryview of
    a NumPy array: -1) and cannot tell a leak from that bookkeeping: it is
    gated only in the modules whose repeated tests call no such extension,
    and shown everywhere. `held` reads the counts themselves (ob_refcnt,
    exact whoever changed them): the sum of sys.getrefcount() over every
    object the collector tracks and every object those refer to directly
    (a module's globals, a type's attributes, a container's items). A
    reference leaked to a long-lived object (a missing Py_DECREF on a
    producer, a type, a cached object) allocates nothing, so blocks miss
    it; held sees it, NumPy or not. It misses only a reference leaked to an
    object two or more hops from any tracked one (a string inside an
    untracked tuple), which references still see in the REFERENCES
    modules. Allocated blocks and descriptors are counted by the
    interpreter and the kernel, whoever allocates. When a module leaks,
    each of its tests is repeated alone and the leaking ones are named.

A module whose tests fail on a repeat cannot be measured: it is reported as
such and fails the hunt, like a leak. Last line of the report:
"refleak: N modules, M leaking, U unmeasured (...)".
"""
import array
import gc
import os
import sys
import time
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests", "python")
# The modules that drive devbuf's C code (buffers, views, DLPack, the
# array interfaces, Arrow, pickle, formats, lifetimes, the C API).
# Left out until their tests settle every producer they make:
# test_dlpack_header.py and test_consumer_edges.py. Their producer, the
# conformance kit's adversarial one (devbuf.check), makes capsules without a
# destructor and keeps each tensor in a registry until its deleter runs or
# the test calls settle(); a tensor devbuf refuses is never deleted there, so
# these modules grow by that registry (about 250 blocks a test in
# test_dlpack_header.py), which hides anything devbuf itself might leak.
DEFAULT = [
    "test_device_buffer.py", "test_view.py", "test_interop_dlpack.py",
    "test_buffer_rules.py", "test_lifetimes.py", "test_arrow.py", "test_pickle.py",
    "test_format_api.py", "test_format_complex.py", "test_format_struct.py",
    "test_capi.py", "test_backport.py", "test_zero_dim.py",
]
GAUGES = ("references", "held", "blocks", "fds")
# The modules whose repeated tests call no release-built extension (no
# NumPy, pyarrow, ml_dtypes): there sys.gettotalrefcount() is exact and its
# growth fails the hunt too. Every other hunted module calls NumPy in its
# tests, whose drift of the total is its own (see above); there `held`
# stands for it. A module added here must stay flat on references.
REFERENCES = ["test_format_api.py"]


def _cleanup():
    """What regrtest's dash_R_cleanup clears that a test run may fill."""
    import re
    re.purge()
    try:
        import struct
        struct._clearcache()
    except (ImportError, AttributeError):
        pass
    typing = sys.modules.get("typing")
    for f in getattr(typing, "_cleanups", ()):
        f()
    clear = getattr(sys, "_clear_internal_caches", None) or sys._clear_type_cache
    clear()
    # Full collections until one finds nothing (at most 4: on a debug
    # interpreter each one checks its lists, a second or so with the whole
    # suite's imports loaded). One is not always enough: a ctypes Structure
    # class (test_format_struct.py makes thousands) is freed only by the
    # collection after the one that frees its array types, whose cache
    # entries let go of it from a weakref callback; with one collection a
    # random share of them outlived each run (blocks -435 +45 +132 a run).
    for _ in range(4):
        if not gc.collect():
            break


def _fds():
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _held():
    """The reference counts on live objects, read from the objects: every
    object the collector tracks and every object those refer to directly,
    each once (in C loops: a second at most on the whole suite)."""
    objs = gc.get_objects()
    seen = dict(zip(map(id, objs), objs))
    refs = gc.get_referents(*objs)
    objs = None
    seen.update(zip(map(id, refs), refs))
    refs = None
    # Less the reference each object has from `seen` and from the call.
    return sum(map(sys.getrefcount, seen.values())) - 2 * len(seen)


def snapshot():
    """(references or None, held, blocks, fds), read right after a collection."""
    _cleanup()
    held = _held()
    try:
        interned = sys.getunicodeinternedsize(_only_immortal=True)
    except (AttributeError, TypeError):
        interned = 0
    refs = sys.gettotalrefcount() if hasattr(sys, "gettotalrefcount") else None
    return refs, held, sys.getallocatedblocks() - interned, _fds()


def grows(deltas):
    """regrtest's check_rc_deltas: a leak when every counted run grew."""
    return bool(deltas) and all(d >= 1 for d in deltas)


class _Parent:
    """The `nextitem` of the last test of a repeat: the next test is in the
    same module (or class), so teardown keeps that node's fixtures."""

    def __init__(self, item):
        self._chain = item.listchain()[:-1]

    def listchain(self):
        return list(self._chain)


def _nothing():
    """The body of a test in the baseline runs: the harness alone."""



class Hunt:
    def __init__(self, config, select, warmups, repeats, report, gauges="held,blocks,fds", slow=2.0,
                 references=None):
        self.config = config
        self.slow = slow
        self.gated = [g for g in gauges.split(",") if g]
        # Modules where references are gated as well (file names).
        self.references = set(REFERENCES if references is None else [m for m in references.split(",") if m])
        unknown = set(self.gated) - set(GAUGES)
        if unknown:
            raise pytest.UsageError(f"--refleak-gauges: unknown {sorted(unknown)}; known: {', '.join(GAUGES)}")
        self.select = select
        self.warmups = max(1, warmups)
        self.repeats = max(1, repeats)
        self.report = report
        self.groups = {}      # module path -> [items]
        self.last = {}        # nodeid of a module's last item -> module path
        self.module_of = {}   # nodeid -> module path
        self.failed = set()   # modules with a failure in the reported run
        self.seconds = {}     # nodeid -> seconds of its reported run (setup, call, teardown)
        self.skipped_slow = 0
        self.skipped_marked = 0
        self.lines = []
        self.leaking = self.unmeasured = 0
        self.excess = [0] * len(GAUGES)
        self.measured = 0

    def _selected(self, path):
        if self.select in ("all", "*"):
            return True
        names = DEFAULT if self.select == "default" else self.select.split(",")
        return os.path.basename(path) in names

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        for it in items:
            path = str(it.path)
            if self._selected(path):
                self.groups.setdefault(path, []).append(it)
        for path, group in self.groups.items():
            self.last[group[-1].nodeid] = path
            for it in group:
                self.module_of[it.nodeid] = path

    def pytest_runtest_logreport(self, report):
        if report.nodeid in self.module_of:
            if report.failed:
                self.failed.add(self.module_of[report.nodeid])
            self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        path = self.last.get(item.nodeid)
        if path is None:
            return None
        from _pytest.runner import runtestprotocol
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        # The suite's own run of the module's last test; the module stays set up.
        runtestprotocol(item, nextitem=_Parent(item))
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        if not (item.session.shouldfail or item.session.shouldstop):
            self._hunt(path, self.groups[path])
        # Now the module's fixtures go, as after any last test of a module.
        item.session._setupstate.teardown_exact(nextitem)
        return True

    def _run_group(self, group, body):
        """One run of `group`, unreported; the first failure, or None."""
        from _pytest.runner import runtestprotocol
        bad = None
        for j, it in enumerate(group):
            nxt = group[j + 1] if j + 1 < len(group) else _Parent(it)
            sections = list(it._report_sections)
            if body:
                reports = runtestprotocol(it, log=False, nextitem=nxt)
                bad = bad or next((f"{it.nodeid} ({r.when})" for r in reports if r.failed), None)
            else:
                # The same hooks around an empty body: pytest's own cost.
                it.runtest = _nothing
                try:
                    runtestprotocol(it, log=False, nextitem=nxt)
                finally:
                    del it.runtest
            it._report_sections[:] = sections
            del sections, nxt
            reports = None
        return bad

    def _runs(self, group, body, warm):
        """Deltas of each gauge over warm + repeats runs of `group`; the
        counted ones (the last `repeats`) only."""
        n = warm + self.repeats
        # The deltas go into C arrays made beforehand: keeping them makes no
        # Python object (a new int, or a pool entry as in regrtest, would be
        # counted in the next run's blocks).
        deltas = [array.array("q", bytes(8 * n)) for _ in GAUGES]
        bad = None
        before = snapshot()
        for i in range(n):
            # The repeats run inside the protocol of the module's last test,
            # whose warnings pytest records (catch_warnings(record=True)): a
            # list of its own per run, with the same filters, is dropped at
            # the run's end, so that a warning is not mistaken for a leak.
            with warnings.catch_warnings(record=True):
                failed = self._run_group(group, body)
            bad = bad or failed
            after = snapshot()
            for g in range(len(GAUGES)):
                if after[g] is not None:
                    deltas[g][i] = after[g] - before[g]
            before = after
            after = None
        deltas = [None if before[g] is None else list(deltas[g][warm:]) for g in range(len(GAUGES))]
        return deltas, bad

    def _hunt(self, path, group):
        name = os.path.relpath(path, self.config.rootpath) if path.startswith(str(self.config.rootpath)) else path
        if path in self.failed:
            self.unmeasured += 1
            self._say(f"UNMEASURED {name}: a test failed in the suite's run")
            return
        t0 = time.monotonic()
        # Tests slower than --refleak-slow in the suite's run (subprocesses,
        # long stress loops) are not repeated: the hunt's cost stays a few
        # runs of the quick tests. How many is said.
        slow = [it for it in group if self.seconds.get(it.nodeid, 0.0) > self.slow]
        marked = [it for it in group if it not in slow and it.get_closest_marker("refleak_unrepeated")]
        group = [it for it in group if it not in slow and it not in marked]
        self.skipped_slow += len(slow)
        self.skipped_marked += len(marked)
        if not group:
            self._say(f"--   {name}: every test is slower than {self.slow:g} s: not repeated")
            return
        # The reported run was the first warm-up of the tests; the baseline
        # (empty bodies) has one of its own.
        base, _ = self._runs(group, body=False, warm=1)
        got, bad = self._runs(group, body=True, warm=self.warmups - 1)
        took = f", {len(slow)} slow not repeated" if slow else ""
        took += f", {len(marked)} marked refleak_unrepeated" if marked else ""
        took = f" [{len(group)} tests{took}; {time.monotonic() - t0:.1f} s]"
        if bad:
            self.unmeasured += 1
            self._say(f"UNMEASURED {name}: {bad} failed when repeated (the hunt needs tests that can run twice)")
            return
        self.measured += 1
        gated = set(self.gated)
        if os.path.basename(path) in self.references:
            gated.add("references")
        verdicts, notes = [], []
        for g, gauge in enumerate(GAUGES):
            if got[g] is None:
                continue
            # The harness's steady growth: what every baseline run grew.
            floor = max(min(base[g]), 0)
            excess = [d - floor for d in got[g]]
            if grows(got[g]) and grows(excess):
                if gauge in gated:
                    verdicts.append(gauge)
                    self.excess[g] += min(excess)
                else:
                    notes.append(gauge)
        fig = "; ".join(
            f"{gauge} {' '.join(f'{d:+d}' for d in got[g])} (baseline {' '.join(f'{d:+d}' for d in base[g])})"
            for g, gauge in enumerate(GAUGES) if got[g] is not None)
        if verdicts:
            self.leaking += 1
            self._say(f"LEAK {name} [{', '.join(verdicts)}]: {fig}{took}")
            # Which tests: each one repeated alone, by the same rule, for a
            # minute at most (a module of many tests says where to look).
            t1 = time.monotonic()
            for k, it in enumerate(group):
                if time.monotonic() - t1 > 60:
                    self._say(f"  ({len(group) - k} more tests not tried alone: a minute is up)")
                    break
                one, bad = self._runs([it], body=True, warm=1)
                named = [gauge for g, gauge in enumerate(GAUGES) if one[g] is not None
                         and gauge in verdicts and grows(one[g])]
                if named and not bad:
                    fig = "; ".join(f"{GAUGES[g]} {' '.join(f'{d:+d}' for d in one[g])}"
                                    for g in range(len(GAUGES)) if GAUGES[g] in named)
                    self._say(f"  leaking test {it.nodeid}: {fig}")
        else:
            grew = f" (grew, not gated: {', '.join(notes)})" if notes else ""
            self._say(f"ok   {name}{grew}: {fig}{took}")

    def _say(self, line):
        self.lines.append(line)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and self.config.option.verbose > 0:
            tr.write_line(f"refleak: {line}")

    def summary(self):
        n = self.measured + self.unmeasured
        refs = "n/a (not a debug interpreter)" if not hasattr(sys, "gettotalrefcount") else f"+{self.excess[0]}"
        return (f"refleak: {n} modules, {self.leaking} leaking, {self.unmeasured} unmeasured "
                f"(gated: {','.join(self.gated)}, references in {','.join(sorted(self.references)) or 'none'}; "
                f"{refs} references, +{self.excess[1]} held, +{self.excess[2]} blocks, +{self.excess[3]} fds per run; "
                f"warmups {self.warmups}, repeats {self.repeats}; {self.skipped_slow} tests slower than "
                f"{self.slow:g} s and {self.skipped_marked} marked refleak_unrepeated not repeated)")

    def ok(self):
        return self.measured > 0 and self.leaking == 0 and self.unmeasured == 0

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.section("reference-leak hunt")
        for line in self.lines:
            terminalreporter.write_line(line)
        terminalreporter.write_line(self.summary())

    def pytest_unconfigure(self, config):
        if self.report:
            with open(self.report, "w") as f:
                f.write("".join(line + "\n" for line in self.lines))
                f.write(self.summary() + "\n")


def pytest_addoption(parser):
    g = parser.getgroup("refleak", "reference-leak hunt (scripts/refleak.py)")
    g.addoption("--refleak", metavar="MODULES", default=None,
                help="hunt reference leaks in these test modules: default, all, or a comma list of file names")
    g.addoption("--refleak-slow", type=float, default=2.0,
                help="tests slower than this many seconds in the suite's run are not repeated (2)")
    g.addoption("--refleak-warmups", type=int, default=2, help="runs not counted, the suite's own included (3)")
    g.addoption("--refleak-repeats", type=int, default=3, help="runs counted (3)")
    g.addoption("--refleak-gauges", default="held,blocks,fds",
                help="the gauges whose growth fails the hunt in every module: references,held,blocks,fds "
                     "(default held,blocks,fds)")
    g.addoption("--refleak-references", metavar="MODULES", default=None,
                help="comma list of module file names where references are gated as well "
                     f"(default: {','.join(REFERENCES)})")
    g.addoption("--refleak-report", metavar="FILE", default=None, help="write the hunt's lines here too")


_LAST = {}  # the hunt of the last pytest run, for main()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "refleak_unrepeated(reason): the leak hunt (scripts/refleak.py) does not repeat "
        "this test: its growth is a library's own, not devbuf's")
    sel = config.getoption("refleak", None)
    if sel:
        hunt = Hunt(config, sel, config.getoption("refleak_warmups"), config.getoption("refleak_repeats"),
                    config.getoption("refleak_report"), config.getoption("refleak_gauges"),
                    config.getoption("refleak_slow"), config.getoption("refleak_references"))
        config.pluginmanager.register(hunt, "refleak-hunt")
        _LAST["hunt"] = hunt


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmups", type=int, default=2)
    ap.add_argument("--slow", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--report", default=None)
    ap.add_argument("--gauges", default="held,blocks,fds")
    ap.add_argument("--references", default=None,
                    help=f"modules where references are gated as well (default: {','.join(REFERENCES)})")
    ap.add_argument("paths", nargs="*")
    a, rest = ap.parse_known_args(argv)
    if not hasattr(sys, "gettotalrefcount"):
        print("refleak: not a debug interpreter: references are not counted, blocks and fds are", flush=True)
    paths = a.paths or [os.path.join(TESTS, m) for m in DEFAULT if os.path.exists(os.path.join(TESTS, m))]
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--refleak=all",
            f"--refleak-warmups={a.warmups}", f"--refleak-gauges={a.gauges}", f"--refleak-slow={a.slow}", f"--refleak-repeats={a.repeats}", *rest, *paths]
    if a.report:
        args.append(f"--refleak-report={a.report}")
    if a.references is not None:
        args.append(f"--refleak-references={a.references}")
    rc = pytest.main(args, plugins=[sys.modules[__name__]])
    hunt = _LAST.get("hunt")
    if rc not in (0, 5):
        print(f"refleak: the tests failed (pytest exit {rc})")
        return 1
    return 0 if hunt is not None and hunt.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
