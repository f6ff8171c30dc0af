"""Plugin records: devbuf.plugins() and devbuf.load_plugin()."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

from . import _devbuf


@dataclass(frozen=True)
class PluginInfo:
    """One plugin the runtime knows of, loaded or not.

    ``state`` is "loaded", "failed" or "unregistered"; a failed plugin says why
    in ``reason``. ``device_count`` is 0 with ``device_error`` set when a
    loaded plugin found no device (e.g. "libcuda.so.1: cannot open shared
    object file"); asking may initialise the plugin's driver.
    """

    index: int
    state: str
    name: Optional[str]
    version: Optional[str]
    description: Optional[str]
    path: str
    source: str
    abi: Tuple[int, int]
    reason: str
    error: str
    identifiers: Tuple[str, ...]
    device_count: int
    device_error: Optional[str]

    @property
    def loaded(self) -> bool:
        return self.state == "loaded"

    @classmethod
    def _from_raw(cls, d: dict) -> "PluginInfo":
        d = dict(d)
        d["identifiers"] = tuple(d["identifiers"])
        d["abi"] = tuple(d["abi"])
        return cls(**d)


def plugins() -> list:
    """Every plugin record, in load order (failed ones included)."""
    return [PluginInfo._from_raw(d) for d in _devbuf._plugins()]


def load_plugin(path) -> PluginInfo:
    """Load one more plugin file now and return its record.

    Raises :class:`devbuf.PluginError` (with the loader's reason: missing
    entry symbol, ABI major mismatch, ...) when it cannot be used; the failed
    record still shows in :func:`plugins`.
    """
    return PluginInfo._from_raw(_devbuf._load_plugin(os.fspath(path)))
