"""pytest plugin: the conformance kit inside a library's own test suite.

In the project's conftest.py::

    pytest_plugins = ["devbuf.check.pytest_plugin"]

then, in a test::

    def test_my_arrays_follow_the_rules(devbuf_check):
        devbuf_check.producer(lambda spec: mylib.asarray(spec.numpy()))

    def test_my_from_dlpack(devbuf_check):
        devbuf_check.consumer(mylib.from_dlpack, "dlpack")

A failing rule fails the test with the kit's report (rule, spec citation,
reproducer). Known failures are allowed by rule id or glob, per call
(`allow=["bp.error_type"]`), per test (`@pytest.mark.devbuf_check_allow("dl.*")`)
or for the whole project (ini option `devbuf_check_allow`); an allowed rule
that passes again is reported, so that the allowance can go.
"""
from __future__ import annotations

import fnmatch
import warnings
from typing import Any, List, Sequence

import pytest

from . import consumer as _consumer
from . import producer as _producer
from ._consumer import ConsumerFn
from ._producer import Factory
from ._report import Report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("devbuf_check_allow", "devbuf.check rule ids (globs) whose failures are "
                  "known and allowed", type="args", default=[])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "devbuf_check_allow(*rules): devbuf.check rules (ids "
                            "or globs) allowed to fail in this test")


def pytest_report_header(config: pytest.Config) -> str:
    import devbuf
    return f"devbuf.check: devbuf {devbuf.__version__}"


class Checker:
    """What the `devbuf_check` fixture gives: producer() and consumer() that
    run the kit and fail the test on a rule that is not allowed."""

    def __init__(self, allow: Sequence[str]) -> None:
        self.allow = list(allow)
        self.reports: List[Report] = []

    def _judge(self, rep: Report, allow: Sequence[str]) -> Report:
        allowed = self.allow + list(allow)

        def ok(rule_id: str) -> bool:
            return any(fnmatch.fnmatchcase(rule_id, pat) for pat in allowed)
        self.reports.append(rep)
        for rule_id in allow:  # named for this call: say when it is no longer needed
            res = rep.results.get(rule_id)
            if res is not None and res.status == "pass":
                warnings.warn(f"devbuf.check: {rule_id} passes now; drop it from allow=",
                              stacklevel=3)
        bad = [r for r in rep.failures if not ok(r.rule.id)]
        if bad:
            pytest.fail(f"devbuf.check: {len(bad)} rule(s) broken: "
                        f"{', '.join(r.rule.id for r in bad)}\n{rep.format()}", pytrace=False)
        if not bad and rep.unchecked is not None:  # a run that checked nothing is no pass
            pytest.fail(f"devbuf.check: {rep.unchecked}\n{rep.format()}", pytrace=False)
        return rep

    def producer(self, factory: Factory, *, allow: Sequence[str] = (), **kw: Any) -> Report:
        """devbuf.check.producer(factory, **kw); fail on a rule not allowed."""
        return self._judge(_producer(factory, **kw), allow)

    def consumer(self, fn: ConsumerFn, protocol: str = "dlpack", *, allow: Sequence[str] = (),
                 **kw: Any) -> Report:
        """devbuf.check.consumer(fn, protocol, **kw); fail on a rule not allowed."""
        return self._judge(_consumer(fn, protocol, **kw), allow)


@pytest.fixture
def devbuf_check(request: pytest.FixtureRequest) -> Checker:
    allow = list(request.config.getini("devbuf_check_allow"))
    for mark in request.node.iter_markers("devbuf_check_allow"):
        allow += list(mark.args)
    return Checker(allow)
