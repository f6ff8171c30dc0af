"""Built-in targets: factories (and consumers) for the libraries the kit
reports on, so that `python -m devbuf.check numpy` needs no code.

A factory returns None for a spec its library cannot make as asked (a layout
it would silently copy, a dtype it lacks): the kit counts those as not
offered, never as failures. `source(spec)` writes the reproducer's first
lines in the library's own terms, so that a failure is ready to file.
"""
from __future__ import annotations

import ctypes
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict,
                    Union)

import numpy as np
import numpy.typing as npt

from ._consumer import ConsumerFn, ResultReader
from ._dlpack import to_py_object
from ._producer import Factory, ObjectReader
from ._spec import default_cases, import_foreign
from ._spec import EXTENSION_DTYPES, PLAIN_DTYPES, RECORD_DTYPES, LAYOUTS, ArraySpec, as_buffer


class ConsumerOptions(TypedDict, total=False):
    """consumer()'s keyword arguments that a Target gives for one consumer."""

    read: ResultReader
    setup: str


# label -> (fn, protocol) or (fn, protocol, ConsumerOptions)
ConsumerEntry = Union[Tuple[ConsumerFn, str], Tuple[ConsumerFn, str, ConsumerOptions]]

# ---- NumPy source for a spec (the reproducers' first lines) --------------------------------


def numpy_source(spec: ArraySpec, var: str = "a") -> str:
    """Plain NumPy code building `var` with spec's dtype, layout and values."""
    dt = spec.np_dtype
    lines = ["import numpy as np"]
    if spec.dtype in EXTENSION_DTYPES:
        lines.append("import ml_dtypes")
        dts = f"ml_dtypes.{spec.dtype}"
    elif dt.fields:
        dts = "np." + repr(dt)
    else:
        dts = f"np.{spec.dtype}" if spec.dtype != "bool" else "np.bool_"
    shape = spec.shape
    n = int(np.prod(shape, dtype=np.int64))

    def fill(count: int) -> str:
        if dt.fields:
            return f"np.zeros({count}, {dts})"
        if dt.kind == "b":
            return f"(np.arange({count}) % 3 != 1)"
        return f"(np.arange({count}) % 7 + 1).astype({dts})"

    lay = spec.layout
    if lay == "C" or not shape and lay != "offset":
        expr = f"{fill(max(n, 1) if not shape else n)}.reshape({shape})"
    elif lay == "F":
        expr = f"np.asfortranarray({fill(n)}.reshape({shape}))"
    elif lay == "offset":
        expr = f"{fill(n + 1)}[1:].reshape({shape})"
    elif lay == "strided":
        big = shape[:-1] + (shape[-1] * 2,)
        expr = f"{fill(int(np.prod(big, dtype=np.int64)))}.reshape({big})[..., ::2]"
    elif lay == "reversed":
        expr = f"{fill(n)}.reshape({shape})[::-1]"
    else:  # broadcast
        row = (1,) + shape[1:]
        expr = f"np.broadcast_to({fill(int(np.prod(row, dtype=np.int64)))}.reshape({row}), {shape})"
        if 0 in shape:
            expr += ".copy()"
    lines.append(f"{var} = {expr}")
    if spec.readonly and not (lay == "broadcast" and 0 not in shape):
        lines.append(f"{var}.flags.writeable = False")
    return "\n".join(lines)


class Target:
    """A library under test: factories (label -> factory), their dtypes,
    reproducer sources, and the library's consumers (label -> (fn, protocol))."""

    def __init__(self, name: str, version: str, factories: Dict[str, Factory],
                 consumers: Mapping[str, ConsumerEntry] = {},  # (copied, never changed)
                 dtypes: Optional[Sequence[str]] = None, cases: Optional[List[ArraySpec]] = None,
                 note: str = "") -> None:
        self.name, self.version = name, version
        self.factories = factories
        self.consumers = dict(consumers)
        self.dtypes = dtypes
        self.cases = cases
        self.note = note


def _factory(make: Factory, source: Callable[[ArraySpec], str],
             read: Optional[ObjectReader] = None, name: Optional[str] = None) -> Factory:
    def factory(spec: ArraySpec) -> Any:
        return make(spec)
    # (attributes producer() looks for with getattr: not part of a Factory's type)
    setattr(factory, "source", source)
    factory.__name__ = name or make.__name__
    if read is not None:
        setattr(factory, "read", read)
    return factory


def _flat_read(result: Any, spec: ArraySpec) -> npt.NDArray[Any]:
    """What a consumer that returns a flat byte buffer read, as spec's items in C order."""
    return np.frombuffer(memoryview(result).cast("B"), spec.np_dtype).reshape(spec.shape)


def _np_src(tail: str) -> Callable[[ArraySpec], str]:
    return lambda spec: numpy_source(spec) + "\n" + tail


# ---- the libraries -------------------------------------------------------------------------

def numpy_target() -> Target:
    def make(spec: ArraySpec) -> Any:
        if spec.dtype in EXTENSION_DTYPES:
            return None
        return spec.numpy()
    return Target("numpy", np.__version__, {
        "numpy.ndarray": _factory(make, _np_src("obj = a"), name="numpy.ndarray")},
        consumers={"np.from_dlpack": (np.from_dlpack, "dlpack"),
                   "np.asarray": (np.asarray, "buffer")})


def ml_dtypes_target() -> Target:
    ml_dtypes = import_foreign("ml_dtypes")

    def make(spec: ArraySpec) -> Any:
        return spec.numpy() if spec.dtype in EXTENSION_DTYPES else None
    cases = [ArraySpec(dt, shape, lay, ro) for dt in EXTENSION_DTYPES
             for shape in ((7,), (3, 4), ()) for lay in ("C", "strided") for ro in (False, True)
             if shape or lay == "C"]
    return Target("ml_dtypes", ml_dtypes.__version__, {
        "ml_dtypes (NumPy arrays of ml_dtypes types)": _factory(
            make, _np_src("obj = a"), name="ml_dtypes_array")}, cases=cases)


def pyarrow_target() -> Target:
    pa = import_foreign("pyarrow")

    def tensor(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES or spec.dtype in ("bool", "complex64", "complex128"):
            return None
        a = spec.numpy()
        if any(s < 0 for s in a.strides) or (a.ndim and 0 in a.strides and a.size):
            return None  # pa.Tensor refuses negative strides; zero strides would alias
        return pa.Tensor.from_numpy(a)

    def array(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES or spec.dtype.startswith("complex") or \
                len(spec.shape) != 1 or spec.layout not in ("C", "offset"):
            return None
        if spec.layout == "offset":
            full = ArraySpec(spec.dtype, (spec.shape[0] + 1,), "C").numpy()
            arr = pa.array(full)[1:]
            # pa.array keeps values; spec.values of 'offset' are full[1:] by construction
            return arr
        return pa.array(spec.numpy())

    def array_src(spec: ArraySpec) -> str:
        if spec.layout == "offset":
            full = ArraySpec(spec.dtype, (spec.shape[0] + 1,), "C")
            return numpy_source(full) + "\nimport pyarrow as pa\nobj = pa.array(a)[1:]"
        return numpy_source(spec) + "\nimport pyarrow as pa\nobj = pa.array(a)"

    return Target("pyarrow", pa.__version__, {
        "pyarrow.Tensor": _factory(tensor, _np_src("import pyarrow as pa\n"
                                                   "obj = pa.Tensor.from_numpy(a)"),
                                   read=lambda t: t.to_numpy() if hasattr(t, "to_numpy") else
                                   np.asarray(t), name="pyarrow.Tensor"),
        "pyarrow.Array": _factory(array, array_src, read=lambda a: a.to_numpy(
            zero_copy_only=False), name="pyarrow.Array")},
        consumers={"pa.py_buffer": (pa.py_buffer, "buffer", {
            "read": _flat_read, "setup": "import pyarrow as pa"})})


def nanoarrow_target() -> Target:
    na = import_foreign("nanoarrow")

    def array(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES or spec.dtype in ("bool", "float16") or \
                spec.dtype.startswith("complex") or len(spec.shape) != 1 or spec.layout != "C":
            return None
        return na.Array(spec.numpy())

    def buffer(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES:
            return None
        a = spec.numpy()
        if a.ndim != 1 or not a.flags.c_contiguous:
            return None  # nanoarrow buffers are flat
        return na.c_buffer(a)

    def src(call: str) -> Callable[[ArraySpec], str]:
        return _np_src(f"import nanoarrow as na\nobj = {call}(a)")

    return Target("nanoarrow", na.__version__, {
        "nanoarrow.Array": _factory(array, src("na.Array"), read=lambda a: np.asarray(
            a.to_pylist()), name="nanoarrow.Array"),
        "nanoarrow.c_buffer": _factory(buffer, src("na.c_buffer"), name="nanoarrow.c_buffer")},
        consumers={"na.c_buffer": (na.c_buffer, "buffer", {
            "read": _flat_read, "setup": "import nanoarrow as na"})})


def array_api_strict_target() -> Target:
    xp = import_foreign("array_api_strict")

    def make(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES or spec.dtype == "float16":
            return None
        return xp.asarray(spec.numpy())
    return Target("array_api_strict", xp.__version__, {
        "array_api_strict.Array": _factory(
            make, _np_src("import array_api_strict as xp\nobj = xp.asarray(a)"),
            read=lambda x: np.asarray(x._array), name="array_api_strict.Array")},
        consumers={"xp.from_dlpack": (xp.from_dlpack, "dlpack", {
            "setup": "import array_api_strict as xp"})})


def jax_target() -> Target:
    jax = import_foreign("jax")
    jax.config.update("jax_platforms", "cpu")
    # 64-bit types on: without it JAX narrows float64 to float32 on import (its
    # documented default), which would hide every protocol question behind a dtype
    jax.config.update("jax_enable_x64", True)
    jnp = import_foreign("jax.numpy")

    def make(spec: ArraySpec) -> Any:
        if spec.dtype not in PLAIN_DTYPES and spec.dtype not in EXTENSION_DTYPES:
            return None
        if spec.layout != "C":
            return None  # jax arrays have no strides: any other layout is a copy
        return jnp.asarray(spec.numpy())
    return Target("jax", jax.__version__, {
        "jax.Array": _factory(make, _np_src("import jax.numpy as jnp\nobj = jnp.asarray(a)"),
                              read=np.asarray, name="jax.Array")},
        note="jax_enable_x64 on, CPU backend",
        consumers={"jnp.from_dlpack": (jnp.from_dlpack, "dlpack", {
            "setup": "import jax; jax.config.update('jax_enable_x64', True)\n"
                     "import jax.numpy as jnp"})})


# ---- the standard library's exporters (ctypes, array, mmap) and Pillow ------------------------

_CTYPES = {"bool": "c_bool", "int8": "c_int8", "uint8": "c_uint8", "int16": "c_int16",
           "uint16": "c_uint16", "int32": "c_int32", "uint32": "c_uint32", "int64": "c_int64",
           "uint64": "c_uint64", "float32": "c_float", "float64": "c_double"}
_CTYPES_RECORDS = ("record_packed", "record_aligned")


def _ctypes_type_src(spec: ArraySpec) -> Optional[Tuple[str, List[str]]]:
    """The ctypes type expression for spec (C order; ctypes has no other) and
    the lines that define it, or None when ctypes has no such type."""
    if spec.layout != "C" or spec.readonly:
        return None  # ctypes arrays are C-ordered and always writable
    lines: List[str] = []
    if spec.dtype in _CTYPES:
        base = f"ctypes.{_CTYPES[spec.dtype]}"
    elif spec.dtype in _CTYPES_RECORDS:
        dt = spec.np_dtype
        inv = {np.dtype(k): v for k, v in _CTYPES.items()}
        fields = ", ".join(f"({n!r}, ctypes.{inv[dt[n].newbyteorder('=')]})"
                           for n in dt.names or ())
        pack = "_pack_ = 1; " if spec.dtype == "record_packed" else ""
        lines.append(f"class Rec(ctypes.Structure): {pack}_fields_ = [{fields}]")
        base = "Rec"
    else:
        return None
    for d in reversed(spec.shape):
        base = f"{base} * {d}"
    return base, lines


def ctypes_target() -> Target:
    def src(spec: ArraySpec) -> str:
        t = _ctypes_type_src(spec)
        assert t is not None
        return "\n".join([numpy_source(spec), "import ctypes", *t[1], f"obj = ({t[0]})()",
                          "ctypes.memmove(ctypes.addressof(obj), a.ctypes.data, a.nbytes)"])

    def make(spec: ArraySpec) -> Any:
        t = _ctypes_type_src(spec)
        if t is None:
            return None
        ns: Dict[str, Any] = {"ctypes": ctypes}
        for line in t[1]:
            exec(line, ns)  # the reproducer's own class statement  # noqa: S102
        obj = eval(f"({t[0]})()", ns)  # noqa: S307 - built from the names above only
        a = np.ascontiguousarray(spec.numpy())
        if spec.np_dtype.itemsize and ctypes.sizeof(obj) != a.nbytes:
            return None  # (a record ctypes lays out otherwise than NumPy)
        ctypes.memmove(ctypes.addressof(obj), a.ctypes.data, a.nbytes)
        return obj
    import platform
    return Target("ctypes", platform.python_version(), {
        "ctypes arrays and Structures": _factory(make, src, read=lambda x: np.asarray(
            memoryview(x)), name="ctypes_array")},
        note="the standard library's ctypes")


_ARRAY_CODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
                "uint32": "I", "int64": "q", "uint64": "Q", "float32": "f", "float64": "d"}


def array_target() -> Target:
    import array
    import platform

    def make(spec: ArraySpec) -> Any:
        if spec.dtype not in _ARRAY_CODES or len(spec.shape) != 1 or spec.layout != "C" or \
                spec.readonly:
            return None  # array.array: flat, C-ordered, writable
        return array.array(_ARRAY_CODES[spec.dtype], spec.numpy().tobytes())

    def src(spec: ArraySpec) -> str:
        return (numpy_source(spec) + f"\nimport array\nobj = array.array("
                f"{_ARRAY_CODES[spec.dtype]!r}, a.tobytes())")
    return Target("array", platform.python_version(), {
        "array.array": _factory(make, src, read=lambda x: np.asarray(memoryview(x)),
                                name="array.array")}, note="the standard library's array")


def mmap_target() -> Target:
    import mmap
    import platform

    def make(spec: ArraySpec) -> Any:
        if spec.dtype != "uint8" or len(spec.shape) != 1 or not spec.shape[0] or \
                spec.layout != "C":
            return None  # bytes only; an anonymous map of 0 bytes is refused
        a = spec.numpy()
        m = mmap.mmap(-1, a.nbytes)
        m.write(a.tobytes())
        if spec.readonly:
            return None  # (an anonymous read-only map could not hold the values)
        return m

    def src(spec: ArraySpec) -> str:
        return (numpy_source(spec) + "\nimport mmap\nobj = mmap.mmap(-1, a.nbytes)\n"
                "obj.write(a.tobytes())")
    return Target("mmap", platform.python_version(), {
        "mmap.mmap": _factory(make, src, read=lambda x: np.frombuffer(x, np.uint8).copy(),
                              name="mmap.mmap")}, note="the standard library's mmap")


_PIL_MODES = {"uint8": "L", "int32": "I", "float32": "F"}


def pillow_target() -> Target:
    PIL = import_foreign("PIL")
    Image = import_foreign("PIL.Image")

    def make(spec: ArraySpec) -> Any:
        if spec.dtype not in _PIL_MODES or spec.layout != "C" or len(spec.shape) != 2 or \
                0 in spec.shape:
            return None  # images: 2-d, rows by columns, not empty
        a = np.ascontiguousarray(spec.numpy())
        return Image.frombytes(_PIL_MODES[spec.dtype], (a.shape[1], a.shape[0]), a.tobytes())

    def src(spec: ArraySpec) -> str:
        return (numpy_source(spec) + "\nfrom PIL import Image\nobj = Image.frombytes("
                f"{_PIL_MODES[spec.dtype]!r}, (a.shape[1], a.shape[0]), a.tobytes())")
    return Target("pillow", PIL.__version__, {
        "PIL.Image.Image": _factory(make, src, read=np.asarray, name="PIL.Image.Image")})


# ---- CUDA libraries (scripts/gpu-check.sh runs them on a GPU machine) --------------------------

class Unavailable(ImportError):
    """The library imports but cannot run here (no GPU it can reach): the
    target is skipped with this reason, like a library that is not installed."""


def _strided_parts(spec: ArraySpec) -> Optional[Tuple[npt.NDArray[Any], int, Tuple[int, ...]]]:
    """spec's NumPy array as (flat, offset, strides): `flat` a C-contiguous copy
    of the memory it spans (from the allocation's start for layout 'offset'),
    `offset` and `strides` where the array sits in it, in items. A device
    library builds the same layout over its own copy of `flat`, instead of
    converting the strided array (which would give a packed copy). None for an
    empty array (no layout to keep) or strides that are not whole items."""
    a = spec.numpy()
    item = a.itemsize
    if a.size == 0 or any(s % item for s in a.strides):
        return None
    lo = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + item
    pad = item if spec.layout == "offset" else 0  # the item before the array's start
    raw = (ctypes.c_char * (hi - lo + pad)).from_address(a.ctypes.data + lo - pad)
    flat = np.frombuffer(bytes(raw), a.dtype)
    return flat, (pad - lo) // item, tuple(s // item for s in a.strides)


def _device_dtypes_ok(spec: ArraySpec) -> bool:
    # Plain dtypes only: neither library has record dtypes, and read-only
    # arrays do not exist in either (a read-only spec is not offered).
    return spec.dtype in PLAIN_DTYPES and not spec.readonly


def cupy_factory(cupy: Any) -> Factory:
    """spec -> a cupy.ndarray in GPU memory with spec's values and layout
    (negative and zero strides included), or None."""
    def make(spec: ArraySpec) -> Any:
        if not _device_dtypes_ok(spec):
            return None
        parts = _strided_parts(spec)
        if parts is None:
            return cupy.asarray(spec.numpy())  # empty (or 0-d): nothing to lay out
        flat, offset, strides = parts
        base = cupy.asarray(flat)[offset:]
        item = flat.itemsize
        return cupy.lib.stride_tricks.as_strided(base, spec.shape, tuple(s * item
                                                                          for s in strides))

    def src(spec: ArraySpec) -> str:
        return _np_src("import cupy\nobj = cupy.asarray(a)  # (the kit keeps a's strides: "
                       "cupy.lib.stride_tricks.as_strided over a copy of its memory)")(spec)
    return _factory(make, src, read=lambda x: x.get(), name="cupy.ndarray")


def torch_factory(torch: Any) -> Factory:
    """spec -> a torch.Tensor on 'cuda' with spec's values and layout, or None
    (negative strides, and the dtypes this torch cannot take from NumPy)."""
    def make(spec: ArraySpec) -> Any:
        if not _device_dtypes_ok(spec):
            return None
        parts = _strided_parts(spec)
        try:
            if parts is None:
                return torch.from_numpy(spec.numpy().copy()).to("cuda")
            flat, offset, strides = parts
            if any(s < 0 for s in strides):
                return None  # torch has no negative strides
            base = torch.from_numpy(flat.copy()).to("cuda")  # (a writable copy: no warning)
        except TypeError:
            return None  # "can't convert np.ndarray of type numpy.uint16" (older torch)
        return torch.as_strided(base, spec.shape, strides, offset)

    def src(spec: ArraySpec) -> str:
        return _np_src("import torch\nobj = torch.from_numpy(a.copy()).to('cuda')  # (the "
                       "kit keeps a's strides: torch.as_strided over a copy of its memory)")(spec)
    return _factory(make, src, read=lambda t: t.cpu().numpy(), name="torch.Tensor (cuda)")


def cupy_target() -> Target:
    cupy = import_foreign("cupy")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CuPy raises its own CUDARuntimeError
        raise Unavailable(f"CuPy {cupy.__version__} cannot reach a GPU: {e}") from None
    if n < 1:
        raise Unavailable(f"CuPy {cupy.__version__} sees no GPU")
    # No consumer: the kit's consumer checks feed host memory (and devbuf.sim),
    # which cupy.from_dlpack refuses by design; a refusal of the plain array
    # would read as a failure.
    return Target("cupy", cupy.__version__, {"cupy.ndarray": cupy_factory(cupy)},
                  note="CUDA device 0; values read back through devbuf.cuda")


def torch_target() -> Target:
    torch = import_foreign("torch")
    if not torch.cuda.is_available():
        raise Unavailable(f"PyTorch {torch.__version__} sees no CUDA GPU")
    # torch.from_dlpack of the kit's host producers gives CPU tensors: its
    # DLPack consumer is the same code for both devices.
    return Target("torch", torch.__version__, {"torch.Tensor (cuda)": torch_factory(torch)},
                  note="CUDA device 0; values read back through devbuf.cuda",
                  consumers={"torch.from_dlpack": (torch.from_dlpack, "dlpack", {
                      "setup": "import torch"})})


def devbuf_target() -> Target:
    import devbuf

    def buffer(spec: ArraySpec) -> Any:
        if spec.layout != "C":
            return None
        if spec.dtype == "bfloat16" and not spec.readonly:
            # NumPy cannot export ml_dtypes' 'E': devbuf's own custom dtype carries it
            b = devbuf.empty(spec.shape, "[devbuf$bfloat16]")
            v = spec.values
            ctypes.memmove(b.ptr, v.ctypes.data, v.nbytes)
            return b
        if spec.dtype in EXTENSION_DTYPES:
            return None
        return devbuf.from_host(as_buffer(spec.numpy()), readonly=spec.readonly)

    def view(spec: ArraySpec) -> Any:
        return None if spec.dtype in EXTENSION_DTYPES else devbuf.view(spec.numpy())

    def foreign(spec: ArraySpec) -> Any:
        if spec.dtype in EXTENSION_DTYPES or spec.np_dtype.fields:
            return None
        # The one public maker of a ForeignArray: its type's exchange table.
        return to_py_object(devbuf.ForeignArray, spec.numpy())

    def sim(spec: ArraySpec) -> Any:
        if spec.layout != "C" or spec.dtype not in PLAIN_DTYPES:
            return None
        try:
            dev = devbuf.device("devbuf.sim")
        except devbuf.Error:
            return None
        return devbuf.from_host(as_buffer(spec.numpy()), device=dev, readonly=spec.readonly)

    def src(tail: str) -> Callable[[ArraySpec], str]:
        return _np_src("import devbuf\n" + tail)

    def to_host(x: Any) -> npt.NDArray[Any]:
        return np.asarray(x.to_host()) if hasattr(x, "to_host") else np.asarray(x)

    try:
        import_foreign("ml_dtypes")  # the bfloat16 cases need it for their values
        extra = [ArraySpec("bfloat16", shape) for shape in ((7,), (3, 4), ())]
    except ImportError:
        extra = []
    return Target("devbuf", devbuf.__version__, cases=default_cases() + extra, factories={
        "devbuf.DeviceBuffer": _factory(buffer, src(
            "obj = devbuf.from_host(a, readonly=a.flags.writeable is False)"),
            name="devbuf.DeviceBuffer"),
        "devbuf.DeviceView": _factory(view, src("obj = devbuf.view(a)"), name="devbuf.DeviceView"),
        "devbuf.ForeignArray": _factory(foreign, src(
            "from devbuf.check._dlpack import to_py_object\n"
            "obj = to_py_object(devbuf.ForeignArray, a)"),
                                        name="devbuf.ForeignArray"),
        "devbuf.DeviceBuffer on devbuf.sim": _factory(sim, src(
            "obj = devbuf.from_host(a, device='devbuf.sim')"), read=to_host,
            name="devbuf.sim")},
        consumers={"devbuf.from_dlpack": (devbuf.from_dlpack, "dlpack"),
                   "devbuf.view": (devbuf.view, "buffer")})


TARGETS: Dict[str, Callable[[], Target]] = {
    "numpy": numpy_target, "ml_dtypes": ml_dtypes_target, "pyarrow": pyarrow_target,
    "nanoarrow": nanoarrow_target, "array_api_strict": array_api_strict_target,
    "jax": jax_target, "ctypes": ctypes_target, "array": array_target, "mmap": mmap_target,
    "pillow": pillow_target, "devbuf": devbuf_target,
    # on a GPU only: scripts/gpu-check.sh
    "cupy": cupy_target, "torch": torch_target,
}

__all__ = ["TARGETS", "Target", "Unavailable", "cupy_factory", "torch_factory", "numpy_source", "LAYOUTS", "RECORD_DTYPES"]
