"""Pickling of DeviceBuffer and DeviceView (PEP 574, pickle protocol 5).

What goes out (``__reduce_ex__``, installed on both types by the C extension,
lands in :func:`_reduce`):

* protocol 5, host-readable memory (``cpu``, or a device whose memory the
  host may read): a ``pickle.PickleBuffer`` of the memory itself. No copy;
  with a ``buffer_callback`` it travels out-of-band.
* protocol 5, device memory the host cannot read (``devbuf.sim``, CUDA...):
  exactly one device-to-host copy, through the device's plugin, into host
  staging memory that plugin allocated (``devbuf_host_alloc``: pinned where
  the plugin can), wrapped in a :class:`devbuf.HostStaging` and handed out as
  a ``PickleBuffer``: that one copy is what travels out-of-band.
* protocols 0-4: the contents in-band, as ``bytes`` (one copy).

Metadata travels in-band: identifier, ordinal, format (custom dtypes
verbatim), shape, strides, item size, read-only flag.

What comes back: a DeviceBuffer on the same ``identifier:ordinal`` when this
process can open it. On ``cpu`` the buffer *borrows* the payload's memory
(so an in-process ``loads(..., buffers=...)`` given the same PickleBuffer
shares memory with the original, as the PEP allows); elsewhere one
host-to-device copy. When the device cannot be opened here, the unpickle
policy decides: ``"error"`` (the default) raises :class:`MissingDeviceError`
naming the identifier; ``"host"`` lands the data on the host as a ``cpu``
DeviceBuffer. Choose it with :func:`set_unpickle_policy`, the
:func:`unpickle_policy` context manager, or ``DEVBUF_UNPICKLE_POLICY``.

A DeviceView comes back as a DeviceView of such a rebuilt DeviceBuffer,
C-contiguous (the PEP wants contiguous payloads; a strided view is gathered
on the way out, and its original strides are kept in the metadata as
``source_strides``).

See docs/pickle-and-distributed.md.
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import os
import pickle
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

from . import _devbuf

if TYPE_CHECKING:
    from typing_extensions import Buffer

# (metadata dict, payload) -> the rebuilt object: what __reduce_ex__ hands pickle
_Rebuild = Callable[[Dict[str, Any], "Buffer"], object]
_Payload = Union[pickle.PickleBuffer, bytes]

__all__ = [
    "MissingDeviceError",
    "POLICIES",
    "get_unpickle_policy",
    "set_unpickle_policy",
    "unpickle_policy",
]

#: The unpickle policies: where a buffer goes when its device is missing.
POLICIES = ("error", "host")

# Version of the metadata dict; a loader refuses versions it does not know.
_META_VERSION = 1


class MissingDeviceError(_devbuf.Error, pickle.UnpicklingError):
    """A pickled buffer names a device this process cannot open.

    ``identifier`` and ``ordinal`` say which; ``reason`` is the runtime's
    message. Raised under the ``"error"`` unpickle policy.
    """

    def __init__(self, message: str, identifier: str = "", ordinal: int = 0, reason: str = ""):
        super().__init__(message)
        self.identifier = identifier
        self.ordinal = ordinal
        self.reason = reason


def _policy_from_env() -> str:
    p = os.environ.get("DEVBUF_UNPICKLE_POLICY", "error").strip().lower() or "error"
    if p not in POLICIES:
        raise ValueError(
            f"DEVBUF_UNPICKLE_POLICY={p!r}: expected one of {', '.join(map(repr, POLICIES))}")
    return p


_default_policy = _policy_from_env()
# A context manager's choice, per thread / per asyncio task; None: the default.
_scoped_policy: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "devbuf_unpickle_policy", default=None)


def _check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(
            f"unknown unpickle policy {policy!r}: expected one of {', '.join(map(repr, POLICIES))}")
    return policy


def get_unpickle_policy() -> str:
    """The policy in force here: the innermost :func:`unpickle_policy`, else
    the process default (:func:`set_unpickle_policy`, initially
    ``$DEVBUF_UNPICKLE_POLICY`` or ``"error"``)."""
    scoped = _scoped_policy.get()
    return scoped if scoped is not None else _default_policy


def set_unpickle_policy(policy: str) -> str:
    """Set the process-wide unpickle policy (``"error"`` or ``"host"``);
    returns the previous one."""
    global _default_policy
    old = _default_policy
    _default_policy = _check_policy(policy)
    return old


@contextlib.contextmanager
def unpickle_policy(policy: str) -> Iterator[str]:
    """``with devbuf.unpickle_policy("host"): pickle.loads(...)``: the policy
    for this thread (or asyncio task) inside the block."""
    token = _scoped_policy.set(_check_policy(policy))
    try:
        yield policy
    finally:
        _scoped_policy.reset(token)


# The staging cache (DEVBUF_PICKLE_STAGING_CACHE_MB) gives its block back to
# the plugin before the plugins go away.
atexit.register(_devbuf._pickle_staging_cache, 0)


# ---- pickling -------------------------------------------------------------------------

def _metadata(obj: Union[_devbuf.DeviceBuffer, _devbuf.DeviceView], identifier: str,
              ordinal: int) -> Dict[str, Any]:
    meta = {
        "v": _META_VERSION,
        "identifier": identifier,
        "ordinal": ordinal,
        "format": obj.format,
        "shape": tuple(obj.shape),
        "itemsize": obj.itemsize,
        "readonly": bool(obj.readonly),
    }
    return meta


def _c_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= n if n else 1
    return tuple(reversed(strides))


def _reduce(obj: Union[_devbuf.DeviceBuffer, _devbuf.DeviceView],
            protocol: int) -> Tuple[_Rebuild, Tuple[Dict[str, Any], _Payload]]:
    """__reduce_ex__ of DeviceBuffer and DeviceView."""
    rebuild: _Rebuild
    payload: _Payload
    if isinstance(obj, _devbuf.DeviceBuffer):
        dev = obj.device
        meta = _metadata(obj, dev.identifier, dev.ordinal)
        meta["strides"] = tuple(obj.strides)
        host = dev.host_accessible
        contiguous = True
        rebuild = _rebuild_buffer
    elif isinstance(obj, _devbuf.DeviceView):
        ident = obj.identifier
        if ident is None:  # a host exporter (bytes, NumPy...): it comes back on cpu
            ident, ordinal = "cpu", 0
        else:
            ordinal = obj.device.ordinal
        meta = _metadata(obj, ident, ordinal)
        meta["strides"] = _c_strides(meta["shape"], meta["itemsize"])
        contiguous = obj.c_contiguous
        if not contiguous:
            meta["source_strides"] = tuple(obj.strides)
        host = obj.host_accessible
        rebuild = _rebuild_view
    else:  # pragma: no cover - only installed on the two types
        raise TypeError(f"cannot pickle {type(obj).__name__} with devbuf._pickle")

    if protocol >= 5:
        if host and contiguous:
            # The memory itself: zero copies (the export waits on the
            # producer's event first).
            payload = pickle.PickleBuffer(obj)
        else:
            payload = pickle.PickleBuffer(_devbuf._pickle_download(obj))
    elif host and contiguous:
        with memoryview(obj) as mv:
            payload = mv.tobytes()
    else:
        payload = _devbuf._pickle_download(obj, True)
    return rebuild, (meta, payload)


# ---- unpickling -----------------------------------------------------------------------

def _open_device(identifier: str, ordinal: int) -> Optional[_devbuf.Device]:
    """The Device to rebuild on, or None when it cannot be opened here and
    the policy says "host". Raises MissingDeviceError under "error"."""
    spec = f"{identifier}:{ordinal}"
    try:
        dev = _devbuf.device(spec)
        if _devbuf._pickle_device_usable(dev):
            return dev
        reason = f"the plugin behind {spec} was unregistered"
    except _devbuf.Error as e:
        reason = str(e)
    policy = get_unpickle_policy()
    if policy == "host":
        return None
    known = sorted({i for p in _devbuf._plugins() if p["state"] == "loaded"
                    for i in p["identifiers"]} | {"cpu"})
    registered = identifier in known
    why = ("has no device " + str(ordinal) if registered
           else "is not registered in this process")
    raise MissingDeviceError(
        f"cannot unpickle a devbuf buffer of device {spec!r}: identifier {identifier!r} {why} "
        f"({reason}); registered here: {', '.join(known)}. "
        f"devbuf.set_unpickle_policy('host') (or `with devbuf.unpickle_policy('host'):`, or "
        f"DEVBUF_UNPICKLE_POLICY=host) lands such buffers on the host instead",
        identifier, ordinal, reason)


def _rebuild_buffer(meta: Dict[str, Any], payload: Buffer) -> _devbuf.DeviceBuffer:
    if meta.get("v") != _META_VERSION:
        raise pickle.UnpicklingError(
            f"devbuf: pickled buffer metadata version {meta.get('v')!r} is not supported "
            f"here (this devbuf reads version {_META_VERSION})")
    device = _open_device(meta["identifier"], meta["ordinal"])
    return _devbuf._pickle_rebuild("cpu" if device is None else device, payload,
                                   meta["shape"], meta["format"],
                                   meta["itemsize"], meta["readonly"])


def _rebuild_view(meta: Dict[str, Any], payload: Buffer) -> _devbuf.DeviceView:
    return _devbuf.view(_rebuild_buffer(meta, payload))
