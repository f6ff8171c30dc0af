"""What the kit asks a factory for: an ArraySpec (dtype, shape, layout,
read-only), with the values the array must hold and a NumPy array of exactly
that layout that a factory may convert from."""
from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from typing_extensions import Buffer


def import_foreign(module: str) -> Any:
    """`import module`, typed Any. The libraries the kit checks (ml_dtypes,
    pyarrow, JAX, CuPy, ...) are foreign objects to it: whatever they are and
    whether they have stubs, the kit must type-check the same with or without
    them installed, so their modules, and the arrays and callables they make,
    are Any throughout devbuf.check."""
    return importlib.import_module(module)



def as_buffer(a: npt.NDArray[Any]) -> Buffer:
    """a itself, typed as the buffer it is at run time on every Python: NumPy's
    stubs give ndarray its __buffer__ (PEP 688) only from Python 3.12, so before
    that devbuf.from_host(a) would not type-check."""
    return cast("Buffer", a)


# Plain dtypes every factory is asked for (NumPy spelling).
PLAIN_DTYPES: Tuple[str, ...] = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")

# Record dtypes: the layouts whose PEP 3118 formats exporters get wrong.
RECORD_DTYPES: Dict[str, Callable[[], np.dtype[Any]]] = {
    # fields of every alignment, packed (align=False): '@'-aligned formats need padding codes
    "record_packed": lambda: np.dtype([("a", "i2"), ("b", "i4"), ("c", "u1"), ("d", "i8")]),
    # the same, aligned as a C struct
    "record_aligned": lambda: np.dtype([("a", "i2"), ("b", "i4"), ("c", "u1"), ("d", "i8")],
                                       align=True),
    # a packed 3-byte struct inside a 16-byte record, explicit offsets
    "record_offsets": lambda: np.dtype({
        "names": ["o", "k"], "formats": [np.dtype([("i", "i2"), ("j", "u1")]), "f8"],
        "offsets": [0, 8], "itemsize": 16}),
    # a sub-array field followed by a bool, packed
    "record_subarray": lambda: np.dtype([("p", "f4", (2, 3)), ("q", "?")]),
}

# Extension dtypes (ml_dtypes); asked of factories that know them.
EXTENSION_DTYPES: Tuple[str, ...] = ("bfloat16", "float8_e4m3fn", "int4")

# Layouts: how the elements sit in memory.
#   C, F       contiguous in that order
#   strided    every other element along the last axis (positive, non-unit strides)
#   reversed   axis 0 walked backwards (negative stride)
#   broadcast  axis 0 repeated (zero stride)
#   offset     C-contiguous, starting one element into a larger allocation
LAYOUTS: Tuple[str, ...] = ("C", "F", "strided", "reversed", "broadcast", "offset")

SHAPES: Tuple[Tuple[int, ...], ...] = ((), (0,), (3, 0), (7,), (3, 4), (2, 3, 2))


def numpy_dtype(name: str) -> np.dtype[Any]:
    if name in RECORD_DTYPES:
        return RECORD_DTYPES[name]()
    if name in EXTENSION_DTYPES:
        ml_dtypes = import_foreign("ml_dtypes")
        ext: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
        return ext
    return np.dtype(name)


def _fill(dt: np.dtype[Any], n: int) -> npt.NDArray[Any]:
    """n deterministic, distinct-ish values of dtype dt (non-zero where possible,
    so that a read of zeroed or foreign memory shows)."""
    if dt.fields:
        out = np.zeros(n, dt)
        for name in dt.names or ():  # (fields imply names)
            sub = dt.fields[name][0]
            base, shape = (sub.base, sub.shape) if sub.subdtype else (sub, ())
            m = n * int(np.prod(shape, dtype=np.int64))
            out[name] = _fill(base, m).reshape((n,) + shape)
        return out
    if dt.kind == "b":
        flags: npt.NDArray[np.bool_] = (np.arange(n) % 3 != 1)
        return flags
    if dt.kind == "c":
        return (np.arange(n) % 7 + 1 + 1j * (np.arange(n) % 5)).astype(dt)
    if dt.kind in "iu":
        return (np.arange(n) % 7 + 1).astype(dt)
    return (np.arange(n) % 7 + 1).astype(np.float32).astype(dt)


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """What the kit asks a factory for. `dtype` is a NumPy dtype name, a key
    of RECORD_DTYPES or an ml_dtypes name; `layout` one of LAYOUTS."""

    dtype: str
    shape: Tuple[int, ...] = (7,)
    layout: str = "C"
    readonly: bool = False

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout {self.layout!r}: expected one of {', '.join(LAYOUTS)}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def np_dtype(self) -> np.dtype[Any]:
        return numpy_dtype(self.dtype)

    def numpy(self) -> npt.NDArray[Any]:
        """A NumPy array with this spec's values, layout and read-only flag."""
        dt = self.np_dtype
        shape = self.shape
        n = int(np.prod(shape, dtype=np.int64))
        if not shape and self.layout != "offset":
            a = _fill(dt, 1).reshape(())  # every layout of a 0-d array is the same
        elif self.layout == "C":
            a = _fill(dt, n).reshape(shape)
        elif self.layout == "F":
            a = np.asfortranarray(_fill(dt, n).reshape(shape))
        elif self.layout == "offset":
            a = _fill(dt, n + 1)[1:].reshape(shape)
        elif self.layout == "strided":
            big = shape[:-1] + (shape[-1] * 2,)
            a = _fill(dt, int(np.prod(big, dtype=np.int64))).reshape(big)[..., ::2]
        elif self.layout == "reversed":
            a = _fill(dt, n).reshape(shape)[::-1]
        elif self.layout == "broadcast":
            row = _fill(dt, int(np.prod(shape[1:], dtype=np.int64))).reshape((1,) + shape[1:])
            a = np.broadcast_to(row, shape)
        else:  # pragma: no cover - __post_init__ refuses it
            raise AssertionError(self.layout)
        if self.layout == "broadcast":
            a = a.copy() if 0 in shape else a  # broadcast_to is read-only already
        if self.readonly:
            a.flags.writeable = False
        elif self.layout == "broadcast" and 0 not in shape:
            # a writable zero-stride array would alias its own items
            raise ValueError("layout 'broadcast' exists only read-only")
        return a

    @property
    def values(self) -> npt.NDArray[Any]:
        """The logical values, C-contiguous."""
        return np.array(self.numpy(), order="C", copy=True)  # (ascontiguousarray makes 0-d 1-d)

    def __str__(self) -> str:
        ro = ", readonly=True" if self.readonly else ""
        return f"ArraySpec({self.dtype!r}, {self.shape!r}, {self.layout!r}{ro})"


def default_cases(dtypes: Optional[Iterable[str]] = None, layouts: Iterable[str] = LAYOUTS,
                  shapes: Iterable[Tuple[int, ...]] = SHAPES) -> List[ArraySpec]:
    """The cases the kit asks a producer for: every dtype C-contiguous and
    read-only, every layout and shape for a few dtypes."""
    dtypes = tuple(dtypes) if dtypes is not None else PLAIN_DTYPES + tuple(RECORD_DTYPES)
    cases: List[ArraySpec] = []
    shape: Tuple[int, ...]
    for dt in dtypes:
        for shape in ((7,), (3, 4), ()):
            cases.append(ArraySpec(dt, shape, "C"))
        cases.append(ArraySpec(dt, (3, 4), "C", readonly=True))
        cases.append(ArraySpec(dt, (3, 4), "strided"))
    for dt in ("int8", "float64", "int32", "record_packed"):
        if dt not in dtypes:
            continue
        for layout in layouts:
            for shape in shapes:
                if layout == "broadcast" and not shape:
                    continue
                for ro in (False, True):
                    if layout == "broadcast" and not ro and 0 not in shape:
                        continue
                    cases.append(ArraySpec(dt, shape, layout, ro))
    seen: Set[ArraySpec] = set()
    out: List[ArraySpec] = []
    for c in cases:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def same_values(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> bool:
    """Do two NumPy arrays hold the same values (padding bytes of records
    aside)?"""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.tobytes() == want.tobytes():
        return True
    return bool(want.dtype.fields) and bool(np.all(got == want))
