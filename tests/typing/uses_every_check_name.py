"""A user's script that touches every public name of devbuf.check, the
conformance kit (``devbuf.check.__all__``, ``python -m devbuf.check``'s
``main`` and the pytest plugin's ``Checker``), with the types a user would
write. tests/python/test_typing.py type-checks it with ``mypy --strict`` (so
a missing or wrong annotation in the kit fails) and runs it (so the names
really exist and behave as typed). It uses only NumPy and devbuf's cpu (the
kit's consumer checks add devbuf.sim when it is there): no GPU.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

import devbuf
import devbuf.check as check
from devbuf.check.__main__ import main as check_main
from devbuf.check.pytest_plugin import Checker


def make(spec: check.ArraySpec) -> Optional[npt.NDArray[Any]]:
    """A factory: the kit asks for a spec, the library answers an array (or None)."""
    return spec.numpy() if spec.dtype in check.PLAIN_DTYPES else None


def specs() -> List[check.ArraySpec]:
    layouts: Tuple[str, ...] = check.LAYOUTS
    shapes: Tuple[Tuple[int, ...], ...] = check.SHAPES
    records: Dict[str, Callable[[], np.dtype[Any]]] = check.RECORD_DTYPES
    cases: List[check.ArraySpec] = check.default_cases(["int32"], layouts[:2], shapes[:3])
    spec = check.ArraySpec("int32", (3, 4), "C", readonly=True)
    values: npt.NDArray[Any] = spec.values
    source: str = check.numpy_source(spec)
    assert values.shape == (3, 4) and records["record_packed"]().itemsize == 15
    assert "np.int32" in source
    return cases[:3] + [spec]


def buffers() -> int:
    a = np.arange(12, dtype=np.int32)  # (1-d: C- and Fortran-contiguous, answers every request)
    requests: Tuple[int, ...] = check.ALL_REQUESTS + check.TEST_BUFFER_REQUESTS
    answers: List[check.Answer] = [check.getbuffer(a, req) for req in requests]
    shape: Optional[Tuple[int, ...]] = answers[-1].shape
    fmt: Optional[bytes] = answers[0].format
    fields: Dict[str, Any] = answers[0].as_dict()
    name: str = check.request_name(requests[0])
    held = check.Held(a, 0)
    held.release()
    sizes: Dict[str, Optional[int]] = check.format_sizes("T{i:x:h:y:}")
    producer = check.DLPackProducer(a)
    info = check.read_capsule(producer.__dlpack__(max_version=(1, 0)))
    device: Tuple[int, int] = info["device"]
    strides: Optional[Tuple[int, ...]] = info["strides"]
    legacy = check.LegacyOnly(check.DLPackProducer(a))
    legacy_device: Tuple[int, ...] = legacy.__dlpack_device__()
    producer.settle()
    host: npt.NDArray[Any] = check.to_numpy(devbuf.from_host(b"abcd"))
    assert shape == (12,) and device == legacy_device == (1, 0) and host.nbytes == 4
    return len(answers) + len(fmt or b"") + len(fields) + len(name) + len(sizes) + len(
        strides or ())


def reports() -> int:
    rules: Dict[str, check.Rule] = check.RULES
    kinds: List[check.Rule] = check.PRODUCER_RULES + check.CONSUMER_RULES
    statuses: Tuple[str, str, str] = (check.PASS, check.FAIL, check.SKIP)
    cited: Dict[str, str] = check.SPECS
    rep: check.Report = check.producer(make, cases=specs(), name="numpy arrays")
    result: check.Result = rep.results["bp.values"]
    assert result.status in statuses and rep.status("bp.values") == check.PASS
    consumed: check.Report = check.consumer(np.from_dlpack, "dlpack", dtypes=["int32"])
    mine = check.Target("mine", np.__version__, {"numpy.ndarray": make}, cases=specs(),
                        consumers={"np.asarray": (np.asarray, "buffer"),
                                   "np.from_dlpack": (np.from_dlpack, "dlpack",
                                                      {"setup": "import numpy as np"})})
    more: List[check.Report] = check.run_target(mine)
    builtin: check.Target = check.target("numpy")  # (made, not run)
    targets: Dict[str, Callable[[], check.Target]] = check.TARGETS
    as_json: str = consumed.to_json()
    checker = Checker(["*"])  # what the devbuf_check fixture gives, allowing every rule
    checked: check.Report = checker.producer(make, cases=specs()[:1])
    rc: int = check_main(["--list-rules"])
    return (len(rules) + len(kinds) + len(cited) + len(more) + len(builtin.factories)
            + len(targets) + len(as_json) + len(checked.results) + rc)


if __name__ == "__main__":
    print(len(specs()), buffers(), reports())
