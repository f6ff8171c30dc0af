"""Consumer checks: devbuf's adversarial producers, fed to a consumer.

`consumer(fn, protocol)` calls fn(producer) for each producer below and reads
what it returned. Refusing an array (an exception) is always allowed except
for the plain C-contiguous one; returning wrong values, a writable alias of
read-only memory, garbage from device memory, or holding on to (or letting go
of) the producer wrongly is a failure.
"""
from __future__ import annotations

import gc
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _dlpack as D
from ._report import Report, Rule, RULES, rule
from ._spec import ArraySpec, as_buffer, same_values

# A consumer under test: fn(producer) -> what it made of it. Both are foreign
# objects (an array of the consumer's library, whatever it accepts): Any.
ConsumerFn = Callable[[Any], Any]
# read(result, spec) -> a NumPy array of the values the consumer's result holds
ResultReader = Callable[[Any, ArraySpec], npt.NDArray[Any]]

C_ = "consumer"
C_VALUES = rule("c.values", C_, "buffer", "a C-contiguous array: the minimum every consumer "
                "reads", "a plain C-contiguous array is accepted and read right")
C_NEG = rule("c.negative_strides", C_, "buffer", "strides may be negative (Buffer structure: "
             "strides; DLTensor.strides)",
             "an array with a negative stride is read right (or refused)")
C_ZERO = rule("c.zero_strides", C_, "buffer", "zero strides (broadcast arrays)",
              "an array with a zero stride is read right (or refused)")
C_0D = rule("c.zero_d", C_, "buffer", "ndim 0: shape and strides empty",
            "a 0-d array is read right, with shape ()")
C_EMPTY = rule("c.empty", C_, "buffer", "size-0 arrays (shape with a 0)",
               "an empty array is read right, with its shape")
C_OFFSET = rule("c.byte_offset", C_, "dlpack", "DLTensor.byte_offset / buf past the "
                "allocation's start", "an array that starts past its allocation's start "
                "(a pointer offset, or DLPack's byte_offset) is read from the right place")
C_NONCONTIG = rule("c.noncontiguous", C_, "buffer", "PyBUF_STRIDES / DLTensor.strides",
                   "a strided array is read right (or refused)")
C_READONLY = rule("c.readonly", C_, "buffer", "readonly / DLPACK_FLAG_BITMASK_READ_ONLY",
                  "read-only memory never comes back as a writable alias")
C_DEVICE = rule("c.device", C_, "device", "memory the host cannot read (devbuf.sim): "
                "DLPack 'raise BufferError' for an unsupported device",
                "non-host memory is refused, or copied to the host with the right values; "
                "never read as if it were host memory")
C_KEEPALIVE = rule("c.keepalive", C_, "dlpack", "'The producer keeps owning the memory' "
                   "while the consumer's object lives",
                   "what the consumer returns keeps the producer alive: its values survive "
                   "the producer's last other reference")
C_RELEASE = rule("c.release", C_, "buffer", "PyBuffer_Release / the deleter, exactly once",
                 "when the consumer's object dies, the export is released (or the deleter "
                 "called) exactly once")
C_CONSUMED = rule("c.consumed_capsule", C_, "dlpack", "'used_dltensor': a capsule is "
                  "consumed once", "a capsule that was already consumed is refused")
C_NAME = rule("c.capsule_name", C_, "dlpack", "capsule names 'dltensor', "
              "'dltensor_versioned'", "a capsule with any other name is refused")
C_RENAME = rule("c.rename", C_, "dlpack", "Implementation: the consumer renames the capsule "
                "to 'used_dltensor' ('used_dltensor_versioned')",
                "a consumed capsule is renamed, so that its destructor leaves the tensor alone")
C_MAXV = rule("c.max_version", C_, "dlpack", "from_dlpack passes max_version (array API v2023)",
              "the consumer asks with max_version, and reads a legacy-only producer "
              "(TypeError on max_version) right or refuses it")

CONSUMER_RULES: List[Rule] = [r for r in RULES.values() if r.role == C_]


class LegacyOnly:
    """A producer with the pre-2023 signature: __dlpack__(stream=None)."""

    def __init__(self, inner: D.Producer) -> None:
        self.inner = inner

    def __dlpack__(self, stream: object = None) -> object:
        return self.inner.__dlpack__(stream=stream)

    def __dlpack_device__(self) -> Tuple[int, ...]:
        return self.inner.__dlpack_device__()


def default_read(result: Any, spec: Optional[ArraySpec] = None) -> npt.NDArray[Any]:
    from ._producer import to_numpy
    return to_numpy(result)


def _writable_alias(result: Any, src: npt.NDArray[Any]) -> bool:
    """Is result a writable view of src's memory?"""
    if isinstance(result, np.ndarray):
        return result.flags.writeable and np.may_share_memory(result, src)
    ro = getattr(result, "readonly", None)
    if isinstance(ro, bool) and not ro:
        ptr = getattr(result, "ptr", None)
        lo = src.__array_interface__["data"][0]
        return ptr is not None and lo <= ptr < lo + max(src.nbytes, 1) + 64
    try:
        m = memoryview(result)
    except TypeError:
        return False
    return not m.readonly and np.may_share_memory(np.asarray(m), src)


def consumer(fn: ConsumerFn, protocol: str = "dlpack", *, name: Optional[str] = None,
             read: Optional[ResultReader] = None, dtypes: Iterable[str] = ("int32", "float64"),
             setup: str = "") -> Report:
    """Feed consumer `fn` devbuf's adversarial producers through `protocol`
    ("dlpack" or "buffer") and return a Report. `read(result, spec)` turns what
    fn returned into a NumPy array of spec's values (default: DLPack, then the
    buffer protocol; a consumer that returns flat bytes passes one that
    reinterprets them with spec.np_dtype and spec.shape). `setup` is the
    import line the reproducers need to call fn by `name`."""
    import devbuf
    if protocol not in ("dlpack", "buffer"):
        raise ValueError(f"protocol must be 'dlpack' or 'buffer', not {protocol!r}")
    read = read or default_read
    label = name or getattr(fn, "__qualname__", repr(fn))
    rep = Report(f"{label} ({protocol})", "consumer", CONSUMER_RULES)
    call = f"{label}(producer)"

    def repro(spec: ArraySpec, make: str) -> str:
        head = "import devbuf, devbuf.check, numpy as np\nfrom devbuf.check import ArraySpec\n"
        return (head + (setup + "\n" if setup else "") +
                f"spec = {spec}\nproducer = {make}\nresult = {call}")

    def feed(rid: str, spec: ArraySpec, producer: object, make: str, *, must_accept: bool = False,
             device: bool = False) -> Any:
        try:
            result = fn(producer)
        except Exception as e:  # noqa: BLE001 - refusing is the consumer's right
            if must_accept:
                rep.failed(rid, f"refused a plain array: {type(e).__name__}: {e}", str(spec),
                           repro(spec, make))
            else:
                rep.skipped(rid, f"refused ({type(e).__name__}: {str(e)[:80]})")
            return None
        try:
            got = read(result, spec)
        except BufferError as e:
            if not device:
                rep.failed(rid, f"its result could not be read back: BufferError: {e}",
                           str(spec), repro(spec, make))
                return None
            # kept as device memory: it refuses host reads, which is right; its own
            # copy to the host (if it has one) must hold the values
            if not hasattr(result, "to_host"):
                rep.passed(rid)
                return result
            got = np.asarray(result.to_host())
        except Exception as e:  # noqa: BLE001
            rep.failed(rid, f"its result could not be read back: {type(e).__name__}: {e}",
                       str(spec), repro(spec, make))
            return None
        want = spec.values
        if not same_values(got, want):
            rep.failed(rid, f"read {got.shape} {got.dtype} {np.array2string(got.ravel()[:6])}"
                       f", the producer holds {want.shape} {want.dtype} "
                       f"{np.array2string(want.ravel()[:6])}", str(spec), repro(spec, make))
            return None
        rep.passed(rid)
        return result

    def producer_for(spec: ArraySpec) -> Tuple[object, str]:
        a = spec.numpy()
        if protocol == "buffer":
            return devbuf.view(a), "devbuf.view(spec.numpy())"
        p = D.Producer(a, flags=D.FLAG_READ_ONLY if spec.readonly else 0)
        return p, "devbuf.check.DLPackProducer(spec.numpy())"

    cases = [(C_VALUES, ArraySpec(dt, (3, 4), "C")) for dt in dtypes]
    for dt in dtypes:
        cases += [(C_NEG, ArraySpec(dt, (3, 4), "reversed")),
                  (C_ZERO, ArraySpec(dt, (3, 4), "broadcast", readonly=True)),
                  (C_0D, ArraySpec(dt, (), "C")), (C_EMPTY, ArraySpec(dt, (3, 0), "C")),
                  (C_EMPTY, ArraySpec(dt, (0,), "C")),
                  (C_NONCONTIG, ArraySpec(dt, (3, 4), "strided")),
                  (C_NONCONTIG, ArraySpec(dt, (3, 4), "F"))]
    for rid, spec in cases:
        p, make = producer_for(spec)
        feed(rid, spec, p, make, must_accept=rid == C_VALUES)
        if isinstance(p, D.Producer):
            _settle(p)

    # byte_offset: DLPack's field, or a buffer that starts past its allocation
    for dt in dtypes:
        spec = ArraySpec(dt, (3, 4), "offset")
        a = spec.numpy()
        if protocol == "dlpack":
            base = a.base if a.base is not None else a
            p = D.Producer(a, data=base.ctypes.data, byte_offset=a.ctypes.data - base.ctypes.data)
            feed(C_OFFSET, spec, p, "devbuf.check.DLPackProducer(a, data=base pointer, "
                 "byte_offset=itemsize)")
            _settle(p)
        else:
            feed(C_OFFSET, spec, devbuf.view(a), "devbuf.view(spec.numpy())")

    # read-only memory
    spec = ArraySpec("float64", (3, 4), "C", readonly=True)
    src = spec.numpy()
    if protocol == "buffer":
        p, make = devbuf.view(src), "devbuf.view(spec.numpy())"
    else:
        p, make = D.Producer(src, flags=D.FLAG_READ_ONLY), \
            "devbuf.check.DLPackProducer(spec.numpy(), flags=1)  # DLPACK_FLAG_BITMASK_READ_ONLY"
    result = feed(C_READONLY, spec, p, make)
    if result is not None and _writable_alias(result, src):
        rep.results[C_READONLY].passed -= 1
        rep.failed(C_READONLY, "returned a writable alias of read-only memory", str(spec),
                   repro(spec, make) + "\nresult[...] = 0  # writes the read-only source")
    del result
    if isinstance(p, D.Producer):
        _settle(p)

    # non-host memory (devbuf.sim)
    try:
        sim = devbuf.device("devbuf.sim")
    except devbuf.Error as e:
        rep.skipped(C_DEVICE, f"devbuf.sim not available: {e}")
    else:
        spec = ArraySpec("int32", (3, 4), "C")
        dev = devbuf.from_host(as_buffer(spec.numpy()), device=sim)
        feed(C_DEVICE, spec, dev, "devbuf.from_host(spec.numpy(), device='devbuf.sim')",
             device=True)
        del dev

    # keep-alive and release: a producer that owns its memory (devbuf)
    spec = ArraySpec("float64", (64,), "C")
    owner = devbuf.from_host(as_buffer(spec.numpy()))
    make = "devbuf.from_host(spec.numpy())"
    try:
        result = fn(owner)
    except Exception as e:  # noqa: BLE001
        rep.skipped(C_KEEPALIVE, f"refused ({type(e).__name__}: {e})")
        rep.skipped(C_RELEASE, "refused")
    else:
        # Deterministic, and no read of freed memory: while the kit still holds the
        # producer, a result that points into its memory must hold an export (a
        # buffer export, or an unconsumed-then-kept DLPack tensor), or the memory
        # goes when the caller's last reference does.
        exports = owner.exports
        lo, hi = owner.ptr, owner.ptr + owner.nbytes
        got: Union[npt.NDArray[Any], Exception]
        try:
            got = read(result, spec)
            ptr = got.__array_interface__["data"][0] if got.size else None
        except Exception as e:  # noqa: BLE001
            got, ptr = e, None
        if ptr is not None and lo <= ptr < hi and exports == 0:
            rep.failed(C_KEEPALIVE, "the result points into the producer's memory but holds "
                       "no export of it (buffer released, or DLPack deleter already called): "
                       "it dangles once the producer's last reference goes", str(spec),
                       repro(spec, make) + "\nprint(producer.exports)  # 0, and result "
                       "aliases producer.ptr")
        else:
            del owner  # (alive still if the result holds an export: that is the point)
            gc.collect()
            try:
                got = read(result, spec)
                ok = same_values(got, spec.values)
            except Exception as e:  # noqa: BLE001
                ok, got = False, e
            if ok:
                rep.passed(C_KEEPALIVE)
            else:
                rep.failed(C_KEEPALIVE, f"after the producer's last reference went, the result"
                           f" read {got!r:.60}", str(spec), repro(spec, make) +
                           "\ndel producer; import gc; gc.collect(); print(result)")
        if protocol == "buffer":
            src2 = devbuf.from_host(as_buffer(spec.numpy()))
            r2 = fn(src2)
            held = src2.exports
            del r2
            gc.collect()
            if src2.exports != 0:
                rep.failed(C_RELEASE, f"{src2.exports} export(s) still open after the result "
                           f"died", str(spec), repro(spec, make) +
                           "\ndel result; print(producer.exports)  # not 0")
            elif held == 0 and exports == 0:
                rep.skipped(C_RELEASE, "the result copied: nothing held")
            else:
                rep.passed(C_RELEASE)
        del result

    if protocol == "dlpack":
        _dlpack_only(rep, fn, read, repro)
    return rep


def _dlpack_only(rep: Report, fn: ConsumerFn, read: ResultReader,
                 repro: Callable[[ArraySpec, str], str]) -> None:
    spec = ArraySpec("int32", (5,), "C")
    a = spec.numpy()
    # release: the deleter runs exactly once when the result dies
    p = D.Producer(a)
    make = "devbuf.check.DLPackProducer(spec.numpy())"
    try:
        r = fn(p)
    except Exception as e:  # noqa: BLE001
        rep.skipped(C_RELEASE, f"refused ({type(e).__name__})")
        r = None
    if r is not None:
        names = [D.capsule_name(cap) for cap, _ in p.capsules]
        if not any(n.startswith("used_") for n in names):
            rep.failed(C_RENAME, f"the consumed capsule is still named {names}", str(spec),
                       repro(spec, make) + "\nprint(producer.capsules)")
        else:
            rep.passed(C_RENAME)
        kw = p.calls[0] if p.calls else {}
        if kw.get("max_version") is None:
            rep.failed(C_MAXV, f"__dlpack__ called with {kw}: no max_version", str(spec),
                       repro(spec, make) + "\nprint(producer.calls)")
        else:
            rep.passed(C_MAXV)
        del r
        gc.collect()
        if p.deleted != 1:
            rep.failed(C_RELEASE, f"deleter called {p.deleted} times after the result died",
                       str(spec), repro(spec, make) + "\ndel result; print(producer.deleted)")
        else:
            rep.passed(C_RELEASE)
        p.settle()
    # legacy-only producer
    legacy = LegacyOnly(D.Producer(a, legacy_only=True))
    try:
        r = fn(legacy)
    except (TypeError, BufferError):
        rep.passed(C_MAXV)
    except Exception as e:  # noqa: BLE001
        rep.failed(C_MAXV, f"a legacy-only producer raised {type(e).__name__}: {e}", str(spec),
                   repro(spec, "LegacyOnly(...)"))
    else:
        try:
            ok = read(r, spec).tobytes() == a.tobytes()
        except Exception:  # noqa: BLE001
            ok = False
        if ok:
            rep.passed(C_MAXV)
        else:
            rep.failed(C_MAXV, "misread a legacy-only producer", str(spec),
                       repro(spec, "LegacyOnly(...)"))
        del r
    _settle(legacy.inner)
    # a capsule already consumed, and a wrongly named one
    p = D.Producer(a, reuse_capsule=True)
    try:
        r1 = fn(p)
    except Exception:  # noqa: BLE001
        r1 = None
    try:
        r2 = fn(p)
    except Exception:  # noqa: BLE001
        rep.passed(C_CONSUMED)
    else:
        rep.failed(C_CONSUMED, "accepted a capsule it had already consumed", str(spec),
                   repro(spec, "DLPackProducer(spec.numpy(), reuse_capsule=True)") +
                   "\nagain = " + "consumer(producer)  # must raise")
        del r2
    del r1
    _settle(p)
    p = D.Producer(a, name=b"not_a_tensor")
    try:
        r = fn(p)
    except Exception:  # noqa: BLE001
        rep.passed(C_NAME)
    else:
        rep.failed(C_NAME, "accepted a capsule named 'not_a_tensor'", str(spec),
                   repro(spec, "DLPackProducer(spec.numpy(), name=b'not_a_tensor')"))
        del r
    _settle(p)


def _settle(p: D.Producer) -> None:
    """Collect garbage first only when a tensor of p is still alive: a result
    caught in a reference cycle then gets its chance to call the deleter
    before settle() does. A full collection costs tenths of a second in a
    process with a big heap, and most consumers release by reference count."""
    if p.pending():
        gc.collect()
    p.settle()


__all__ = ["CONSUMER_RULES", "LegacyOnly", "consumer"]
