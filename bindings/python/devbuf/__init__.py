"""devbuf: device memory and custom dtypes for the Python buffer protocol.

The C core lives in :mod:`devbuf._devbuf`; this package re-exports it and adds
the small Python layer (plugin records, parsed formats). See docs/python-api.md.
"""
from . import _devbuf
from ._devbuf import (
    PyBUF_CLASSIC_FLAGS,
    PyBUF_DEVICE,
    PyBUF_REQUIRED_FLAGS,
    SUPPORTED_FLAGS_ATTR,
    Device,
    DeviceBuffer,
    DeviceView,
    Error,
    FormatError,
    ForeignArray,
    ImportInfo,
    OutOfMemoryError,
    PluginError,
    Sync,
    check_buffer_supports,
    device,
    devices,
    dtype_namespaces,
    from_dlpack,
    from_host,
    plugin_stats,
    register_dtype_namespace,
    runtime_version,
    search_path,
    unregister_dtype_namespace,
    view,
)
from ._api import calcsize, empty, parse_format
from ._format import Custom, DTypeDesc, Field, Format
from ._plugins import (
    ENTRY_POINT_GROUP,
    EntryPointPlugin,
    PluginInfo,
    entry_point_plugins,
    load_plugin,
    plugins,
)

__version__ = _devbuf.__version__

__all__ = [
    "PyBUF_CLASSIC_FLAGS",
    "PyBUF_DEVICE",
    "PyBUF_REQUIRED_FLAGS",
    "SUPPORTED_FLAGS_ATTR",
    "Custom",
    "DTypeDesc",
    "Device",
    "DeviceBuffer",
    "DeviceView",
    "Error",
    "Field",
    "Format",
    "FormatError",
    "ForeignArray",
    "ImportInfo",
    "OutOfMemoryError",
    "PluginError",
    "PluginInfo",
    "ENTRY_POINT_GROUP",
    "EntryPointPlugin",
    "entry_point_plugins",
    "Sync",
    "check_buffer_supports",
    "device",
    "devices",
    "dtype_namespaces",
    "empty",
    "from_dlpack",
    "from_host",
    "load_plugin",
    "parse_format",
    "calcsize",
    "plugin_stats",
    "plugins",
    "register_dtype_namespace",
    "runtime_version",
    "search_path",
    "unregister_dtype_namespace",
    "view",
]

# Pickle protocol 5 with out-of-band buffers (devbuf/_pickle.py, docs/pickle-and-distributed.md).
from ._devbuf import HostStaging  # noqa: E402
from ._pickle import (  # noqa: E402
    MissingDeviceError,
    get_unpickle_policy,
    set_unpickle_policy,
    unpickle_policy,
)

MissingDeviceError.__module__ = "devbuf"  # raised as devbuf.MissingDeviceError

__all__ += ["HostStaging", "MissingDeviceError", "get_unpickle_policy", "set_unpickle_policy",
            "unpickle_policy"]

# The Arrow PyCapsule (device) interface, both ways (src/exporters/arrow_export.c, src/readers/arrow_import.c, docs/arrow.md).
from ._devbuf import ArrowArray, from_arrow  # noqa: E402

# Headers for C and Cython consumers (`cimport devbuf`, devbuf/__init__.pxd).
from ._include import get_include  # noqa: E402

# NumPy for the dtypes its buffer reader refuses (datetime64, timedelta64).
from ._numpy import to_numpy  # noqa: E402

__all__ += ["ArrowArray", "from_arrow", "get_include", "to_numpy"]

# Plugins shipped as Python packages (the "devbuf.plugins" entry-point group),
# last, once the package is whole: a plugin package may import devbuf.
from ._plugins import discover_entry_points as _discover  # noqa: E402

_discover()
del _discover


def __getattr__(name: str) -> object:
    # devbuf.check and devbuf.plugin without importing them first (both import
    # more than most programs need: they load on first use).
    if name in ("check", "plugin"):
        import importlib

        return importlib.import_module(f"devbuf.{name}")
    raise AttributeError(f"module 'devbuf' has no attribute {name!r}")
