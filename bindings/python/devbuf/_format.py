"""Parsed format strings: devbuf.parse_format() and DeviceView.dtype.

The C engine (registry/include/devbuf/format.h) does the parsing; this module
only gives its result Python types. docs/format-strings.md is the grammar.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from . import _devbuf


@dataclass(frozen=True)
class DTypeDesc:
    """What a dtype namespace said one custom item is."""

    kind: str
    itemsize: int
    alignment: int
    bits: int
    elements_per_item: int
    dlpack: Optional[Tuple[int, int]]
    canonical: str
    plain_format: str


@dataclass(frozen=True)
class Custom:
    """A ``[id$payload;alt$payload]`` item: every alternative as written, and
    which one (``chosen``, -1 if none) gave the layout."""

    alternatives: Tuple[dict, ...]
    chosen: int
    is_complex: bool
    desc: Optional[DTypeDesc]

    @property
    def id(self) -> Optional[str]:
        return self.alternatives[self.chosen]["id"] if self.chosen >= 0 else None

    @property
    def payload(self) -> Optional[str]:
        return self.alternatives[self.chosen]["payload"] if self.chosen >= 0 else None


@dataclass(frozen=True)
class Field:
    name: Optional[str]
    kind: str          # scalar padding struct pointer function custom bits
    code: str
    offset: int
    size: int
    elem_size: int
    count: int
    alignment: int
    byteorder: str
    big_endian: bool
    dtype_kind: str
    shape: Tuple[int, ...]
    children: Tuple["Field", ...]
    pointee: Optional["Field"]
    custom: Optional[Custom]
    bit_offset: int
    src_offset: int


@dataclass(frozen=True)
class Format:
    """A parsed buffer-protocol format string."""

    format: str
    mode: str
    itemsize: int
    alignment: int
    canonical: str
    fields: Tuple[Field, ...]
    has_custom: bool
    has_unknown: bool
    has_pointers: bool
    non_native: bool
    end_byteorder: str


def _field(d: dict) -> Field:
    d = dict(d)
    d["children"] = tuple(_field(c) for c in d["children"])
    d["pointee"] = _field(d["pointee"]) if d["pointee"] is not None else None
    c = d["custom"]
    if c is not None:
        desc = DTypeDesc(**c["desc"]) if c["desc"] is not None else None
        d["custom"] = Custom(tuple(c["alternatives"]), c["chosen"], c["is_complex"], desc)
    return Field(**d)


def _make_format(d: dict) -> Format:
    d = dict(d)
    d["fields"] = tuple(_field(f) for f in d["fields"])
    return Format(**d)


_devbuf._set_format_factory(_make_format)


def parse_format(fmt: str, mode: str = "default", *, allow_unknown: bool = False,
                 plugins: bool = True, lint: bool = False) -> Format:
    """Parse a buffer-protocol format string, custom dtypes included.

    ``mode`` is "default" (PEP 3118 + ``[id$payload]``), "struct" (exactly
    CPython's struct module, with the complex codes of 3.14 and 3.15: F, D,
    Zf, Zd) or "numpy" (NumPy's PEP 3118 reader). Raises
    :class:`devbuf.FormatError` (a ValueError) with ``.offset``, the byte the
    problem was found at, and a caret under it in the message.

    ``lint=True`` also refuses a space or ``[`` in a custom dtype id: the
    draft allows them, but no package name has one.
    """
    return _devbuf._parse_format(fmt, mode, allow_unknown=allow_unknown, plugins=plugins,
                                 lint=lint)
