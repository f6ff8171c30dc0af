# devbuf/__init__.pxd: `cimport devbuf` for Cython consumers
# (docs/consumers.md, "From Cython").
#
# Everything here is either an extern declaration of devbuf's C headers or a
# `cdef inline` helper, so a cimporting module needs no compiled devbuf Cython
# module and links nothing: the backport header (devbuf_buffer.h) is
# header-only, and the DeviceView accessors go through the
# devbuf._devbuf._C_API capsule (devbuf_capi.h). Compile with
#     include_dirs=[devbuf.get_include()]
# and the folder that holds the devbuf package on Cython's include path
# (cythonize finds it on sys.path).
from cpython.buffer cimport PyObject_GetBuffer
from cpython.object cimport PyObject, PyTypeObject
from libc.string cimport memset


cdef extern from "devbuf_buffer.h":
    # ---- the flags
    int PyBUF_DEVICE
    int PyBUF_REQUIRED_FLAGS
    int DEVBUFPY_BUF_CLASSIC_FLAGS
    int DEVBUFPY_BUF_EXTENDED_FLAGS
    const char *DEVBUFPY_SUPPORTED_FLAGS_ATTR

    # ---- the extended Py_buffer: Py_buffer first, then the draft's fields
    ctypedef struct DevbufPy_buffer_ext:
        Py_buffer view
        int flags
        int ext_flags
        char *device
        void *device_info

    # ---- advertising and checking supported flags
    int DevbufPy_SetBufferSupportedFlags(PyTypeObject *type, int flags) except -1
    int DevbufPy_GetBufferSupportedFlags(PyTypeObject *type, int *supported) except -1
    int DevbufPy_CheckBufferSupports(object obj, int flags) except -1

    # ---- getting and releasing (release: safe twice, safe after a failed get)
    int DevbufPy_GetBufferEx(object obj, DevbufPy_buffer_ext *view, int flags) except -1
    int DevbufPy_BufferIsDevice(const DevbufPy_buffer_ext *view) noexcept nogil
    void DevbufPy_BufferRelease(DevbufPy_buffer_ext *view)
    int DevbufPy_BufferSetDevice(Py_buffer *pybuffer, int flags, const char *device,
                                 void *device_info) noexcept nogil


cdef extern from "devbuf_capi.h":
    ctypedef struct devbuf_device:
        const char *identifier
        int ordinal

    ctypedef struct devbuf_error:
        int code
        char message[1]

    # What a DeviceView holds. Pointers stay valid while the view is not released.
    ctypedef struct DevbufPy_ViewInfo:
        size_t struct_size
        void *ptr
        Py_ssize_t nbytes
        Py_ssize_t itemsize
        int ndim
        int readonly
        const Py_ssize_t *shape        # NULL: 1-d, nbytes / itemsize items
        const Py_ssize_t *strides      # NULL: C-contiguous
        const char *format             # never NULL
        const char *device             # the identifier; NULL for host memory
        const void *device_info
        int is_device
        int host_accessible
        devbuf_device dev
        void *event                    # the producer event to honour, or NULL
        void *stream
        const DevbufPy_buffer_ext *buffer

    # The C API table (the fields a Cython consumer needs; the rest are in
    # devbuf_capi.h and may be declared the same way).
    ctypedef struct DevbufPy_CAPI:
        size_t struct_size
        unsigned short version_major
        unsigned short version_minor
        PyTypeObject *Device_Type
        PyTypeObject *DeviceBuffer_Type
        PyTypeObject *DeviceView_Type
        object (*View_FromObject)(object obj, int flags)
        int (*View_GetInfo)(object view, DevbufPy_ViewInfo *out) except -1
        int (*View_Synchronize)(object view) except -1
        int (*View_Release)(object view) except -1
        object (*View_ToHost)(object view)
        int (*rt_event_synchronize)(const devbuf_device *dev, void *event,
                                    devbuf_error *err) nogil

    const DevbufPy_CAPI *DevbufPy_ImportCAPI() except NULL


cdef extern from *:
    """
    /* One table pointer per cimporting module, imported on first use. */
    static const DevbufPy_CAPI *devbuf_cy_capi_ = NULL;
    static const DevbufPy_CAPI *devbuf_cy_capi(void) {
      if (devbuf_cy_capi_ == NULL) devbuf_cy_capi_ = DevbufPy_ImportCAPI();
      return devbuf_cy_capi_;
    }
    """
    const DevbufPy_CAPI *devbuf_cy_capi() except NULL


# The DeviceView type, for `cdef devbuf.DeviceView v` and isinstance checks;
# its fields are read through view_info() (a stable ABI), not the struct.
cdef extern from *:
    ctypedef class devbuf._devbuf.DeviceView [object PyObject, check_size ignore]:
        pass


# ---- helpers --------------------------------------------------------------------------------

cdef inline const DevbufPy_CAPI *capi() except NULL:
    """The devbuf C API table (ImportError when devbuf is missing or too old)."""
    return devbuf_cy_capi()


cdef inline DeviceView view(object obj, bint writable=False):
    """devbuf.view(obj): a DeviceView of any producer (extended or plain
    buffer, DLPack, CUDA Array Interface, Arrow PyCapsule)."""
    return capi().View_FromObject(obj, 0x0001 if writable else 0)  # 0x0001: PyBUF_WRITABLE


cdef inline DevbufPy_ViewInfo view_info(DeviceView v) except *:
    """Typed fields of a DeviceView: ptr, nbytes, itemsize, ndim, shape,
    strides, format, device (identifier), is_device, host_accessible, dev,
    and the sync to honour (event, stream)."""
    cdef DevbufPy_ViewInfo info
    memset(&info, 0, sizeof(info))
    info.struct_size = sizeof(info)
    capi().View_GetInfo(v, &info)
    return info


cdef inline int synchronize(DeviceView v) except -1:
    """Block (GIL released) until the producer's event has completed."""
    return capi().View_Synchronize(v)


cdef inline int release(DeviceView v) except -1:
    return capi().View_Release(v)


cdef inline int host_buffer(object obj, Py_buffer *out, int flags) except -1:
    """A plain host Py_buffer of any producer, for code that reads memory on
    the CPU: device memory the host cannot read raises devbuf's BufferError
    (which says how to copy it), host-readable device memory is synchronised
    first. The buffer holds the view, which holds the producer: release it
    with PyBuffer_Release(out)."""
    return PyObject_GetBuffer(view(obj), out, flags)


cdef inline object to_host(DeviceView v):
    """A host DeviceBuffer with a C-contiguous copy, after honouring the sync."""
    return capi().View_ToHost(v)
