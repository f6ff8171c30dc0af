"""A user's script that touches every public name of devbuf (``devbuf.__all__``,
``devbuf.plugin.__all__``, ``python -m devbuf``'s helpers) with the types a
user would write. tests/python/test_typing.py type-checks it with
``mypy --strict`` (so a missing or wrong stub fails) and runs it (so the
names really exist and behave as typed). It uses only cpu and devbuf.sim.
"""
from __future__ import annotations

import pickle
from typing import Dict, List, Optional, Tuple

import numpy as np

import devbuf
import devbuf.plugin
from devbuf.__main__ import main as devbuf_config, user_plugin_dir


def buffers() -> Tuple[int, str]:
    sim: devbuf.Device = devbuf.device("devbuf.sim")
    cpu: devbuf.Device = devbuf.devices()[0]
    assert isinstance(cpu.identifier, str) and cpu.ordinal >= 0
    props: Tuple[bool, bool, str, str, int, int, int, Tuple[int, int], Optional[str]] = (
        sim.host_accessible, sim.is_async, sim.name, sim.vendor, sim.total_memory,
        sim.free_memory, sim.alignment, sim.dlpack_device, sim.plugin)
    sim.synchronize()
    buf: devbuf.DeviceBuffer = devbuf.from_host(bytes(range(16)), device=sim)
    empty: devbuf.DeviceBuffer = devbuf.empty((2, 2), "i", "cpu", readonly=False)
    with devbuf.view(buf) as v:
        view: devbuf.DeviceView = v
        sync: Optional[devbuf.Sync] = v.sync
        if sync is not None:
            ident: str = sync.identifier
            event: Optional[int] = sync.event
        shape: Tuple[int, ...] = v.shape
        fmt: devbuf.Format = v.dtype
        vinfo: devbuf.Format = v.format_info
        host: devbuf.DeviceBuffer = v.to_host()
        data = bytes(memoryview(host))
        as_numpy = devbuf.to_numpy(host)
        assert as_numpy.nbytes == 16
        del as_numpy
    assert data == bytes(range(16)) and view.released and shape == (16,) and fmt.itemsize == 1
    copied: devbuf.DeviceBuffer = buf.copy_to("cpu")
    # NumPy arrays are buffers on every Python (NumPy's stubs say so from 3.12 on only).
    arr = np.arange(16, dtype=np.uint8)
    from_np: devbuf.DeviceBuffer = devbuf.from_host(arr, "devbuf.sim")
    out = np.empty(16, np.uint8)
    same = from_np.to_host(out=out)
    into: devbuf.DeviceBuffer = from_np.copy_to(out=devbuf.empty(16, np.uint8, "devbuf.sim"))
    assert same is out and into.nbytes == 16 and bytes(out) == bytes(range(16))
    size: int = buf.size + len(buf) + buf.ndim
    info: devbuf.Format = buf.format_info
    assert size == 16 + 16 + 1 and info.itemsize == 1 and vinfo == info
    dt = buf.dtype
    assert dt is not None and dt.itemsize == 1
    buf.copy_from(bytes(range(16)))
    buf[...] = bytes(16)
    buf.fill(7)
    assert bytes(memoryview(buf.to_host())) == bytes([7]) * 16
    buf.copy_from(data)
    total = buf.nbytes + copied.nbytes + empty.nbytes + len(props)
    staged = pickle.loads(pickle.dumps(buf, protocol=5))
    assert isinstance(staged, devbuf.DeviceBuffer)
    foreign: devbuf.DeviceView = devbuf.from_dlpack(copied)
    assert foreign.nbytes == 16 and foreign.obj is copied
    how: Optional[devbuf.ImportInfo] = foreign.imported
    if how is not None:
        kind: str = how.kind
        dl_device: Tuple[int, int] = how.dl_device
        dl_dtype: Optional[Tuple[int, int, int]] = how.dl_dtype
        version: Optional[Tuple[int, int]] = how.dlpack_version
        copied_by_producer: bool = how.is_copied
        assert kind == "dlpack" and dl_device[0] >= 1 and not copied_by_producer
        assert dl_dtype is not None and version is not None
    foreign.release()
    arrow_types: Tuple[type, type, type, type] = (devbuf.ArrowArray, devbuf.ForeignArray,
                                                  devbuf.HostStaging, type(devbuf.from_arrow))
    for b in (buf, copied, empty):
        b.free()
    return total + len(arrow_types), devbuf.__version__


def formats() -> int:
    f: devbuf.Format = devbuf.parse_format("T{[devbuf$bfloat16]:x:2i:y:}")
    assert devbuf.parse_format("float32") == devbuf.parse_format("f")
    assert devbuf.calcsize("int64") == 8
    inner: devbuf.Field = f.fields[0].children[0]
    custom: Optional[devbuf.Custom] = inner.custom
    desc: Optional[devbuf.DTypeDesc] = custom.desc if custom else None
    size: int = devbuf.calcsize("2i") + f.itemsize + (desc.itemsize if desc else 0)
    try:
        devbuf.parse_format("T{i")
    except devbuf.FormatError as e:
        size += 0 * e.offset
    devbuf.register_dtype_namespace("example_typed", lambda payload: {"itemsize": 4})
    names: List[Dict[str, str]] = devbuf.dtype_namespaces()
    devbuf.unregister_dtype_namespace("example_typed")
    supports: bool = devbuf.check_buffer_supports(bytearray(4), devbuf.PyBUF_DEVICE)
    flags = devbuf.PyBUF_CLASSIC_FLAGS | devbuf.PyBUF_REQUIRED_FLAGS
    attr: str = devbuf.SUPPORTED_FLAGS_ATTR
    return size + len(names) + int(supports) + flags + len(attr)


def plugins_and_packaging() -> int:
    infos: List[devbuf.PluginInfo] = devbuf.plugins()
    eps: List[devbuf.EntryPointPlugin] = devbuf.entry_point_plugins()
    group: str = devbuf.ENTRY_POINT_GROUP
    stats: Dict[str, int] = devbuf.plugin_stats("cpu")
    rv = devbuf.runtime_version()
    sp = devbuf.search_path()
    try:
        devbuf.load_plugin("/nonexistent/devbuf_plugin_none.so")
    except devbuf.PluginError as e:
        code: str = e.code
        assert code
    errors: Tuple[type, ...] = (devbuf.Error, devbuf.OutOfMemoryError, devbuf.MissingDeviceError)
    policy: str = devbuf.get_unpickle_policy()
    with devbuf.unpickle_policy("host") as p:
        assert p == "host"
    devbuf.set_unpickle_policy(policy)
    include: str = devbuf.get_include()
    rc: int = devbuf_config(["--version"])
    user: str = user_plugin_dir()
    return (len(infos) + len(eps) + len(group) + len(stats) + len(rv) + len(sp) + len(errors)
            + len(include) + rc + len(user))


class Typed(devbuf.plugin.PythonPlugin):
    name = "typed"
    identifiers = ("example.typed",)

    @devbuf.plugin.ext_function("i(ie)")
    def twice(self, x: int) -> int:
        return 2 * x

    @devbuf.plugin.dtype_namespace("typedns")
    def interpret(self, payload: str) -> Optional[Dict[str, int]]:
        return {"itemsize": 4} if payload == "w" else None


def python_plugins() -> int:
    P = devbuf.plugin
    errors: Tuple[type, ...] = (P.CallbackError, P.NoDevice, P.InvalidArgument,
                                P.NotSupported, P.BackendError)
    kinds: Tuple[type, ...] = (P.ExtFunction, P.ConformanceResult, P.Registration)
    regs: List[P.Registration] = P.registrations()
    sig = P.check_signature("i(ie)")
    addr: int = P.address_of(bytearray(8))
    P.register_dtype_namespace("typed_fn", lambda payload: None)
    P.unregister_dtype_namespace("typed_fn")
    exts: List[P.ExtFunction] = P.ext_functions("cpu")
    funcs = (P.register_plugin, P.unregister, P.call_ext, P.run_conformance, P.run_dtype_conformance)
    slots: Tuple[Tuple[str, str], ...] = P.SLOTS
    names: Tuple[str, ...] = P.MANDATORY_SLOTS + P.OPTIONAL_SLOTS
    codes: Tuple[int, ...] = (P.OK, P.EINVAL, P.ENOMEM, P.ENODEV, P.ENOTSUP, P.EBACKEND, P.EABI,
                              P.ELOAD, P.EBUSY, P.EFORMAT, P.ENOTFOUND, P.EEXIST, P.ETIMEDOUT,
                              P.EINIT, P.EINTERNAL, P.ECALLBACK)
    flags: Tuple[int, ...] = (P.DEVICE_HOST_ACCESSIBLE, P.DEVICE_UNIFIED, P.DEVICE_ASYNC,
                              P.DEVICE_INFO_HOST_ACCESSIBLE, P.DEVICE_INFO_READONLY, P.DL_CPU,
                              P.DL_CUDA, P.DL_OPENCL, P.DL_EXT_DEV)
    assert len(set(codes)) == len(codes) and P.OK == 0
    return (len(flags) + len(errors) + len(kinds) + len(regs) + len(sig) + int(addr != 0) + len(exts)
            + len(funcs) + len(slots) + len(names))


if __name__ == "__main__":
    print(buffers(), formats(), plugins_and_packaging(), python_plugins(), Typed.name)
