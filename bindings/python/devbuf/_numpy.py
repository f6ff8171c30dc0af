"""devbuf.to_numpy(): host memory to NumPy for the dtypes NumPy's buffer reader refuses."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Union

if TYPE_CHECKING:  # numpy is imported only when to_numpy is called
    from numpy.typing import NDArray

    from ._devbuf import DeviceBuffer, DeviceView, ForeignArray


class _Pinned:
    """Carries an __array_interface__ for NumPy and a memoryview export that
    pins the source (a DeviceBuffer cannot be freed, a DeviceView cannot be
    released) for as long as the NumPy array lives (it keeps this as .base)."""

    __slots__ = ("_export", "__array_interface__")

    def __init__(self, export: memoryview, interface: Dict[str, Any]) -> None:
        self._export = export
        self.__array_interface__ = interface


def to_numpy(obj: "Union[DeviceBuffer, DeviceView, ForeignArray]") -> "NDArray[Any]":
    """A NumPy array over the host memory of a devbuf object (DeviceBuffer,
    DeviceView, ForeignArray), without a copy.

    NumPy reads the buffer protocol first and has no PEP 3118 spelling for
    datetime64/timedelta64, so ``numpy.asarray`` refuses
    ``[devbuf$datetime64(D)]``; this goes through devbuf's
    ``__array_interface__``, which names it ``'<M8[D]'``. Plain dtypes work
    too. Device memory the host cannot read raises BufferError (copy it with
    ``.to_host()`` first); a dtype NumPy cannot name raises AttributeError
    saying why.
    """
    export = memoryview(obj)  # pins the source; BufferError for device memory
    try:
        interface = obj.__array_interface__
    except BaseException:
        export.release()
        raise
    import numpy as np

    return np.asarray(_Pinned(export, interface))
