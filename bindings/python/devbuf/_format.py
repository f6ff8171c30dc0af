"""Parsed format strings: devbuf.parse_format() and DeviceView.dtype.

The C engine (registry/include/devbuf/format.h) does the parsing; this module
only gives its result Python types. docs/format-strings.md is the grammar.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, TypedDict

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


class Alternative(TypedDict):
    """One ``id$payload`` alternative of a custom item, as the engine read it."""

    id: str
    payload: str
    offset: int  # where it starts in the format string
    state: str  # what the dtype registry made of it
    status: str  # the error status name, or ""


@dataclass(frozen=True)
class Custom:
    """A ``[id$payload;alt$payload]`` item: every alternative as written, and
    which one (``chosen``, -1 if none) gave the layout."""

    alternatives: Tuple[Alternative, ...]
    chosen: int
    is_complex: bool
    desc: Optional[DTypeDesc]

    @property
    def id(self) -> Optional[str]:
        return self.alternatives[self.chosen]["id"] if self.chosen >= 0 else None

    @property
    def payload(self) -> Optional[str]:
        return self.alternatives[self.chosen]["payload"] if self.chosen >= 0 else None


# Format and Field are C types over the engine's result (bindings/python/src/
# base/format.c): their attributes are made on first read, so a parse costs about
# what the C parse costs. Same attribute names, repr and equality as the
# dataclasses they replaced.
Format = _devbuf.Format
Field = _devbuf.Field


def _make_custom(c: Dict[str, Any]) -> Custom:
    desc = DTypeDesc(**c["desc"]) if c["desc"] is not None else None
    return Custom(tuple(c["alternatives"]), c["chosen"], c["is_complex"], desc)


_devbuf._set_format_factory(_make_custom)

# A C function (no Python frame in between): see its docstring.
parse_format = _devbuf.parse_format
