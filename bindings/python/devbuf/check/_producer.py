"""Producer checks: what an exporter must do, asked of objects a factory makes.

Each check reads the object only through the protocol under test (a buffer
request made with ctypes exactly as a C consumer makes it, a DLPack capsule
read in place, the Arrow structs behind a capsule, pickle), and compares what
it finds with the ArraySpec the object was made from.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import pickle
import struct
import sys
import warnings
from typing import (Any, Callable, Collection, Dict, Iterable, Iterator, List, Optional,
                    Sequence, Tuple, Union, cast)

import numpy as np
import numpy.typing as npt

from . import _capi as C
from . import _dlpack as D
from ._report import Report, RULES, Rule, rule
from ._spec import ArraySpec, default_cases, same_values

# What the kit checks: factory(spec) -> the producer's object (or None for a
# spec it cannot make). The object is foreign (any library's array): Any.
Factory = Callable[[ArraySpec], Any]
# read(obj) -> a NumPy array of the object's values
ObjectReader = Callable[[Any], npt.NDArray[Any]]

# ---- the rules ------------------------------------------------------------------------
P = "producer"
BP_ANSWER = rule("bp.answer", P, "buffer", "Buffer request types; test_buffer.py verify()",
                 "an answered request fills exactly what it asked for: shape with PyBUF_ND, "
                 "strides with PyBUF_STRIDES (else C-contiguous), suboffsets only with "
                 "PyBUF_INDIRECT, format with PyBUF_FORMAT and NULL without it, "
                 "len == itemsize * product(shape), the contiguity asked for, obj set, and "
                 "the same items as the full answer")
BP_REFUSE = rule("bp.refuse", P, "buffer", "contiguity requests (PyBUF_C/F/ANY_CONTIGUOUS, "
                 "PyBUF_ND without PyBUF_STRIDES)",
                 "a request whose contiguity the exporter cannot meet raises BufferError "
                 "instead of answering with another layout")
BP_WRITABLE = rule("bp.writable_readonly", P, "buffer", "PyBUF_WRITABLE: 'If the exporter "
                   "cannot provide a writable buffer ... it MUST raise BufferError'",
                   "a PyBUF_WRITABLE request to a read-only exporter raises BufferError, "
                   "never answers readonly=1")
BP_ERROR = rule("bp.error_type", P, "buffer", "getbufferproc: 'If the request cannot be met "
                "... raise BufferError'",
                "an exporter that cannot answer a request raises BufferError (not ValueError "
                "or TypeError)")
BP_SATISFIABLE = rule("bp.satisfiable", P, "buffer", "test_buffer.py: every request its "
                      "exporters can meet is answered",
                      "a request that the exporter's own full answer satisfies (layout, "
                      "writability) is answered, not refused")
BP_SIMPLE_FORMAT = rule("bp.simple_format", P, "buffer", "PyBUF_FORMAT 'can be |'d to any of "
                        "the flags except PyBUF_SIMPLE, because the latter already implies "
                        "format B'",
                        "a PyBUF_FORMAT request without PyBUF_ND is refused or answered with "
                        "format NULL or 'B': a flat byte export cannot carry an item format")
BP_FORMAT = rule("bp.format_itemsize", P, "struct", "struct.calcsize; PEP 3118 'T{}' layout "
                 "as NumPy reads it",
                 "the exported format describes items of exactly itemsize bytes, under "
                 "struct's rules or NumPy's (so that the exporter's own library can re-import "
                 "it)")
BP_VALUES = rule("bp.values", P, "buffer", "Buffer structure: buf, shape, strides",
                 "the full answer (PyBUF_FULL_RO) describes the array's shape, item size and "
                 "values")
BP_EXPORTS = rule("bp.exports", P, "buffer", "PyBuffer_Release; 'obj: a new reference to the "
                  "exporting object'",
                  "each export holds a reference that its release gives back: after every "
                  "export is released, the exporter's reference count (and its export count, "
                  "if it shows one) is what it was")
DL_DEVICE = rule("dl.device", P, "dlpack", "__dlpack_device__; DLTensor.device",
                 "__dlpack_device__() returns (device_type, device_id) ints, and every "
                 "capsule's dl_tensor.device agrees with it")
DL_NAMES = rule("dl.names", P, "dlpack", "Implementation: capsule names; max_version",
                "__dlpack__() without max_version answers a 'dltensor' capsule (the caller "
                "cannot read a versioned one); with max_version >= (1, 0) a "
                "'dltensor_versioned' (or, from a producer without 1.x, a 'dltensor'); a "
                "fresh, unconsumed capsule on every call")
DL_VERSION = rule("dl.version", P, "dlpack", "__dlpack__(max_version=...): the producer must "
                  "not answer a newer major version",
                  "a versioned capsule's major version is 1 and not above the max_version "
                  "asked for; max_version below (1, 0) gets a legacy capsule")
DL_VALUES = rule("dl.values", P, "dlpack", "DLTensor: data, byte_offset, shape, strides, dtype "
                 "(0-d, empty and offset arrays included)",
                 "the capsule's dtype, shape, strides, byte_offset and data describe the "
                 "array's values; shape is non-NULL for ndim > 0; NULL strides only for a "
                 "compact row-major tensor")
DL_READONLY = rule("dl.readonly", P, "dlpack", "DLPACK_FLAG_BITMASK_READ_ONLY (DLPack 1.0)",
                   "a read-only array goes out with the READ_ONLY flag in a versioned capsule, "
                   "and is refused (BufferError) in a legacy capsule, which cannot say so")
DL_COPY = rule("dl.copy", P, "dlpack", "Semantics: copy=True, DLPACK_FLAG_BITMASK_IS_COPIED",
               "copy=True gives new memory, flagged IS_COPIED, whose strides describe the "
               "copy (NULL, or a dense layout: row-major, or another order of the axes "
               "as NumPy's order='K' copies), holding the same values")
DL_NOCOPY = rule("dl.copy_false", P, "dlpack", "Semantics: copy=False 'must not copy'",
                 "copy=False exports the array's own memory without IS_COPIED, or raises")
DL_DL_DEVICE = rule("dl.dl_device", P, "dlpack", "__dlpack__(dl_device=...) (array API v2023)",
                    "dl_device equal to __dlpack_device__() is accepted; a device the producer "
                    "cannot export to raises (BufferError or ValueError), never a capsule on "
                    "another device than the one asked for")
DL_STREAM = rule("dl.stream", P, "dlpack", "Semantics: stream (None on CPU)",
                 "stream=None is accepted on the array's own device")
DL_DELETER = rule("dl.deleter", P, "dlpack", "Implementation: PyCapsule_Destructor calls the "
                  "deleter only for an unconsumed 'dltensor' capsule",
                  "an unconsumed capsule, dropped, runs its deleter (the producer's reference "
                  "comes back); a consumed one (renamed, deleter called by the consumer) does "
                  "not run it again")
def _iface_rules(cuda: bool) -> Dict[str, str]:
    p, spec = ("cai", "cai") if cuda else ("ai", "ai")
    name = "__cuda_array_interface__" if cuda else "__array_interface__"
    out = {
        "version": rule(f"{p}.version", P, spec, "version",
                        "version is 3" + (" (2 accepted, no stream)" if cuda else "")),
        "typestr": rule(f"{p}.typestr", P, spec, "typestr, shape",
                        f"{name} is a dict; typestr is a type string (byte order, kind, size) "
                        "of the array's item size and kind; shape a tuple of ints (not bools) "
                        "equal to the array's"),
        "descr": rule(f"{p}.descr", P, spec, "descr",
                      "descr, when given, is a list of (name, typestr[, shape]) tuples that "
                      "describes typestr's item size"),
        "data": rule(f"{p}.data", P, spec, "data",
                     "data is a (pointer, read_only) tuple of an int and a bool" +
                     ("" if cuda else " (or a buffer, or None)") + ", the pointer non-zero "
                     "for a non-empty array, read_only True for a read-only array"),
        "strides": rule(f"{p}.strides", P, spec, "strides: 'None ... C-style contiguous'",
                        "strides is None (only for a C-contiguous array) or a tuple of ndim "
                        "ints (not bools) matching the layout" +
                        ("; None for a C-contiguous array (v3)" if cuda else "")),
        "mask": rule(f"{p}.mask", P, spec, "mask",
                     f"mask is absent or None, or an object with a {name} of the array's "
                     "shape"),
    }
    if cuda:
        out["stream"] = rule("cai.stream", P, spec, "stream (v3): None, or an int other "
                             "than 0", "stream is absent, None, or a non-zero int")
    else:
        out["values"] = rule("ai.values", P, spec, "data, offset, strides",
                             "offset is an int >= 0, and data + offset with the strides "
                             "describe the array's values")
    return out


_IFACE_RULES = {False: _iface_rules(False), True: _iface_rules(True)}
AR_NAMES = rule("arrow.names", P, "arrow", "PyCapsule interface: capsule names",
                "__arrow_c_array__ returns ('arrow_schema', 'arrow_array') capsules, "
                "__arrow_c_device_array__ ('arrow_schema', 'arrow_device_array')")
AR_RELEASE = rule("arrow.release", P, "arrow", "Released structure: 'the release callback "
                  "MUST ... mark the structure as released by setting release to NULL'",
                  "every exported ArrowSchema / ArrowArray has a release callback, which marks "
                  "the struct released")
AR_DEVICE = rule("arrow.device", P, "arrow", "ArrowDeviceArray.device_type, sync_event",
                 "host memory says ARROW_DEVICE_CPU, and has no sync_event to wait on")
AR_VALUES = rule("arrow.values", P, "arrow", "Arrow C data interface: buffers, offset, length",
                 "the exported format, length, offset and data buffer hold the array's values")
PK_ROUNDTRIP = rule("pickle.roundtrip", P, "pickle", "pickle protocol 5, in-band",
                    "pickle.loads(pickle.dumps(obj, protocol=5)) holds the same values")
PK_OOB = rule("pickle.out_of_band", P, "pickle", "buffer_callback / buffers=",
              "with a buffer_callback, the out-of-band PickleBuffers plus the stream rebuild "
              "the same values, and loads without them fails")
DX_PLAIN = rule("dx.plain_refused", P, "device", "'a consumer that did not ask for "
                "PyBUF_DEVICE must never receive device memory'",
                "memory the host cannot read is refused (BufferError) to a request without "
                "PyBUF_DEVICE")
DX_UNASKED = rule("dx.no_unasked_fields", P, "device", "backport: the extended fields are "
                  "written only for a PyBUF_DEVICE request",
                  "a request without PyBUF_DEVICE leaves the extended Py_buffer fields "
                  "(flags, ext_flags, device, device_info) untouched")
DX_ADVERTISED = rule("dx.advertised", P, "device", "bf_supported_flags / "
                     "PyObject_CheckBufferSupports",
                     "an exporter that advertises PyBUF_DEVICE answers a PyBUF_DEVICE "
                     "request, with the same shape, format and strides as a plain one for "
                     "host memory")
DX_ANSWER = rule("dx.answer", P, "device", "PyBUF_DEVICE: flags, device, device_info",
                 "device memory answers a PyBUF_DEVICE request (every request of the buffer "
                 "rules, with PyBUF_DEVICE added, is then held to those rules: shape, strides, "
                 "format, writability), setting PyBUF_DEVICE in flags and a device identifier "
                 "other than 'cpu', the same in every answer, and a device_info that the "
                 "identifier's reader (devbuf.view) takes, with its event")
CD_FORMAT = rule("dtypes.format", P, "dtypes", "'[id$payload;alt$payload]' items",
                 "a format with custom dtype items parses (devbuf.parse_format) and, where "
                 "the namespace is known, gives the exported itemsize")

PRODUCER_RULES: List[Rule] = [r for r in RULES.values() if r.role == P]

# ---- helpers ----------------------------------------------------------------------------


def _struct_size(fmt: str) -> Optional[int]:
    try:
        return struct.calcsize(fmt)
    except (struct.error, TypeError):
        return None


def _devbuf_size(fmt: str, mode: str) -> Optional[int]:
    import devbuf
    try:
        return devbuf.calcsize(fmt, mode)
    except (devbuf.FormatError, ValueError):
        return None


def format_sizes(fmt: str) -> Dict[str, Optional[int]]:
    """Item size of a buffer format under struct's, NumPy's and devbuf's rules."""
    return {"struct": _struct_size(fmt), "numpy": _devbuf_size(fmt, "numpy"),
            "default": _devbuf_size(fmt, "default")}


def _dl_dtype(dt: np.dtype[Any]) -> Optional[Tuple[int, int, int]]:
    """(code, bits, lanes) a DLPack producer must use for NumPy dtype dt, or None."""
    if dt.fields or dt.subdtype:
        return None
    bits = dt.itemsize * 8
    name = dt.name
    special = {"bfloat16": (4, 16, 1), "float8_e4m3fn": (10, 8, 1), "int4": (0, 4, 1)}
    if name in special:
        return special[name]
    code = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}.get(dt.kind)
    return None if code is None else (code, bits, 1)


def _gather_strided(ptr: int, shape: Sequence[int], strides_items: Sequence[int],
                    itemsize: int) -> bytes:
    return C._gather(ptr, shape, tuple(s * itemsize for s in strides_items), itemsize)


def _dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Do element strides describe a dense, non-overlapping layout of shape
    (C, Fortran or any other order of the axes), as a fresh copy must?"""
    dims = sorted((s, d) for d, s in zip(shape, strides) if d != 1)
    expect = 1
    for s, d in dims:
        if s != expect:
            return False
        expect *= d
    return True


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No automatic collection while a reference count is compared: it could
    free unrelated garbage (an old traceback) that held the object."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _refcount_settles(obj: object, fn: Callable[[], object]) -> int:
    """Run fn() and say by how much obj's reference count moved. (No gc.collect:
    capsules and exports are freed by reference counting, and a collection per
    case would cost more than all the checks in a big process.)"""
    with _no_gc():
        before = sys.getrefcount(obj)
        fn()
        return sys.getrefcount(obj) - before


def to_numpy(x: Any) -> npt.NDArray[Any]:
    """A NumPy array of x's values, through whatever protocol x offers."""
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass
    try:
        return np.asarray(memoryview(x))
    except (TypeError, BufferError, ValueError, NotImplementedError):
        pass
    if hasattr(x, "to_numpy"):
        return np.asarray(x.to_numpy())
    return np.asarray(x)


# ---- the checks, one protocol each ----------------------------------------------------------


class _Ctx:
    def __init__(self, report: Report, spec: ArraySpec, obj: Any,
                 repro: Callable[[ArraySpec], str]) -> None:
        self.report, self.spec, self.obj, self.repro = report, spec, obj, repro
        self.full: Optional[C.Answer] = None  # the PyBUF_FULL_RO answer, when there is one
        self.known_readonly = spec.readonly
        self.device_memory = False  # set by check_device: never read it from the host

    @property
    def host(self) -> Optional[bool]:
        """Is the object's memory host memory? True when it answers a plain buffer
        request or says kDLCPU; False for another DLPack device; else None."""
        if self.full is not None:
            return True
        try:
            return int(self.obj.__dlpack_device__()[0]) in (D.KDLCPU, D.KDLCUDAHOST)
        except Exception:  # noqa: BLE001
            return None

    def ok(self, rid: str) -> None:
        self.report.passed(rid, str(self.spec))

    def fail(self, rid: str, reason: str, lines: Sequence[str] = (),
             kind: Optional[str] = None) -> None:
        code = self.repro(self.spec)
        if lines:
            code += "\n" + "\n".join(lines)
        self.report.failed(rid, reason, str(self.spec), code, kind)

    def skip(self, rid: str, reason: str, applies: bool = False) -> None:
        self.report.skipped(rid, reason, applies)


def _ask(obj: object, req: int,
         gather: bool = True) -> Tuple[Optional[C.Answer], Optional[Exception]]:
    try:
        return C.getbuffer(obj, req, gather), None
    except Exception as e:  # noqa: BLE001 - which exception it was is the point
        return None, e


def check_buffer(c: _Ctx) -> None:
    obj, spec = c.obj, c.spec
    gather = not c.device_memory  # (answered wrongly, device memory must not be read)
    full, err = _ask(obj, C.PyBUF_FULL_RO, gather)
    bp_rules = (BP_ANSWER, BP_REFUSE, BP_WRITABLE, BP_ERROR, BP_SATISFIABLE, BP_SIMPLE_FORMAT,
                BP_FORMAT, BP_VALUES, BP_EXPORTS)
    base = 0  # PyBUF_DEVICE when the exporter answers device memory only
    if err is not None:
        if isinstance(err, TypeError) and ("bytes-like object is required" in str(err) or
                                           "does not support the buffer" in str(err)):
            for r in bp_rules + (DX_ANSWER,):
                c.skip(r, f"{type(obj).__name__} is not a buffer exporter")
            return
        if isinstance(err, BufferError):
            # Device memory is refused to a plain request (dx.plain_refused):
            # its answers to PyBUF_DEVICE requests are what gets checked.
            full, derr = _ask(obj, C.PyBUF_FULL_RO | C.PyBUF_DEVICE, gather=False)
            if full is not None and not _device_answer(full):
                # PyBUF_DEVICE only widens what is acceptable: a host answer
                # to it was owed to the plain request too. Either the plain
                # refusal is wrong, or device memory went out unmarked (an
                # interpreter with the extension built in clears the device
                # fields of an answer without the flag, so this is all a
                # consumer there can see of it).
                c.fail(DX_ANSWER, f"PyBUF_FULL_RO was refused ({err}), but "
                       "PyBUF_FULL_RO|PyBUF_DEVICE answered host memory (no PyBUF_DEVICE "
                       f"in flags {full.ext_flags or 0:#x}): device memory must be marked "
                       "PyBUF_DEVICE; host memory must not be refused to a plain request",
                       ["import devbuf.check",
                        "print(devbuf.check.getbuffer(obj, 0x100011c).as_dict())"
                        "  # PyBUF_FULL_RO|PyBUF_DEVICE"])
            if full is None or not _device_answer(full):
                why = f"PyBUF_FULL_RO refused: {err}" + (
                    f"; with PyBUF_DEVICE: {type(derr).__name__}: {derr}" if derr is not None
                    else "; its PyBUF_DEVICE answer is host memory")
                for r in bp_rules:
                    c.skip(r, why, applies=True)
                return
            base, gather = C.PyBUF_DEVICE, False
            c.device_memory = True
            _check_device_answer(c, full, full)
        else:
            c.fail(BP_ERROR, f"PyBUF_FULL_RO raised {type(err).__name__} ({err}), not "
                   "BufferError",
                   ["import ctypes; mv = memoryview(obj)  # raises " + type(err).__name__])
            return
    assert full is not None  # (_ask gives an answer or an error)
    if not base:
        c.full = full
    c.known_readonly = bool(full.readonly)
    dt = spec.np_dtype
    fmt = full.format.decode("latin-1") if full.format is not None else None
    # -- values ------------------------------------------------------------------------
    want = spec.values
    dev_values: Optional[npt.NDArray[Any]] = None
    if base and not (full.ext_flags or 0) & C.PyBUF_DEVICE:
        # (devbuf.view would take it for host memory and read the device's)
        c.skip(BP_VALUES, "the PyBUF_DEVICE answer does not say PyBUF_DEVICE (dx.answer): "
               "its values are not read", applies=True)
    elif base:
        try:  # devbuf's plugin for that identifier copies them to the host
            import devbuf
            with devbuf.view(obj) as v:
                dev_values = np.asarray(v.to_host()).view(dt).reshape(spec.shape)
        except Exception as exc:  # noqa: BLE001 - no plugin reads it: unchecked, said so
            c.skip(BP_VALUES, f"device {full.device!r}: its values cannot be read here "
                   f"({type(exc).__name__}: {exc})", applies=True)
    if full.shape != spec.shape and not (spec.shape == () and full.shape == ()):
        c.fail(BP_VALUES, f"PyBUF_FULL_RO answered shape {full.shape}, the array's is "
               f"{spec.shape}", ["print(memoryview(obj).shape)"])
    elif full.itemsize != dt.itemsize:
        c.fail(BP_VALUES, f"PyBUF_FULL_RO answered itemsize {full.itemsize}, the dtype's is "
               f"{dt.itemsize}", ["print(memoryview(obj).itemsize)"])
    elif full.data is not None and not same_values(
            np.frombuffer(full.data, dt).reshape(spec.shape), want):
        c.fail(BP_VALUES, "PyBUF_FULL_RO describes other values than the array holds",
               ["print(memoryview(obj).tobytes())"])
    elif dev_values is not None and not same_values(dev_values, want):
        c.fail(BP_VALUES, f"PyBUF_FULL_RO|PyBUF_DEVICE on {full.device!r} describes other "
               "values than the array holds", ["import devbuf; print(devbuf.view(obj).to_host())"])
    elif not base or dev_values is not None:  # (else skipped above: not readable here)
        c.ok(BP_VALUES)
    # -- format vs itemsize ------------------------------------------------------------------
    if fmt is not None:
        if "$" in fmt:
            _check_custom_format(c, fmt, full.itemsize)
        else:
            sizes = format_sizes(fmt)
            if full.itemsize in (sizes["struct"], sizes["numpy"]):
                c.ok(BP_FORMAT)
            else:
                said = ", ".join(f"{k} {v}" for k, v in sizes.items() if v is not None) or \
                    "no rule reads it"
                c.fail(BP_FORMAT, f"format {fmt!r} with itemsize {full.itemsize}: the format "
                       f"describes {said} bytes",
                       ["m = memoryview(obj)",
                        "print(m.format, m.itemsize)  # " + f"{fmt!r} {full.itemsize}",
                        "import numpy as np; np.asarray(m)  # the re-import fails or misreads"])
    # -- every request of test_buffer's table --------------------------------------------
    shape = full.shape if full.shape is not None else (full.len // max(full.itemsize, 1),)
    st = full.strides if full.strides is not None else C.c_strides(shape, full.itemsize)
    c_ok = C.is_contiguous(shape, st, full.itemsize, "C")
    f_ok = C.is_contiguous(shape, st, full.itemsize, "F")
    for req in C.ALL_REQUESTS:
        ans, e = _ask(obj, req | base, gather)
        name = C.request_name(req) + ("|PyBUF_DEVICE" if base else "")
        ask_line = f"print(devbuf.check.getbuffer(obj, {hex(req | base)}).as_dict())  # {name}"
        meetable = True
        if req & C.PyBUF_WRITABLE and full.readonly:
            if ans is not None:
                c.fail(BP_WRITABLE, f"{name} to a read-only exporter answered readonly="
                       f"{ans.readonly} instead of raising BufferError",
                       ["import devbuf.check", ask_line + ": answers, should raise BufferError"])
            else:
                c.ok(BP_WRITABLE)
            meetable = False
        need_c = (req & 0x20) or not (req & 0x10)  # no strides: C order, flat bytes too
        bad_layout = ((need_c and not c_ok) or (req & 0x40 and not f_ok) or
                      (req & 0x80 and not (c_ok or f_ok)))
        if bad_layout:
            meetable = False
            if ans is not None:
                c.fail(BP_REFUSE, f"{name} answered a layout that is not what it asked for "
                       f"(strides {full.strides})", ["import devbuf.check", ask_line])
            elif not (req & C.PyBUF_WRITABLE and full.readonly):
                c.ok(BP_REFUSE)
        if e is not None and not isinstance(e, BufferError):
            c.fail(BP_ERROR, f"{name} raised {type(e).__name__} ({e}), not BufferError",
                   ["import devbuf.check", ask_line])
            continue
        if e is not None:
            c.ok(BP_ERROR)
        flat_format = req & C.PyBUF_FORMAT and not req & C.PyBUF_ND
        if flat_format:
            if ans is not None and ans.format not in (None, b"B"):
                f = ans.format.decode("latin-1")
                if ans.shape is None:
                    kind = "an item format with no shape"
                    why = (f"{name} answered format {f!r} with no shape: a consumer cannot "
                           "tell the item count")
                else:  # (a shape unasked is bp.answer's finding; the format is this one)
                    kind = "an item format and a shape unasked"
                    why = (f"{name} (no PyBUF_ND) answered format {f!r} with shape "
                           f"{ans.shape}: a flat byte export carries no item format, so "
                           "the request was not met as asked")
                # (one finding whatever the item type: the format's content is not it)
                c.fail(BP_SIMPLE_FORMAT, why, ["import devbuf.check", ask_line], kind)
            else:
                c.ok(BP_SIMPLE_FORMAT)
        if ans is None:
            if meetable and not flat_format:
                c.fail(BP_SATISFIABLE, f"{name} refused ({e}) although the exporter's own "
                       "PyBUF_FULL_RO answer meets it", ["import devbuf.check", ask_line])
            elif meetable:
                c.ok(BP_SATISFIABLE)
            continue
        if meetable:
            c.ok(BP_SATISFIABLE)
        problem = _answer_problem(ans, req, full)
        if problem:
            c.fail(BP_ANSWER, f"{name}: {problem}", ["import devbuf.check", ask_line])
        else:
            c.ok(BP_ANSWER)
        if base:
            _check_device_answer(c, ans, full, name, ask_line)
    # -- export counts --------------------------------------------------------------------
    _check_exports(c, base)


def _device_answer(a: C.Answer) -> bool:
    """Did a PyBUF_DEVICE request get device memory (the flag, or an identifier
    other than 'cpu': dx.answer then says whether both are right)?"""
    return bool((a.ext_flags or 0) & C.PyBUF_DEVICE or a.device not in (None, b"cpu"))


def _check_device_answer(c: _Ctx, a: C.Answer, full: C.Answer, name: str = "PyBUF_FULL_RO",
                         ask_line: str = "") -> None:
    """dx.answer for one answer to a PyBUF_DEVICE request of device memory."""
    lines = ["import devbuf.check", ask_line] if ask_line else [
        "import devbuf.check",
        "print(devbuf.check.getbuffer(obj, 0x100011c).as_dict())  # PyBUF_FULL_RO|PyBUF_DEVICE"]
    name += "" if name.endswith("|PyBUF_DEVICE") else "|PyBUF_DEVICE"
    if not (a.ext_flags or 0) & C.PyBUF_DEVICE:
        c.fail(DX_ANSWER, f"{name} answered device memory without PyBUF_DEVICE in flags "
               f"({a.ext_flags:#x}): a consumer takes it for host memory", lines)
    elif a.device in (None, b"", b"cpu"):
        c.fail(DX_ANSWER, f"{name} answered device {a.device!r} for memory the host cannot "
               "read", lines)
    elif a.device != full.device:
        c.fail(DX_ANSWER, f"{name} answered device {a.device!r}, PyBUF_FULL_RO|PyBUF_DEVICE "
               f"{full.device!r}", lines)
    elif a is full:
        # device_info through the identifier's reader, and its event (the
        # flag is set: devbuf.view takes it as device memory)
        import devbuf
        try:
            with devbuf.view(c.obj) as v:
                ident = v.identifier
                event = v.sync.event if v.sync is not None else None
                del event  # read: a malformed device_info raises here
        except devbuf.PluginError as e:  # no plugin here for it: unchecked, not wrong
            c.skip(DX_ANSWER, f"{a.device!r}: {e}", applies=True)
            return
        except Exception as e:  # noqa: BLE001 - the reader's refusal is the finding
            c.fail(DX_ANSWER, f"devbuf.view(obj) (a PyBUF_DEVICE request) could not take "
                   f"{a.device!r}'s device_info: {type(e).__name__}: {e}",
                   ["import devbuf; devbuf.view(obj)"])
            return
        if (ident or "").encode() != a.device:
            c.fail(DX_ANSWER, f"devbuf.view(obj) reads device {ident!r}, the answer says "
                   f"{a.device!r}", ["import devbuf; print(devbuf.view(obj).identifier)"])
        else:
            c.ok(DX_ANSWER)
    else:
        c.ok(DX_ANSWER)


def _answer_problem(a: C.Answer, req: int, full: C.Answer) -> Optional[str]:
    if not a.obj:
        return "view.obj is NULL"
    if a.suboffsets is not None and not (req & 0x100):
        return "suboffsets without PyBUF_INDIRECT"
    if req & C.PyBUF_FORMAT:
        if a.format != full.format:
            return f"format {a.format!r}, the full answer's is {full.format!r}"
    elif a.format is not None:
        return f"format {a.format.decode('latin-1')!r} without PyBUF_FORMAT (must be NULL)"
    if req & C.PyBUF_WRITABLE and a.readonly:
        return "readonly=1 for a PyBUF_WRITABLE request"
    if a.len != full.len:
        return f"len {a.len}, the full answer's is {full.len}"
    if req & C.PyBUF_ND:
        if a.shape is None:
            return "shape NULL for a PyBUF_ND request"
        if a.shape != full.shape:
            return f"shape {a.shape}, the full answer's is {full.shape}"
        n = 1
        for d in a.shape:
            n *= d
        if n * a.itemsize != a.len:
            return f"len {a.len} != itemsize {a.itemsize} * {n} items"
        if req & 0x10 and a.strides is None and a.ndim > 0:
            return "strides NULL for a PyBUF_STRIDES request"
        st = a.strides if a.strides is not None else C.c_strides(a.shape, a.itemsize)
        if (req & 0x20 or not req & 0x10) and not C.is_contiguous(a.shape, st, a.itemsize, "C"):
            return f"strides {st} are not C-contiguous"
        if req & 0x40 and not C.is_contiguous(a.shape, st, a.itemsize, "F"):
            return f"strides {st} are not Fortran-contiguous"
        if a.data is not None and full.data is not None and a.data != full.data:
            return "describes other items than the PyBUF_FULL_RO answer"
    elif a.shape is not None:
        return "shape set without PyBUF_ND (must be NULL)"
    elif a.ndim == 0 and a.len != a.itemsize:
        return (f"ndim 0 ('buf points to a single item representing a scalar') with len "
                f"{a.len} and itemsize {a.itemsize}")
    return None


def _check_exports(c: _Ctx, base: int = 0) -> None:
    obj = c.obj
    counter = getattr(obj, "exports", None)
    held = []

    def hold_and_release() -> Optional[int]:
        for req in (C.PyBUF_FULL_RO, C.PyBUF_RECORDS_RO, C.PyBUF_SIMPLE):
            try:
                held.append(C.Held(obj, req | base))
            except Exception:  # noqa: BLE001 - refusals are bp.refuse's and bp.error_type's
                pass
        during = getattr(obj, "exports", None)
        for h in reversed(held):
            h.release()
        return during

    with _no_gc():
        before = sys.getrefcount(obj)
        during = hold_and_release()
        after = sys.getrefcount(obj)
    if after != before:
        c.fail(BP_EXPORTS, f"{len(held)} exports taken and released changed the exporter's "
               f"reference count by {after - before}",
               ["import sys, devbuf.check", "n = sys.getrefcount(obj)",
                "h = devbuf.check.Held(obj, 0x11c); h.release()",
                "print(sys.getrefcount(obj) - n)  # not 0"])
    elif isinstance(counter, int) and (getattr(obj, "exports", 0) != counter or
                                       during != counter + len(held)):
        c.fail(BP_EXPORTS, f"exports counter read {counter}, {during} with {len(held)} held, "
               f"{getattr(obj, 'exports', None)} after release")
    else:
        c.ok(BP_EXPORTS)


def _check_custom_format(c: _Ctx, fmt: str, itemsize: int) -> None:
    import devbuf
    try:
        f = devbuf.parse_format(fmt, allow_unknown=True)
    except devbuf.FormatError as e:
        c.fail(CD_FORMAT, f"format {fmt!r} does not parse: {e}")
        return
    if not f.has_unknown and f.itemsize != itemsize:
        c.fail(CD_FORMAT, f"format {fmt!r} describes {f.itemsize} bytes, itemsize is {itemsize}")
    else:
        c.ok(CD_FORMAT)


# ---- DLPack --------------------------------------------------------------------------------

def _dlpack(obj: Any, **kw: object) -> Tuple[Optional[object], Optional[Exception]]:
    try:
        with warnings.catch_warnings():  # the legacy form is asked on purpose
            warnings.simplefilter("ignore", DeprecationWarning)
            return obj.__dlpack__(**kw), None
    except Exception as e:  # noqa: BLE001
        return None, e


class Unreadable(Exception):
    """A tensor's values could not be read on this machine (the reason says why):
    a skip, never a pass."""


class _OneCapsule:
    """Hands one capsule the producer already made to devbuf.from_dlpack, so
    that what is read is what the producer exported, not a fresh export."""

    def __init__(self, cap: Optional[object], dev: Tuple[int, int]) -> None:
        self.cap, self.dev = cap, dev

    def __dlpack__(self, **kw: object) -> object:
        cap, self.cap = self.cap, None
        if cap is None:
            raise BufferError("the capsule was handed over already")
        return cap

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.dev


def _device_values(cap: Optional[object], info: D.CapsuleInfo,
                   spec: ArraySpec) -> Tuple[Tuple[int, ...], bytes]:
    """The C-order bytes of a capsule on memory the host cannot read, copied
    to the host by devbuf (its plugin for that device: devbuf.cuda for
    kDLCUDA, devbuf.sim for the simulator). Raises Unreadable when no plugin
    takes it."""
    import devbuf
    try:
        v = devbuf.from_dlpack(_OneCapsule(cap, info["device"]))
        got = np.asarray(v.to_host())
    except Exception as e:  # noqa: BLE001 - which plugin is missing is the reason
        raise Unreadable(f"device {info['device']}: the host cannot read it and devbuf could "
                         f"not copy it ({type(e).__name__}: {str(e)[:100]})") from None
    return got.shape, got.tobytes()


def _dl_values_problem(info: D.CapsuleInfo, spec: ArraySpec, readable: bool = True,
                       cap: Optional[object] = None) -> Optional[str]:
    """None when the tensor holds spec's values, else what is wrong. Memory the
    host cannot read is read through devbuf when `cap` is given (Unreadable
    when that fails too), never passed unread."""
    dt = spec.np_dtype
    want_dtype = _dl_dtype(dt)
    if want_dtype is not None and info["dtype"] != want_dtype:
        return f"dtype (code, bits, lanes) {info['dtype']}, expected {want_dtype}"
    if info["null_shape"]:
        return f"shape is NULL with ndim {info['ndim']}"
    if info["shape"] != spec.shape:
        return f"shape {info['shape']}, the array's is {spec.shape}"
    n = int(np.prod(spec.shape, dtype=np.int64))
    if n == 0:
        return None
    if info["device"][0] not in (D.KDLCPU, D.KDLCUDAHOST) or not readable:
        if cap is None:
            raise Unreadable(f"device {info['device']}: the host cannot read it")
        shape, got = _device_values(cap, info, spec)
        if shape != spec.shape or got != spec.values.tobytes():
            return (f"the tensor on device {info['device']} (strides {info['strides']}, "
                    f"byte_offset {info['byte_offset']}), copied to the host by devbuf, holds "
                    "other values than the array")
        return None
    itemsize = dt.itemsize
    strides = info["strides"]
    if strides is None:
        strides = tuple(s // itemsize for s in C.c_strides(spec.shape, itemsize))
    if not info["data"]:
        return "data is NULL for a non-empty tensor"
    got = _gather_strided(info["data"] + info["byte_offset"], spec.shape, strides, itemsize)
    if got != spec.values.tobytes():
        return (f"the tensor (strides {info['strides']}, byte_offset {info['byte_offset']}) "
                f"holds other values than the array")
    return None


def check_dlpack(c: _Ctx) -> None:
    obj, spec = c.obj, c.spec
    dl_rules = (DL_DEVICE, DL_NAMES, DL_VERSION, DL_VALUES, DL_READONLY, DL_COPY, DL_NOCOPY,
                DL_DL_DEVICE, DL_STREAM, DL_DELETER)
    if not hasattr(obj, "__dlpack__"):
        for r in dl_rules:
            c.skip(r, f"{type(obj).__name__} has no __dlpack__")
        return
    if spec.np_dtype.fields:
        # DLPack has no record dtypes: the producer must refuse; nothing else to check.
        cap, e = _dlpack(obj, max_version=(1, 0))
        if cap is not None:
            c.fail(DL_VALUES, "a record dtype went out as a DLPack tensor: DLPack has no "
                   "record types", ["cap = obj.__dlpack__(max_version=(1, 0))  # no error"])
        return
    try:
        dev = obj.__dlpack_device__()
        dev = (int(dev[0]), int(dev[1]))
    except Exception as e:  # noqa: BLE001
        c.fail(DL_DEVICE, f"__dlpack_device__() failed: {type(e).__name__}: {e}",
               ["obj.__dlpack_device__()"])
        return
    # -- names, versions ---------------------------------------------------------------
    legacy, le = _dlpack(obj)
    versioned, ve = _dlpack(obj, max_version=(1, 0))
    readonly = c.known_readonly
    if versioned is None and isinstance(ve, TypeError):
        c.skip(DL_NAMES, "__dlpack__ takes no max_version (pre-2023 signature)")
    if legacy is not None:
        name = D.capsule_name(legacy)
        if name != "dltensor":
            c.fail(DL_NAMES, f"__dlpack__() (no max_version) answered a {name!r} capsule",
                   ["cap = obj.__dlpack__()", "print(cap)  # want 'dltensor'"])
        else:
            c.ok(DL_NAMES)
        if readonly:
            c.fail(DL_READONLY, "a read-only array went out in a legacy capsule, which has no "
                   "read-only flag: a consumer may write to it",
                   ["cap = obj.__dlpack__()  # should raise BufferError"])
    elif readonly and versioned is not None:
        c.ok(DL_READONLY)  # refused: the legacy form cannot say read-only
    old, oe = _dlpack(obj, max_version=(0, 8))
    if old is not None and D.capsule_name(old) != "dltensor":
        c.fail(DL_VERSION, f"max_version=(0, 8) answered a {D.capsule_name(old)!r} capsule",
               ["cap = obj.__dlpack__(max_version=(0, 8))", "print(cap)  # want 'dltensor'"])
    info = info_cap = None
    for cap in (versioned, legacy):
        if cap is None:
            continue
        try:
            info = D.read_capsule(cap)
        except ValueError as e:
            c.fail(DL_NAMES, str(e), ["cap = obj.__dlpack__(max_version=(1, 0)); print(cap)"])
            return
        info_cap = cap
        break
    if info is None:
        reason = f"no capsule: {ve or le}"
        for r in dl_rules:
            c.skip(r, reason)
        return
    if versioned is not None:
        vname = D.capsule_name(versioned)
        if vname not in ("dltensor_versioned", "dltensor"):
            c.fail(DL_NAMES, f"max_version=(1, 0) answered a {vname!r} capsule")
        again, _ = _dlpack(obj, max_version=(1, 0))
        if again is versioned or (again is not None and D.capsule_name(again).startswith("used")):
            c.fail(DL_NAMES, "a second __dlpack__ call answered the same or a used capsule",
                   ["a = obj.__dlpack__(max_version=(1, 0))",
                    "b = obj.__dlpack__(max_version=(1, 0)); print(a is b, b)"])
        if info["versioned"]:
            if info["version"] is None or info["version"][0] != 1:  # (versioned: not None)
                c.fail(DL_VERSION, f"versioned capsule says DLPack {info['version']}, "
                       "max_version asked (1, 0)",
                       ["cap = obj.__dlpack__(max_version=(1, 0))  # read major"])
            else:
                c.ok(DL_VERSION)
            if readonly:
                if info["flags"] & D.FLAG_READ_ONLY:
                    c.ok(DL_READONLY)
                else:
                    c.fail(DL_READONLY, "a read-only array's versioned capsule lacks the "
                           "READ_ONLY flag", ["import numpy as np",
                                              "y = np.from_dlpack(obj); y[...] = 0  # writes"])
        elif old is not None:
            c.ok(DL_VERSION)
    # -- device --------------------------------------------------------------------------
    if info["device"] != dev:
        c.fail(DL_DEVICE, f"__dlpack_device__() says {dev}, the capsule's device is "
               f"{info['device']}", ["print(obj.__dlpack_device__())"])
    else:
        c.ok(DL_DEVICE)
    # -- values ----------------------------------------------------------------------------
    # (device memory: read through devbuf from a capsule of its own, so that the
    # one the later checks compare against stays unconsumed)
    vcap = info_cap
    if info["device"][0] not in (D.KDLCPU, D.KDLCUDAHOST) or c.device_memory:
        vcap, _ = _dlpack(obj, max_version=(1, 0)) if versioned is not None else _dlpack(obj)
    try:
        problem = _dl_values_problem(info, spec, not c.device_memory, vcap)
    except Unreadable as e:
        c.skip(DL_VALUES, str(e))
    else:
        if problem:
            c.fail(DL_VALUES, problem, ["import numpy as np", "print(np.from_dlpack(obj))"])
        else:
            c.ok(DL_VALUES)
    # -- stream, dl_device -------------------------------------------------------------------
    if versioned is not None:
        cap, err = _dlpack(obj, max_version=(1, 0), stream=None)
        if cap is None:
            c.fail(DL_STREAM, f"stream=None raised {type(err).__name__}: {err}",
                   ["obj.__dlpack__(max_version=(1, 0), stream=None)"])
        else:
            c.ok(DL_STREAM)
        cap, err = _dlpack(obj, max_version=(1, 0), dl_device=dev)
        if cap is None and not isinstance(err, TypeError):
            c.fail(DL_DL_DEVICE, f"dl_device={dev} (its own device) raised "
                   f"{type(err).__name__}: {err}", [f"obj.__dlpack__(max_version=(1, 0), "
                                                  f"dl_device={dev})"])
        elif cap is not None:
            other = (D.KDLCUDA, 0) if dev[0] != D.KDLCUDA else (D.KDLCPU, 0)
            cap2, e2 = _dlpack(obj, max_version=(1, 0), dl_device=other)
            if cap2 is not None and D.read_capsule(cap2)["device"] != other:
                c.fail(DL_DL_DEVICE, f"dl_device={other} answered a capsule on "
                       f"{D.read_capsule(cap2)['device']}",
                       [f"cap = obj.__dlpack__(max_version=(1, 0), dl_device={other})"])
            elif cap2 is None and not isinstance(e2, (BufferError, ValueError,
                                                      NotImplementedError)):
                c.fail(DL_DL_DEVICE, f"dl_device={other} raised {type(e2).__name__} ({e2}), "
                       "not BufferError or ValueError",
                       [f"obj.__dlpack__(max_version=(1, 0), dl_device={other})"])
            else:
                c.ok(DL_DL_DEVICE)
        # -- copies --------------------------------------------------------------------------
        _check_copies(c, info, dev)
    _check_deleter(c)


def _check_copies(c: _Ctx, info: D.CapsuleInfo, dev: Tuple[int, int]) -> None:
    obj, spec = c.obj, c.spec
    cap, err = _dlpack(obj, max_version=(1, 0), copy=True)
    line = "import numpy as np; print(np.from_dlpack(obj, copy=True))  # want " + \
        np.array2string(spec.values.ravel()[:6], separator=" ")
    if cap is None:
        if not isinstance(err, (TypeError, BufferError, ValueError, NotImplementedError)):
            c.fail(DL_COPY, f"copy=True raised {type(err).__name__}: {err}")
        else:
            c.skip(DL_COPY, f"copy=True not offered: {type(err).__name__}: {err}")
    elif D.capsule_name(cap) == "dltensor_versioned":
        ci = D.read_capsule(cap)
        n = int(np.prod(spec.shape, dtype=np.int64))
        compact = ci["strides"] is None or _dense(spec.shape, ci["strides"])
        if not ci["flags"] & D.FLAG_IS_COPIED:
            c.fail(DL_COPY, "copy=True answered without the IS_COPIED flag",
                   ["cap = obj.__dlpack__(max_version=(1, 0), copy=True)  # flags lack 2"])
        elif n and ci["data"] + ci["byte_offset"] == info["data"] + info["byte_offset"]:
            c.fail(DL_COPY, "copy=True answered the array's own memory", [line])
        elif n and not compact:
            c.fail(DL_COPY, f"copy=True answered strides {ci['strides']} for shape "
                   f"{spec.shape}: a fresh copy is packed, so strides that are not a dense "
                   "layout (the source's?) reach past it", [line])
        else:
            try:
                problem = _dl_values_problem(ci, spec, not c.device_memory, cap)
            except Unreadable as e:
                c.skip(DL_COPY, f"copy=True answered a copy whose values cannot be read: {e}")
            else:
                if problem:
                    c.fail(DL_COPY, "copy=True: " + problem, [line])
                else:
                    c.ok(DL_COPY)
    cap, err = _dlpack(obj, max_version=(1, 0), copy=False)
    if cap is None:
        if isinstance(err, (BufferError, ValueError, TypeError, NotImplementedError)):
            c.ok(DL_NOCOPY) if not isinstance(err, TypeError) else c.skip(DL_NOCOPY, str(err))
        else:
            c.fail(DL_NOCOPY, f"copy=False raised {type(err).__name__}: {err}")
        return
    ci = D.read_capsule(cap)
    if ci["flags"] & D.FLAG_IS_COPIED or (
            ci["data"] + ci["byte_offset"] != info["data"] + info["byte_offset"]):
        c.fail(DL_NOCOPY, "copy=False answered a copy",
               ["cap = obj.__dlpack__(max_version=(1, 0), copy=False)"])
    else:
        c.ok(DL_NOCOPY)


def _check_deleter(c: _Ctx) -> None:
    obj = c.obj
    kw = {"max_version": (1, 0)}  # (read-only arrays go out only in versioned capsules)

    def drop() -> None:
        cap, e = _dlpack(obj, **kw)
        del cap

    def consume() -> None:
        cap, e = _dlpack(obj, **kw)
        if cap is not None:
            D.consume(cap)
        del cap

    d1 = _refcount_settles(obj, drop)
    d2 = _refcount_settles(obj, consume)
    if d1:
        c.fail(DL_DELETER, f"an unconsumed capsule, dropped, left the producer's reference "
               f"count {d1:+d}: its destructor did not run the deleter",
               ["import sys; n = sys.getrefcount(obj)",
                "cap = obj.__dlpack__(max_version=(1, 0)); del cap",
                "print(sys.getrefcount(obj) - n)  # not 0"])
    elif d2:
        c.fail(DL_DELETER, f"a consumed capsule (renamed, deleter called once) left the "
               f"producer's reference count {d2:+d}")
    else:
        c.ok(DL_DELETER)


# ---- the array interfaces (__array_interface__, __cuda_array_interface__) ------------------

_TYPESTR_KINDS = "btiufcmMOSUV"


def _typestr_size(ts: object) -> Optional[Tuple[str, int]]:
    """(kind, itemsize) of a well-formed typestr '<i4', else None."""
    if not (isinstance(ts, str) and len(ts) >= 3 and ts[0] in "<>|=" and
            ts[1] in _TYPESTR_KINDS and ts[2:].isdigit()):
        return None
    return ts[1], int(ts[2:])


def _descr_size(descr: object) -> Optional[int]:
    """The item size a descr list describes (None when it is malformed)."""
    if not isinstance(descr, list) or not descr:
        return None
    total = 0
    for f in descr:
        if not (isinstance(f, tuple) and len(f) in (2, 3) and isinstance(f[0], (str, tuple))):
            return None
        if isinstance(f[1], list):
            size = _descr_size(f[1])
        else:
            k = _typestr_size(f[1])
            size = k[1] if k is not None else None
        if size is None:
            return None
        n = 1
        if len(f) == 3:
            if not (isinstance(f[2], tuple) and all(isinstance(d, int) and
                                                    not isinstance(d, bool) for d in f[2])):
                return None
            for d in f[2]:
                n *= d
        total += size * n
    return total


def _ints(t: object, n: int) -> bool:
    return (isinstance(t, tuple) and len(t) == n and
            all(isinstance(x, int) and not isinstance(x, bool) for x in t))


def check_interface(c: _Ctx, cuda: bool) -> None:
    """The rules of one array interface (v3) on c.obj."""
    obj, spec = c.obj, c.spec
    attr = "__cuda_array_interface__" if cuda else "__array_interface__"
    R = _IFACE_RULES[cuda]
    try:
        d = getattr(obj, attr)
    except Exception as e:  # noqa: BLE001 - absent, or refused for this memory
        for r in R.values():
            c.skip(r, f"no {attr} ({type(e).__name__})")
        return
    line = [f"print(obj.{attr})"]
    if not isinstance(d, dict):
        c.fail(R["typestr"], f"{attr} is a {type(d).__name__}, not a dict", line)
        return
    v = d.get("version")
    if cuda and v in (2, 3) or not cuda and v == 3:
        c.ok(R["version"])
    else:
        c.fail(R["version"], f"version {v!r}: want 3" + (" (2 accepted)" if cuda else ""), line)
    dt = spec.np_dtype
    ts = d.get("typestr")
    k = _typestr_size(ts)
    shape = d.get("shape")
    nd = len(spec.shape)
    if k is None:
        c.fail(R["typestr"], f"typestr {ts!r} is not a type string (byte order, kind, size)",
               line)
    elif k[1] != dt.itemsize or not (k[0] == dt.kind or k[0] == "V" or
                                     (dt.kind == "V" and not dt.fields)):
        c.fail(R["typestr"], f"typestr {ts!r} for dtype {dt} (kind {dt.kind!r}, itemsize "
               f"{dt.itemsize})", line)
    elif not isinstance(shape, tuple) or not _ints(shape, nd) or shape != spec.shape:
        c.fail(R["typestr"], f"shape {shape!r}: want a tuple of {nd} ints, {spec.shape}", line)
    else:
        c.ok(R["typestr"])
    descr = d.get("descr")
    if descr is not None:
        size = _descr_size(descr)
        if size is None:
            c.fail(R["descr"], f"descr {descr!r:.120} is not a list of (name, typestr[, shape]) "
                   "tuples", line)
        elif k is not None and size != k[1] and not (len(descr) == 1 and descr[0][0] == ""):
            c.fail(R["descr"], f"descr describes {size} bytes, typestr {ts!r} {k[1]}", line)
        else:
            c.ok(R["descr"])
    data = d.get("data")
    n = int(np.prod(spec.shape, dtype=np.int64))
    ptr: Optional[int] = None
    if not cuda and data is not None and not isinstance(data, tuple):
        try:  # the interface allows an object exposing the buffer interface
            raw = np.frombuffer(data, np.uint8)  # (held in `data` while the values are read)
            c.ok(R["data"])
            ptr = raw.ctypes.data if raw.size else None
        except (TypeError, ValueError, BufferError):
            c.fail(R["data"], f"data {type(data).__name__} is neither (pointer, read_only) nor "
                   "a buffer", line)
    elif not cuda and data is None:
        c.ok(R["data"])  # (the object's own buffer, which the buffer rules check)
    elif not (isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], int) and
              not isinstance(data[0], bool) and isinstance(data[1], bool)):
        c.fail(R["data"], f"data {data!r:.80}: want (pointer int, read_only bool)", line)
    elif n and not data[0]:
        c.fail(R["data"], f"data pointer 0 for {n} items", line)
    elif data[0] < 0:
        c.fail(R["data"], f"data pointer {data[0]} is negative", line)
    elif spec.readonly and not data[1]:
        c.fail(R["data"], "a read-only array exported with read_only False: a consumer may "
               "write to it", line)
    else:
        c.ok(R["data"])
        ptr = data[0]
    strides = d.get("strides")
    np_strides = spec.numpy().strides
    c_contig = C.is_contiguous(spec.shape, np_strides, dt.itemsize, "C")
    if strides is not None and not _ints(strides, nd):
        c.fail(R["strides"], f"strides {strides!r}: want None or a tuple of {nd} ints "
               "(bools are not ints)", line)
        strides = False
    elif strides is None and not c_contig:
        c.fail(R["strides"], "strides None for a non-C-contiguous array", line)
        strides = False
    elif cuda and c_contig and strides is not None and n and nd:
        c.fail(R["strides"], f"strides {strides} for a C-contiguous array (v3: must be None)",
               line)
    elif strides is not None and n and any(
            d_ > 1 and s != w for d_, s, w in zip(spec.shape, strides, np_strides)):
        c.fail(R["strides"], f"strides {strides}, the array's layout has {np_strides}", line)
        strides = False
    else:
        c.ok(R["strides"])
    mask = d.get("mask")
    mask_d = getattr(mask, attr, None) if mask is not None else None
    if mask is not None and (not isinstance(mask_d, dict) or
                             mask_d.get("shape") != spec.shape):
        c.fail(R["mask"], f"mask {mask!r:.60} has no {attr} of the array's shape", line)
    else:
        c.ok(R["mask"])
    if cuda:
        if "stream" in d and d["stream"] is not None and (
                not isinstance(d["stream"], int) or isinstance(d["stream"], bool) or
                d["stream"] == 0):
            c.fail(R["stream"], f"stream {d['stream']!r}: 0 is ambiguous and disallowed", line)
        else:
            c.ok(R["stream"])
        return
    off = d.get("offset", 0)
    if not isinstance(off, int) or isinstance(off, bool) or off < 0:
        c.fail(R["values"], f"offset {off!r}: want an int >= 0", line)
        return
    # values, read through the pointer and strides the interface gave (host memory)
    if ptr is None or strides is False or c.device_memory or not n:
        return
    st = strides if strides is not None else C.c_strides(spec.shape, dt.itemsize)
    got = C._gather(ptr + off, spec.shape, st, dt.itemsize)
    if not same_values(np.frombuffer(got, dt).reshape(spec.shape), spec.values):
        c.fail(R["values"], "data, offset and strides describe other values than the array "
               "holds", line)
    else:
        c.ok(R["values"])


def check_cai(c: _Ctx) -> None:
    check_interface(c, True)


def check_array_interface(c: _Ctx) -> None:
    check_interface(c, False)


# ---- Arrow ---------------------------------------------------------------------------------

def check_arrow(c: _Ctx) -> None:
    obj, spec = c.obj, c.spec
    ar_rules = (AR_NAMES, AR_RELEASE, AR_DEVICE, AR_VALUES)
    methods = [m for m in ("__arrow_c_array__", "__arrow_c_device_array__") if hasattr(obj, m)]
    if not methods:
        for r in ar_rules:
            c.skip(r, f"{type(obj).__name__} has no __arrow_c_array__")
        return
    for m in methods:
        want = ("arrow_schema", "arrow_array" if m == "__arrow_c_array__" else
                "arrow_device_array")
        try:
            pair = getattr(obj, m)()
        except Exception as e:  # noqa: BLE001 - Arrow cannot hold every array (n-d, records)
            c.skip(AR_NAMES, f"{m}() refused: {type(e).__name__}: {str(e)[:80]}")
            continue
        names = tuple(C.capsule_name(p) for p in pair) if isinstance(pair, tuple) else None
        if names != want:
            c.fail(AR_NAMES, f"{m}() answered capsules named {names}, want {want}",
                   [f"print(obj.{m}())"])
            continue
        c.ok(AR_NAMES)
        schema = C.capsule_struct(pair[0], C.ArrowSchema)
        if m == "__arrow_c_array__":
            arr, dev = C.capsule_struct(pair[1], C.ArrowArray), None
        else:
            dev = C.capsule_struct(pair[1], C.ArrowDeviceArray)
            arr = dev.array
            if c.host is False:
                if dev.device_type == C.ARROW_DEVICE_CPU:
                    c.fail(AR_DEVICE, "device memory exported as ARROW_DEVICE_CPU",
                           [f"obj.{m}()"])
                else:
                    c.ok(AR_DEVICE)
            elif dev.device_type != C.ARROW_DEVICE_CPU:
                c.fail(AR_DEVICE, f"host memory exported with device_type {dev.device_type}",
                       [f"obj.{m}()"])
            elif dev.sync_event:
                c.fail(AR_DEVICE, "host memory exported with a sync_event",
                       [f"obj.{m}()"])
            else:
                c.ok(AR_DEVICE)
        if dev is None or dev.device_type == C.ARROW_DEVICE_CPU:
            _arrow_values(c, schema, arr, m)  # (device buffers are not readable here)
        if not schema.release or not arr.release:
            c.fail(AR_RELEASE, f"{m}(): a struct with a NULL release callback (already "
                   "released?)", [f"obj.{m}()"])
            continue
        ok_a = C.release_array(arr)
        ok_s = C.release_schema(schema)
        if not (ok_a and ok_s):
            c.fail(AR_RELEASE, f"{m}(): the release callback left release non-NULL "
                   f"({'array' if not ok_a else 'schema'})", [f"obj.{m}()"])
        else:
            c.ok(AR_RELEASE)
        del pair  # the capsule destructors now see released structs: nothing to do


def _arrow_values(c: _Ctx, schema: C.ArrowSchema, arr: C.ArrowArray, m: str) -> None:
    spec = c.spec
    fmt = schema.format.decode() if schema.format else None
    npfmt = C.ARROW_FORMATS.get(fmt) if fmt is not None else None
    if npfmt is None or spec.np_dtype.kind == "b":
        c.skip(AR_VALUES, f"Arrow format {fmt!r} not value-checked")
        return
    want = spec.values.ravel()
    if np.dtype(npfmt) != spec.np_dtype or arr.length != want.size or arr.n_buffers < 2:
        c.fail(AR_VALUES, f"{m}(): format {fmt!r} length {arr.length}, want "
               f"{spec.np_dtype} length {want.size}", [f"obj.{m}()"])
        return
    ptr = arr.buffers[1]
    if want.size and not ptr:
        c.fail(AR_VALUES, f"{m}(): NULL data buffer")
        return
    got = ctypes.string_at(ptr + arr.offset * want.itemsize, want.nbytes) if want.size else b""
    if got != want.tobytes():
        c.fail(AR_VALUES, f"{m}(): the data buffer holds other values", [f"obj.{m}()"])
    else:
        c.ok(AR_VALUES)


# ---- pickle 5 ------------------------------------------------------------------------------

def check_pickle(c: _Ctx, read: ObjectReader) -> None:
    obj, spec = c.obj, c.spec
    try:
        data = pickle.dumps(obj, protocol=5)
    except Exception as e:  # noqa: BLE001
        c.skip(PK_ROUNDTRIP, f"not picklable: {type(e).__name__}: {e}")
        c.skip(PK_OOB, "not picklable")
        return
    want = spec.values
    lines = ["import pickle, numpy as np"]
    plain_read = read

    def read_back(x: Any) -> npt.NDArray[Any]:
        try:
            return plain_read(x)
        except Exception:  # noqa: BLE001 - a dtype NumPy cannot import: the raw items
            raw = C.getbuffer(x, C.PyBUF_RECORDS_RO).data
            if raw is None:
                raise TypeError("its PyBUF_RECORDS_RO answer is not readable on the host") \
                    from None
            return np.frombuffer(raw, spec.np_dtype).reshape(spec.shape)
    got: Union[npt.NDArray[Any], Exception]
    try:
        got = read_back(pickle.loads(data))
        same = same_values(got, want)
    except Exception as e:  # noqa: BLE001
        same, got = False, e
    if same:
        c.ok(PK_ROUNDTRIP)
    else:
        c.fail(PK_ROUNDTRIP, f"protocol 5 round trip gave {got!r:.80}",
               lines + ["print(pickle.loads(pickle.dumps(obj, protocol=5)))"])
    bufs: List[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    lines += ["bufs = []; s = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)",
              "print(pickle.loads(s, buffers=bufs))"]
    try:
        got = read_back(pickle.loads(data, buffers=[b.raw() for b in bufs]))
        same = same_values(got, want)
    except Exception as e:  # noqa: BLE001
        same, got = False, e
    if not same:
        c.fail(PK_OOB, f"out-of-band round trip gave {got!r:.80}", lines)
        return
    if bufs:
        try:
            pickle.loads(data)
            c.fail(PK_OOB, "loads() without the out-of-band buffers did not fail", lines)
            return
        except pickle.UnpicklingError:
            pass
    c.ok(PK_OOB)


# ---- the device extension ------------------------------------------------------------------

class _ExtBuffer(ctypes.Structure):
    view: C.Py_buffer
    flags: int
    ext_flags: int
    device: Optional[int]
    device_info: Optional[int]
    _fields_ = [("view", C.Py_buffer), ("flags", ctypes.c_int), ("ext_flags", ctypes.c_int),
                ("device", ctypes.c_void_p), ("device_info", ctypes.c_void_p)]


_SENTINEL = 0x5EED


def check_device(c: _Ctx) -> None:
    import devbuf
    obj = c.obj
    # Extended fields must stay untouched without PyBUF_DEVICE (a canary request).
    ext = _ExtBuffer()
    ext.flags = ext.ext_flags = _SENTINEL
    ext.device = ext.device_info = _SENTINEL
    try:
        C._api.PyObject_GetBuffer(obj, ctypes.byref(ext.view), C.PyBUF_RECORDS_RO)
    except Exception:  # noqa: BLE001 - a refusal writes nothing
        plain_ok = False
    else:
        plain_ok = True
        C._api.PyBuffer_Release(ctypes.byref(ext.view))
        if (ext.flags, ext.ext_flags, ext.device, ext.device_info) != (
                _SENTINEL, _SENTINEL, _SENTINEL, _SENTINEL):
            c.fail(DX_UNASKED, "a request without PyBUF_DEVICE wrote the extended fields "
                   "(flags, ext_flags, device, device_info) past the Py_buffer")
        else:
            c.ok(DX_UNASKED)
    try:
        advertised = devbuf.check_buffer_supports(obj, devbuf.PyBUF_DEVICE)
    except Exception:  # noqa: BLE001
        advertised = False
    if not advertised:
        c.skip(DX_ADVERTISED, "does not advertise PyBUF_DEVICE")
        c.skip(DX_PLAIN, "does not advertise PyBUF_DEVICE")
        return
    try:
        v = devbuf.view(obj)
    except Exception as e:  # noqa: BLE001
        c.fail(DX_ADVERTISED, f"advertises PyBUF_DEVICE, but devbuf.view(obj) (a PyBUF_DEVICE "
               f"request) raised {type(e).__name__}: {e}", ["import devbuf; devbuf.view(obj)"])
        return
    with v:
        try:
            host = not v.is_device or v.host_accessible
        except devbuf.Error:  # an identifier no plugin knows: the host must not read it
            host = False
        c.device_memory = not host
        if not host:
            if plain_ok:
                c.fail(DX_PLAIN, f"memory on {v.identifier}, which the host cannot read, was "
                       "answered to a plain request", ["memoryview(obj)  # should raise"])
            else:
                c.ok(DX_PLAIN)
        plain, _ = _ask(obj, C.PyBUF_FULL_RO, gather=False)
        if host and plain is not None:
            same = (v.shape == plain.shape and v.itemsize == plain.itemsize and
                    (plain.strides is None or v.strides == plain.strides))
            if not same:
                c.fail(DX_ADVERTISED, f"the PyBUF_DEVICE answer (shape {v.shape}, strides "
                       f"{v.strides}) differs from the plain one (shape {plain.shape}, "
                       f"strides {plain.strides})")
                return
        c.ok(DX_ADVERTISED)


# ---- the driver ---------------------------------------------------------------------------------

def _default_source(factory: Factory) -> Callable[[ArraySpec], str]:
    # (a function's __module__, __qualname__ and __name__ are str)
    mod = cast(str, getattr(factory, "__module__", None) or "mymodule")
    name = cast(str, getattr(factory, "__qualname__", None) or
                getattr(factory, "__name__", "factory"))

    def source(spec: ArraySpec) -> str:
        if "<" in name:  # a lambda or a local function: name it, it cannot be imported
            return (f"from devbuf.check import ArraySpec\n"
                    f"obj = factory({spec})  # factory: {name} in {mod}")
        return (f"from devbuf.check import ArraySpec\nfrom {mod} import {name.split('.')[0]}\n"
                f"obj = {name}({spec})")
    return source


def producer(factory: Factory, *, cases: Optional[Iterable[ArraySpec]] = None,
             dtypes: Optional[Iterable[str]] = None, name: Optional[str] = None,
             source: Optional[Callable[[ArraySpec], str]] = None,
             read: Optional[ObjectReader] = None,
             checks: Collection[str] = ("buffer", "dlpack", "cai", "array_interface", "arrow",
                                        "pickle", "device")) -> Report:
    """Run every producer check on the objects `factory(spec)` makes.

    factory(spec: ArraySpec) returns the object to check, or None (or raises
    NotImplementedError) for a spec it cannot make. `cases` (ArraySpecs)
    default to `default_cases(dtypes)`. `source(spec)` returns Python code that
    makes `obj` for the reproducers; `read(obj)` a NumPy array of an object's
    values (for pickle round trips; default: DLPack, then the buffer protocol).
    Returns a Report.
    """
    cases = list(cases) if cases is not None else default_cases(dtypes)
    source = source or getattr(factory, "source", None) or _default_source(factory)
    read = read or getattr(factory, "read", None) or to_numpy
    label = name or cast(str, getattr(factory, "__name__", repr(factory)))
    rep = Report(label, "producer", PRODUCER_RULES)
    made = unsupported = 0
    errors: Dict[str, List[str]] = {}
    for spec in cases:
        try:
            obj = factory(spec)
        except NotImplementedError:
            obj = None
        except Exception as e:  # noqa: BLE001 - the factory's failure is not the library's
            errors.setdefault(f"{type(e).__name__}: {e}"[:160], []).append(str(spec))
            continue
        if obj is None:
            unsupported += 1
            continue
        made += 1
        c = _Ctx(rep, spec, obj, source)
        if "device" in checks:  # first: it finds out whether the host may read obj
            check_device(c)
        if "buffer" in checks:
            check_buffer(c)
        if "dlpack" in checks:
            check_dlpack(c)
        if "cai" in checks:
            check_cai(c)
        if "array_interface" in checks:
            check_array_interface(c)
        if "arrow" in checks:
            check_arrow(c)
        if "pickle" in checks:
            check_pickle(c, read)
        del obj, c
    rep.notes.append(f"{made} arrays made, {unsupported} specs not offered by the factory")
    for msg, specs in errors.items():
        rep.notes.append(f"factory raised {msg} for {len(specs)} specs, e.g. {specs[0]}")
    return rep


__all__ = ["ArraySpec", "PRODUCER_RULES", "format_sizes", "producer", "to_numpy"]
