/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf_capi.h: devbuf's C API for other CPython extensions, through the
 * capsule `devbuf._devbuf._C_API`. An extension that includes this header
 * calls the devbuf runtime (views, copies, sync, the format engine and dtype
 * registry) WITHOUT linking libdevbuf: every function is reached through the
 * table the capsule points to, so the libdevbuf that devbuf's own extension
 * loaded is the one used (one runtime, one plugin registry per process).
 *
 * Use:
 *     #include <Python.h>
 *     #include "devbuf_capi.h"      // also includes devbuf_buffer.h and the
 *                                   // devbuf/ type headers (no link needed)
 *     static const DevbufPy_CAPI *devbuf_api;
 *     ... in PyInit_x:  devbuf_api = DevbufPy_ImportCAPI();
 *                       if (devbuf_api == NULL) return NULL;
 *     ... later:        PyObject *v = devbuf_api->View_FromObject(obj, 0);
 *                       DevbufPy_ViewInfo info = {sizeof info};
 *                       devbuf_api->View_GetInfo(v, &info);
 *
 * Versioning: the table starts with struct_size and a major/minor version.
 * Fields are only ever appended; a new minor adds fields at the end. The
 * importer refuses another major and a table smaller than the v1.0 table.
 * Check DEVBUFPY_CAPI_HAS(api, field) before using a field added after 1.0.
 *
 * Ownership and the GIL
 *  - Functions taking or returning PyObject* need the GIL and follow
 *    CPython's conventions (new references; NULL or -1 with an exception).
 *  - The devbuf_* runtime functions (the `rt_` fields) do not touch Python:
 *    call them without the GIL for anything that may block (syncs, copies).
 *    Their errors come back in a devbuf_error; SetError turns one into the
 *    matching devbuf exception.
 *  - Types and exception objects in the table are borrowed references that
 *    live as long as the devbuf._devbuf module (forever, in practice).
 *
 * Threads, and free-threaded CPython (3.13t, the GIL off)
 *  - Every View_* and Buffer_* function locks the object it is given for
 *    the duration of the call (CPython's per-object critical section; a
 *    no-op with the GIL), as devbuf's Python methods do: two threads may
 *    call them on one view at once. A call that blocks (View_Synchronize,
 *    a copy) lets other threads in meanwhile, exactly where the GIL would
 *    have been released; the view stays pinned (it cannot be released)
 *    until the call returns.
 *  - The pointers View_GetInfo fills in stay valid until the view is
 *    released. Another thread may release it: share a view between threads
 *    only with an agreement on who releases it (or one reference each and
 *    release at the last), as for a memoryview.
 *  - The devbuf_* runtime functions are thread-safe (the C registries have
 *    their own locks) and take no Python lock. */
#ifndef DEVBUF_CAPI_H
#define DEVBUF_CAPI_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before devbuf_capi.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"
#include "devbuf_buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVBUFPY_CAPI_NAME "devbuf._devbuf._C_API"
#define DEVBUFPY_CAPI_VERSION_MAJOR 1
#define DEVBUFPY_CAPI_VERSION_MINOR 1

/* What a view holds, for C consumers. Set struct_size before the call; the
 * callee fills what fits. Pointers stay valid while the view is not released. */
typedef struct DevbufPy_ViewInfo {
  size_t struct_size;              /* in: sizeof(DevbufPy_ViewInfo) */
  void *ptr;                       /* data pointer (device pointer for device memory) */
  Py_ssize_t nbytes;
  Py_ssize_t itemsize;
  int ndim;
  int readonly;
  const Py_ssize_t *shape;         /* ndim entries, or NULL (1-D, nbytes/itemsize items) */
  const Py_ssize_t *strides;       /* ndim entries, never NULL for ndim > 0 (filled in, in
                                      C order, for a producer that gave none) */
  const char *format;              /* never NULL ("B" when the producer gave none) */
  const char *device;              /* the producer's identifier, NULL for host memory */
  const void *device_info;         /* the producer's device_info, NULL for host memory */
  int is_device;                   /* DevbufPy_BufferIsDevice of the held buffer */
  int host_accessible;             /* the host may dereference ptr (after syncing) */
  devbuf_device dev;               /* the runtime device (host: identifier "cpu") */
  void *event;                     /* producer event to honour, or NULL */
  void *stream;                    /* producer stream, or NULL */
  const DevbufPy_buffer_ext *buffer; /* the held extended buffer itself */
} DevbufPy_ViewInfo;

/* An import without any Python object of devbuf's (C API 1.1): the one
 * description that devbuf.view() and devbuf.from_dlpack() hold, filled by
 * the reader of whichever protocol the producer speaks (the DLPack C
 * exchange table, __dlpack__ with the stream hand-off, the CUDA Array
 * Interface, the array interface). Set struct_size before the call. The
 * producer (or its DLPack tensor) is held until Import_Release, which calls
 * the tensor's deleter exactly once; release every successful import, with
 * the GIL held, and only once. Not shared between threads unless the caller
 * orders them. */
typedef struct DevbufPy_Import {
  size_t struct_size;              /* in: sizeof(DevbufPy_Import) */
  /* As DevbufPy_GetBufferEx(obj, PyBUF_RECORDS_RO | PyBUF_DEVICE) answers:
   * pointer, len, itemsize, readonly, ndim, format, shape, strides (never
   * NULL for ndim > 0), and for device memory PyBUF_DEVICE in flags with the
   * identifier and its device_info (whose event is the sync to honour).
   * buffer.view.obj is NULL: release with Import_Release, never
   * PyBuffer_Release. */
  DevbufPy_buffer_ext buffer;
  void *event;                     /* the event to wait on before reading, or NULL */
  void *stream;                    /* the producer stream it was recorded on, or NULL */
  int is_device;                   /* DevbufPy_BufferIsDevice(&buffer) */
  int host_accessible;             /* the host may dereference the pointer (after the event) */
  void *owner_;                    /* private to devbuf */
} DevbufPy_Import;

typedef struct DevbufPy_CAPI {
  /* ---- header (fixed for every major) ------------------------------------------------ */
  size_t struct_size;
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t reserved0;

  /* ---- Python objects (borrowed) ------------------------------------------------------ */
  PyTypeObject *Device_Type;
  PyTypeObject *DeviceBuffer_Type;
  PyTypeObject *DeviceView_Type;
  PyObject *Error;
  PyObject *PluginError;
  PyObject *FormatError;

  /* ---- the buffer-protocol backport (same as devbuf_buffer.h's inline ones) ---------- */
  int (*GetBufferEx)(PyObject *obj, DevbufPy_buffer_ext *view, int flags);
  int (*CheckBufferSupports)(PyObject *obj, int flags);

  /* ---- devices ------------------------------------------------------------------------- */
  /* Device, "identifier" or "identifier:N" (None: the host) -> new Device. */
  PyObject *(*Device_Get)(PyObject *spec);
  /* The runtime device behind a Device. 0, or -1 with TypeError. */
  int (*Device_AsDevbuf)(PyObject *device, devbuf_device *out);

  /* ---- views ----------------------------------------------------------------------------- */
  /* devbuf.view(obj): new DeviceView. flags: 0 or PyBUF_WRITABLE. */
  PyObject *(*View_FromObject)(PyObject *obj, int flags);
  /* Fill *out (set out->struct_size first). Imports the device_info on first
   * use (validation by the device's plugin). 0, or -1 with an exception. */
  int (*View_GetInfo)(PyObject *view, DevbufPy_ViewInfo *out);
  /* Block (GIL released) until the producer's event completed. */
  int (*View_Synchronize)(PyObject *view);
  /* Release the export now; BufferError while the view is re-exported. */
  int (*View_Release)(PyObject *view);
  /* A host DeviceBuffer with a C-contiguous copy of the data. */
  PyObject *(*View_ToHost)(PyObject *view);

  /* ---- buffers ----------------------------------------------------------------------------- */
  /* devbuf.empty(shape_tuple, format, device). */
  PyObject *(*Buffer_Empty)(PyObject *shape, const char *format, PyObject *device);
  /* devbuf.from_host(obj, device). */
  PyObject *(*Buffer_FromHost)(PyObject *obj, PyObject *device);
  /* buffer.copy_to(device); device None means the host. */
  PyObject *(*Buffer_CopyTo)(PyObject *buffer, PyObject *device);

  /* ---- errors ------------------------------------------------------------------------------- */
  /* Raise the devbuf exception matching err (Error, PluginError, FormatError,
   * OutOfMemoryError); always returns NULL. */
  PyObject *(*SetError)(const devbuf_error *err);

  /* ---- the runtime (devbuf/runtime.h), callable without the GIL ---------------------------- */
  int (*rt_device_open)(const char *spec, devbuf_device *out, devbuf_error *err);
  int (*rt_device_props_get)(const devbuf_device *dev, devbuf_device_props *props,
                             devbuf_error *err);
  int (*rt_identifier_lookup)(const char *identifier, const char **interned,
                              size_t *plugin_index, devbuf_error *err);
  int (*rt_mem_alloc)(const devbuf_device *dev, size_t size, size_t alignment, void *stream,
                      void **ptr, devbuf_error *err);
  int (*rt_mem_free)(const devbuf_device *dev, void *ptr, void *stream, devbuf_error *err);
  int (*rt_stream_create)(const devbuf_device *dev, void **stream, devbuf_error *err);
  int (*rt_stream_destroy)(const devbuf_device *dev, void *stream, devbuf_error *err);
  int (*rt_stream_synchronize)(const devbuf_device *dev, void *stream, devbuf_error *err);
  int (*rt_event_create)(const devbuf_device *dev, void **event, devbuf_error *err);
  int (*rt_event_destroy)(const devbuf_device *dev, void *event, devbuf_error *err);
  int (*rt_event_record)(const devbuf_device *dev, void *event, void *stream, devbuf_error *err);
  int (*rt_stream_wait_event)(const devbuf_device *dev, void *stream, void *event,
                              devbuf_error *err);
  int (*rt_event_synchronize)(const devbuf_device *dev, void *event, devbuf_error *err);
  int (*rt_event_query)(const devbuf_device *dev, void *event, devbuf_error *err);
  int (*rt_copy_h2d)(const devbuf_device *dev, void *dst, size_t dst_offset, const void *src,
                     size_t nbytes, void *stream, devbuf_error *err);
  int (*rt_copy_d2h)(const devbuf_device *dev, void *dst, const void *src, size_t src_offset,
                     size_t nbytes, void *stream, devbuf_error *err);
  int (*rt_copy_d2d)(const devbuf_device *dev, void *dst, size_t dst_offset, const void *src,
                     size_t src_offset, size_t nbytes, void *stream, devbuf_error *err);
  int (*rt_copy_to_host_sync)(const devbuf_device *dev, void *dst, const void *src,
                              size_t src_offset, size_t nbytes, void *event, devbuf_error *err);
  int (*rt_copy_from_host_sync)(const devbuf_device *dev, void *dst, size_t dst_offset,
                                const void *src, size_t nbytes, devbuf_error *err);
  int (*rt_device_info_export)(const devbuf_device *dev, void *event, void *stream,
                               uint32_t flags, void *out, size_t capacity, size_t *size,
                               devbuf_error *err);
  int (*rt_device_info_import)(const char *identifier, const void *info,
                               devbuf_device_info_desc *desc, devbuf_device *dev,
                               devbuf_error *err);

  /* ---- the format engine and dtype registry (devbuf/format.h) ----------------------------- */
  int (*fmt_parse)(const char *fmt, size_t len, uint32_t flags, devbuf_format *out,
                   devbuf_error *err);
  void (*fmt_release)(devbuf_format *f);
  int (*fmt_itemsize)(const char *fmt, size_t len, uint32_t flags, uint64_t *itemsize,
                      uint64_t *alignment, size_t *error_offset, devbuf_error *err);
  int (*dtype_register)(const devbuf_dtype_namespace *ns, devbuf_error *err);
  int (*dtype_unregister)(const char *id, devbuf_error *err);
  int (*dtype_lookup)(const char *id, size_t len, const devbuf_dtype_namespace **out,
                      const char **source, devbuf_error *err);
  int (*dtype_interpret)(const char *id, const char *payload, size_t len,
                         devbuf_dtype_desc *out, devbuf_error *err);

  /* ---- 1.1: imports without a view object (DEVBUFPY_CAPI_HAS(api, Import_Release)) ---- */
  /* Fill *out from an object WITHOUT the buffer protocol (a DLPack-only or
   * Arrow producer, the interfaces; for buffer exporters use GetBufferEx):
   * the same readers, order, checks and messages as devbuf.view(obj), no
   * devbuf object made. flags: 0 or
   * PyBUF_WRITABLE. 0, or -1 with an exception (TypeError when obj speaks no
   * protocol devbuf reads). */
  int (*Import_FromObject)(PyObject *obj, int flags, DevbufPy_Import *out);
  /* Release what Import_FromObject took (the deleter, the producer), once;
   * the fields are cleared. NULL or an already released import: nothing. */
  void (*Import_Release)(DevbufPy_Import *imp);

  /* New fields go here, and only here (bump DEVBUFPY_CAPI_VERSION_MINOR). */
} DevbufPy_CAPI;

/* Size of the 1.0 table: importers accept any table at least this big. */
#define DEVBUFPY_CAPI_V1_SIZE \
  (offsetof(DevbufPy_CAPI, dtype_interpret) + sizeof(void (*)(void)))

/* True if `api` has `field` (for fields added after 1.0). */
#define DEVBUFPY_CAPI_HAS(api, field) \
  (offsetof(DevbufPy_CAPI, field) + sizeof(((DevbufPy_CAPI *)0)->field) <= (api)->struct_size)

/* Import the table: a borrowed pointer valid while devbuf._devbuf is loaded
 * (for good: extension modules are never unloaded), or NULL with ImportError. */
static inline const DevbufPy_CAPI *DevbufPy_ImportCAPI(void) {
  const DevbufPy_CAPI *api = (const DevbufPy_CAPI *)PyCapsule_Import(DEVBUFPY_CAPI_NAME, 0);
  if (api == NULL) return NULL;
  if (api->version_major != DEVBUFPY_CAPI_VERSION_MAJOR) {
    PyErr_Format(PyExc_ImportError,
                 "devbuf C API: this extension was built for major version %d, the installed "
                 "devbuf provides %d.%d: rebuild it against this devbuf",
                 DEVBUFPY_CAPI_VERSION_MAJOR, (int)api->version_major, (int)api->version_minor);
    return NULL;
  }
  if (api->struct_size < DEVBUFPY_CAPI_V1_SIZE) {
    PyErr_Format(PyExc_ImportError, "devbuf C API: table of %zu bytes is smaller than v1 (%zu)",
                 api->struct_size, (size_t)DEVBUFPY_CAPI_V1_SIZE);
    return NULL;
  }
  return api;
}

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_CAPI_H */
