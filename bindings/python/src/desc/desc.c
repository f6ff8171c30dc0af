/* desc.c: the one description of imported memory (desc.h).
 *
 * Host memory ("cpu", pinned) is a plain CPU buffer; device memory carries
 * the device's identifier and a device_info whose event is what a reader
 * must wait on (recorded on the producer's stream when the protocol names
 * one). The readers fill it; a DeviceView (or a ForeignArray, an ArrowArray)
 * owns it. */
#include "desc/desc.h"
#include "base/dbp_freelist.h" /* after Python.h */

#include <string.h>

/* A few freed descriptions kept for reuse: at ~2.8 KiB each, malloc and
 * free were a fifth of a from_dlpack(). The GIL guards the stack; without
 * the GIL the freelist is per-thread slots (dbp_freelist.h). */
DBP_FREELIST(g_desc_free);

dbp_desc *dbp_desc_new_undescribed(int kind, PyObject *source) {
  dbp_desc *d = dbp_freelist_pop(&g_desc_free);
  if (d == NULL) {
    d = PyMem_Malloc(sizeof *d);
    if (d == NULL) {
      PyErr_NoMemory();
      return NULL;
    }
  }
  /* Zero everything but the big arrays and `desc`, which describe fills (a
   * full memset of ~2.5 KiB is a third of an import's cost). `info` is
   * zeroed where it is filled (dbp_desc_prepare_device), only for device
   * exports: a host import never reads it. */
  memset(d, 0, offsetof(dbp_desc, el_shape));
  d->kind = kind;
  d->source = Py_XNewRef(source);
  d->desc.struct_size = sizeof d->desc;
  return d;
}

dbp_desc *dbp_desc_new(int kind, PyObject *source) {
  dbp_desc *d = dbp_desc_new_undescribed(kind, source);
  if (d != NULL) {
    memset(&d->desc, 0, offsetof(devbuf_dlpack_desc, shape));
    d->desc.struct_size = sizeof d->desc;
  }
  return d;
}

/* The owner's own release: the tensor's deleter, or the release the reader
 * set with the owner (the Arrow array's release callback). */
static void desc_release_owner(const dbp_desc *d, void *m) {
  if (d->kind == DBP_DESC_DLPACK) devbuf_dlpack_delete_versioned(m);
  else if (d->release_owner != NULL) d->release_owner(m);
  else devbuf_dlpack_delete_legacy(m);
}

void dbp_desc_free(dbp_desc *d) {
  if (d == NULL) return;
  /* An Arrow event is the producer's: its array's release frees it. */
  if (d->event && d->has_dev && d->kind != DBP_DESC_ARROW)
    devbuf_event_destroy(&d->dev, d->event, NULL);
  void *m = d->managed;
  d->managed = NULL;
  /* The producer's deleter may run Python code (a decref): keep any
   * pending exception out of its way, and none it leaves escapes. With
   * nothing pending (the usual case) there is nothing to fetch and put
   * back: clearing whatever the deleter left is what restoring "no
   * exception" did. */
  if (m) {
    if (PyErr_Occurred()) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      desc_release_owner(d, m);
      PyErr_Restore(t, v, tb);
    } else {
      desc_release_owner(d, m);
      if (PyErr_Occurred()) PyErr_Clear();
    }
  }
  Py_CLEAR(d->source);
  if (!dbp_freelist_push(&g_desc_free, d)) PyMem_Free(d);
}

/* The layout invariant (layout.c) on a described tensor: format and item
 * size agree, and len is what shape says. The memory's extent is the
 * producer's word (libdevbuf checked it does not wrap). */
int dbp_desc_check(const devbuf_dlpack_desc *d, const char *what) {
  /* int64_t and Py_ssize_t are the same width (desc/desc.h asserts it), as
   * dbp_desc_export already relies on: the arrays are read in place. */
  return dbp_layout_check(what, d->format, (Py_ssize_t)d->itemsize, d->ndim,
                          (const Py_ssize_t *)d->shape, (const Py_ssize_t *)d->strides,
                          (Py_ssize_t)(d->nitems * d->itemsize), -1, DBP_LAYOUT_BUFFER_ERROR);
}

int dbp_desc_describe(dbp_desc *f, const DLTensor *t, uint64_t dl_flags, DLPackVersion version) {
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_dlpack_describe(t, dl_flags, &f->desc, &err) != DEVBUF_OK) return dbp_buffer_error(&err);
  if (dbp_desc_check(&f->desc, "devbuf.ForeignArray") < 0) return -1;
  f->desc.version = version;
  f->dl_flags = dl_flags;
  /* As received: shape/strides still point into `t` (dbp_desc_own_tensor
   * copies them when the tensor is needed past t's life). */
  f->tensor = *t;
  /* Every identifier describe() gives is a string of at least 4 bytes
   * with its NUL ("cpu", "devbuf.*"): a 4-byte compare, inlined. */
  f->is_host = memcmp(f->desc.identifier, "cpu", 4) == 0;
  if ((f->desc.flags & DEVBUF_DLPACK_HANDLE) && t->byte_offset != 0) {
    PyErr_Format(PyExc_BufferError,
                 "a %s tensor with byte_offset %llu cannot be re-exported: its data is a memory "
                 "handle, and the buffer protocol has no offset field",
                 devbuf_dlpack_device_type_name(f->desc.dl_device_type),
                 (unsigned long long)t->byte_offset);
    return -1;
  }
  return 0;
}

void dbp_desc_own_tensor(dbp_desc *f) {
  const DLTensor *t = &f->tensor;
  int nd = t->ndim;
  if (nd == 0) { /* as DLPack says a 0-d tensor: no arrays */
    f->tensor.shape = NULL;
    f->tensor.strides = NULL;
    return;
  }
  if (t->shape == f->el_shape) return;
  /* In place is safe: el_shape/el_strides are not what t points at. */
  for (int i = 0; i < nd; i++) f->el_shape[i] = t->shape[i];
  if (t->strides) {
    for (int i = 0; i < nd; i++) f->el_strides[i] = t->strides[i];
  } else {
    /* Row-major strides, multiplying by the real extents as CPython does
     * (an empty array's outer strides become 0). describe() bounds the
     * product only when there are items: with a 0 extent further out the
     * inner extents may be anything, so an overflowing product is an empty
     * array's stride, which nothing reads, and is stored as 0. */
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
      f->el_strides[i] = s;
      if (__builtin_mul_overflow(s, t->shape[i], &s)) s = 0;
    }
  }
  f->tensor.shape = f->el_shape;
  f->tensor.strides = f->el_strides;
}

dbp_desc *dbp_desc_from_versioned(DLManagedTensorVersioned *m, PyObject *producer) {
  if (m == NULL) {
    PyErr_SetString(PyExc_BufferError, "NULL DLManagedTensorVersioned");
    return NULL;
  }
  if (m->version.major != DEVBUF_DLPACK_MAJOR) {
    PyErr_Format(PyExc_BufferError,
                 "DLPack version %u.%u is not supported (devbuf reads major %d)",
                 m->version.major, m->version.minor, DEVBUF_DLPACK_MAJOR);
    return NULL;
  }
  dbp_desc *d = dbp_desc_new_undescribed(DBP_DESC_DLPACK, producer);
  if (d == NULL) return NULL;
  if (dbp_desc_describe(d, &m->dl_tensor, m->flags, m->version) < 0) {
    dbp_desc_free(d); /* managed is still NULL: the caller keeps m */
    return NULL;
  }
  d->managed = m;
  return d;
}

/* Open the tensor's device (once). */
static int desc_open(dbp_desc *f, devbuf_error *err) {
  if (f->has_dev) return DEVBUF_OK;
  int rc = devbuf_device_open_ordinal(f->desc.identifier, f->desc.ordinal, &f->dev, err);
  if (rc == DEVBUF_OK) f->has_dev = 1;
  return rc;
}

int dbp_desc_record(dbp_desc *f, void *stream, const char *what) {
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  if (f->is_host) return 0;
  rc = desc_open(f, &err);
  void *ev = NULL;
  if (rc == DEVBUF_OK) {
    DBP_NOGIL(rc = devbuf_event_create(&f->dev, &ev, &err);
              if (rc == DEVBUF_OK) rc = devbuf_event_record(&f->dev, ev, stream, &err));
  }
  if (rc != DEVBUF_OK) {
    if (ev) devbuf_event_destroy(&f->dev, ev, NULL);
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s: cannot honour the producer's stream on %s:%d", what,
             f->desc.identifier, (int)f->desc.ordinal);
    devbuf_error_prefix(&err, prefix);
    return dbp_fail(&err);
  }
  if (f->event) devbuf_event_destroy(&f->dev, f->event, NULL);
  f->event = ev;
  f->stream = stream; /* exported beside the event: the consumer may order on it */
  return 0;
}

/* Record an event on devbuf's (default) stream of an async device after a
 * DLPack import, so that every later reader, on any stream, waits for the
 * data the producer ordered onto it. Without a usable device nothing is
 * recorded (nothing can use the memory then anyway). */
int dbp_desc_after_stream_import(dbp_desc *f) {
  if (f->is_host) return 0;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (desc_open(f, &err) != DEVBUF_OK) return 0;
  devbuf_device_props props;
  memset(&props, 0, sizeof props);
  props.struct_size = sizeof props;
  if (devbuf_device_props_get(&f->dev, &props, &err) != DEVBUF_OK ||
      !(props.flags & DEVBUF_DEVICE_ASYNC))
    return 0;
  return dbp_desc_record(f, NULL, "DLPack import");
}

/* device_info for a device export (once). A device whose plugin has no
 * device here (no GPU) still gets the devbuf_device_info layout every
 * devbuf.* identifier uses, as long as there is no event to carry: the view
 * can be described, and using the memory reports the plugin's reason. */
static int desc_prepare_device(dbp_desc *f) {
  if (f->info_ready) return 0;
  devbuf_error err;
  const char *interned = NULL;
  size_t pidx = 0;
  devbuf_error_clear(&err);
  if (devbuf_identifier_lookup(f->desc.identifier, &interned, &pidx, &err) != DEVBUF_OK) {
    devbuf_error_prefix(&err, "ForeignArray: no plugin for the tensor's device");
    return dbp_buffer_error(&err);
  }
  uint32_t flags = 0;
  if (f->desc.flags & DEVBUF_DLPACK_READONLY) flags |= DEVBUF_DEVICE_INFO_READONLY;
  if (f->desc.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE) flags |= DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  int rc = desc_open(f, &err);
  memset(&f->info, 0, sizeof f->info);
  if (rc == DEVBUF_OK) {
    size_t size = 0;
    rc = devbuf_device_info_export(&f->dev, f->event, f->event ? f->stream : NULL, flags, &f->info,
                                   sizeof f->info, &size, &err);
    if (rc != DEVBUF_OK) {
      devbuf_error_prefix(&err, "ForeignArray: device_info");
      return dbp_buffer_error(&err);
    }
  } else if (f->event == NULL) {
    memset(&f->info, 0, sizeof f->info);
    f->info.info.struct_size = sizeof f->info.info;
    f->info.info.version = DEVBUF_DEVICE_INFO_VERSION;
    f->info.info.device_ordinal = f->desc.ordinal;
    f->info.info.flags = flags;
  } else {
    devbuf_error_prefix(&err, "ForeignArray: opening the tensor's device");
    return dbp_buffer_error(&err);
  }
  f->identifier = interned;
  f->info_ready = 1;
  return 0;
}

int dbp_desc_export(dbp_desc *f, Py_buffer *view, int flags) {
  const devbuf_dlpack_desc *d = &f->desc;
  int readonly = (d->flags & DEVBUF_DLPACK_READONLY) != 0;
  if ((flags & PyBUF_WRITABLE) && readonly) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.ForeignArray: the producer (%.100s, through %s) marked it read-only, "
                 "so a writable request is refused",
                 f->source ? Py_TYPE(f->source)->tp_name : "unknown", dbp_desc_kind_name(f->kind));
    return -1;
  }
  /* As CPython's memoryview: without PyBUF_ND the export is flat bytes, and
   * a real format with ndim 1 and no shape would describe len items. */
  if (dbp_refuse_flat_format("devbuf.ForeignArray", d->format, flags) < 0) return -1;
  int device_export = !f->is_host && (flags & PyBUF_DEVICE);
  if (!f->is_host && !device_export) {
    if (!(d->flags & DEVBUF_DLPACK_HOST_ACCESSIBLE)) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.ForeignArray holds %s device memory the host cannot read: request "
                   "it with the PyBUF_DEVICE flag (devbuf.view(obj) does), or copy it with "
                   "devbuf.view(obj).to_host()",
                   d->identifier);
      return -1;
    }
    if (f->event) { /* the host is about to read */
      devbuf_error err;
      int rc;
      devbuf_error_clear(&err);
      DBP_NOGIL(rc = devbuf_event_synchronize(&f->dev, f->event, &err));
      if (rc != DEVBUF_OK) return dbp_fail(&err);
    }
  }
#if DBP_CHECK_EXPORTS
  if (f->kind == DBP_DESC_ARROW) { /* its format lives in its owner: dbp_arrow_desc_export */
    PyErr_SetString(PyExc_SystemError, "dbp_desc_export of an Arrow description");
    return -1;
  }
  if (dbp_desc_check(d, "devbuf.ForeignArray export") < 0) return -1;
#endif
  if (device_export && desc_prepare_device(f) < 0) return -1;
  /* Integer arithmetic: libdevbuf checked it does not wrap, and pointer
   * arithmetic on a foreign address would be UB if it did. */
  view->buf = (void *)((uintptr_t)d->data + (uintptr_t)d->byte_offset);
  view->obj = NULL;
  view->len = (Py_ssize_t)(d->nitems * d->itemsize);
  view->itemsize = (Py_ssize_t)d->itemsize;
  view->readonly = readonly;
  view->format = (flags & PyBUF_FORMAT) ? (char *)d->format : NULL;
  view->ndim = d->ndim;
  view->shape = (Py_ssize_t *)d->shape;
  view->strides = (Py_ssize_t *)d->strides;
  view->suboffsets = NULL;
  view->internal = NULL;
  int c = (d->flags & DEVBUF_DLPACK_C_CONTIGUOUS) != 0, fo = (d->flags & DEVBUF_DLPACK_F_CONTIGUOUS) != 0;
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
    if (!c) {
      PyErr_SetString(PyExc_BufferError, "devbuf.ForeignArray is not C-contiguous");
      return -1;
    }
    view->strides = NULL;
  }
  if (((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c) ||
      ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !fo) ||
      ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c && !fo)) {
    PyErr_SetString(PyExc_BufferError, "devbuf.ForeignArray does not have the requested contiguity");
    return -1;
  }
  if (!(flags & PyBUF_ND)) {
    view->ndim = 1;
    view->shape = NULL;
  }
  /* A 0-d array has no shape and no strides: CPython's contiguity checks
   * assert ndim > 0 whenever strides is non-NULL (a DLPack tensor of ndim 0
   * may still carry non-NULL pointers). */
  if (view->ndim == 0) view->shape = view->strides = NULL;
  if (device_export) DevbufPy_BufferSetDevice(view, flags, f->identifier, &f->info);
  return 0;
}

const char *dbp_desc_kind_name(int k) {
  switch (k) {
    case DBP_DESC_DLPACK: return "dlpack";
    case DBP_DESC_DLPACK_LEGACY: return "dlpack_legacy";
    case DBP_DESC_CAI: return "cuda_array_interface";
    case DBP_DESC_ARRAY_INTERFACE: return "array_interface";
    case DBP_DESC_ARROW: return "arrow";
    default: return "?";
  }
}

/* ---- DeviceView.imported: what the reader received -------------------------------------- */

static PyTypeObject *g_info_type;

static PyStructSequence_Field info_fields[] = {
    {"kind", "the route: 'dlpack', 'dlpack_legacy', 'cuda_array_interface', "
             "'array_interface', 'arrow'"},
    {"dl_device", "(device_type, device_id) as received (Arrow: its device type and id, "
                  "which are DLPack's numbers); derived for the interfaces"},
    {"dl_dtype", "(code, bits, lanes) of the DLPack dtype as received, or derived for the "
                 "interfaces (a datetime64's int64 storage); None for Arrow"},
    {"dlpack_version", "(major, minor) of a versioned DLPack tensor, else None"},
    {"is_copied", "True if the producer made a copy for devbuf (DLPack's IS_COPIED flag)"},
    {NULL},
};
static PyStructSequence_Desc info_desc = {
    "devbuf.ImportInfo", "How a DeviceView's memory was imported (DeviceView.imported).",
    info_fields, 5};

PyObject *dbp_desc_import_info(const dbp_desc *f) {
  const devbuf_dlpack_desc *d = &f->desc;
  PyObject *s = PyStructSequence_New(g_info_type);
  if (s == NULL) return NULL;
  PyObject *v[5];
  v[0] = PyUnicode_FromString(dbp_desc_kind_name(f->kind));
  v[1] = Py_BuildValue("(ii)", (int)d->dl_device_type, (int)d->dl_device_id);
  v[2] = f->kind == DBP_DESC_ARROW
             ? Py_NewRef(Py_None)
             : Py_BuildValue("(iii)", (int)d->dtype.code, (int)d->dtype.bits, (int)d->dtype.lanes);
  v[3] = f->kind == DBP_DESC_DLPACK ? Py_BuildValue("(II)", d->version.major, d->version.minor)
                                    : Py_NewRef(Py_None);
  v[4] = PyBool_FromLong((d->flags & DEVBUF_DLPACK_IS_COPIED) != 0);
  for (int i = 0; i < 5; i++) {
    if (v[i] == NULL) {
      for (int j = 0; j < 5; j++) Py_XDECREF(v[j]);
      Py_DECREF(s);
      return NULL;
    }
  }
  for (int i = 0; i < 5; i++) PyStructSequence_SET_ITEM(s, i, v[i]);
  return s;
}

int dbp_desc_init(PyObject *module) {
  g_info_type = PyStructSequence_NewType(&info_desc);
  if (g_info_type == NULL) return -1;
  return PyModule_AddObjectRef(module, "ImportInfo", (PyObject *)g_info_type);
}
