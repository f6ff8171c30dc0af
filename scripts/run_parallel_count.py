"""pytest plugin for scripts/run-parallel.sh: after collection, count the items
pytest-run-parallel will run in one thread only, and why: the ones that carry
`@pytest.mark.thread_unsafe(reason=...)` (devbuf's tests that are unsafe by
construction) and the ones the plugin itself found (a thread-unsafe fixture or
call), and apart from those the ones whose work runs in a child process
(tests/python/conftest.py runs them in one thread: they ask for `devbuf_env`
or are marked `child_process`). Prints one line at the end of the run and
fails the run when more than RUN_PARALLEL_MAX_MARKED (default 0.10) of the
items are marked thread_unsafe."""
import os

import pytest

_counts = {}


def _run_parallel_plugin(config):
    for p in config.pluginmanager.get_plugins():
        if type(p).__name__ == "RunParallelPlugin":
            return p
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    items = session.items
    marked = [i for i in items if i.get_closest_marker("thread_unsafe") is not None]
    # tests/python/conftest.py marks each of these child_process (in_child_process).
    child = [i for i in items if i.get_closest_marker("thread_unsafe") is None and
             i.get_closest_marker("child_process") is not None]
    rp = _run_parallel_plugin(session.config)
    single = len(getattr(rp, "thread_unsafe", {})) if rp is not None else len(items)
    if rp is not None:
        child = [i for i in child if i.nodeid in rp.thread_unsafe]
    limit = float(os.environ.get("RUN_PARALLEL_MAX_MARKED", "0.10"))
    _counts.update(items=len(items), marked=len(marked), child=len(child), single=single, limit=limit,
                   over=len(marked) > limit * len(items),
                   files=sorted({i.nodeid.split("::")[0] for i in marked}))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _counts:
        return
    s = terminalreporter.stats
    passed, failed = len(s.get("passed", [])), len(s.get("failed", [])) + len(s.get("error", []))
    skipped = len(s.get("skipped", []))
    limit = _counts["limit"]
    frac = _counts["marked"] / max(_counts["items"], 1)
    terminalreporter.write_line(
        f"run-parallel: {_counts['items']} items, {passed} passed, {failed} failed, {skipped} skipped; "
        f"{_counts['marked']} marked thread_unsafe ({100 * frac:.1f}%, at most {100 * limit:.0f}%), "
        f"{_counts['child']} run in one thread as their work runs in a child process, "
        f"{_counts['single'] - _counts['marked'] - _counts['child']} more run in one thread by the plugin's own detection")
    if _counts["over"]:
        terminalreporter.write_line(
            f"run-parallel: FAIL: {_counts['marked']} of {_counts['items']} items are marked thread_unsafe "
            f"(more than {100 * limit:.0f}%) in {', '.join(_counts['files'])}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if _counts.get("over") and session.exitstatus == 0:
        session.exitstatus = 1
