"""devbuf.check: a conformance kit for array producers and consumers.

Every interchange rule devbuf knows (CPython's buffer protocol and
test_buffer's requests, the device and custom-dtype drafts, DLPack, the CUDA
Array Interface, the Arrow PyCapsule / C device interface, pickle 5) as a
check that any library runs on its own objects:

    import devbuf.check
    report = devbuf.check.producer(lambda spec: mylib.asarray(spec.numpy()))
    print(report)              # PASS/FAIL/SKIP per rule, reproducers for failures
    report = devbuf.check.consumer(mylib.from_dlpack, "dlpack")

Command line: ``python -m devbuf.check numpy`` or ``python -m devbuf.check
mylib.module:factory``; pytest: ``pytest_plugins = ["devbuf.check.pytest_plugin"]``.
See docs/conformance-kit.md.
"""
from __future__ import annotations

from typing import List as _List

from ._capi import ALL_REQUESTS, TEST_BUFFER_REQUESTS, Answer, Held, getbuffer, request_name
from ._consumer import CONSUMER_RULES, LegacyOnly, consumer
from ._dlpack import Producer as DLPackProducer
from ._dlpack import read_capsule
from ._factories import TARGETS, Target, numpy_source
from ._producer import PRODUCER_RULES, format_sizes, producer, to_numpy
from ._report import FAIL, PASS, RULES, SKIP, SPECS, Report, Result, Rule
from ._spec import LAYOUTS, PLAIN_DTYPES, RECORD_DTYPES, SHAPES, ArraySpec, default_cases


def target(name: str) -> Target:
    """The built-in Target for a library name (see TARGETS)."""
    try:
        return TARGETS[name]()
    except KeyError:
        raise ValueError(f"no built-in target {name!r}; built in: {', '.join(TARGETS)}; or "
                         "pass module:factory") from None


def run_target(t: Target, *, consumers: bool = True) -> _List[Report]:
    """Producer reports for each factory of Target t, then consumer reports."""
    reports: _List[Report] = []
    for label, factory in t.factories.items():
        reports.append(producer(factory, name=label, cases=t.cases, dtypes=t.dtypes))
    if consumers:
        for label, (fn, protocol, *more) in t.consumers.items():
            kw = more[0] if more else {}
            reports.append(consumer(fn, protocol, name=label, **kw))
    return reports


__all__ = [
    "ALL_REQUESTS", "Answer", "ArraySpec", "CONSUMER_RULES", "DLPackProducer", "FAIL", "Held",
    "LAYOUTS", "LegacyOnly", "PASS", "PLAIN_DTYPES", "PRODUCER_RULES", "RECORD_DTYPES", "RULES",
    "Report", "Result", "Rule", "SHAPES", "SKIP", "SPECS", "TARGETS", "TEST_BUFFER_REQUESTS",
    "Target", "consumer", "default_cases", "format_sizes", "getbuffer", "numpy_source",
    "producer", "read_capsule", "request_name", "run_target", "target", "to_numpy",
]


del annotations  # the __future__ feature, not a public name
