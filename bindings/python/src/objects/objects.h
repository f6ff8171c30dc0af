/* objects.h: the Python objects of devbuf._devbuf, the layer above route/
 * and copies/. Not installed.
 *
 *   buffer.c       devbuf.DeviceBuffer: allocation, uploads/downloads, the
 *                  buffer exporter
 *   view.c         devbuf.DeviceView: the buffer-protocol reader, and the
 *                  owner of every other route's description
 *   foreign.c      devbuf.ForeignArray: a description behind a public type
 *   arrow_array.c  devbuf.ArrowArray, devbuf.from_arrow(): the Arrow
 *                  reader's description behind a public read-only exporter
 *   from_dlpack.c  devbuf.from_dlpack(): the DLPack reader's description in
 *                  a DeviceView, or copied
 *
 * They call route/, readers/, copies/, desc/ and base/; the exporters
 * (exporters/) add their protocols' methods to these types from above. */
#ifndef DBP_OBJECTS_H
#define DBP_OBJECTS_H

#include "base/dbp.h"
#include "copies/copies.h"
#include "desc/desc.h"

/* ---- buffer.c ---------------------------------------------------------------- */
enum dbp_mem_kind {
  DBP_MEM_DEVICE = 0,  /* devbuf_mem_alloc on `device` */
  DBP_MEM_HOST = 1,    /* host memory of the bindings (aligned_alloc), device is the host */
  DBP_MEM_BORROWED = 2 /* host memory of another exporter, held by `base` (pickle.c) */
};

#if defined(Py_GIL_DISABLED)
#define DBP_SOLO_SLOTS 4 /* a power of two; the slot index is 2 bits of each word */
#endif

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
   * the array cannot be Fortran-contiguous; PyBUF_DEVICE always, a host
   * export on the host);
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
                              count of live exports (bf_getbuffer minus bf_releasebuffer)
                              taken by the locked path */
#if defined(Py_GIL_DISABLED)
  /* The lock-free export words (buffer.c, "the solo export"): each holds at
   * most one more live export, and whether the fast path may take one;
   * accessed only atomically. Each word has a cache line of its own (64
   * bytes before it, 64 after the last), so that two threads exporting the
   * same buffer at once each write their own line. */
  struct {
    char pad[64];
    uintptr_t w;
  } solo[DBP_SOLO_SLOTS];
  char solo_tail[64 - sizeof(uintptr_t)];
#endif
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
PyObject *dbp_buffer_copy_to(DbpBuffer *self, DbpDevice *target);

PyObject *dbp_empty(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_from_host(PyObject *self, PyObject *args, PyObject *kwargs);


/* __array__(dtype=None, copy=None) for exporters: NumPy swallows a failed
 * buffer request and builds an object array; it does propagate __array__'s
 * error, so device memory gets the same BufferError a plain request gets. */
PyObject *dbp_array_via_memoryview(PyObject *self, PyObject *args, PyObject *kwargs);

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
/* A DeviceView owning `d` (taken on success and on failure: freed then).
 * `flags` adds request flags (PyBUF_WRITABLE). */
DbpView *dbp_view_from_desc(dbp_desc *d, int flags);

/* ---- foreign.c: devbuf.ForeignArray, the description as a public type ---- */
typedef struct DbpForeign {
  PyObject_HEAD
  dbp_desc *d;              /* owned */
  Py_ssize_t exports;       /* live buffer exports */
  PyObject *weakreflist;
} DbpForeign;

extern PyTypeObject DbpForeign_Type;
/* A ForeignArray owning `d` (on success only). */
DbpForeign *dbp_foreign_wrap(dbp_desc *d);
/* Wrap an owning versioned tensor (ownership passes to the new object on
 * success; on failure the caller still owns it). `producer` may be NULL. */
DbpForeign *dbp_foreign_from_versioned(DLManagedTensorVersioned *m, PyObject *producer);
int dbp_foreign_init(PyObject *module);

/* ---- arrow_array.c --------------------------------------------------------- */
/* devbuf.ArrowArray and devbuf.from_arrow (the Arrow reader's init first). */
int dbp_arrow_import_init(PyObject *module);

/* ---- from_dlpack.c --------------------------------------------------------- */
PyObject *dbp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *dbp_exchange_import_bench(PyObject *self, PyObject *args);
int dbp_import_init(PyObject *module);

#endif /* DBP_OBJECTS_H */
