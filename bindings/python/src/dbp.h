/* dbp.h: what the files of devbuf._devbuf share. Not installed.
 *
 * One file per type (device.c, buffer.c, view.c), plus errors.c (the
 * exception hierarchy), format.c (the format engine and Python dtype
 * namespaces), capi.c (the _C_API capsule) and module.c (module functions
 * and init). Internal symbols are prefixed dbp_ and have hidden visibility
 * (the extension is built with -fvisibility=hidden; only PyInit__devbuf is
 * exported). See bindings/python/README.md. */
#ifndef DBP_H
#define DBP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "dbp_compat.h"
#include "devbuf/runtime.h"
#include "devbuf_buffer.h"
#include "export_ledger.h"

#include "dbp_lock.h"

/* ---- errors.c ------------------------------------------------------------ */
extern PyObject *dbp_Error;             /* devbuf.Error (Exception) */
extern PyObject *dbp_PluginError;       /* devbuf.PluginError (Error) */
extern PyObject *dbp_FormatError;       /* devbuf.FormatError (Error, ValueError) */
extern PyObject *dbp_OutOfMemoryError;  /* devbuf.OutOfMemoryError (PluginError, MemoryError) */
int dbp_errors_init(PyObject *module);
/* Raise the exception that matches err->code with err's message; returns NULL
 * (or -1 through dbp_fail) so callers can `return dbp_raise(&err);`. */
PyObject *dbp_raise(const devbuf_error *err);
int dbp_fail(const devbuf_error *err);
/* FormatError with .offset and .format set. */
PyObject *dbp_raise_format(const char *fmt, size_t len, size_t offset, const devbuf_error *err);

/* ---- module.c -------------------------------------------------------------- */
/* Objects that Python code hands the extension (format factory, pickle
 * reducer) belong to one interpreter: kept in its state dict under `key`
 * ("devbuf.<what>"), never in a C global that another interpreter would see.
 * get: borrowed reference, or NULL (an exception is set only on error, so
 * check PyErr_Occurred). set: `value` NULL deletes; 0 or -1. */
PyObject *dbp_interp_get(const char *key);
int dbp_interp_set(const char *key, PyObject *value);

/* ---- device.c ---------------------------------------------------------------- */
typedef struct DbpDevice {
  PyObject_HEAD
  devbuf_device dev;       /* dev.backend is NULL for the built-in host device */
  PyObject *spec;          /* "identifier:N" */
  uint32_t props_flags;    /* DEVBUF_DEVICE_* */
  int is_host;             /* "cpu": plain host memory semantics */
  size_t plugin_index;     /* (size_t)-1 for the built-in host device */
} DbpDevice;

extern PyTypeObject DbpDevice_Type;
int dbp_device_init(PyObject *module);
/* Device, "identifier" or "identifier:N" -> new reference to the (cached)
 * Device. NULL with an exception. `arg` None gives the host device. */
DbpDevice *dbp_device_get(PyObject *arg);
/* The host ("cpu:0") device: the cpu plugin's when loaded, else a built-in
 * stand-in without a backend. Borrowed reference. */
DbpDevice *dbp_device_host(void);
/* Device for an opened runtime device. New reference. */
DbpDevice *dbp_device_from_devbuf(const devbuf_device *dev);
PyObject *dbp_devices(PyObject *self, PyObject *unused);
PyObject *dbp_device_func(PyObject *self, PyObject *arg);

/* ---- buffer.c ---------------------------------------------------------------- */
enum dbp_mem_kind {
  DBP_MEM_DEVICE = 0,  /* devbuf_mem_alloc on `device` */
  DBP_MEM_HOST = 1,    /* host memory of the bindings (aligned_alloc), device is the host */
  DBP_MEM_BORROWED = 2 /* host memory of another exporter, held by `base` (pickle.c) */
};

typedef struct DbpBuffer {
  PyObject_HEAD
  DbpDevice *device;       /* strong reference */
  void *ptr;               /* NULL once freed */
  size_t nbytes;
  int kind;                /* enum dbp_mem_kind */
  int ndim;
  int readonly;
  int host_readable;       /* the host may dereference ptr */
  int freed;
  int info_ready;          /* `info` holds the exported device_info */
  /* Precomputed by dbp_buffer_prepare_exports once the layout is final; all
   * zero (never prepared) sends every request but PyBUF_SIMPLE to the full
   * checks. fast_flags: the request bits the export fast path may take
   * without the checks (no PyBUF_WRITABLE if read-only, no Fortran bit if
   * the array cannot be Fortran-contiguous, PyBUF_DEVICE only off the host);
   * device_flag: PyBUF_DEVICE if a PyBUF_DEVICE request gets a device
   * export (any device but "cpu"), else 0. */
  int fast_flags;
  int device_flag;
  Py_ssize_t itemsize;
  Py_ssize_t *shape;       /* ndim entries, then ndim strides (one PyMem block) */
  Py_ssize_t *strides;
  char *format;            /* PyMem copy, NUL-terminated */
  Py_ssize_t pins;         /* operations running with the GIL released */
  void *event;             /* the data is ready once this completes; owned; NULL = ready */
  void *staging;           /* host staging memory in flight until `event` completes */
  union {                  /* device_info handed to consumers; lives as long as the buffer */
    devbuf_device_info info;
    uint64_t raw[32];
  } info;
  PyObject *weakreflist;
  PyObject *base;          /* DBP_MEM_BORROWED: memoryview holding the lender's export; else NULL */
  DbpLedger ledger;        /* which exports are alive (export_ledger.h); ledger.n is the
                              count of live exports (bf_getbuffer minus bf_releasebuffer) */
} DbpBuffer;

extern PyTypeObject DbpBuffer_Type;
int dbp_buffer_init(PyObject *module);
/* New buffer of `shape` items of `format` on `device`, uninitialised. */
DbpBuffer *dbp_buffer_new(DbpDevice *device, int ndim, const Py_ssize_t *shape,
                          const char *format, Py_ssize_t itemsize, int readonly);
/* Fill fast_flags/device_flag from the final device, readonly flag and layout;
 * every constructor calls it last. */
void dbp_buffer_prepare_exports(DbpBuffer *self);
/* Copy a host Py_buffer into a new buffer on `device` (asynchronously when
 * the device is). */
DbpBuffer *dbp_buffer_from_pybuffer(DbpDevice *device, Py_buffer *src, int readonly);
/* Host copy of `nbytes` at device `ptr` (+offset) described by the given
 * layout, honouring `event` first. Works without a DeviceBuffer (views). */
DbpBuffer *dbp_buffer_download(const devbuf_device *dev, int host_readable, const void *ptr,
                               size_t nbytes, int ndim, const Py_ssize_t *shape,
                               const Py_ssize_t *strides, const char *format,
                               Py_ssize_t itemsize, void *event);
/* The same copy into `out_nbytes` (the layout's size) of C-ordered host
 * memory at out_ptr. 0, or -1 with an exception. */
int dbp_download_into(const devbuf_device *dev, int host_readable, const void *ptr, int ndim,
                      const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                      void *event, char *out_ptr, size_t out_nbytes);
PyObject *dbp_buffer_copy_to(DbpBuffer *self, DbpDevice *target);

/* ---- copy_into.c ------------------------------------------------------------- */
/* A copy's source: `nbytes` described by ndim/shape/strides (strides NULL:
 * C order) at `ptr` on `dev` (NULL or no backend: host memory), readable by
 * the host once `event` completed when host_readable. */
typedef struct {
  const devbuf_device *dev;
  int host_readable;
  const void *ptr;
  size_t nbytes;
  int ndim;
  const Py_ssize_t *shape;
  const Py_ssize_t *strides;
  Py_ssize_t itemsize;
  const char *format;
  void *event;
} dbp_copy_src;
/* Copy the source into `out`, a writable buffer of the same size and layout
 * (or flat bytes) on `target` (NULL or the host: host memory), or on any
 * device when any_device. New reference to out, or NULL with an exception
 * (TypeError, BufferError, ValueError naming what does not fit). */
PyObject *dbp_copy_into(const dbp_copy_src *s, PyObject *out, DbpDevice *target, int any_device,
                        const char *what);
/* Parse (pos[0..npos), *, out=None) of a fastcall method (`device` may also
 * be a keyword for pos[0]); *out NULL when absent or None. 0 or -1. */
int dbp_parse_out_kw(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, Py_ssize_t npos, PyObject **pos, PyObject **out);
PyObject *dbp_empty(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_from_host(PyObject *self, PyObject *args, PyObject *kwargs);

/* ---- view.c --------------------------------------------------------------------- */
typedef struct DbpView {
  PyObject_HEAD
  DevbufPy_buffer_ext buf; /* the held export, or the held description's fields */
  struct dbp_desc *held;   /* an import's description (desc.h), owned; NULL: `buf` is an
                              export of the producer (buf.view.obj) */
  int released;
  int resolved;            /* `dev`/`desc` filled from device_info (device buffers) */
  int is_device;           /* DevbufPy_BufferIsDevice(&buf) */
  Py_ssize_t exports;      /* re-exports of this view */
  Py_ssize_t pins;         /* operations running with the GIL released */
  devbuf_device dev;
  devbuf_device_info_desc desc;
  PyObject *device_obj;    /* cached Device */
  PyObject *dtype_obj;     /* cached parsed format */
  PyObject *weakreflist;
  DbpLedger ledger;        /* which re-exports are alive (export_ledger.h) */
} DbpView;

extern PyTypeObject DbpView_Type;
int dbp_view_init(PyObject *module);
/* devbuf.view(obj): new DeviceView; `flags` adds request flags
 * (PyBUF_WRITABLE). */
DbpView *dbp_view_new(PyObject *obj, int flags);
PyObject *dbp_view_func(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames);
/* Import the producer's device_info (once); 0 or -1 with an exception. */
int dbp_view_resolve(DbpView *v);
int dbp_view_release(DbpView *v);
int dbp_view_synchronize(DbpView *v);
PyObject *dbp_view_to_host(DbpView *v);

/* ---- format.c ------------------------------------------------------------------- */
int dbp_format_init(PyObject *module);
/* Item size of a format string; -1 with FormatError (or another exception). */
int dbp_format_itemsize(const char *fmt, Py_ssize_t *itemsize);
/* The parsed description of `fmt` as Python objects (see devbuf/_format.py). */
PyObject *dbp_format_describe(const char *fmt, Py_ssize_t len);
/* The same for a producer's buffer: a description whose itemsize is
 * `itemsize` (C, else struct, else NumPy layout), or ValueError naming both
 * sizes. */
PyObject *dbp_format_describe_sized(const char *fmt, Py_ssize_t len, Py_ssize_t itemsize);
/* The format devbuf stores and exports for `itemsize`-byte items of `fmt`
 * (PyMem_Malloc'd): where struct reads `fmt`, struct.calcsize of the result
 * is itemsize (trailing padding written as 'x', F/D spelled Zf/Zd). NULL
 * with ValueError when struct's size exceeds itemsize. */
char *dbp_format_for_export(const char *fmt, Py_ssize_t itemsize);
PyObject *dbp_parse_format(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_register_dtype_namespace(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_unregister_dtype_namespace(PyObject *self, PyObject *arg);
PyObject *dbp_dtype_namespaces(PyObject *self, PyObject *unused);

/* ---- pickle.c ------------------------------------------------------------------- */
/* __reduce_ex__ on DeviceBuffer/DeviceView, devbuf.HostStaging, _pickle_* functions. */
int dbp_pickle_init(PyObject *module);

/* ---- capi.c ----------------------------------------------------------------------- */
int dbp_capi_init(PyObject *module);

/* ---- layout.c: the layout invariant (issue 20) -------------------------------------
 * itemsize agrees with the format (custom items: the namespace's itemsize),
 * len == prod(shape) * itemsize, that is at most `owned` bytes (-1: not
 * known, a foreign producer's memory), and strides stay inside `owned`.
 * ValueError (or BufferError with DBP_LAYOUT_BUFFER_ERROR) naming `what`
 * and the field; 0 or -1. */
#define DBP_LAYOUT_OWN 0x1u          /* memory devbuf allocates or rebuilds: no 'O'/pointers */
#define DBP_LAYOUT_BUFFER_ERROR 0x2u /* raise BufferError (exports, views) */
/* Every exporter's answer to PyBUF_FORMAT without PyBUF_ND (issue 23): a
 * consumer would take len as a count of `format` items and read past the
 * end, so refuse it as memoryview does. 0, or -1 with BufferError. */
int dbp_refuse_flat_format(const char *what, const char *format, int flags);
int dbp_layout_check(const char *what, const char *format, Py_ssize_t itemsize, int ndim,
                     const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t len,
                     Py_ssize_t owned, unsigned flags);
int dbp_layout_check_view(const char *what, const Py_buffer *b, Py_ssize_t owned,
                          unsigned flags);
/* Debug and sanitizer builds check every export as well. */
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define DBP_CHECK_EXPORTS 1
#else
#define DBP_CHECK_EXPORTS 0
#endif

/* ---- helpers ---------------------------------------------------------------------- */
/* C-contiguous strides for shape into `strides`; returns total items or -1
 * on overflow. */
Py_ssize_t dbp_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize,
                         Py_ssize_t *strides);
/* (a, b, ...) from n Py_ssize_t values. */
PyObject *dbp_tuple_from_ssize(int n, const Py_ssize_t *v);
/* __array__(dtype=None, copy=None) for exporters: NumPy swallows a failed
 * buffer request and builds an object array; it does propagate __array__'s
 * error, so device memory gets the same BufferError a plain request gets. */
PyObject *dbp_array_via_memoryview(PyObject *self, PyObject *args, PyObject *kwargs);
/* Call `fn(args)` with the GIL released: small macro to keep sites short. */
#define DBP_NOGIL(stmt)      \
  do {                       \
    Py_BEGIN_ALLOW_THREADS   \
    stmt;                    \
    Py_END_ALLOW_THREADS     \
  } while (0)

#endif /* DBP_H */
