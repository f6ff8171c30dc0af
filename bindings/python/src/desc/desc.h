/* desc.h: the one description every import route fills, the layer above
 * base/. Not installed. desc.c calls only base/.
 *
 * A reader (readers/: dlpack_import.c for DLPack and its C exchange table,
 * interface_import.c for the CUDA Array Interface and the array interface,
 * arrow_import.c for the Arrow PyCapsule interface) validates what its
 * producer handed over and fills a dbp_desc: device, pointer, shape,
 * strides, format, read-only, the sync a reader honours, and the owner plus
 * how to release it. A DeviceView (view.c) owns the description directly,
 * holds the producer (`source`, its .obj) and releases the owner exactly
 * once; nothing is made or re-exported in between. Two public types hold a
 * description too, outside the import path: devbuf.ForeignArray (foreign.c),
 * what ForeignArray's DLPack exchange table's to_py_object makes, and
 * devbuf.ArrowArray (arrow_import.c), what devbuf.from_arrow() returns. See
 * docs/consumers.md.
 *
 * The description is not an object: its mutable fields (event, the lazily
 * opened device and device_info) are guarded by its one owner's critical
 * section (the view's, the ForeignArray's or the ArrowArray's, dbp_lock.h). */
#ifndef DBP_DESC_H
#define DBP_DESC_H

#include "base/dbp.h"
#include "devbuf/dlpack.h"

/* Py_ssize_t arrays are handed out as DLPack int64 arrays and back. */
_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "Py_ssize_t must be 64-bit");

/* How the owner is released, and the route's name (DeviceView.imported.kind,
 * ForeignArray.kind). */
enum dbp_desc_kind {
  DBP_DESC_DLPACK = 1,          /* a versioned managed tensor: its deleter */
  DBP_DESC_DLPACK_LEGACY = 2,   /* a legacy managed tensor: its deleter */
  DBP_DESC_CAI = 3,             /* __cuda_array_interface__: the producer's reference */
  DBP_DESC_ARRAY_INTERFACE = 4, /* __array_interface__: the producer's reference */
  DBP_DESC_ARROW = 5            /* the moved Arrow (device) array: its release callback
                                 * (`managed` is a dbp_arrow_owner, arrow_import.c, freed
                                 * by `release_owner`); `event`
                                 * is the producer's sync_event, never destroyed here */
};

typedef struct dbp_desc {
  int kind;                 /* enum dbp_desc_kind */
  int is_host;              /* identifier "cpu": a plain CPU buffer */
  int info_ready;           /* `info`, `identifier` valid */
  int has_dev;              /* `dev` opened */
  int format_only;          /* desc.format has no DLPack dtype (datetime64): `tensor.dtype`
                             * is only its storage, never exported as the type */
  void *managed;            /* owner: DLManagedTensorVersioned* / DLManagedTensor* /
                             * dbp_arrow_owner*, or NULL */
  PyObject *source;         /* owner: the producer (kept alive), or NULL */
  void (*release_owner)(void *managed); /* owner: the release the reader set with
                             * `managed` (the Arrow reader's), or NULL: kind says (a
                             * DLPack tensor's deleter). The description never knows
                             * the readers. */
  void *event;              /* sync: owned event on `dev` that readers wait on, or NULL */
  void *stream;             /* sync: the producer's stream `event` was recorded on */
  const char *identifier;   /* interned identifier once info_ready */
  devbuf_device dev;
  uint64_t dl_flags;        /* DLPACK_FLAG_BITMASK_* as received (or derived) */
  DLTensor tensor;          /* as received; shape/strides point into the producer's tensor
                             * (alive while `managed` is) until dbp_desc_own_tensor points
                             * them at el_shape/el_strides */
  int64_t el_shape[DEVBUF_DLPACK_MAX_NDIM];
  int64_t el_strides[DEVBUF_DLPACK_MAX_NDIM];
  union {
    devbuf_device_info info;
    uint64_t raw[32];
  } info;
  devbuf_dlpack_desc desc;  /* device, pointer, items, byte strides, format, flags */
} dbp_desc;

/* A description owned by nobody yet, for `kind`, holding a reference to
 * `source` (may be NULL). NULL with MemoryError. */
dbp_desc *dbp_desc_new(int kind, PyObject *source);
/* The same, with d->desc left unset but for struct_size: for a reader that
 * calls dbp_desc_describe next, which fills every field of it (nothing
 * reads it before, and a failed describe frees it unread). */
dbp_desc *dbp_desc_new_undescribed(int kind, PyObject *source);
/* Release the owner (the deleter, the producer's reference) and the event,
 * then the description: exactly once. Keeps any pending exception, and lets
 * none that the deleter raises escape. NULL is allowed. */
void dbp_desc_free(dbp_desc *d);
/* Describe `t` (checked by libdevbuf) into d. 0, or -1 with BufferError.
 * Takes no ownership; d->tensor still points at t's shape and strides. */
int dbp_desc_describe(dbp_desc *d, const DLTensor *t, uint64_t dl_flags, DLPackVersion version);
/* Copy d->tensor's shape and strides into d (strides made explicit), so
 * that d->tensor outlives the tensor it was described from: right after
 * describing a tensor that does not live as long as d (a reader's own), and
 * before d->tensor is handed out (a ForeignArray's exchange table). The
 * hot path, a view of a managed tensor, never needs the copy. */
void dbp_desc_own_tensor(dbp_desc *d);
/* The layout invariant (layout.c) on a described tensor, naming `what`. */
int dbp_desc_check(const devbuf_dlpack_desc *d, const char *what);
/* A versioned tensor's description, owning m on success (on failure the
 * caller still owns m). */
dbp_desc *dbp_desc_from_versioned(DLManagedTensorVersioned *m, PyObject *producer);
/* Record an event on the producer's `stream` of the tensor's device, that
 * every later reader waits on. 0, or -1 naming `what`. */
int dbp_desc_record(dbp_desc *d, void *stream, const char *what);
/* After a DLPack import on devbuf's default stream: an event there, when
 * the device is asynchronous. */
int dbp_desc_after_stream_import(dbp_desc *d);
/* Fill `view` (a DevbufPy_buffer_ext's Py_buffer) from d for `flags`, with
 * every check an exporter owes (the messages name devbuf.ForeignArray, as
 * they always did); view->obj is left NULL for the caller. 0, or -1 with
 * BufferError. Not for an Arrow description: dbp_arrow_desc_export (no
 * dispatch on the kind here, the DLPack hot path's cost; checked in debug
 * builds). */
int dbp_desc_export(dbp_desc *d, Py_buffer *view, int flags);
/* "dlpack", "dlpack_legacy", "cuda_array_interface", "array_interface",
 * "arrow". */
const char *dbp_desc_kind_name(int kind);
/* DeviceView.imported: devbuf.ImportInfo(kind, dl_device, dl_dtype,
 * dlpack_version, is_copied) of d. New reference, NULL with an exception. */
PyObject *dbp_desc_import_info(const dbp_desc *d);
int dbp_desc_init(PyObject *module);

#endif /* DBP_DESC_H */
