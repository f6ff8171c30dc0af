/* dlpack_import.c: memory of other libraries, as devbuf sees it.
 *
 * devbuf.ForeignArray holds what a producer handed over (an owning DLPack
 * managed tensor, or a reference to a CUDA Array Interface / array
 * interface producer) plus its validated description, and re-exports it
 * through the extended buffer protocol: a third-party consumer built on
 * devbuf_buffer.h accepts it like any other exporter. Host memory ("cpu",
 * pinned) is a plain CPU buffer; device memory carries the device's
 * identifier and a device_info whose event is what the consumer must wait
 * on (recorded on the producer's stream when the protocol names one).
 *
 * devbuf.from_dlpack(obj, device=None, copy=None) and the devbuf.view()
 * fallback build ForeignArrays; see docs/interop.md. */
#include "interop.h"

#include <string.h>
#include <time.h>

static PyObject *g_s_dlpack, *g_s_dlpack_device, *g_s_cai, *g_s_ai, *g_s_api_attr;
/* ("stream", "max_version", "dl_device", "copy")[:n] for n = 0..4, and
 * devbuf's max_version: built once, they cost an import nothing. */
static PyObject *g_kwnames[5], *g_max_version;
/* ("max_version", "dl_device", "copy")[:n] for n = 0..3: the calls that
 * leave stream at its default (None). */
static PyObject *g_kwnames_ns[4];

/* ---- ForeignArray ------------------------------------------------------------- */

/* A few freed ForeignArrays kept for reuse: at ~2.8 KiB each, malloc and
 * free were a fifth of a from_dlpack() (the type is final, the GIL guards
 * it). Without the GIL there is no freelist: a shared stack would need a
 * lock on the hot path, and mimalloc's per-thread heaps already make the
 * allocation cheap there. */
#if defined(Py_GIL_DISABLED)
enum { FOREIGN_FREELIST = 0 };
#else
enum { FOREIGN_FREELIST = 4 };
#endif
static DbpForeign *g_foreign_free[FOREIGN_FREELIST > 0 ? FOREIGN_FREELIST : 1];
static int g_foreign_nfree;

static DbpForeign *foreign_alloc(int kind, PyObject *source) {
  DbpForeign *f;
  if (FOREIGN_FREELIST > 0 && g_foreign_nfree > 0) {
    f = g_foreign_free[--g_foreign_nfree];
    PyObject_Init((PyObject *)f, &DbpForeign_Type);
  } else {
    f = PyObject_New(DbpForeign, &DbpForeign_Type);
    if (f == NULL) return NULL;
  }
  /* Zero everything but the big arrays, which describe fills (a full
   * memset of ~2.5 KiB is a third of an import's cost). */
  memset((char *)f + sizeof(PyObject), 0, offsetof(DbpForeign, el_shape) - sizeof(PyObject));
  /* `info` is zeroed where it is filled (foreign_prepare_device), only for
   * device exports: a host import never reads it. */
  memset(&f->desc, 0, offsetof(devbuf_dlpack_desc, shape));
  f->weakreflist = NULL;
  f->kind = kind;
  f->source = Py_XNewRef(source);
  f->desc.struct_size = sizeof f->desc;
  return f;
}

/* The layout invariant (layout.c) on a described tensor: format and item
 * size agree, and len is what shape says. The memory's extent is the
 * producer's word (libdevbuf checked it does not wrap). */
static int check_desc(const devbuf_dlpack_desc *d, const char *what) {
  /* int64_t and Py_ssize_t are the same width (interop.h asserts it), as
   * foreign_getbuffer already relies on: the arrays are read in place. */
  return dbp_layout_check(what, d->format, (Py_ssize_t)d->itemsize, d->ndim,
                          (const Py_ssize_t *)d->shape, (const Py_ssize_t *)d->strides,
                          (Py_ssize_t)(d->nitems * d->itemsize), -1, DBP_LAYOUT_BUFFER_ERROR);
}

/* Describe `t` (checked by libdevbuf) into f, keeping a copy of its shape
 * and strides. 0, or -1 with BufferError. Takes no ownership. */
static int foreign_describe(DbpForeign *f, const DLTensor *t, uint64_t dl_flags,
                            DLPackVersion version) {
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_dlpack_describe(t, dl_flags, &f->desc, &err) != DEVBUF_OK) return dbp_buffer_error(&err);
  if (check_desc(&f->desc, "devbuf.ForeignArray") < 0) return -1;
  f->desc.version = version;
  f->dl_flags = dl_flags;
  f->tensor = *t;
  int nd = t->ndim;
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
  f->tensor.shape = nd ? f->el_shape : NULL;
  f->tensor.strides = nd ? f->el_strides : NULL;
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

DbpForeign *dbp_foreign_from_versioned(DLManagedTensorVersioned *m, PyObject *producer) {
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
  DbpForeign *f = foreign_alloc(DBP_FOREIGN_DLPACK, producer);
  if (f == NULL) return NULL;
  if (foreign_describe(f, &m->dl_tensor, m->flags, m->version) < 0) {
    Py_DECREF(f);
    return NULL;
  }
  f->managed = m;
  return f;
}

/* Open the tensor's device (once). */
static int foreign_open(DbpForeign *f, devbuf_error *err) {
  if (f->has_dev) return DEVBUF_OK;
  int rc = devbuf_device_open_ordinal(f->desc.identifier, f->desc.ordinal, &f->dev, err);
  if (rc == DEVBUF_OK) f->has_dev = 1;
  return rc;
}

/* Record an event on the producer's `stream` of the tensor's device, for
 * every later reader to wait on. */
static int foreign_record(DbpForeign *f, void *stream, const char *what) {
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  if (f->is_host) return 0;
  rc = foreign_open(f, &err);
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

/* device_info for a device export (once). A device whose plugin has no
 * device here (no GPU) still gets the devbuf_device_info layout every
 * devbuf.* identifier uses, as long as there is no event to carry: the view
 * can be described, and using the memory reports the plugin's reason. */
static int foreign_prepare_device(DbpForeign *f) {
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
  int rc = foreign_open(f, &err);
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

static const char *kind_name(int k);

static int foreign_getbuffer_locked(DbpForeign *f, Py_buffer *view, int flags) {
  const devbuf_dlpack_desc *d = &f->desc;
  int readonly = (d->flags & DEVBUF_DLPACK_READONLY) != 0;
  if ((flags & PyBUF_WRITABLE) && readonly) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.ForeignArray: the producer (%.100s, through %s) marked it read-only, "
                 "so a writable request is refused",
                 f->source ? Py_TYPE(f->source)->tp_name : "unknown", kind_name(f->kind));
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
  if (check_desc(d, "devbuf.ForeignArray export") < 0) return -1;
#endif
  if (device_export && foreign_prepare_device(f) < 0) return -1;
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
  if (device_export) DevbufPy_BufferSetDevice(view, flags, f->identifier, &f->info);
  view->obj = Py_NewRef((PyObject *)f);
  f->exports++;
  return 0;
}

static void foreign_releasebuffer_locked(DbpForeign *f, Py_buffer *view) { f->exports--; }
/* Locked (dbp.h): the export count, the event and the lazily made device_info. */
DBP_LOCKED_GETBUFFER(DbpForeign, foreign_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpForeign, foreign_releasebuffer)

static PyBufferProcs foreign_as_buffer = {
    .bf_getbuffer = (getbufferproc)foreign_getbuffer,
    .bf_releasebuffer = (releasebufferproc)foreign_releasebuffer,
};

static void foreign_dealloc(DbpForeign *f) {
  if (f->weakreflist) PyObject_ClearWeakRefs((PyObject *)f);
  if (f->event && f->has_dev) devbuf_event_destroy(&f->dev, f->event, NULL);
  void *m = f->managed;
  f->managed = NULL;
  /* The producer's deleter may run Python code (a decref): keep any
   * pending exception out of its way, and none it leaves escapes. With
   * nothing pending (the usual case) there is nothing to fetch and put
   * back: clearing whatever the deleter left is what restoring "no
   * exception" did. */
  if (m) {
    if (PyErr_Occurred()) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      if (f->kind == DBP_FOREIGN_DLPACK) devbuf_dlpack_delete_versioned(m);
      else devbuf_dlpack_delete_legacy(m);
      PyErr_Restore(t, v, tb);
    } else {
      if (f->kind == DBP_FOREIGN_DLPACK) devbuf_dlpack_delete_versioned(m);
      else devbuf_dlpack_delete_legacy(m);
      if (PyErr_Occurred()) PyErr_Clear();
    }
  }
  Py_CLEAR(f->source);
  if (FOREIGN_FREELIST > 0 && g_foreign_nfree < FOREIGN_FREELIST) g_foreign_free[g_foreign_nfree++] = f;
  else PyObject_Free(f);
}

static const char *kind_name(int k) {
  switch (k) {
    case DBP_FOREIGN_DLPACK: return "dlpack";
    case DBP_FOREIGN_DLPACK_LEGACY: return "dlpack_legacy";
    case DBP_FOREIGN_CAI: return "cuda_array_interface";
    case DBP_FOREIGN_ARRAY_INTERFACE: return "array_interface";
    default: return "?";
  }
}

static PyObject *fget_kind(DbpForeign *f, void *c) { return PyUnicode_FromString(kind_name(f->kind)); }
static PyObject *fget_obj(DbpForeign *f, void *c) { return Py_NewRef(f->source ? f->source : Py_None); }
static PyObject *fget_identifier(DbpForeign *f, void *c) { return PyUnicode_FromString(f->desc.identifier); }
static PyObject *fget_ordinal(DbpForeign *f, void *c) { return PyLong_FromLong(f->desc.ordinal); }
static PyObject *fget_shape(DbpForeign *f, void *c) {
  return dbp_tuple_from_ssize(f->desc.ndim, (const Py_ssize_t *)f->desc.shape);
}
static PyObject *fget_strides(DbpForeign *f, void *c) {
  return dbp_tuple_from_ssize(f->desc.ndim, (const Py_ssize_t *)f->desc.strides);
}
static PyObject *fget_format(DbpForeign *f, void *c) { return PyUnicode_FromString(f->desc.format); }
static PyObject *fget_readonly(DbpForeign *f, void *c) {
  return PyBool_FromLong((f->desc.flags & DEVBUF_DLPACK_READONLY) != 0);
}
static PyObject *fget_is_copied(DbpForeign *f, void *c) {
  return PyBool_FromLong((f->desc.flags & DEVBUF_DLPACK_IS_COPIED) != 0);
}
static PyObject *fget_ptr(DbpForeign *f, void *c) {
  return PyLong_FromVoidPtr((void *)((uintptr_t)f->desc.data + (uintptr_t)f->desc.byte_offset));
}
static PyObject *fget_dl_device(DbpForeign *f, void *c) {
  return Py_BuildValue("(ii)", (int)f->desc.dl_device_type, (int)f->desc.dl_device_id);
}
static PyObject *fget_dl_dtype(DbpForeign *f, void *c) {
  return Py_BuildValue("(iii)", (int)f->desc.dtype.code, (int)f->desc.dtype.bits,
                       (int)f->desc.dtype.lanes);
}
static PyObject *fget_version(DbpForeign *f, void *c) {
  if (f->kind != DBP_FOREIGN_DLPACK) Py_RETURN_NONE;
  return Py_BuildValue("(II)", f->desc.version.major, f->desc.version.minor);
}
static PyObject *fget_exports_locked(DbpForeign *f, void *c) { return PyLong_FromSsize_t(f->exports); }
DBP_LOCKED_GETTER(DbpForeign, fget_exports)
static PyObject *fget_event(DbpForeign *f, void *c) {
  if (f->event == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(f->event);
}

static PyGetSetDef foreign_getset[] = {
    {"kind", (getter)fget_kind, NULL,
     "how it was imported: 'dlpack', 'dlpack_legacy', 'cuda_array_interface', 'array_interface'",
     NULL},
    {"obj", (getter)fget_obj, NULL, "the producer (kept alive), or None", NULL},
    {"identifier", (getter)fget_identifier, NULL, "devbuf device identifier", NULL},
    {"ordinal", (getter)fget_ordinal, NULL, "device ordinal", NULL},
    {"shape", (getter)fget_shape, NULL, "items per dimension", NULL},
    {"strides", (getter)fget_strides, NULL, "byte strides", NULL},
    {"format", (getter)fget_format, NULL, "buffer-protocol format of one item", NULL},
    {"readonly", (getter)fget_readonly, NULL, "True if the producer forbids writes", NULL},
    {"is_copied", (getter)fget_is_copied, NULL, "True if the producer made a copy for us", NULL},
    {"ptr", (getter)fget_ptr, NULL, "address of the first item (data + byte_offset)", NULL},
    {"dl_device", (getter)fget_dl_device, NULL, "(device_type, device_id) as received", NULL},
    {"dl_dtype", (getter)fget_dl_dtype, NULL, "(code, bits, lanes) as received", NULL},
    {"dlpack_version", (getter)fget_version, NULL, "(major, minor) of a versioned tensor", NULL},
    {"exports", (getter)fget_exports, NULL, "live buffer exports", NULL},
    {"event", (getter)fget_event, NULL, "the event readers wait on (int handle), or None", NULL},
    {NULL},
};

static PyObject *foreign_repr(DbpForeign *f) {
  PyObject *shape = fget_shape(f, NULL);
  if (shape == NULL) return NULL;
  PyObject *r = PyUnicode_FromFormat("<devbuf.ForeignArray %s %s:%d shape=%R format='%s'%s>",
                                     kind_name(f->kind), f->desc.identifier, (int)f->desc.ordinal,
                                     shape, f->desc.format,
                                     (f->desc.flags & DEVBUF_DLPACK_READONLY) ? " readonly" : "");
  Py_DECREF(shape);
  return r;
}

PyTypeObject DbpForeign_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.ForeignArray",
    .tp_basicsize = sizeof(DbpForeign),
    .tp_dealloc = (destructor)foreign_dealloc,
    .tp_repr = (reprfunc)foreign_repr,
    .tp_as_buffer = &foreign_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory another library handed to devbuf (DLPack, CUDA Array Interface, array "
              "interface), validated and re-exported through the extended buffer protocol. "
              "Made by devbuf.from_dlpack() and devbuf.view().",
    .tp_weaklistoffset = offsetof(DbpForeign, weakreflist),
    .tp_getset = foreign_getset,
};

/* ---- the exchange table of a producer type ------------------------------------------ */

const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type) {
  /* Direct-mapped cache keyed by (type, version tag), as the flag cache of
   * devbuf_buffer.h: a type attribute change gives a new tag. */
  enum { NCACHE = 16 };
  static struct {
    PyTypeObject *type;
    unsigned int tag;
    const devbuf_dlpack_exchange_api *api;
  } cache[NCACHE];
  size_t slot = ((size_t)(uintptr_t)type >> 4) & (NCACHE - 1);
  if (cache[slot].type == type && type->tp_version_tag != 0 &&
      cache[slot].tag == type->tp_version_tag &&
      (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
    return cache[slot].api;
  PyObject *attr = _PyType_Lookup(type, g_s_api_attr); /* borrowed, no exception */
  const devbuf_dlpack_exchange_api *api = NULL;
  if (attr != NULL) {
    if (!PyCapsule_IsValid(attr, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE)) {
      PyErr_Format(PyExc_TypeError,
                   "%.100s.%s is not a PyCapsule named \"%s\"", type->tp_name,
                   DEVBUF_DLPACK_EXCHANGE_API_ATTR, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE);
      return NULL;
    }
    api = PyCapsule_GetPointer(attr, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE);
    /* Walk to a table of the major we read. */
    const devbuf_dlpack_exchange_api_header *h = api ? &api->header : NULL;
    while (h != NULL && h->version.major != DEVBUF_DLPACK_MAJOR) h = h->prev_api;
    api = (const devbuf_dlpack_exchange_api *)h;
    if (api && (api->managed_tensor_from_py_object_no_sync == NULL)) api = NULL;
  }
  if (type->tp_version_tag != 0 && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
    cache[slot].type = type;
    cache[slot].tag = type->tp_version_tag;
    cache[slot].api = api;
  }
  return api;
}

static int after_stream_import(DbpForeign *f);

/* Import through the table: an owning tensor, then the producer's current
 * stream turned into an event. */
static DbpForeign *import_exchange(PyObject *obj, const devbuf_dlpack_exchange_api *api) {
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || m == NULL) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_BufferError, "%.100s's DLPack exchange table returned no tensor",
                   Py_TYPE(obj)->tp_name);
    return NULL;
  }
  DbpForeign *f = dbp_foreign_from_versioned(m, obj);
  if (f == NULL) {
    devbuf_dlpack_delete_versioned(m); /* ours: the table gave it to us */
    return NULL;
  }
  if (!f->is_host && api->current_work_stream != NULL) {
    void *stream = NULL;
    if (api->current_work_stream(m->dl_tensor.device.device_type, m->dl_tensor.device.device_id,
                                 &stream) != 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, "current_work_stream failed");
      Py_DECREF(f);
      return NULL;
    }
    /* The producer's work stream (NULL: its device's default stream, where
     * devbuf itself orders its work) gets an event every reader waits on:
     * with no sync from the producer, this is what makes the data safe. */
    int rc = stream != NULL ? foreign_record(f, stream, "DLPack exchange import")
                            : after_stream_import(f);
    if (rc < 0) {
      Py_DECREF(f);
      return NULL;
    }
  }
  return f;
}

/* ---- capsules --------------------------------------------------------------------- */

/* legacy_writable: the caller vouched that a pre-1.0 producer allows
 * writes; otherwise a legacy tensor is read-only (it cannot say). */
static DbpForeign *import_capsule(PyObject *cap, PyObject *producer, int legacy_writable) {
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__ returned %.100s, not a PyCapsule",
                 Py_TYPE(cap)->tp_name);
    return NULL;
  }
  const char *name = PyCapsule_GetName(cap);
  int versioned;
  if (name != NULL && strcmp(name, DEVBUF_DLPACK_CAPSULE_VERSIONED) == 0) versioned = 1;
  else if (name != NULL && strcmp(name, DEVBUF_DLPACK_CAPSULE_LEGACY) == 0) versioned = 0;
  else if (name != NULL && (strcmp(name, DEVBUF_DLPACK_CAPSULE_VERSIONED_USED) == 0 ||
                            strcmp(name, DEVBUF_DLPACK_CAPSULE_LEGACY_USED) == 0)) {
    PyErr_Format(PyExc_BufferError,
                 "the DLPack capsule was already consumed (its name is \"%s\"): a capsule can "
                 "be imported once",
                 name);
    return NULL;
  } else {
    PyErr_Format(PyExc_BufferError,
                 "a DLPack capsule must be named \"dltensor_versioned\" or \"dltensor\", not %s%s%s",
                 name ? "\"" : "", name ? name : "NULL", name ? "\"" : "");
    return NULL;
  }
  void *p = PyCapsule_GetPointer(cap, name);
  if (p == NULL) return NULL;
  DbpForeign *f;
  if (versioned) {
    /* Another major: refuse without consuming, so that the capsule's own
     * destructor still calls the deleter. */
    f = dbp_foreign_from_versioned(p, producer);
  } else {
    DLManagedTensor *m = p;
    DLPackVersion none = {0, 0};
    f = foreign_alloc(DBP_FOREIGN_DLPACK_LEGACY, producer);
    uint64_t fl = legacy_writable ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
    if (f != NULL && foreign_describe(f, &m->dl_tensor, fl, none) < 0) Py_CLEAR(f);
  }
  if (f == NULL) return NULL;
  if (PyCapsule_SetName(cap, versioned ? DEVBUF_DLPACK_CAPSULE_VERSIONED_USED
                                       : DEVBUF_DLPACK_CAPSULE_LEGACY_USED) < 0) {
    f->managed = NULL; /* the capsule keeps it */
    Py_DECREF(f);
    return NULL;
  }
  f->managed = p;
  return f;
}

/* The stream devbuf consumes on, as the DLPack Python spec numbers it:
 * devbuf works on each device's default stream. For OpenCL that is the
 * plugin's default queue, passed as its cl_command_queue handle (what the
 * devbuf_device_info of a NULL stream names, docs/devices/opencl.md) so that
 * any producer can order its work before it; if the device cannot be
 * opened, None (the producer then synchronizes as it sees fit). */
static PyObject *consumer_stream(DLDevice pd) {
  switch ((int32_t)pd.device_type) {
    case kDLCUDA:
    case kDLCUDAManaged: return PyLong_FromLong(1); /* legacy default stream */
    case kDLROCM: return PyLong_FromLong(0);        /* default stream */
    case kDLOpenCL: {
      devbuf_device dev;
      devbuf_device_info info;
      size_t size = 0;
      devbuf_error err;
      devbuf_error_clear(&err);
      if (devbuf_device_open_ordinal("devbuf.opencl", pd.device_id, &dev, &err) == DEVBUF_OK &&
          devbuf_device_info_export(&dev, NULL, NULL, 0, &info, sizeof info, &size, &err) ==
              DEVBUF_OK &&
          size >= offsetof(devbuf_device_info, stream) + sizeof info.stream && info.stream != NULL)
        return PyLong_FromVoidPtr(info.stream);
      Py_RETURN_NONE;
    }
    default: Py_RETURN_NONE;
  }
}

/* obj.__dlpack_device__() as (type, id), or -1 with an exception. *has = 0
 * when the method is missing. */
static int producer_device(PyObject *obj, DLDevice *out, int *has) {
  *has = 0;
  /* NumPy's ndarray is host memory by definition (its __dlpack_device__
   * always answers (kDLCPU, 0)): skip the round trip, a third of an import.
   * Only the exact C type: a subclass may say otherwise. A Python class's
   * tp_name has no dot, so no other type can pass this name test. */
  static PyTypeObject *g_ndarray; /* set once, to the same value by any thread */
  PyTypeObject *type = Py_TYPE(obj), *ndarray = (PyTypeObject *)DBP_LOAD_PTR(&g_ndarray);
  if (type == ndarray || (ndarray == NULL && !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
                          strcmp(type->tp_name, "numpy.ndarray") == 0)) {
    DBP_STORE_PTR(&g_ndarray, type);
    out->device_type = kDLCPU;
    out->device_id = 0;
    *has = 1;
    return 0;
  }
  PyObject *r = PyObject_CallMethodNoArgs(obj, g_s_dlpack_device);
  if (r == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return 0;
    }
    return -1;
  }
  int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2;
  long t = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 0)) : 0;
  long id = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : 0;
  Py_DECREF(r);
  if (!ok) {
    PyErr_SetString(PyExc_TypeError, "__dlpack_device__() must return a (device_type, device_id) tuple");
    return -1;
  }
  if (PyErr_Occurred()) return -1;
  int32_t ti = (int32_t)t;
  memcpy(&out->device_type, &ti, sizeof ti);
  out->device_id = (int32_t)id;
  *has = 1;
  return 0;
}

/* Whether a method call obj.name(...) on an instance of `type`, whose
 * type attribute `descr` (from _PyType_Lookup) is, calls descr(obj, ...)
 * exactly, as CPython's _PyObject_GetMethod decides: generic attribute
 * lookup, a method descriptor (a builtin method, as NumPy's __dlpack__ is;
 * not a data descriptor), and no instance dict that could shadow it. Then
 * the call skips the second lookup of the method. */
static int method_call_is_direct(PyTypeObject *type, PyObject *descr) {
  if (type->tp_getattro != PyObject_GenericGetAttr) return 0;
  if (!PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_METHOD_DESCRIPTOR)) return 0;
  if (type->tp_dictoffset != 0) return 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
  if (type->tp_flags & Py_TPFLAGS_MANAGED_DICT) return 0;
#endif
  return 1;
}

/* Call obj.__dlpack__ with what the producer understands: the full
 * keywords first, then without dl_device/copy (*dropped = 1), then the
 * pre-2023 forms. */
static PyObject *call_dlpack(PyObject *obj, PyObject *fn, int unbound, PyObject *stream,
                             PyObject *dl_device, PyObject *copy, int *dropped) {
  int extra = dl_device != Py_None || copy != Py_None;
  /* stream=None is the default: leaving it out spares the producer parsing
   * a keyword (NumPy's own from_dlpack leaves it out too). */
  int ns = stream == Py_None;
  const int tries_full[] = {4, 2, 1, 0}, tries_short[] = {2, 1, 0};
  const int tries_full_ns[] = {3, 1, 0}, tries_short_ns[] = {1, 0};
  const int *tries = extra ? (ns ? tries_full_ns : tries_full) : (ns ? tries_short_ns : tries_short);
  int ntries = (extra ? 4 : 3) - ns;
  int nall = 4 - ns;
  /* argv[0] is obj, for the method call without a bound method object. */
  PyObject *argv[5] = {obj, stream, g_max_version, dl_device, copy};
  PyObject **vals = argv + 1 + ns, **names = ns ? g_kwnames_ns : g_kwnames;
  if (ns) vals[-1] = obj;
  PyObject *r = NULL;
  *dropped = 0;
  for (int a = 0; a < ntries; a++) {
    /* A producer that does not know a keyword raises TypeError: retry with
     * fewer, as the array API standard suggests. */
    if (a > 0) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) break;
      PyErr_Clear();
    }
    int n = tries[a];
    if (extra && n < nall) *dropped = 1;
    /* fn: an instance attribute the caller found (unbound: the type's
     * method descriptor, called with obj first, as a method call would);
     * else the type's method, looked up by the call. */
    r = fn == NULL ? PyObject_VectorcallMethod(g_s_dlpack, vals - 1, 1, names[n])
        : unbound  ? PyObject_Vectorcall(fn, vals - 1, 1, names[n])
                   : PyObject_Vectorcall(fn, vals, 0, names[n]);
    if (r != NULL) break;
  }
  return r;
}

/* Record an event on devbuf's (default) stream of an async device after a
 * DLPack import, so that every later reader, on any stream, waits for the
 * data the producer ordered onto it. Without a usable device nothing is
 * recorded (nothing can use the memory then anyway). */
static int after_stream_import(DbpForeign *f) {
  if (f->is_host) return 0;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (foreign_open(f, &err) != DEVBUF_OK) return 0;
  devbuf_device_props props;
  memset(&props, 0, sizeof props);
  props.struct_size = sizeof props;
  if (devbuf_device_props_get(&f->dev, &props, &err) != DEVBUF_OK ||
      !(props.flags & DEVBUF_DEVICE_ASYNC))
    return 0;
  return foreign_record(f, NULL, "DLPack import");
}

/* fn: obj.__dlpack__ when the caller found it on the instance, else NULL
 * (the type's method is called). */
static DbpForeign *import_dlpack_call(PyObject *obj, PyObject *fn, int unbound,
                                      PyObject *dl_device, PyObject *copy, int *dropped,
                                      int legacy_writable) {
  DLDevice pd;
  int has = 0;
  if (producer_device(obj, &pd, &has) < 0) return NULL;
  PyObject *stream = has ? consumer_stream(pd) : Py_NewRef(Py_None);
  if (stream == NULL) return NULL;
  PyObject *cap = call_dlpack(obj, fn, unbound, stream, dl_device, copy, dropped);
  /* The producer cannot reach that device (NumPy only knows the CPU): take
   * the tensor where it is and let devbuf's plugins move it. The standard
   * says BufferError; NumPy 2.1-2.2 raise ValueError("unsupported device
   * requested"). Only the retry without dl_device decides: any other
   * ValueError comes back from it unchanged. */
  if (cap == NULL && dl_device != Py_None &&
      (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError))) {
    PyErr_Clear();
    cap = call_dlpack(obj, fn, unbound, stream, Py_None, copy == Py_True ? Py_None : copy,
                      dropped);
    *dropped = 1;
  }
  Py_DECREF(stream);
  if (cap == NULL) return NULL;
  DbpForeign *f = import_capsule(cap, obj, legacy_writable);
  Py_DECREF(cap); /* consumed: its destructor does nothing; else it deletes */
  if (f != NULL && after_stream_import(f) < 0) Py_CLEAR(f);
  return f;
}

/* ---- CUDA Array Interface / array interface --------------------------------------- */

static int typestr_to_format(PyObject *ts, char *fmt, size_t cap) {
  Py_ssize_t slen = 0;
  const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8AndSize(ts, &slen) : NULL;
  if (s == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "typestr must be a str");
    return -1;
  }
  if ((size_t)slen != strlen(s)) {
    PyErr_SetString(PyExc_BufferError, "typestr contains a NUL character");
    return -1;
  }
  const uint16_t one = 1;
  char native = *(const unsigned char *)&one == 1 ? '<' : '>';
  char order = s[0], kind = s[0] ? s[1] : 0;
  char *end = NULL;
  long size = (s[0] && s[1]) ? strtol(s + 2, &end, 10) : 0;
  /* The whole string: "<f4junk" or "<f 4" is not "<f4" (issue 20). */
  /* Only for the kinds devbuf maps: '<M8[ns]' keeps its "no devbuf format". */
  if (kind != '\0' && strchr("iufcb", kind) != NULL &&
      (end == NULL || end == s + 2 || *end != '\0' || s[2] < '0' || s[2] > '9')) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' is malformed: expected a byte order, a kind and a size in "
                 "digits, nothing else (e.g. '<f4')",
                 s);
    return -1;
  }
  const char *code = NULL;
  if (order == '<' || order == '>' || order == '|' || order == '=') {
    switch (kind) {
      case 'i': code = size == 1 ? "b" : size == 2 ? "h" : size == 4 ? "i" : size == 8 ? "q" : NULL; break;
      case 'u': code = size == 1 ? "B" : size == 2 ? "H" : size == 4 ? "I" : size == 8 ? "Q" : NULL; break;
      case 'f': code = size == 2 ? "e" : size == 4 ? "f" : size == 8 ? "d" : NULL; break;
      case 'c': code = size == 8 ? "Zf" : size == 16 ? "Zd" : NULL; break;
      case 'b': code = size == 1 ? "?" : NULL; break;
      default: break;
    }
  }
  if (code != NULL && size > 1 && order != native && order != '=' && order != '|') {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not in native byte order", s);
    return -1;
  }
  if (code == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' has no devbuf format (structured, custom or unknown dtypes are "
                 "not read from an array interface: use DLPack or the buffer protocol)",
                 s);
    return -1;
  }
  snprintf(fmt, cap, "%s", code);
  return 0;
}

/* NumPy's datetime64 / timedelta64 typestr ('<M8[D]', '<m8[10s]') as
 * devbuf's "[devbuf$datetime64(D)]" / "[devbuf$timedelta64(10s)]": 8-byte
 * signed counts of the unit since the epoch, NaT the smallest int64. Any
 * unit NumPy has, multiples included; the format engine checks the unit
 * when the ForeignArray is described. 1 if mapped, 0 if not a time kind,
 * -1 with BufferError. */
static int time_format(PyObject *ts, char *fmt, size_t cap) {
  const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8(ts) : NULL;
  if (s == NULL) {
    PyErr_Clear();
    return 0; /* typestr_to_format says what is wrong with it */
  }
  if (s[0] == '\0' || (s[1] != 'M' && s[1] != 'm')) return 0;
  const char *base = s[1] == 'M' ? "datetime64" : "timedelta64";
  const uint16_t one = 1;
  char native = *(const unsigned char *)&one == 1 ? '<' : '>';
  size_t n = strlen(s);
  if (s[2] != '8' || (s[3] != '\0' && s[3] != '[') || (s[3] == '[' && s[n - 1] != ']')) {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not a NumPy %s typestr (e.g. '<%c8[ns]')", s,
                 base, s[1]);
    return -1;
  }
  if (s[3] == '\0' || n == 5) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' is a %s without a unit (NumPy's generic unit): give the array "
                 "one first, e.g. .astype('%c8[s]')",
                 s, base, s[1]);
    return -1;
  }
  if (s[0] != native && s[0] != '=' && s[0] != '|') {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not in native byte order", s);
    return -1;
  }
  if ((size_t)snprintf(fmt, cap, "[devbuf$%s(%.*s)]", base, (int)(n - 5), s + 4) >= cap) {
    PyErr_Format(PyExc_BufferError, "typestr '%s' has a unit too long for a devbuf format", s);
    return -1;
  }
  return 1;
}

/* getattr(o, name, None) as a new reference; NULL with an exception only
 * for errors other than AttributeError. *out NULL when absent. */
static int optional_attr(PyObject *o, const char *name, PyObject **out) {
  *out = PyObject_GetAttrString(o, name);
  if (*out != NULL) return 0;
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
  PyErr_Clear();
  return 0;
}

/* An ml_dtypes NumPy array says only "<V2" in its array interface, but its
 * dtype names the type exactly, with the names devbuf's builtin namespace
 * uses: "[devbuf$NAME]". 1 if mapped, 0 if not an ml_dtypes dtype, -1 on
 * error. */
static int ml_dtypes_format(PyObject *obj, char *fmt, size_t cap) {
  static const char *const names[] = {
      "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
      "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
      "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2", "int1", "uint1",
      "complex32", "bcomplex32"};
  int found = 0, rc = -1;
  PyObject *dtype = NULL, *type = NULL, *mod = NULL, *name = NULL;
  if (optional_attr(obj, "dtype", &dtype) < 0) goto out;
  if (dtype == NULL || optional_attr(dtype, "type", &type) < 0) goto done;
  if (type == NULL || optional_attr(type, "__module__", &mod) < 0) goto done;
  const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
  if (m == NULL || strncmp(m, "ml_dtypes", 9) != 0) goto done;
  if (optional_attr(dtype, "name", &name) < 0) goto out;
  const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  for (size_t i = 0; n && i < sizeof names / sizeof names[0]; i++)
    if (strcmp(n, names[i]) == 0) {
      snprintf(fmt, cap, "[devbuf$%s]", n);
      found = 1;
    }
  /* A newer ml_dtypes type: refused by its name, not as the anonymous
   * '<V2' its typestr says (which would also fit a wrong same-sized type). */
  if (!found && n != NULL) {
    PyErr_Format(PyExc_BufferError,
                 "ml_dtypes type '%s' is not one devbuf maps (it maps bfloat16, float8_*, "
                 "float6_*, float4_e2m1fn, int4/2/1, uint4/2/1, complex32, bcomplex32): a newer "
                 "ml_dtypes than this devbuf",
                 n);
    goto out;
  }
done:
  rc = found;
  if (PyErr_Occurred()) rc = -1;
out:
  Py_XDECREF(dtype);
  Py_XDECREF(type);
  Py_XDECREF(mod);
  Py_XDECREF(name);
  return rc;
}

static DbpForeign *import_interface(PyObject *obj, PyObject *d, int cuda) {
  const char *what = cuda ? "__cuda_array_interface__" : "__array_interface__";
  if (!PyDict_Check(d)) {
    PyErr_Format(PyExc_TypeError, "%s must be a dict", what);
    return NULL;
  }
  PyObject *shape = PyDict_GetItemString(d, "shape"), *typestr = PyDict_GetItemString(d, "typestr");
  PyObject *data = PyDict_GetItemString(d, "data"), *strides = PyDict_GetItemString(d, "strides");
  PyObject *mask = PyDict_GetItemString(d, "mask"), *version = PyDict_GetItemString(d, "version");
  PyObject *offset = PyDict_GetItemString(d, "offset");
  PyObject *stream = cuda ? PyDict_GetItemString(d, "stream") : NULL;
  if (shape == NULL || typestr == NULL || data == NULL || !PyTuple_Check(shape)) {
    PyErr_Format(PyExc_BufferError, "%s needs 'shape' (tuple), 'typestr' and 'data'", what);
    return NULL;
  }
  if (version != NULL && PyLong_Check(version) && PyLong_AsLong(version) > 3) {
    PyErr_Format(PyExc_BufferError, "%s version %ld is newer than 3", what, PyLong_AsLong(version));
    return NULL;
  }
  if (mask != NULL && mask != Py_None) {
    PyErr_Format(PyExc_BufferError, "%s with a mask is not supported", what);
    return NULL;
  }
  if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) {
    PyErr_Format(PyExc_BufferError, "%s 'data' must be a (pointer, read_only) tuple", what);
    return NULL;
  }
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd > DEVBUF_DLPACK_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "%s has %zd dimensions; at most %d", what, nd,
                 DEVBUF_DLPACK_MAX_NDIM);
    return NULL;
  }
  char fmt[64], time_fmt[DEVBUF_DLPACK_FORMAT_MAX];
  int ml = ml_dtypes_format(obj, fmt, sizeof fmt);
  if (ml < 0) return NULL;
  int tm = ml == 0 ? time_format(typestr, time_fmt, sizeof time_fmt) : 0;
  if (tm < 0) return NULL;
  /* A time type is stored as int64: described as one, then given its format. */
  if (tm) snprintf(fmt, sizeof fmt, "q");
  if (ml == 0 && !tm && typestr_to_format(typestr, fmt, sizeof fmt) < 0) return NULL;
  DLTensor t;
  memset(&t, 0, sizeof t);
  devbuf_error err;
  devbuf_error_clear(&err);
  int padded = 0;
  if (devbuf_dlpack_dtype_from_format(fmt, (size_t)-1, &t.dtype, &padded, &err) != DEVBUF_OK) {
    dbp_buffer_error(&err);
    return NULL;
  }
  /* ml_dtypes keeps sub-byte types one per byte: DLPack's padded form. */
  int64_t itemsize = padded ? (int64_t)t.dtype.lanes : (int64_t)(t.dtype.bits / 8) * t.dtype.lanes;
  /* PyLong_AsVoidPtr takes negative ints and reinterprets them as high
   * addresses; an address is never negative (issue 20). */
  PyObject *ptr_obj = PyTuple_GET_ITEM(data, 0);
  if (!PyLong_Check(ptr_obj)) {
    PyErr_Format(PyExc_BufferError, "%s 'data' pointer must be an int, not %.100s", what,
                 Py_TYPE(ptr_obj)->tp_name);
    return NULL;
  }
  if (_PyLong_Sign(ptr_obj) < 0) {
    PyErr_Format(PyExc_BufferError, "%s 'data' pointer %R is negative", what, ptr_obj);
    return NULL;
  }
  t.data = PyLong_AsVoidPtr(ptr_obj);
  if (t.data == NULL && PyErr_Occurred()) return NULL;
  int ro = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
  if (ro < 0) return NULL;
  t.device.device_type = cuda ? kDLCUDA : kDLCPU;
  t.device.device_id = 0; /* CAI has no device field: see docs/interop.md */
  t.ndim = (int32_t)nd;
  int64_t sh[DEVBUF_DLPACK_MAX_NDIM], st[DEVBUF_DLPACK_MAX_NDIM];
  for (Py_ssize_t i = 0; i < nd; i++) {
    /* As NumPy: a bool is not a dimension (True would read as 1). */
    if (PyBool_Check(PyTuple_GET_ITEM(shape, i))) {
      PyErr_Format(PyExc_TypeError, "%s 'shape'[%zd] must be an int, not bool", what, i);
      return NULL;
    }
    sh[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (sh[i] == -1 && PyErr_Occurred()) return NULL;
  }
  t.shape = sh;
  if (strides != NULL && strides != Py_None) {
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd) {
      PyErr_Format(PyExc_BufferError, "%s 'strides' must be None or a tuple of %zd ints", what, nd);
      return NULL;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
      long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
      if (b == -1 && PyErr_Occurred()) return NULL;
      if (b % itemsize != 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s stride[%zd] = %lld bytes is not a multiple of the item size %lld",
                     what, i, b, (long long)itemsize);
        return NULL;
      }
      st[i] = b / itemsize;
    }
    t.strides = st;
  }
  if (offset != NULL && offset != Py_None) {
    long long o = PyLong_AsLongLong(offset);
    if (o == -1 && PyErr_Occurred()) return NULL;
    if (o < 0) {
      PyErr_Format(PyExc_BufferError, "%s 'offset' is negative", what);
      return NULL;
    }
    t.byte_offset = (uint64_t)o;
  }
  DbpForeign *f = foreign_alloc(cuda ? DBP_FOREIGN_CAI : DBP_FOREIGN_ARRAY_INTERFACE, obj);
  if (f == NULL) return NULL;
  DLPackVersion none = {0, 0};
  uint64_t dlf = (ro ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                 (padded ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0);
  if (foreign_describe(f, &t, dlf, none) < 0) {
    Py_DECREF(f);
    return NULL;
  }
  if (tm) {
    /* Checked as any format (the unit by devbuf's namespace, 8 bytes). */
    memcpy(f->desc.format, time_fmt, sizeof time_fmt);
    f->format_only = 1;
    if (check_desc(&f->desc, what) < 0) {
      Py_DECREF(f);
      return NULL;
    }
  }
  if (stream != NULL && stream != Py_None) {
    /* CAI v3: the data is produced on `stream`; the consumer must wait for
     * it. 0 is disallowed, 1 is the legacy and 2 the per-thread default. */
    long long s = PyLong_AsLongLong(stream);
    if (s == -1 && PyErr_Occurred()) {
      Py_DECREF(f);
      return NULL;
    }
    if (s == 0) {
      PyErr_SetString(PyExc_BufferError,
                      "__cuda_array_interface__ stream 0 is disallowed by CAI v3 (ambiguous)");
      Py_DECREF(f);
      return NULL;
    }
    if (foreign_record(f, s == 1 ? NULL : (void *)(uintptr_t)s, "__cuda_array_interface__") < 0) {
      Py_DECREF(f);
      return NULL;
    }
  }
  return f;
}

/* ---- entry points ---------------------------------------------------------------------- */

int dbp_route_note(PyObject **notes, const char *route) {
  PyObject *t, *e, *tb;
  PyErr_Fetch(&t, &e, &tb);
  if (t == NULL) return 0;
  PyErr_NormalizeException(&t, &e, &tb);
  PyObject *line = PyUnicode_FromFormat("%s: %s: %S", route, ((PyTypeObject *)t)->tp_name,
                                        e ? e : Py_None);
  Py_XDECREF(t);
  Py_XDECREF(e);
  Py_XDECREF(tb);
  if (line == NULL) return -1;
  if (*notes == NULL && (*notes = PyList_New(0)) == NULL) {
    Py_DECREF(line);
    return -1;
  }
  int rc = PyList_Append(*notes, line);
  Py_DECREF(line);
  return rc;
}

void dbp_route_raise(PyObject *type, PyObject *notes, PyObject *obj) {
  PyObject *sep = PyUnicode_FromString("; ");
  PyObject *joined = sep ? PyUnicode_Join(sep, notes) : NULL;
  Py_XDECREF(sep);
  if (joined == NULL) return;
  PyErr_Format(type, "devbuf cannot import %.100s by any route it speaks (%S)",
               Py_TYPE(obj)->tp_name, joined);
  Py_DECREF(joined);
}

PyObject *dbp_interop_exporter(PyObject *obj) {
  return dbp_interop_exporter_noted(obj, NULL);
}

PyObject *dbp_interop_exporter_noted(PyObject *obj, PyObject **notes_out) {
  const devbuf_dlpack_exchange_api *api = dbp_exchange_api_of(Py_TYPE(obj));
  if (api != NULL) return (PyObject *)import_exchange(obj, api);
  if (PyErr_Occurred()) return NULL;
  /* Each protocol the object speaks, in order; one that cannot describe
   * the data (BufferError: NumPy's __dlpack__ for an ml_dtypes array) hands
   * over to the next. If none can, every route's reason is reported (into
   * *notes_out when the caller collects them, else raised here). */
  static const char *const route[3] = {"__dlpack__", "__cuda_array_interface__",
                                       "__array_interface__"};
  PyObject *notes = notes_out && *notes_out ? *notes_out : NULL, *f = NULL;
  for (int step = 0; step < 3 && f == NULL; step++) {
    PyObject *d = NULL;
    if (step == 0) {
      /* The type's method through its cache (no attribute error made and
       * cleared, as PyObject_HasAttr does), else an instance attribute. */
      PyObject *fn = NULL;
      if (_PyType_Lookup(Py_TYPE(obj), g_s_dlpack) == NULL) {
        /* As PyObject_HasAttr did: a failing __getattr__ means "no". */
        if (dbp_compat_LookupAttr(obj, g_s_dlpack, &fn) < 0) PyErr_Clear();
        if (fn == NULL) continue;
      }
      int dropped;
      f = (PyObject *)import_dlpack_call(obj, fn, 0, Py_None, Py_None, &dropped, 0);
      Py_XDECREF(fn);
    } else {
      if (dbp_compat_LookupAttr(obj, step == 1 ? g_s_cai : g_s_ai, &d) < 0) break;
      if (d == NULL) continue;
      f = (PyObject *)import_interface(obj, d, step == 1);
      Py_DECREF(d);
    }
    if (f == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_BufferError)) break;
      if (dbp_route_note(&notes, route[step]) < 0) break;
    }
  }
  if (notes_out != NULL) {
    *notes_out = notes;
  } else {
    if (f == NULL && notes != NULL && !PyErr_Occurred()) /* a hard error wins */
      dbp_route_raise(PyExc_BufferError, notes, obj);
    Py_XDECREF(notes);
  }
  return f; /* NULL without an exception: speaks none of them (or notes hold why) */
}

/* The device a from_dlpack() result must end up on: *id NULL when any. */
static int parse_target(PyObject *device, DLDevice *dl, int *has_dl, const char **id, int *ord) {
  *has_dl = 0;
  *id = NULL;
  if (device == Py_None) return 0;
  DbpDevice *d;
  if (PyTuple_Check(device)) { /* a DLPack (type, id) pair */
    long t = PyTuple_GET_SIZE(device) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(device, 0)) : -1;
    long i = PyTuple_GET_SIZE(device) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(device, 1)) : -1;
    if (PyErr_Occurred()) return -1;
    DLDevice x;
    int32_t ti = (int32_t)t;
    memcpy(&x.device_type, &ti, sizeof ti);
    x.device_id = (int32_t)i;
    devbuf_error err;
    devbuf_error_clear(&err);
    int32_t o;
    if (devbuf_dlpack_device_to_identifier(x, id, &o, NULL, &err) != DEVBUF_OK) {
      dbp_buffer_error(&err);
      return -1;
    }
    *ord = o;
    *dl = x;
    *has_dl = 1;
    return 0;
  }
  d = dbp_device_get(device);
  if (d == NULL) return -1;
  *id = d->is_host ? "cpu" : d->dev.identifier;
  *ord = d->is_host ? 0 : d->dev.ordinal;
  Py_DECREF(d); /* cached Devices live for the process: *id stays valid */
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_dlpack_device_from_identifier(*id, *ord, 0, dl, NULL) == DEVBUF_OK) *has_dl = 1;
  return 0;
}

PyObject *dbp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  PyObject *obj = NULL, *device = Py_None, *copy_o = Py_None, *lw_o = Py_None;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "from_dlpack() takes 1 positional argument");
    return NULL;
  }
  if (nargs == 1) obj = args[0];
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
    if (obj == NULL && PyUnicode_CompareWithASCIIString(k, "x") == 0) obj = v;
    else if (PyUnicode_CompareWithASCIIString(k, "device") == 0) device = v;
    else if (PyUnicode_CompareWithASCIIString(k, "copy") == 0) copy_o = v;
    else if (PyUnicode_CompareWithASCIIString(k, "legacy_writable") == 0) lw_o = v;
    else {
      PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument '%U'", k);
      return NULL;
    }
  }
  if (obj == NULL) {
    PyErr_SetString(PyExc_TypeError, "from_dlpack() missing required argument 'x'");
    return NULL;
  }
  int copy = -1;
  if (copy_o != Py_None) {
    copy = PyObject_IsTrue(copy_o);
    if (copy < 0) return NULL;
  }
  int legacy_writable = PyObject_IsTrue(lw_o);
  if (legacy_writable < 0) return NULL;
  DLDevice tdl;
  int has_dl = 0, tord = 0;
  const char *tid = NULL;
  if (parse_target(device, &tdl, &has_dl, &tid, &tord) < 0) return NULL;

  DbpForeign *f = NULL;
  int dropped = 1; /* the producer did not handle device/copy */
  const devbuf_dlpack_exchange_api *api = dbp_exchange_api_of(Py_TYPE(obj));
  if (api == NULL && PyErr_Occurred()) return NULL;
  /* obj.__dlpack__: the type's method (found through the type's method
   * cache, called without binding it), else an instance attribute. */
  PyObject *fn = NULL;
  int has_method = 0, unbound = 0;
  /* copy=True is never passed on: devbuf copies the producer's plain
   * export itself (docs/interop.md, "copy=True"). A producer's own copy was
   * seen wrong: pyarrow 26's copy of a strided Tensor keeps the strides
   * over a compact buffer, and reads past it. */
  PyObject *producer_copy = copy == 1 ? Py_None : copy_o;
  if (api == NULL) {
    PyObject *descr = _PyType_Lookup(Py_TYPE(obj), g_s_dlpack); /* borrowed */
    has_method = descr != NULL;
    if (has_method && method_call_is_direct(Py_TYPE(obj), descr)) {
      /* What obj.__dlpack__(...) would call, found once: a new reference,
       * as the call may change the type. */
      fn = Py_NewRef(descr);
      unbound = 1;
    }
    if (!has_method && dbp_compat_LookupAttr(obj, g_s_dlpack, &fn) < 0) return NULL;
  }
  if (api != NULL) {
    f = import_exchange(obj, api);
  } else if (has_method || fn != NULL) {
    PyObject *dl = Py_None;
    if (has_dl) {
      dl = Py_BuildValue("(ii)", (int)tdl.device_type, (int)tdl.device_id);
      if (dl == NULL) {
        Py_XDECREF(fn);
        return NULL;
      }
    } else {
      Py_INCREF(dl);
    }
    f = import_dlpack_call(obj, fn, unbound, dl, producer_copy, &dropped, legacy_writable);
    Py_DECREF(dl);
    Py_XDECREF(fn);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack() needs an object with __dlpack__ (or a type with %s), not "
                 "%.100s",
                 DEVBUF_DLPACK_EXCHANGE_API_ATTR, Py_TYPE(obj)->tp_name);
    return NULL;
  }
  if (f == NULL) return NULL;

  /* What the producer did not do, devbuf does through its plugins. */
  int elsewhere = tid != NULL && !(strcmp(tid, f->desc.identifier) == 0 && tord == f->desc.ordinal);
  /* A copy the producer made on its own (to reach dl_device) is already
   * fresh memory; anything else is copied here. */
  int want_copy = copy == 1 && !(f->desc.flags & DEVBUF_DLPACK_IS_COPIED);
  PyObject *result;
  if ((dropped && elsewhere) || want_copy) {
    if (tid == NULL) { /* no device asked: the copy stays where the data is */
      tid = f->desc.identifier;
      tord = f->desc.ordinal;
    }
    if (copy == 0) {
      PyErr_Format(PyExc_BufferError,
                   "from_dlpack: copy=False, but the tensor is on %s:%d and device asks for %s:%d",
                   f->desc.identifier, (int)f->desc.ordinal, tid, tord);
      Py_DECREF(f);
      return NULL;
    }
    DbpView *src = dbp_view_new((PyObject *)f, 0);
    Py_DECREF(f);
    if (src == NULL) return NULL;
    PyObject *host = dbp_view_to_host(src);
    dbp_view_release(src);
    Py_DECREF(src);
    if (host == NULL) return NULL;
    PyObject *buf = host;
    if (tid != NULL && strcmp(tid, "cpu") != 0) {
      PyObject *spec = PyUnicode_FromFormat("%s:%d", tid, tord);
      DbpDevice *td = spec ? dbp_device_get(spec) : NULL;
      Py_XDECREF(spec);
      buf = td ? dbp_buffer_copy_to((DbpBuffer *)host, td) : NULL;
      Py_XDECREF(td);
      Py_DECREF(host);
      if (buf == NULL) return NULL;
    }
    result = (PyObject *)dbp_view_new(buf, 0);
    Py_DECREF(buf);
    return result;
  }
  result = (PyObject *)dbp_view_new((PyObject *)f, 0);
  Py_DECREF(f);
  return result;
}

/* Benchmark helper: import `obj` through its type's exchange table `n`
 * times (the borrowed DLTensor when the table has it, else an owning
 * tensor and its deleter), validating each with devbuf_dlpack_describe.
 * Returns the seconds per import. This is the C consumer's fast path. */
PyObject *dbp_exchange_import_bench(PyObject *self, PyObject *args) {
  PyObject *obj;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "On:_exchange_import_bench", &obj, &n)) return NULL;
  devbuf_dlpack_desc d;
  d.struct_size = sizeof d;
  devbuf_error err;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (Py_ssize_t i = 0; i < n; i++) {
    const devbuf_dlpack_exchange_api *api = dbp_exchange_api_of(Py_TYPE(obj));
    if (api == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "no DLPack exchange table");
      return NULL;
    }
    if (api->dltensor_from_py_object_no_sync != NULL) {
      DLTensor t;
      if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
      if (devbuf_dlpack_describe(&t, 0, &d, &err) != DEVBUF_OK) return PyErr_Format(PyExc_BufferError, "%s", err.message);
    } else {
      DLManagedTensorVersioned *m = NULL;
      if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
      int rc = devbuf_dlpack_describe_versioned(m, &d, &err);
      devbuf_dlpack_delete_versioned(m);
      if (rc != DEVBUF_OK) return PyErr_Format(PyExc_BufferError, "%s", err.message);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return PyFloat_FromDouble(n > 0 ? secs / (double)n : 0.0);
}

static PyMethodDef import_functions[] = {
    {"from_dlpack", (PyCFunction)(void (*)(void))dbp_from_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack(x, /, *, device=None, copy=None, legacy_writable=False) -> DeviceView of a "
     "DLPack producer's memory (through its type's C exchange table when it has one, else "
     "x.__dlpack__). device: a devbuf Device or spec, or a DLPack (type, id) pair; copy: None "
     "(only if needed), True, False (BufferError if a copy is needed); legacy_writable: an "
     "unversioned (pre-1.0) capsule cannot say it is read-only, so it is imported read-only "
     "unless this is True (you know the producer allows writes)."},
    {"_exchange_import_bench", dbp_exchange_import_bench, METH_VARARGS,
     "_exchange_import_bench(obj, n) -> seconds per DLPack C-exchange-table import (benchmarks)."},
    {NULL},
};

int dbp_import_init(PyObject *module) {
  g_s_dlpack = PyUnicode_InternFromString("__dlpack__");
  g_s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  g_s_cai = PyUnicode_InternFromString("__cuda_array_interface__");
  g_s_ai = PyUnicode_InternFromString("__array_interface__");
  g_s_api_attr = PyUnicode_InternFromString(DEVBUF_DLPACK_EXCHANGE_API_ATTR);
  if (!g_s_dlpack || !g_s_dlpack_device || !g_s_cai || !g_s_ai || !g_s_api_attr) return -1;
  static const char *const kw[] = {"stream", "max_version", "dl_device", "copy"};
  for (int n = 0; n <= 3; n++) {
    g_kwnames_ns[n] = PyTuple_New(n);
    if (g_kwnames_ns[n] == NULL) return -1;
    for (int i = 0; i < n; i++) {
      PyObject *k = PyUnicode_InternFromString(kw[i + 1]);
      if (k == NULL) return -1;
      PyTuple_SET_ITEM(g_kwnames_ns[n], i, k);
    }
  }
  for (int n = 0; n <= 4; n++) {
    g_kwnames[n] = PyTuple_New(n);
    if (g_kwnames[n] == NULL) return -1;
    for (int i = 0; i < n; i++) {
      PyObject *k = PyUnicode_InternFromString(kw[i]);
      if (k == NULL) return -1;
      PyTuple_SET_ITEM(g_kwnames[n], i, k);
    }
  }
  g_max_version = Py_BuildValue("(ii)", DEVBUF_DLPACK_MAJOR, DEVBUF_DLPACK_MINOR);
  if (g_max_version == NULL) return -1;
  if (PyType_Ready(&DbpForeign_Type) < 0) return -1;
  if (DevbufPy_SetBufferSupportedFlags(&DbpForeign_Type, DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  if (PyModule_AddObjectRef(module, "ForeignArray", (PyObject *)&DbpForeign_Type) < 0) return -1;
  if (PyModule_AddFunctions(module, import_functions) < 0) return -1;
  return PyModule_AddIntConstant(module, "DLPACK_MAX_NDIM", DEVBUF_DLPACK_MAX_NDIM);
}
