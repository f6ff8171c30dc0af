"""NumPy dtype names, types and dtypes wherever devbuf takes a format.

The rule for a string (docs/python-api.md#formats-and-numpy-dtypes): a string
the struct/PEP 3118 grammar reads is that format ("f", "d", "<q", "T{f:x:}");
only a string that grammar rejects is looked up as a NumPy dtype name or
typestr ("float32", "int64", "<i8", "bfloat16"). The names that are also
struct codes ("f", "d", "b", "e", "?") mean the same item both ways, so the
order matters only for what is not a number: "c" is struct's char (one byte),
as in memoryview, not NumPy's "S1".

Non-strings go through ``numpy.dtype()``: ``np.float32``, ``np.dtype("f4")``,
``float``, structured dtypes, ``ml_dtypes.bfloat16`` (devbuf's
``[devbuf$bfloat16]``) and ``datetime64``/``timedelta64``.

NumPy is imported only when a name is not a struct format or a dtype object
is passed; the names of the table below work without it.
"""
from __future__ import annotations

import difflib
import re
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from . import _devbuf

if TYPE_CHECKING:
    import numpy as np

    from ._devbuf import Field, Format

__all__: List[str] = []

# Names that need no NumPy. Sizes are fixed ('q', not 'l', for int64).
_NAMES: Dict[str, str] = {
    "bool": "?", "bool_": "?",
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float16": "e", "float32": "f", "float64": "d", "half": "e", "single": "f", "double": "d",
    "complex64": "Zf", "complex128": "Zd",
    "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "intc": "i", "uintc": "I",
    "longlong": "q", "ulonglong": "Q", "intp": "n", "uintp": "N", "longdouble": "g",
    "clongdouble": "Zg", "csingle": "Zf", "cdouble": "Zd",
}
# devbuf's own well-known types ([devbuf$name]) that NumPy users know from ml_dtypes.
_DEVBUF_NAMES = (
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2", "complex32",
)

ACCEPTED = (
    "a struct/PEP 3118 format string ('f', 'd', '<q', '2i', 'T{f:x:i:y:}', "
    "'[devbuf$bfloat16]'), a NumPy dtype name or typestr ('float32', 'int64', '<i8', "
    "'complex64', 'bfloat16', 'datetime64[D]'), a NumPy type or dtype (numpy.float32, "
    "numpy.dtype('f4'), a structured dtype), or an ml_dtypes type (ml_dtypes.bfloat16)"
)

_cache: Dict[str, str] = {}
# What is looked up as a NumPy name or typestr: 'float32', '<i8', 'M8[ns]',
# 'datetime64[D]'; not NumPy's comma strings ('f4,i8') or other grammar.
_NAME_LIKE = re.compile(r"[<>=|]?[A-Za-z][A-Za-z0-9_]*(\[[0-9]*[A-Za-z]+\])?\Z")


def _extend(err: _devbuf.FormatError, spec: str) -> _devbuf.FormatError:
    """The struct parser's own error (offset, code, caret kept), with the
    accepted forms and a near NumPy name added to its message."""
    msg = f"{err.args[0] if err.args else err}\n(not a NumPy dtype name either. Accepted: {ACCEPTED}"
    close = difflib.get_close_matches(spec, list(_NAMES) + list(_DEVBUF_NAMES), n=3, cutoff=0.7)
    msg += ("; did you mean " + " or ".join(repr(c) for c in close) + "?)") if close else ")"
    err.args = (msg,) + tuple(err.args[1:])
    return err


def dtype_like(spec: object) -> bool:
    """A NumPy type, dtype, or object with a .dtype: what as_format reads besides strings."""
    return isinstance(spec, type) or type(spec).__module__.startswith(("numpy", "ml_dtypes")) \
        or hasattr(spec, "dtype")


def _unknown(spec: object, why: str) -> _devbuf.FormatError:
    shown = spec if isinstance(spec, str) else repr(spec)
    msg = f"format: {shown!r} is not a format devbuf reads ({why}). Accepted: {ACCEPTED}"
    if isinstance(spec, str):
        close = difflib.get_close_matches(spec, list(_NAMES) + list(_DEVBUF_NAMES), n=3, cutoff=0.7)
        if close:
            msg += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    e = _devbuf.FormatError(msg)
    e.offset = 0
    e.format = shown
    return e


def _devbuf_name(name: str) -> Optional[str]:
    if name in _DEVBUF_NAMES:
        return f"[devbuf${name}]"
    return None


def _from_numpy_dtype(dt: "np.dtype[Any]") -> str:
    """The devbuf format of a NumPy dtype."""
    import numpy as np

    if dt.kind in "Mm":
        unit, count = np.datetime_data(dt)
        if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
            raise _unknown(dt, "devbuf's datetime64/timedelta64 are little-endian")
        step = unit if count == 1 else f"{count}{unit}"
        base = "datetime64" if dt.kind == "M" else "timedelta64"
        return f"[devbuf${base}({step})]" if unit != "generic" else f"[devbuf${base}]"
    if type(dt).__module__.startswith("ml_dtypes") or dt.type.__module__.startswith("ml_dtypes"):
        f = _devbuf_name(dt.name)
        if f is not None:
            return f
    try:
        arr: Any = np.empty(0, dt)  # a Buffer (NumPy's stubs say so from 3.12 on)
        return memoryview(arr).format
    except (ValueError, TypeError, BufferError) as e:
        f = _devbuf_name(dt.name)
        if f is not None:
            return f
        raise _unknown(dt, f"NumPy has no buffer format for it: {e}") from None


def as_format(spec: object) -> str:
    """The devbuf format string for `spec`: a struct/PEP 3118 format string, a
    NumPy dtype name or typestr, a NumPy type or dtype, or an ml_dtypes type.
    A string the struct grammar reads is taken as that format first. Raises
    FormatError (a ValueError) listing the accepted forms."""
    if isinstance(spec, bytes):
        spec = spec.decode("ascii", "replace")
    if isinstance(spec, str):
        hit = _cache.get(spec)
        if hit is not None:
            return hit
        try:
            _devbuf.calcsize(spec)
            return spec
        except _devbuf.FormatError as struct_error:
            first = struct_error
        # A code the format engine knows and refuses on purpose ('<G', '<Zg':
        # long double complex has no standard size) stays refused: NumPy's
        # reading of the same typestr would hide the reason.
        if "long double complex" in str(first):
            raise first
        f = _NAMES.get(spec) or _devbuf_name(spec)
        if f is None and _NAME_LIKE.match(spec) and ("numpy" in sys.modules
                                                       or _numpy_importable()):
            import numpy as np

            try:
                f = _from_numpy_dtype(np.dtype(spec))
            except _devbuf.FormatError:
                raise
            except Exception:  # NumPy's parser raises SyntaxError too (for ',')
                f = None
        if f is None:
            raise _extend(first, spec)
        if len(_cache) < 256:
            _cache[spec] = f
        return f
    if dtype_like(spec):
        try:
            import numpy as np
        except ImportError:
            raise _unknown(spec, "NumPy is not installed to read it") from None
        try:
            dt = np.dtype(spec)  # type: ignore[call-overload]
        except TypeError as e:
            raise _unknown(spec, str(e)) from None
        return _from_numpy_dtype(dt)
    raise TypeError(f"format must be a str, a NumPy dtype or type, not {type(spec).__name__}: "
                    f"accepted: {ACCEPTED}")


_np_ok: Optional[bool] = None


def _numpy_importable() -> bool:
    global _np_ok
    if _np_ok is None:
        import importlib.util

        _np_ok = importlib.util.find_spec("numpy") is not None
    return _np_ok


# ---- devbuf format -> NumPy dtype (DeviceBuffer.dtype) -------------------------------

_KIND = {"int": "i", "uint": "u", "float": "f", "complex": "c", "bool": "b"}


def _field_dtype(fl: "Field") -> Any:
    """A NumPy dtype for one field, or None."""
    import numpy as np

    if fl.kind == "struct":
        names: List[str] = []
        formats: List[Any] = []
        offsets: List[int] = []
        for i, c in enumerate(c for c in fl.children if c.kind != "padding"):
            d = _field_dtype(c)
            if d is None:
                return None
            names.append(c.name or f"f{i}")
            formats.append(d)
            offsets.append(c.offset)
        base = np.dtype({"names": names, "formats": formats, "offsets": offsets,
                         "itemsize": fl.elem_size})
    elif fl.custom is not None:
        desc = fl.custom.desc
        if desc is None:
            return None
        canon = desc.canonical
        if canon.startswith(("datetime64", "timedelta64")):
            unit = canon[canon.find("(") + 1:-1] if "(" in canon else ""
            base = np.dtype(canon.split("(")[0] + (f"[{unit}]" if unit else ""))
        else:
            try:
                import ml_dtypes
            except ImportError:
                return None
            t = getattr(ml_dtypes, canon, None)
            if t is None:
                return None
            base = np.dtype(t)
    elif fl.kind == "scalar" and fl.dtype_kind in _KIND:
        order = ">" if fl.big_endian else "<"
        base = np.dtype(f"{order}{_KIND[fl.dtype_kind]}{fl.elem_size}")
    elif fl.kind == "scalar" and fl.dtype_kind == "string" and fl.code in ("c", "s"):
        base = np.dtype(f"S{fl.elem_size}")
    else:
        return None
    shape: Tuple[int, ...] = tuple(fl.shape) or ((fl.count,) if fl.count != 1 else ())
    return np.dtype((base, shape)) if shape else base


def numpy_dtype(fmt: "Format") -> Any:
    """The NumPy dtype of a parsed devbuf format, or None where none maps."""
    fields = [f for f in fmt.fields if f.kind != "padding"]
    if len(fields) != 1 or fields[0].offset != 0:
        return None
    d = _field_dtype(fields[0])
    if d is None or d.itemsize != fmt.itemsize:
        return None
    return d


def shape_size(shape: Union[Tuple[int, ...], List[int]]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
