"""Plugin records: devbuf.plugins() and devbuf.load_plugin(), and plugins
shipped as Python packages (the ``devbuf.plugins`` entry-point group)."""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

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
    def _from_raw(cls, d: Dict[str, Any]) -> "PluginInfo":
        d = dict(d)
        d["identifiers"] = tuple(d["identifiers"])
        d["abi"] = tuple(d["abi"])
        return cls(**d)


def plugins() -> List[PluginInfo]:
    """Every plugin record, in load order (failed ones included)."""
    return [PluginInfo._from_raw(d) for d in _devbuf._plugins()]


def load_plugin(path: "str | os.PathLike[str]") -> PluginInfo:
    """Load one more plugin file now and return its record.

    Raises :class:`devbuf.PluginError` (with the loader's reason: missing
    entry symbol, ABI major mismatch, ...) when it cannot be used; the failed
    record still shows in :func:`plugins`.
    """
    return PluginInfo._from_raw(_devbuf._load_plugin(os.fspath(path)))


#: The entry-point group a plugin package declares, e.g. in its pyproject.toml:
#: ``[project.entry-points."devbuf.plugins"] hostmem = "devbuf_plugin_hostmem:plugin_path"``.
ENTRY_POINT_GROUP = "devbuf.plugins"


@dataclass(frozen=True)
class EntryPointPlugin:
    """What became of one ``devbuf.plugins`` entry point at ``import devbuf``.

    ``path`` is the shared object it named ("" if it named none), ``source``
    the label the runtime recorded ("entry point <dist> <version>"), and
    ``error`` why it was not loaded ("" when it was handed to the runtime;
    the runtime's own verdict is then in :func:`plugins`).
    """

    name: str
    value: str
    distribution: str
    path: str
    source: str
    error: str


_ENTRY_POINTS: List[EntryPointPlugin] = []


def entry_point_plugins() -> List[EntryPointPlugin]:
    """The ``devbuf.plugins`` entry points found at import, in load order."""
    return list(_ENTRY_POINTS)


@dataclass(frozen=True)
class _Dist:
    name: str
    version: str


@dataclass(frozen=True)
class _EntryPoint:
    """One line of a distribution's entry_points.txt (what importlib.metadata
    gives, without importing it: that costs 30 to 120 ms, more than the rest
    of ``import devbuf``)."""

    name: str
    value: str
    dist: _Dist

    def load(self) -> Any:
        import importlib

        module, _, attrs = self.value.partition(":")
        obj: Any = importlib.import_module(module.strip())
        for a in attrs.strip().split(".") if attrs.strip() else ():
            obj = getattr(obj, a)
        return obj


def _group(group: str) -> List[_EntryPoint]:
    """The entry points of ``group`` of every distribution on sys.path, the
    first one of each distribution name winning, as importlib.metadata does."""
    seen = set()
    out: List[_EntryPoint] = []
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for d in names:
            if not d.endswith((".dist-info", ".egg-info")):
                continue
            stem = d.rsplit(".", 1)[0]
            dname, _, version = stem.partition("-")
            key = dname.lower().replace("-", "_").replace(".", "_")
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(entry or ".", d, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            dist = _Dist(_dist_name(os.path.join(entry or ".", d)) or dname, version.split("-")[0])
            section = None
            for line in text.splitlines():
                line = line.strip()
                if not line or line[0] in "#;":
                    continue
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                elif section == group and "=" in line:
                    k, _, v = line.partition("=")
                    out.append(_EntryPoint(k.strip(), v.strip(), dist))
    return out


def _dist_name(info_dir: str) -> Optional[str]:
    """The Name: field of a distribution's METADATA (or PKG-INFO), as
    written (the folder name is normalised: devbuf_plugin_hostmem)."""
    for fn in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info_dir, fn), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Name:"):
                        return line[5:].strip()
                    if not line.strip():
                        break
        except OSError:
            continue
    return None


def _label(dist: str, version: str) -> str:
    # The runtime takes printable ASCII up to 200 bytes; '=' is kept out so
    # that devbuf-info's --plugin-from LABEL=PATH can carry it.
    raw = "entry point %s %s" % (dist, version)
    return "".join(c if " " <= c <= "~" and c != "=" else "?" for c in raw)[:200]


def _resolve(ep: Any) -> Tuple[str, str, str, str]:
    """(distribution, label, path, error) for one entry point; nothing raises."""
    dist = getattr(getattr(ep, "dist", None), "name", None) or "?"
    version = getattr(getattr(ep, "dist", None), "version", None) or "?"
    label = _label(dist, version)
    try:
        obj = ep.load()
        if callable(obj):
            obj = obj()
        path = os.fspath(obj)
    except Exception as e:  # a broken plugin package must not break `import devbuf`
        return dist, label, "", "%s: %s" % (type(e).__name__, e)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not os.path.isabs(path):
        return dist, label, path, (
            "'%s' is a relative path: refused, as in DEVBUF_PLUGINS (it would resolve against "
            "the current directory); return an absolute path, e.g. "
            "os.path.join(os.path.dirname(__file__), NAME)" % path)
    return dist, label, path, ""


def discover_entry_points(load: bool = True) -> List[EntryPointPlugin]:
    """Find the ``devbuf.plugins`` entry points and (with ``load``) load them.

    Called once by ``import devbuf``. Each entry point names an object of the
    plugin package (a path, or a callable returning one) that gives the
    absolute path of its shared object. Like ``DEVBUF_PLUGINS``, nothing is
    loaded in secure-execution mode (setuid/setgid) or when
    ``DEVBUF_NO_PLUGIN_ENTRY_POINTS`` is set and not "0". A failure is a
    :class:`RuntimeWarning` naming the entry point, never an exception.
    """
    from . import _devbuf

    off = os.environ.get("DEVBUF_NO_PLUGIN_ENTRY_POINTS", "")
    if _devbuf._secure_execution() or (off and off != "0"):
        return []
    found: List[EntryPointPlugin] = []
    try:
        eps = _group(ENTRY_POINT_GROUP)
    except Exception as e:
        warnings.warn("devbuf: cannot list the %r entry points: %s" % (ENTRY_POINT_GROUP, e),
                      RuntimeWarning, stacklevel=2)
        return []
    for ep in sorted(eps, key=lambda e: (e.name, e.value)):
        dist, label, path, error = _resolve(ep)
        if not error and load:
            try:
                _devbuf._load_plugin(path, label)
            except Exception as e:  # recorded by the runtime too: plugins() shows it
                error = str(e)
        rec = EntryPointPlugin(ep.name, ep.value, dist, path, label, error)
        found.append(rec)
        if error:
            warnings.warn("devbuf: plugin entry point %r (%s = %s, from %s) not loaded: %s"
                          % (ENTRY_POINT_GROUP, ep.name, ep.value, dist, error),
                          RuntimeWarning, stacklevel=2)
    if load:
        _ENTRY_POINTS[:] = found
    return found


def _launcher_args() -> List[str]:
    """--plugin-from arguments for devbuf-info's launcher: the entry points
    that ``import devbuf`` found, so that the native tool loads and lists
    them with the same source label (those that named no absolute path were
    already reported by a warning at import)."""
    return ["--plugin-from=%s=%s" % (rec.source, rec.path)
            for rec in _ENTRY_POINTS if rec.path and os.path.isabs(rec.path)]
