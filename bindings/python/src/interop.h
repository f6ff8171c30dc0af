/* interop.h: DLPack, CUDA Array Interface and array interface for the
 * devbuf extension. Not installed.
 *
 *   dlpack_export.c  producer side: __dlpack__, __dlpack_device__,
 *                    __array_interface__, __cuda_array_interface__ and the
 *                    DLPack 1.3 C exchange table on DeviceBuffer, DeviceView
 *                    and ForeignArray.
 *   dlpack_import.c  consumer side: devbuf.ForeignArray (memory of another
 *                    library, re-exported through the extended buffer
 *                    protocol), devbuf.from_dlpack(), and the fallback of
 *                    devbuf.view() for objects without the buffer protocol.
 *
 * The C work (validation, mappings, managed-tensor construction) is in
 * libdevbuf's devbuf/dlpack.h; these files only add the Python rules. See
 * docs/interop.md. */
#ifndef DBP_INTEROP_H
#define DBP_INTEROP_H

#include "dbp.h"
#include "devbuf/dlpack.h"

/* Py_ssize_t arrays are handed out as DLPack int64 arrays and back. */
_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "Py_ssize_t must be 64-bit");

/* ---- dlpack_import.c ------------------------------------------------------- */
typedef struct DbpForeign {
  PyObject_HEAD
  int kind;                 /* enum dbp_foreign_kind */
  int is_host;              /* identifier "cpu": a plain CPU buffer */
  int info_ready;           /* `info`, `identifier` valid */
  int has_dev;              /* `dev` opened */
  int format_only;          /* desc.format has no DLPack dtype (datetime64): `tensor.dtype`
                             * is only its storage, never exported as the type */
  Py_ssize_t exports;       /* live buffer exports */
  void *managed;            /* DLManagedTensorVersioned* / DLManagedTensor*, owned; or NULL */
  PyObject *source;         /* the producer (kept alive), or NULL */
  void *event;              /* owned event on `dev` that readers wait on, or NULL */
  void *stream;             /* the producer's stream `event` was recorded on (NULL: default) */
  const char *identifier;   /* interned identifier once info_ready */
  devbuf_device dev;
  uint64_t dl_flags;        /* DLPACK_FLAG_BITMASK_* as received (or derived) */
  DLTensor tensor;          /* as received; shape/strides point at el_shape/el_strides */
  int64_t el_shape[DEVBUF_DLPACK_MAX_NDIM];
  int64_t el_strides[DEVBUF_DLPACK_MAX_NDIM];
  union {
    devbuf_device_info info;
    uint64_t raw[32];
  } info;
  devbuf_dlpack_desc desc;  /* items, byte strides, format, flags */
  PyObject *weakreflist;
} DbpForeign;

enum dbp_foreign_kind {
  DBP_FOREIGN_DLPACK = 1,         /* a versioned managed tensor */
  DBP_FOREIGN_DLPACK_LEGACY = 2,  /* a legacy managed tensor */
  DBP_FOREIGN_CAI = 3,            /* __cuda_array_interface__ */
  DBP_FOREIGN_ARRAY_INTERFACE = 4 /* __array_interface__ */
};

extern PyTypeObject DbpForeign_Type;

/* Wrap an owning versioned tensor (ownership passes to the new object on
 * success; on failure the caller still owns it). `producer` may be NULL. */
DbpForeign *dbp_foreign_from_versioned(DLManagedTensorVersioned *m, PyObject *producer);
/* For devbuf.view(): an exporter for an object without the buffer protocol
 * that speaks the DLPack C exchange table, __dlpack__, the CUDA Array
 * Interface or the array interface (tried in that order). New reference;
 * NULL with an exception on failure; NULL WITHOUT an exception when obj
 * speaks none of them. */
PyObject *dbp_interop_exporter(PyObject *obj);
/* The same, but when every route fails with BufferError their reasons are
 * appended to *notes (a list, made when NULL) instead of raised: NULL with
 * no exception then. The caller owns *notes. */
PyObject *dbp_interop_exporter_noted(PyObject *obj, PyObject **notes);
/* Append "route: Type: message" of the pending exception to *notes (made
 * when NULL) and clear it; 0, or -1 with an exception. */
int dbp_route_note(PyObject **notes, const char *route);
/* Raise `type`: "devbuf cannot import T by any route it speaks (...)". */
void dbp_route_raise(PyObject *type, PyObject *notes, PyObject *obj);
/* The exchange table of obj's type (cached per type), NULL if none (an
 * exception is set only when the attribute is malformed). */
const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type);
PyObject *dbp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *dbp_exchange_import_bench(PyObject *self, PyObject *args);
int dbp_import_init(PyObject *module);

/* ---- dlpack_export.c ------------------------------------------------------- */
/* Export any extended-buffer exporter as an owning versioned (versioned=1)
 * or legacy managed tensor. `stream` is the consumer's stream (Python
 * object, may be NULL = None), honoured when `sync`; `target` the requested
 * device or NULL; copy: -1 None, 0 False, 1 True. 0, or -1 with an exception. */
int dbp_dlpack_export(PyObject *obj, int versioned, PyObject *stream, int sync,
                      const DLDevice *target, int copy, void **out);
/* The devices of a devbuf object as DLPack sees it. */
int dbp_dlpack_device_of(PyObject *obj, DLDevice *out);
int dbp_export_init(PyObject *module);

/* ---- both ------------------------------------------------------------------- */
/* Module hook: types, methods on DeviceBuffer/DeviceView/ForeignArray,
 * module functions. Called once, from the first module exec (module.c). */
int dbp_interop_init(PyObject *module);
/* Raise BufferError with err's message; returns -1. */
int dbp_buffer_error(const devbuf_error *err);

#endif /* DBP_INTEROP_H */
