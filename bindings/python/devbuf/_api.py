"""The Python half of devbuf's NumPy-shaped API: formats given as NumPy dtypes
(empty, parse_format, calcsize), DeviceBuffer.dtype/.format_info/fill()/
b[...] = x (called from bindings/python/src/buffer_api.c), and the
"did you mean" hint for a device identifier no plugin implements (hints.c).
"""
from __future__ import annotations

import difflib
import struct
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Union

from . import _devbuf
from ._dtypes import as_format, dtype_like, numpy_dtype

if TYPE_CHECKING:
    from ._devbuf import Device, DeviceBuffer, Format

__all__: List[str] = []

FormatSpec = Any  # str, bytes, a NumPy dtype or type, an ml_dtypes type


def empty(shape: Union[int, Sequence[int]], format: FormatSpec = "B",
          device: "Optional[Union[Device, str]]" = None, *,
          readonly: bool = False) -> "DeviceBuffer":
    """Allocate an uninitialised DeviceBuffer.

    shape: an int or a sequence of ints (C order).
    format: the item type: a struct/PEP 3118 format string ('B', 'f', 'T{f:x:i:y:}',
        '[devbuf$bfloat16]'), a NumPy dtype name or typestr ('float32', '<i8'), a NumPy
        type or dtype (numpy.float32, numpy.dtype('f4')) or an ml_dtypes type. A string
        the struct grammar reads is that format; only others are NumPy names.
    device: a devbuf.Device, 'identifier' or 'identifier:N' ('devbuf.sim'); None: host.
    readonly: exports refuse PyBUF_WRITABLE.
    """
    fmt = format if type(format) is str and format in _plain else as_format(format)
    return _devbuf.empty(shape, fmt, device, readonly=readonly)


# Struct formats seen by empty() (no parse needed for them again).
_plain = {"B", "b", "f", "d", "e", "i", "I", "q", "Q", "l", "L", "h", "H", "?"}


def parse_format(fmt: FormatSpec, mode: str = "default", *, allow_unknown: bool = False,
                 plugins: bool = True, lint: bool = False) -> "Format":
    """Parse a format into a devbuf.Format (fields, offsets, item size).

    fmt: a struct/PEP 3118 format string or bytes (docs/format-strings.md), or a NumPy
        dtype name, type or dtype, or an ml_dtypes type (converted as devbuf.empty does).
    mode: 'default' (the buffer protocol's rules), 'struct' (CPython's struct module) or
        'numpy' (NumPy's PEP 3118 reader).
    allow_unknown: keep [id$payload] items no dtype namespace knows (else FormatError).
    plugins: ask plugin and Python dtype namespaces about custom items.
    lint: also report formats that are legal but likely mistakes.
    Raises FormatError (a ValueError) with the offset of the first bad byte.
    """
    if not isinstance(fmt, (str, bytes)) or not allow_unknown:
        try:
            return _devbuf.parse_format(fmt, mode, allow_unknown=allow_unknown,
                                        plugins=plugins, lint=lint)
        except (_devbuf.FormatError, TypeError):
            if mode != "default" or not (isinstance(fmt, (str, bytes)) or dtype_like(fmt)):
                raise
            fmt = as_format(fmt)  # the struct parser's error, extended, if nothing reads it
    return _devbuf.parse_format(fmt, mode, allow_unknown=allow_unknown, plugins=plugins,
                                lint=lint)


def calcsize(format: FormatSpec, mode: str = "default", /) -> int:
    """The item size in bytes of a format (as struct.calcsize, with devbuf's grammar).

    format: a struct/PEP 3118 format string, or a NumPy dtype name, type or dtype.
    mode: 'default', 'struct' or 'numpy' (see parse_format).
    """
    try:
        return _devbuf.calcsize(format, mode)
    except (_devbuf.FormatError, TypeError):
        if mode != "default" or not (isinstance(format, (str, bytes)) or dtype_like(format)):
            raise
        return _devbuf.calcsize(as_format(format), mode)


# ---- DeviceBuffer helpers (buffer_api.c) ---------------------------------------------

def format_info(buf: "DeviceBuffer") -> "Format":
    return _devbuf.parse_format(buf.format)


def buffer_dtype(buf: "DeviceBuffer") -> Any:
    import numpy  # noqa: F401  (ModuleNotFoundError names what is missing)

    return numpy_dtype(_devbuf.parse_format(buf.format))


def fill(buf: "DeviceBuffer", value: Any) -> None:
    dt = None
    try:
        dt = buffer_dtype(buf)
    except ImportError:
        pass
    if dt is not None:
        import numpy as np

        buf.copy_from(np.full(buf.shape, value, dtype=dt))
        return
    try:
        item = struct.pack(buf.format, *(value if isinstance(value, tuple) else (value,)))
    except struct.error as e:
        raise TypeError(f"devbuf.DeviceBuffer.fill: cannot make an item of format "
                        f"{buf.format!r} from {value!r} ({e}); install NumPy, or copy_from() "
                        "an array") from None
    if len(item) != buf.itemsize:
        raise TypeError(f"devbuf.DeviceBuffer.fill: format {buf.format!r} packs to {len(item)} "
                        f"bytes, the item is {buf.itemsize}")
    n = buf.size
    try:
        raw: Any = memoryview(bytearray(item * n))
        host = raw.cast(buf.format.lstrip("@"), buf.shape)
    except (TypeError, ValueError) as e:
        raise TypeError(f"devbuf.DeviceBuffer.fill: format {buf.format!r} needs NumPy to fill "
                        f"({e}); or copy_from() an array") from None
    buf.copy_from(host)


def setitem(buf: "DeviceBuffer", key: Any, value: Any) -> None:
    whole = key is Ellipsis or (isinstance(key, slice) and key == slice(None)) or key == ()
    if not whole:
        raise IndexError("devbuf.DeviceBuffer supports only whole-buffer assignment "
                         "(b[...] = host_array, b[...] = scalar); for element access copy "
                         "to the host (b.to_host()) or use a framework over DLPack")
    if isinstance(value, (bool, int, float, complex, tuple)) or (
            type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0):
        fill(buf, value)
    else:
        buf.copy_from(value)


# ---- "did you mean" for device identifiers (hints.c) --------------------------------

def _registered() -> List[str]:
    ids = {"cpu"}
    try:
        for p in _devbuf._plugins():
            ids.update(p.get("identifiers") or ())
    except Exception:
        pass
    return sorted(ids)


def device_suggestions(spec: str) -> List[str]:
    """Registered identifiers close to `spec` (an identifier, perhaps with ':N')."""
    name, sep, ordinal = spec.partition(":")
    ids = _registered()
    low = name.lower()
    out = [i for i in ids if i.rsplit(".", 1)[-1].lower() == low.rsplit(".", 1)[-1] and i != name]
    out += [i for i in difflib.get_close_matches(name, ids, n=3, cutoff=0.6) if i not in out]
    short = {i.rsplit(".", 1)[-1]: i for i in ids}
    out += [short[s] for s in difflib.get_close_matches(low.rsplit(".", 1)[-1], list(short),
                                                        n=3, cutoff=0.75) if short[s] not in out]
    return [i + sep + ordinal for i in out[:3]]


def add_device_hint(exc: BaseException, spec: object) -> None:
    if not isinstance(spec, str) or not isinstance(exc, _devbuf.PluginError):
        return
    if not exc.args or "no plugin implements" not in str(exc.args[0]):
        return
    close = device_suggestions(spec)
    if close:
        exc.args = (f"{exc.args[0]}; did you mean " + " or ".join(repr(c) for c in close)
                    + "?",) + exc.args[1:]
