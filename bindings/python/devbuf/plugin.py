"""devbuf.plugin: device plugins, dtype namespaces and extension functions
written in Python.

A Python object with the plugin operations becomes an ordinary C plugin table
(``devbuf_plugin_table``, core/include/devbuf/plugin.h) whose function pointers
are libffi closures, registered with the runtime under its identifiers. From
then on the runtime cannot tell it from a C plugin: ``devbuf.plugins()`` lists
it, ``devbuf.empty(..., device="example.mmap")`` allocates on it, views,
DLPack and pickling go through it. See docs/python-plugins.md for the whole
contract; the short form::

    from devbuf.plugin import PythonPlugin, register_plugin

    class MyDevice(PythonPlugin):
        name = "mydev"
        identifiers = ("example.mydev",)
        def device_count(self): ...
        def device_props(self, device): ...          # mapping or object
        def mem_alloc(self, device, size, alignment, stream): ...  # -> int handle
        ...

    reg = register_plugin(MyDevice())
    ...
    reg.unregister()        # refused (devbuf.PluginError, DEVBUF_EBUSY) while in use

Device pointers, streams and events are ints (addresses or opaque handles);
``None`` is C's NULL (the default stream, no event). Host memory is lent as a
``memoryview`` that is valid only during the call. An exception raised by an
operation becomes its devbuf status and message (never an exception in C):
raise :class:`CallbackError` (or a subclass such as :class:`NoDevice`) to
choose the status, or let a built-in exception map (MemoryError -> ENOMEM,
ValueError/LookupError/OverflowError -> EINVAL, NotImplementedError -> ENOTSUP,
TimeoutError -> ETIMEDOUT, anything else -> ECALLBACK).
"""
from __future__ import annotations

import atexit as _atexit
import re as _re
import threading as _threading
from dataclasses import dataclass as _dataclass
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any, Callable as _Callable, Dict as _Dict, List as _List
from typing import Optional as _Optional, Sequence as _Sequence, Tuple as _Tuple
from typing import TypeVar as _TypeVar, Union as _Union

from . import _pyplugin

if _TYPE_CHECKING:
    from typing_extensions import Buffer

    from ._plugins import PluginInfo

_F = _TypeVar("_F", bound=_Callable[..., _Any])
# What names a loaded plugin: its name, a device identifier, its index or a Registration.
_PluginRef = _Union[str, int, "Registration"]

__all__ = [
    "PythonPlugin",
    "Registration",
    "CallbackError",
    "NoDevice",
    "InvalidArgument",
    "NotSupported",
    "BackendError",
    "ExtFunction",
    "ConformanceResult",
    "ext_function",
    "dtype_namespace",
    "register_plugin",
    "unregister",
    "registrations",
    "register_dtype_namespace",
    "unregister_dtype_namespace",
    "ext_functions",
    "call_ext",
    "check_signature",
    "address_of",
    "run_conformance",
    "run_dtype_conformance",
    "SLOTS",
    "MANDATORY_SLOTS",
    "OPTIONAL_SLOTS",
    # status codes, device property and device_info flags, DLPack device types
    "OK", "EINVAL", "ENOMEM", "ENODEV", "ENOTSUP", "EBACKEND", "EABI", "ELOAD", "EBUSY",
    "EFORMAT", "ENOTFOUND", "EEXIST", "ETIMEDOUT", "EINIT", "EINTERNAL", "ECALLBACK",
    "DEVICE_HOST_ACCESSIBLE", "DEVICE_UNIFIED", "DEVICE_ASYNC", "DEVICE_INFO_HOST_ACCESSIBLE",
    "DEVICE_INFO_READONLY", "DL_CPU", "DL_CUDA", "DL_OPENCL", "DL_EXT_DEV",
]

# ---- status codes (devbuf/error.h) --------------------------------------------
OK = 0
EINVAL = 1
ENOMEM = 2
ENODEV = 3
ENOTSUP = 4
EBACKEND = 5
EABI = 6
ELOAD = 7
EBUSY = 8
EFORMAT = 9
ENOTFOUND = 10
EEXIST = 11
ETIMEDOUT = 12
EINIT = 13
EINTERNAL = 14
ECALLBACK = 15

# ---- device property and device_info flags (devbuf/plugin.h, device_info.h) --
DEVICE_HOST_ACCESSIBLE = 0x1
DEVICE_UNIFIED = 0x2
DEVICE_ASYNC = 0x4
DEVICE_INFO_HOST_ACCESSIBLE = 0x1
DEVICE_INFO_READONLY = 0x2

# DLPack device types
DL_CPU = 1
DL_CUDA = 2
DL_OPENCL = 4
DL_EXT_DEV = 12

#: (slot name, C signature in extension-function letters), in table order.
SLOTS: _Tuple[_Tuple[str, str], ...] = _pyplugin.SLOTS
OPTIONAL_SLOTS = ("init", "shutdown", "device_info_export", "device_info_import",
                  "host_alloc", "host_free")
MANDATORY_SLOTS = tuple(n for n, _ in SLOTS if n not in OPTIONAL_SLOTS)


# ---- exceptions that choose a status ---------------------------------------------

class CallbackError(Exception):
    """Raise from a plugin operation to return ``status`` with this message.

    The message becomes the devbuf error text as it is (prefixed with the
    operation), without the exception's type: use it for deliberate answers
    ("no such stream"). Any other exception is reported with its type, text
    and the file:line that raised it.
    """

    status = ECALLBACK

    def __init__(self, message: str = "", status: _Optional[int] = None):
        super().__init__(message)
        if status is not None:
            self.status = int(status)


class NoDevice(CallbackError):
    """device_count: there is no device, and the message says why."""

    status = ENODEV


class InvalidArgument(CallbackError):
    status = EINVAL


class NotSupported(CallbackError):
    status = ENOTSUP


class BackendError(CallbackError):
    status = EBACKEND


# ---- decorators -------------------------------------------------------------------



def ext_function(signature: str, doc: _Optional[str] = None,
                 name: _Optional[str] = None) -> _Callable[[_F], _F]:
    """Mark a method as a plugin extension function with a C ``signature``.

    Letters: docs/plugin-authors.md, "Extension functions". The method gets
    the inputs and returns the outputs, with the shapes ``call_ext`` returns:
    ``"i(ii*ie)"`` (status form with one out-parameter) returns the one value;
    raising reports the exception through the ``e`` argument.
    """
    check_signature(signature)

    def mark(fn: _F) -> _F:
        setattr(fn, "__devbuf_ext__", (name or fn.__name__, signature,
                                       doc if doc is not None else (fn.__doc__ or "").strip()))
        return fn

    return mark


def dtype_namespace(id: _Optional[str] = None, provider: _Optional[str] = None,
                    description: str = "") -> _Callable[[_F], _F]:
    """Mark a method as the interpreter of dtype namespace ``id`` (default: the
    plugin's ``name``), registered and unregistered together with the plugin,
    and listed with provider = the plugin's name. It gets the payload (str) and
    returns None (not understood) or a mapping with ``itemsize`` and optionally
    kind, alignment, bits, elements_per_item, dlpack, canonical, plain_format."""

    def mark(fn: _F) -> _F:
        setattr(fn, "__devbuf_dtype__", (id, provider, description))
        return fn

    return mark


# ---- the plugin base class ------------------------------------------------------

class PythonPlugin:
    """Convenience base for Python plugins (any object with the methods works).

    Class attributes: ``name`` (required, short), ``version``, ``description``,
    ``identifiers`` (device identifiers it implements, at least one).

    Mandatory methods (``device`` is the ordinal; handles are ints, None = NULL)::

        device_count() -> int                      raise NoDevice("why") for none
        device_props(device) -> mapping/object     name, vendor, total_memory,
            free_memory, alloc_alignment, dlpack_device_type, dlpack_device_id,
            flags (int or names: "host_accessible", "unified", "async")
        mem_alloc(device, size, alignment, stream) -> int   (non-zero)
        mem_free(device, ptr, stream)
        copy_h2d(device, dst, dst_offset, src: memoryview, stream)
        copy_d2h(device, dst: memoryview, src, src_offset, stream)
        copy_d2d(device, dst, dst_offset, src, src_offset, nbytes, stream)
        stream_create(device) -> int or None; stream_destroy(device, stream)
        stream_synchronize(device, stream)
        event_create(device) -> int; event_destroy(device, event)
        event_record(device, event, stream); stream_wait_event(device, stream, event)
        event_synchronize(device, event); event_query(device, event) -> bool

    Optional: ``init()``, ``shutdown()``, ``device_info_export(identifier,
    device, event, stream, flags) -> bytes``, ``device_info_import(identifier,
    info: memoryview) -> (device_ordinal, flags, event, stream)``,
    ``host_alloc(device, size) -> int``, ``host_free(device, ptr)``.
    """

    name: str = ""
    version: str = "0.1.0"
    description: str = ""
    identifiers: _Sequence[str] = ()


# ---- registration -------------------------------------------------------------------

class Registration:
    """A registered Python plugin: its runtime index, its table of closures and
    the dtype namespaces registered with it. ``unregister()`` undoes all of it."""

    def __init__(self, table: _pyplugin.Table, namespaces: _Sequence[_pyplugin.Namespace],
                 plugin: object) -> None:
        self._table = table
        self._namespaces = namespaces
        self._plugin_id = id(plugin)
        # Made only once table.register() gave an index (register_plugin).
        self.index: int = -1 if table.index is None else table.index
        self.name: str = table.name

    @property
    def registered(self) -> bool:
        return self._table.state == "registered"

    @property
    def plugin(self) -> _Optional[object]:
        """The registered Python object, or None once unregistered (the
        registration then holds no reference to it)."""
        return self._table.plugin

    @property
    def table(self) -> _pyplugin.Table:
        """The devbuf._pyplugin.Table (closures, state, calls in flight)."""
        return self._table

    @property
    def info(self) -> "PluginInfo":
        """This plugin's devbuf.PluginInfo record."""
        from . import plugins

        return plugins()[self.index]

    def unregister(self) -> None:
        """Unregister the plugin, then its dtype namespaces; free the closures.

        Raises devbuf.PluginError (code DEVBUF_EBUSY) while memory, streams or
        events created through the plugin are alive: nothing is changed then."""
        # No lock held while the table is unregistered: that waits for calls
        # in flight, and one of them may be registering something itself.
        # The table refuses a second unregister on its own.
        if self._table.state != "registered":
            raise RuntimeError(f"python plugin '{self.name}' is not registered")
        # Held until the record below is gone: the table drops its reference,
        # and a plugin object made meanwhile (another thread) could otherwise
        # get this one's id() and be refused as "already registered".
        plugin = self._table.plugin  # noqa: F841
        self._table.unregister()
        for ns in self._namespaces:
            if ns.state == "registered":
                ns.unregister()
        self._namespaces = ()
        with _lock:
            if _registrations.get(self._plugin_id) is self:
                del _registrations[self._plugin_id]
        del plugin

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.registered:
            self.unregister()

    def __repr__(self) -> str:
        return f"<devbuf.plugin.Registration '{self.name}' #{self.index} {self._table.state}>"


_lock = _threading.RLock()
_registrations: _Dict[int, Registration] = {}


def _collect_methods(plugin: object) -> _Dict[str, _Callable[..., _Any]]:
    methods: _Dict[str, _Callable[..., _Any]] = {}
    missing: _List[str] = []
    for slot, _sig in SLOTS:
        fn = getattr(plugin, slot, None)
        if fn is None:
            if slot in MANDATORY_SLOTS:
                missing.append(slot)
            continue
        if not callable(fn):
            raise TypeError(f"{type(plugin).__name__}.{slot} is not callable")
        methods[slot] = fn
    if missing:
        raise TypeError(f"{type(plugin).__name__} lacks the mandatory plugin operation(s): "
                        + ", ".join(missing))
    return methods


def _marked(plugin: object, attr: str) -> _List[_Tuple[_Tuple[_Any, ...], _Callable[..., _Any]]]:
    """(mark, bound method) for each method ext_function or dtype_namespace
    marked with attr (mark: the tuple the decorator attached)."""
    out = []
    for name in dir(type(plugin)):
        member = getattr(type(plugin), name, None)
        mark = getattr(member, attr, None)
        if mark is not None:
            out.append((mark, getattr(plugin, name)))
    return out


def register_plugin(plugin: object, *, origin: _Optional[str] = None) -> Registration:
    """Turn ``plugin`` into a C plugin table of libffi closures and register it.

    Raises TypeError for a missing operation, ValueError for a bad extension
    signature, and devbuf.PluginError/devbuf.Error with the loader's reason when
    the runtime refuses the table (identifier taken, invalid name...); the
    refused record stays visible in devbuf.plugins(), as for a C plugin.
    """
    name = getattr(plugin, "name", None) or ""
    if not isinstance(name, str) or not name:
        raise TypeError("a plugin needs a non-empty str 'name'")
    identifiers = getattr(plugin, "identifiers", ())
    if isinstance(identifiers, str):
        identifiers = (identifiers,)
    identifiers = tuple(identifiers)
    version = str(getattr(plugin, "version", "0.1.0"))
    description = str(getattr(plugin, "description", "") or "")
    methods = _collect_methods(plugin)
    ext = [(n, sig, doc, fn) for (n, sig, doc), fn in _marked(plugin, "__devbuf_ext__")]
    if origin is None:
        origin = f"python:{type(plugin).__module__}.{type(plugin).__qualname__}"
    with _lock:
        if id(plugin) in _registrations:
            raise RuntimeError(f"{plugin!r} is already registered")
        table = _pyplugin.Table(plugin, name, version, description, identifiers, methods, ext,
                                origin)
        table.register()
        namespaces = []
        try:
            for (nsid, provider, desc), fn in _marked(plugin, "__devbuf_dtype__"):
                ns = _pyplugin.Namespace(nsid or name, fn, provider or name, desc)
                ns.register()
                namespaces.append(ns)
        except BaseException:
            for ns in namespaces:
                ns.unregister()
            table.unregister()
            raise
        reg = Registration(table, tuple(namespaces), plugin)
        _registrations[id(plugin)] = reg
        return reg


def unregister(what: _Union[Registration, object]) -> None:
    """Unregister a Registration, or the plugin object that was registered."""
    if isinstance(what, Registration):
        what.unregister()
        return
    reg = _registrations.get(id(what))
    if reg is None:
        raise LookupError(f"{what!r} is not a registered Python plugin")
    reg.unregister()


def registrations() -> _List[Registration]:
    """The Python plugins registered now."""
    return list(_registrations.values())


def register_dtype_namespace(id: str, interpret: _Callable[[str], _Any], *,
                             provider: str = "python",
                             description: str = "") -> _pyplugin.Namespace:
    """Register dtype namespace ``id`` whose interpreter is a libffi closure
    around ``interpret(payload) -> mapping or None``. Returns the namespace
    object; ``.unregister()`` (or :func:`unregister_dtype_namespace`) undoes it.

    Unlike devbuf.register_dtype_namespace (a fixed C trampoline), the
    interpreter here is a real C function pointer of its own, as a C caller
    of the registry sees it."""
    ns = _pyplugin.Namespace(id, interpret, provider, description)
    ns.register()
    return ns


def unregister_dtype_namespace(id: str) -> None:
    ns = _pyplugin._registry.get(("dtype", id))
    if ns is None:
        raise LookupError(f"no dtype namespace '{id}' was registered through devbuf.plugin")
    ns.unregister()


# ---- extension functions ---------------------------------------------------------------

@_dataclass(frozen=True)
class ExtFunction:
    """One entry of a plugin's ext_functions table."""

    name: _Optional[str]
    signature: _Optional[str]
    doc: str
    valid: bool
    error: str
    plugin: int


def ext_functions(plugin: _PluginRef) -> _List[ExtFunction]:
    """The extension functions of a loaded plugin (a name, identifier, index or
    Registration), C or Python. Entries with a malformed signature or a NULL
    function are listed with ``valid=False`` and the reason."""
    return [ExtFunction(**d) for d in _pyplugin.ext_functions(plugin)]


def call_ext(plugin: _PluginRef, name: str, *args: _Any) -> _Any:
    """Call extension function ``name`` of ``plugin`` through libffi.

    Arguments are converted with checks (TypeError for a wrong type,
    OverflowError for a value that does not fit the letter) before anything is
    called; ``p`` takes an int address, None or any buffer object (its
    address, held for the call). Out-parameters are not passed; they are
    returned: status form ``i(...e)`` and ``v`` returns give None, the one
    out value, or a tuple of them, and raise the devbuf error when the status
    is not DEVBUF_OK; other returns give the value, or ``(value, *outs)``."""
    return _pyplugin.call_ext(plugin, name, *args)


def check_signature(signature: str) -> _Dict[str, _Any]:
    """Parse a signature string; ValueError names the offending byte."""
    return _pyplugin.check_signature(signature)


def address_of(buffer: Buffer) -> int:
    """The address of an object's buffer (e.g. an mmap), as an int. Valid
    while the object keeps that memory (no resize, no close)."""
    return _pyplugin.address_of(buffer)


# ---- the conformance suite, in this process -------------------------------------------------

@_dataclass
class ConformanceResult:
    returncode: int
    output: str

    @property
    def results(self) -> _Dict[str, _Tuple[str, str]]:
        """check name -> (PASS/FAIL/SKIP, detail)."""
        out: _Dict[str, _Tuple[str, str]] = {}
        for line in self.output.splitlines():
            m = _re.match(r"^(PASS|FAIL|SKIP) ([A-Za-z0-9_]+)(?:: (.*))?$", line)
            if m:
                out[m.group(2)] = (m.group(1), m.group(3) or "")
        return out

    @property
    def passed(self) -> bool:
        return self.returncode == 0


def run_conformance(identifier: str, checks: _Sequence[str] = (), *,
                    allow_no_device: bool = False, isolate: bool = False,
                    timeout: _Optional[float] = None) -> ConformanceResult:
    """Run the devbuf_conformance suite (tests/conformance/conformance.c, the
    same code as the executable) against ``identifier``, where Python plugins
    exist: this process. The GIL is released while it runs; the suite's own
    threads call into the plugin.

    By default every check runs in this process, one after another (the
    executable's ``--in-process``). With ``isolate=True`` each check runs in
    a forked copy of this process with a deadline (``timeout`` seconds per
    check, default 120), as the executable does by default: a plugin that
    crashes, aborts or hangs gets that check's FAIL line, the run its summary
    line, and this process survives. Fork only from a process whose other
    threads hold no lock the plugin needs (the copy has only the calling
    thread)."""
    args: _List[str] = []
    if allow_no_device:
        args.append("--allow-no-device")
    if not isolate:
        args.append("--in-process")
    elif timeout is not None:
        args += ["--timeout", repr(float(timeout))]
    for c in checks:
        args += ["--check", c]
    args.append(identifier)
    rc, out = _pyplugin.run_conformance(args)
    return ConformanceResult(rc, out)


def run_dtype_conformance(namespace: str, payloads: _Sequence[str], checks: _Sequence[str] = (),
                          *, isolate: bool = False,
                          timeout: _Optional[float] = None) -> ConformanceResult:
    """The suite's dtype-namespace checks (``devbuf_conformance --dtype``) on
    ``namespace`` (registered here, built in, or a loaded plugin's) with
    ``payloads`` it understands: parsing, itemsize and alignment, the DLPack
    dtype, refusal of malformed payloads, and interpretation from several
    threads at once. ``isolate`` and ``timeout`` as for run_conformance."""
    if not payloads:
        raise ValueError("give at least one payload the namespace understands")
    args: _List[str] = ["--dtype"]
    if not isolate:
        args.append("--in-process")
    elif timeout is not None:
        args += ["--timeout", repr(float(timeout))]
    for c in checks:
        args += ["--check", c]
    for p in payloads:
        args += ["--payload", p]
    args.append(namespace)
    rc, out = _pyplugin.run_conformance(args)
    return ConformanceResult(rc, out)


# ---- interpreter exit ---------------------------------------------------------------------

@_atexit.register
def _at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    # Unregister what can be while Python still runs normally. What stays
    # (memory still alive) keeps working for the finalizing thread, e.g. when
    # module teardown frees the last buffers; other threads get
    # DEVBUF_ECALLBACK instead of entering a dying interpreter.
    _pyplugin._shutdown_all()


del annotations  # the __future__ feature, not a public name
