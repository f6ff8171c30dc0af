# cython: language_level=3, freethreading_compatible=True
# A Cython consumer of devbuf (docs/consumers.md, "From Cython"):
# built by tests/python/test_cython.py into a temporary folder.
cimport devbuf
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBuffer_Release
from libc.stdint cimport uint16_t, uint32_t
from libc.string cimport memcpy, strcmp


cdef double _sum_f32(const float *p, Py_ssize_t n) noexcept nogil:
    cdef double s = 0
    cdef Py_ssize_t i
    for i in range(n):
        s += p[i]
    return s


def sum_f32(obj):
    """Sum a C-contiguous float32 buffer from any producer, on the host."""
    cdef Py_buffer b
    cdef double s
    # BufferError from devbuf for memory the host cannot read (it says how
    # to copy it); producers' own events are honoured before we read.
    devbuf.host_buffer(obj, &b, PyBUF_ND | PyBUF_STRIDES | PyBUF_FORMAT)
    try:
        if b.itemsize != 4 or strcmp(b.format, b"f") != 0 and strcmp(b.format, b"<f") != 0:
            raise TypeError(f"sum_f32: expected float32 items ('f'), got format "
                            f"{(<bytes>b.format).decode()!r}")
        if b.ndim != 1 or (b.strides != NULL and b.strides[0] != 4):
            raise BufferError("sum_f32: expected a contiguous 1-d buffer")
        with nogil:
            s = _sum_f32(<const float *>b.buf, b.shape[0])
    finally:
        PyBuffer_Release(&b)
    return s


cdef float _bf16_to_f32(uint16_t h) noexcept nogil:
    cdef uint32_t bits = (<uint32_t>h) << 16
    cdef float f
    memcpy(&f, &bits, 4)
    return f


def read_bfloat16(obj):
    """The values of a [devbuf$bfloat16] buffer, as Python floats."""
    cdef Py_buffer b
    cdef Py_ssize_t i, n
    devbuf.host_buffer(obj, &b, PyBUF_ND | PyBUF_STRIDES | PyBUF_FORMAT)
    try:
        if strcmp(b.format, b"[devbuf$bfloat16]") != 0 or b.itemsize != 2:
            raise TypeError(f"read_bfloat16: expected '[devbuf$bfloat16]', got "
                            f"{(<bytes>b.format).decode()!r}")
        n = b.len // 2
        return [_bf16_to_f32((<const uint16_t *>b.buf)[i]) for i in range(n)]
    finally:
        PyBuffer_Release(&b)


def describe(obj):
    """Typed DeviceView fields, read through devbuf.view_info()."""
    cdef devbuf.DeviceView v = devbuf.view(obj)
    cdef devbuf.DevbufPy_ViewInfo info = devbuf.view_info(v)
    out = {
        "ptr": <size_t>info.ptr,
        "nbytes": info.nbytes,
        "itemsize": info.itemsize,
        "ndim": info.ndim,
        "shape": tuple(info.shape[i] for i in range(info.ndim)) if info.shape != NULL else None,
        "strides": tuple(info.strides[i] for i in range(info.ndim)) if info.strides != NULL else None,
        "format": (<bytes>info.format).decode(),
        "device": (<bytes>info.device).decode() if info.device != NULL else None,
        "is_device": bool(info.is_device),
        "host_accessible": bool(info.host_accessible),
        "event": <size_t>info.event if info.event != NULL else None,
        "ordinal": info.dev.ordinal,
    }
    devbuf.synchronize(v)
    devbuf.release(v)
    return out


def extended(obj):
    """The backport header straight: (is_device, identifier) of an extended request."""
    cdef devbuf.DevbufPy_buffer_ext b
    devbuf.DevbufPy_GetBufferEx(obj, &b, PyBUF_ND | PyBUF_STRIDES | PyBUF_FORMAT | devbuf.PyBUF_DEVICE)
    try:
        dev = devbuf.DevbufPy_BufferIsDevice(&b)
        ident = (<bytes>b.device).decode() if b.device != NULL else None
    finally:
        devbuf.DevbufPy_BufferRelease(&b)
    return bool(dev), ident
