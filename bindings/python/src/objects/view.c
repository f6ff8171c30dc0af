/* view.c: devbuf.DeviceView, the consumer side.
 *
 * devbuf.view(obj) asks `obj` for an extended buffer (PyBUF_RECORDS_RO |
 * PyBUF_DEVICE through DevbufPy_GetBufferEx) and holds it: the producer stays
 * alive through view.obj, and the export is released exactly once (release(),
 * __exit__, or deallocation, whichever comes first). A producer without the
 * buffer protocol (the DLPack exchange table, Arrow, DLPack, CUDA Array
 * Interface, array interface) is read into the one import description
 * (desc.h), which the view owns itself (`held`) and releases exactly once the
 * same way; its fields fill `buf` as an export would, and view.obj is the
 * producer the description holds. See docs/consumers.md, "The one import
 * path".
 *
 * Construction is the hot path (a consumer makes one per call), so it does
 * only the buffer request: the identifier's device_info is imported (checked
 * by its plugin, device opened) on first use of .device, .sync,
 * .synchronize(), .to_host() or a plain re-export; the format is parsed on
 * first use of .dtype.
 *
 * A DeviceView re-exports what it holds (as memoryview does), extended
 * fields included when the request has PyBUF_DEVICE; each re-export holds the
 * view, so the memory outlives any release rule of the consumer's, and the
 * view cannot be released while re-exported (BufferError), nor while a
 * GIL-free operation runs on it. */
#include "objects/objects.h"
#include "readers/readers.h" /* the Arrow reader, the exchange table of a type */
#include "route/route.h"     /* dbp_interop_import */
#include "base/dbp_freelist.h" /* after Python.h */

#include <string.h>

#define VIEW_FLAGS (PyBUF_RECORDS_RO | PyBUF_DEVICE)

static PyTypeObject *g_sync_type;

static int check_alive(DbpView *v) {
  if (v->released) {
    PyErr_SetString(PyExc_ValueError, "operation forbidden on a released devbuf.DeviceView");
    return -1;
  }
  return 0;
}

/* A few freed DeviceViews kept for reuse (the type is final): the GC
 * allocation and free were ~130 instructions of each devbuf.view() and
 * devbuf.from_dlpack(). A kept view is untracked and holds nothing (dealloc
 * released it all); reuse re-initialises its object header only, as
 * CPython's own freelists of GC objects do, and every field below is set
 * as for a fresh one. Without the GIL the freelist is per-thread slots
 * (dbp_freelist.h), taken and given back with one atomic each. */
DBP_FREELIST(g_view_free);

static DbpView *view_alloc(void) {
  DbpView *v = dbp_freelist_pop(&g_view_free);
  if (v != NULL) {
    PyObject_Init((PyObject *)v, &DbpView_Type);
  } else {
    v = PyObject_GC_New(DbpView, &DbpView_Type);
    if (v == NULL) return NULL;
  }
  v->released = 1; /* nothing held yet: dealloc must not release */
  v->resolved = 0;
  v->is_device = 0;
  v->exports = 0;
  v->pins = 0;
  v->held = NULL;
  v->device_obj = NULL;
  v->dtype_obj = NULL;
  v->weakreflist = NULL;
  memset(&v->ledger, 0, sizeof v->ledger);
  return v;
}

/* The view holds what it now describes (an export or a description). */
static DbpView *view_finish(DbpView *v) {
  v->released = 0;
  v->is_device = DevbufPy_BufferIsDevice(&v->buf);
  PyObject_GC_Track(v);
  return v;
}

/* Take `d` (freed on failure): the view's Py_buffer points into it, with
 * every check of an export of it (`export`: dbp_desc_export, or
 * dbp_arrow_desc_export for an Arrow description; a constant at each call
 * site, so the hot DLPack path calls its export directly, with no dispatch
 * on the kind); nothing is exported in between. */
static inline int view_take_desc(DbpView *v, dbp_desc *d, int flags,
                                 int (*export)(dbp_desc *, Py_buffer *, int)) {
  v->buf.flags = 0;
  v->buf.ext_flags = 0;
  v->buf.device = NULL;
  v->buf.device_info = NULL;
  if (export(d, &v->buf.view, VIEW_FLAGS | flags) < 0) {
    v->buf.device = NULL;
    v->buf.device_info = NULL;
    dbp_desc_free(d);
    return -1;
  }
  v->held = d;
  return 0;
}

DbpView *dbp_view_from_desc(dbp_desc *d, int flags) {
  DbpView *v = view_alloc();
  if (v == NULL) {
    dbp_desc_free(d);
    return NULL;
  }
  if (view_take_desc(v, d, flags, dbp_desc_export) < 0) {
    Py_DECREF(v);
    return NULL;
  }
  /* The description passed the layout check when it was filled (every
   * reader goes through dbp_desc_describe); it is immutable since. */
  return view_finish(v);
}

/* An imported description into v: Arrow's was not made by
 * dbp_desc_describe, so the producer's answer gets the check a buffer
 * export gets. 0, or -1 with an exception (d freed). */
static int view_take_import(DbpView *v, dbp_desc *d, int flags, int arrow) {
  if (!arrow) return view_take_desc(v, d, flags, dbp_desc_export);
  if (view_take_desc(v, d, flags, dbp_arrow_desc_export) < 0) return -1;
  if (dbp_layout_check_view("devbuf.view: the producer's buffer", &v->buf.view, -1,
                            DBP_LAYOUT_BUFFER_ERROR) < 0) {
    dbp_desc_free(v->held);
    v->held = NULL;
    return -1;
  }
  return 0;
}

DbpView *dbp_view_new(PyObject *obj, int flags) {
  DbpView *v = view_alloc();
  if (v == NULL) return NULL;
  /* Not a buffer exporter: the producer's protocol is read into a
   * description the view owns (desc.h), whatever the protocol. */
  if (!PyObject_CheckBuffer(obj)) {
    /* Each route in turn (import_routes.c): one that refuses (Pillow's
     * Arrow export of an RGB image) hands over to the next; if all refuse,
     * the error names each and why. */
    PyObject *notes = NULL;
    int arrow = 0;
    dbp_desc *d = dbp_import_routes(obj, &notes, &arrow);
    if (d != NULL) {
      Py_XDECREF(notes);
      if (view_take_import(v, d, flags, arrow) < 0) {
        Py_DECREF(v);
        return NULL;
      }
      return view_finish(v);
    }
    if (notes != NULL && !PyErr_Occurred()) dbp_route_raise(PyExc_BufferError, notes, obj);
    Py_XDECREF(notes);
    if (PyErr_Occurred()) {
      Py_DECREF(v);
      return NULL;
    }
  }
  /* A DeviceBuffer supports every request flag (dbp_buffer_init says
   * so): no need to look its answer up (a thread-local cache without the
   * GIL). */
  if ((Py_IS_TYPE(obj, &DbpBuffer_Type)
           ? DevbufPy__GetBufferExSupported(obj, &v->buf, VIEW_FLAGS | flags)
           : DevbufPy_GetBufferEx(obj, &v->buf, VIEW_FLAGS | flags)) < 0) {
    /* An exporter that cannot describe its data in a format string (NumPy
     * with ml_dtypes' bfloat16) may still say it through DLPack or the
     * array interface; if not, its own error stands. */
    PyObject *t, *e, *tb, *notes = NULL;
    dbp_desc *d = NULL;
    int arrow = 0;
    PyErr_Fetch(&t, &e, &tb);
    if (PyErr_GivenExceptionMatches(t, PyExc_ValueError) ||
        PyErr_GivenExceptionMatches(t, PyExc_BufferError))
      d = dbp_import_routes(obj, &notes, &arrow);
    if (d != NULL && view_take_import(v, d, flags, arrow) == 0) {
      Py_XDECREF(t);
      Py_XDECREF(e);
      Py_XDECREF(tb);
      Py_XDECREF(notes);
      return view_finish(v);
    }
    PyErr_Clear();
    if (notes != NULL) {
      /* Every route failed: say what each one said (a NumPy structured
       * array with a datetime64 field has no buffer format, no DLPack code
       * and no array-interface typestr), in the buffer protocol's type. */
      PyObject *type = Py_NewRef(t), *all = NULL;
      PyErr_Restore(t, e, tb);
      if (dbp_route_note(&all, "buffer protocol") == 0 && PyList_SetSlice(all, 1, 1, notes) == 0)
        dbp_route_raise(type, all, obj);
      Py_XDECREF(all);
      Py_DECREF(type);
      Py_DECREF(notes);
    } else {
      PyErr_Restore(t, e, tb);
    }
    Py_DECREF(v);
    return NULL;
  }
  /* A 0-d producer may hand non-NULL shape/strides; held as none (the
   * rule for ndim 0 on every route). */
  if (v->buf.view.ndim == 0) v->buf.view.shape = v->buf.view.strides = NULL;
  /* A writable request answered read-only (a read-only pyarrow Tensor
   * does): whatever getbuffer returned, the producer said no. */
  if ((flags & PyBUF_WRITABLE) && v->buf.view.readonly) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.view(writable=True): %.100s answered the writable request with a "
                 "read-only buffer; ask for a read-only view, or make the producer writable",
                 Py_TYPE(obj)->tp_name);
    DevbufPy_BufferRelease(&v->buf);
    Py_DECREF(v);
    return NULL;
  }
  /* The producer's description must be self-consistent before devbuf
   * re-exports or copies it; its memory size is its own word. */
  if (dbp_layout_check_view("devbuf.view: the producer's buffer", &v->buf.view, -1,
                            DBP_LAYOUT_BUFFER_ERROR) < 0) {
    DevbufPy_BufferRelease(&v->buf);
    Py_DECREF(v);
    return NULL;
  }
  return view_finish(v);
}

/* Let go of what the view holds: its description (the deleter or the
 * producer's reference, once), or the producer's export. */
static void view_drop(DbpView *v) {
  dbp_desc *d = v->held;
  v->held = NULL;
  DevbufPy_BufferRelease(&v->buf); /* nothing to release when it holds a description */
  dbp_desc_free(d);
}

int dbp_view_resolve(DbpView *v) {
  /* Alive first, even when resolved: after release the buffer's fields
   * (shape, strides, device, device_info) are the producer's, maybe freed. */
  if (check_alive(v) < 0) return -1;
  if (v->resolved) return 0;
  if (v->is_device) {
    devbuf_error err;
    devbuf_error_clear(&err);
    memset(&v->desc, 0, sizeof v->desc);
    v->desc.struct_size = sizeof v->desc;
    if (devbuf_device_info_import(v->buf.device, v->buf.device_info, &v->desc, &v->dev, &err) !=
        DEVBUF_OK) {
      devbuf_error_prefix(&err, "devbuf.DeviceView: the producer's device_info");
      return dbp_fail(&err);
    }
  } else {
    memset(&v->desc, 0, sizeof v->desc);
    v->desc.flags = DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
    DbpDevice *h = dbp_device_host();
    if (h == NULL) return -1;
    v->dev = h->dev;
  }
  v->resolved = 1;
  return 0;
}

int dbp_view_release(DbpView *v) {
  if (v->released) return 0;
  if (v->exports > 0 || v->pins > 0) {
    PyErr_Format(PyExc_BufferError,
                 "cannot release a devbuf.DeviceView while %zd export%s of it %s alive%s",
                 v->exports, v->exports == 1 ? "" : "s", v->exports == 1 ? "is" : "are",
                 v->pins ? " (or an operation still runs on it)" : "");
    return -1;
  }
  v->released = 1; /* first: the producer's release may run arbitrary code */
  view_drop(v);
  Py_CLEAR(v->device_obj);
  Py_CLEAR(v->dtype_obj);
  return 0;
}

int dbp_view_synchronize(DbpView *v) {
  if (dbp_view_resolve(v) < 0) return -1;
  if (v->desc.event == NULL) return 0;
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  v->pins++;
  DBP_NOGIL(rc = devbuf_event_synchronize(&v->dev, v->desc.event, &err));
  v->pins--;
  return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
}

PyObject *dbp_view_to_host(DbpView *v) {
  if (dbp_view_resolve(v) < 0) return NULL;
  const Py_buffer *b = &v->buf.view;
  int host = !v->is_device || (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE);
  v->pins++;
  PyObject *out = (PyObject *)dbp_buffer_download(v->is_device ? &v->dev : NULL, host, b->buf,
                                                  (size_t)b->len, (b->shape || b->ndim == 0) ? b->ndim : 1,
                                                  b->shape, b->strides, b->format, b->itemsize,
                                                  v->is_device ? v->desc.event : NULL);
  v->pins--;
  return out;
}

/* ---- module function ------------------------------------------------------------------ */

PyObject *dbp_view_func(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  if (nargs == 1 && kwnames == NULL) return (PyObject *)dbp_view_new(args[0], 0);
  static const char *const names[] = {"obj", "writable"};
  PyObject *obj = NULL;
  int writable = 0;
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "view() takes 1 positional argument, %zd given", nargs);
    return NULL;
  }
  if (nargs == 1) obj = args[0];
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *val = args[nargs + i];
    if (PyUnicode_CompareWithASCIIString(k, names[0]) == 0 && obj == NULL) {
      obj = val;
    } else if (PyUnicode_CompareWithASCIIString(k, names[1]) == 0) {
      writable = PyObject_IsTrue(val);
      if (writable < 0) return NULL;
    } else {
      PyErr_Format(PyExc_TypeError, "view() got an unexpected keyword argument '%U'", k);
      return NULL;
    }
  }
  if (obj == NULL) {
    PyErr_SetString(PyExc_TypeError, "view() missing required argument 'obj'");
    return NULL;
  }
  return (PyObject *)dbp_view_new(obj, writable ? PyBUF_WRITABLE : 0);
}

/* ---- the buffer protocol (re-export) --------------------------------------------- */

static int view_getbuffer_locked(DbpView *self, Py_buffer *out, int flags) {
  if (check_alive(self) < 0) return -1;
  const Py_buffer *b = &self->buf.view;
  if ((flags & PyBUF_WRITABLE) && b->readonly) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceView is read-only");
    return -1;
  }
#if DBP_CHECK_EXPORTS
  if (dbp_layout_check_view("devbuf.DeviceView export", b, -1, DBP_LAYOUT_BUFFER_ERROR) < 0)
    return -1;
#endif
  int device_export = self->is_device && (flags & PyBUF_DEVICE);
  if (self->is_device && !device_export) {
    if (dbp_view_resolve(self) < 0) return -1;
    if (!(self->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE)) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.DeviceView of %s memory that the host cannot read: request it with "
                   "the PyBUF_DEVICE flag (devbuf.view(obj) does), or copy it with .to_host()",
                   self->buf.device);
      return -1;
    }
    if (dbp_view_synchronize(self) < 0) return -1; /* the host is about to read */
  }
  /* As CPython's memoryview: without PyBUF_ND the export is flat bytes, and
   * a real format with ndim 1 and no shape would describe len items. */
  if (dbp_refuse_flat_format("devbuf.DeviceView", b->format, flags) < 0) return -1;
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && b->strides != NULL &&
      !PyBuffer_IsContiguous(b, 'C')) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceView is not C-contiguous");
    return -1;
  }
  if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !PyBuffer_IsContiguous(b, 'C')) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceView is not C-contiguous");
    return -1;
  }
  if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !PyBuffer_IsContiguous(b, 'F')) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceView is not Fortran-contiguous");
    return -1;
  }
  if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !PyBuffer_IsContiguous(b, 'A')) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceView is not contiguous");
    return -1;
  }
  DevbufPy_BufferCopyClassic(out, b); /* never the extended fields: see devbuf_buffer.h */
  out->obj = (PyObject *)self;
  Py_INCREF(self);
  if (dbp_ledger_add(&self->ledger, out) < 0) {
    out->obj = NULL;
    Py_DECREF(self);
    return -1;
  }
  if (!(flags & PyBUF_FORMAT)) out->format = NULL;
  if (!(flags & PyBUF_ND)) {
    out->ndim = 1;
    out->shape = NULL;
  }
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) out->strides = NULL;
  if (out->ndim == 0) out->shape = out->strides = NULL; /* 0-d: none, whatever the producer gave */
  if (device_export) DevbufPy_BufferSetDevice(out, flags, self->buf.device, self->buf.device_info);
  self->exports++;
  return 0;
}

static void view_releasebuffer_locked(DbpView *self, Py_buffer *view) {
  /* Only an export that is alive counts down (export_ledger.h). */
  if (dbp_ledger_remove(&self->ledger, view, (PyObject *)self, "devbuf.DeviceView"))
    self->exports--;
}
DBP_LOCKED_GETBUFFER(DbpView, view_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpView, view_releasebuffer)

static PyBufferProcs view_as_buffer = {
    .bf_getbuffer = (getbufferproc)view_getbuffer,
    .bf_releasebuffer = (releasebufferproc)view_releasebuffer,
};

/* ---- attributes --------------------------------------------------------------------- */

static PyObject *get_obj_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  /* The producer: the exporter of the held buffer, or the object an import
   * read (kept by its description; None when a C caller handed devbuf a
   * tensor without one, the exchange table's to_py_object). */
  PyObject *o = v->held != NULL ? v->held->source : v->buf.view.obj;
  return Py_NewRef(o ? o : Py_None);
}
static PyObject *get_imported_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  if (v->held == NULL) Py_RETURN_NONE; /* a buffer export: nothing was imported */
  return dbp_desc_import_info(v->held);
}
static PyObject *get_released_locked(DbpView *v, void *c) { return PyBool_FromLong(v->released); }
static PyObject *get_is_device_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyBool_FromLong(v->is_device);
}
static PyObject *get_identifier_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  if (!v->is_device) Py_RETURN_NONE;
  return PyUnicode_FromString(v->buf.device);
}
static PyObject *get_device_locked(DbpView *v, void *c) {
  if (v->device_obj == NULL) {
    if (dbp_view_resolve(v) < 0) return NULL;
    if (v->is_device) v->device_obj = (PyObject *)dbp_device_from_devbuf(&v->dev);
    else v->device_obj = Py_XNewRef((PyObject *)dbp_device_host());
    if (v->device_obj == NULL) return NULL;
  }
  return Py_NewRef(v->device_obj);
}
static PyObject *get_host_accessible_locked(DbpView *v, void *c) {
  if (dbp_view_resolve(v) < 0) return NULL;
  return PyBool_FromLong(!v->is_device || (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE));
}
static PyObject *get_ptr_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyLong_FromVoidPtr(v->buf.view.buf);
}
static PyObject *get_nbytes_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyLong_FromSsize_t(v->buf.view.len);
}
static PyObject *get_itemsize_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyLong_FromSsize_t(v->buf.view.itemsize);
}
static PyObject *get_ndim_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyLong_FromLong(v->buf.view.ndim);
}
static PyObject *get_readonly_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyBool_FromLong(v->buf.view.readonly);
}
static PyObject *get_format_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyUnicode_FromString(v->buf.view.format ? v->buf.view.format : "B");
}
static PyObject *get_shape_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  const Py_buffer *b = &v->buf.view;
  if (b->shape == NULL) {
    Py_ssize_t n = b->itemsize ? b->len / b->itemsize : b->len;
    return dbp_tuple_from_ssize(b->ndim == 0 ? 0 : 1, &n);
  }
  return dbp_tuple_from_ssize(b->ndim, b->shape);
}
static PyObject *get_strides_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  const Py_buffer *b = &v->buf.view;
  if (b->strides) return dbp_tuple_from_ssize(b->ndim, b->strides);
  if (b->shape == NULL) return dbp_tuple_from_ssize(b->ndim == 0 ? 0 : 1, &b->itemsize);
  Py_ssize_t st[PyBUF_MAX_NDIM];
  dbp_c_strides(b->ndim, b->shape, b->itemsize, st);
  return dbp_tuple_from_ssize(b->ndim, st);
}
static PyObject *get_c_contiguous_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  return PyBool_FromLong(PyBuffer_IsContiguous(&v->buf.view, 'C'));
}
static PyObject *get_device_info_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  if (!v->is_device || v->buf.device_info == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(v->buf.device_info);
}
static PyObject *get_sync_locked(DbpView *v, void *c) {
  if (dbp_view_resolve(v) < 0) return NULL;
  if (!v->is_device || (v->desc.event == NULL && v->desc.stream == NULL)) Py_RETURN_NONE;
  PyObject *s = PyStructSequence_New(g_sync_type);
  if (s == NULL) return NULL;
  PyObject *ev = v->desc.event ? PyLong_FromVoidPtr(v->desc.event) : Py_NewRef(Py_None);
  PyObject *st = v->desc.stream ? PyLong_FromVoidPtr(v->desc.stream) : Py_NewRef(Py_None);
  PyObject *id = PyUnicode_FromString(v->buf.device);
  if (ev == NULL || st == NULL || id == NULL) {
    Py_XDECREF(ev);
    Py_XDECREF(st);
    Py_XDECREF(id);
    Py_DECREF(s);
    return NULL;
  }
  PyStructSequence_SET_ITEM(s, 0, id);
  PyStructSequence_SET_ITEM(s, 1, ev);
  PyStructSequence_SET_ITEM(s, 2, st);
  return s;
}
static PyObject *get_dtype_locked(DbpView *v, void *c) {
  if (check_alive(v) < 0) return NULL;
  if (v->dtype_obj == NULL) {
    const char *f = v->buf.view.format ? v->buf.view.format : "B";
    v->dtype_obj = dbp_format_describe_sized(f, (Py_ssize_t)strlen(f), v->buf.view.itemsize);
    if (v->dtype_obj == NULL) return NULL;
  }
  return Py_NewRef(v->dtype_obj);
}

/* Every getter, method and slot runs with the view locked (dbp.h: DBP_LOCKED_*). */
DBP_LOCKED_GETTER(DbpView, get_obj)
DBP_LOCKED_GETTER(DbpView, get_imported)
DBP_LOCKED_GETTER(DbpView, get_released)
DBP_LOCKED_GETTER(DbpView, get_is_device)
DBP_LOCKED_GETTER(DbpView, get_identifier)
DBP_LOCKED_GETTER(DbpView, get_device)
DBP_LOCKED_GETTER(DbpView, get_host_accessible)
DBP_LOCKED_GETTER(DbpView, get_ptr)
DBP_LOCKED_GETTER(DbpView, get_nbytes)
DBP_LOCKED_GETTER(DbpView, get_itemsize)
DBP_LOCKED_GETTER(DbpView, get_ndim)
DBP_LOCKED_GETTER(DbpView, get_readonly)
DBP_LOCKED_GETTER(DbpView, get_format)
DBP_LOCKED_GETTER(DbpView, get_shape)
DBP_LOCKED_GETTER(DbpView, get_strides)
DBP_LOCKED_GETTER(DbpView, get_c_contiguous)
DBP_LOCKED_GETTER(DbpView, get_device_info)
DBP_LOCKED_GETTER(DbpView, get_sync)
DBP_LOCKED_GETTER(DbpView, get_dtype)

static PyGetSetDef view_getset[] = {
    {"obj", (getter)get_obj, NULL,
     "the producer, kept alive: the object devbuf.view() or devbuf.from_dlpack() was given, "
     "whatever protocol it was read through (None for a tensor a C caller handed over "
     "without an object)", NULL},
    {"imported", (getter)get_imported, NULL,
     "devbuf.ImportInfo(kind, dl_device, dl_dtype, dlpack_version, is_copied) of a view read "
     "through DLPack, the interfaces or Arrow; None for a buffer-protocol view", NULL},
    {"released", (getter)get_released, NULL, "True once the export was released", NULL},
    {"is_device", (getter)get_is_device, NULL,
     "True if the producer exported device memory (PyBUF_DEVICE and an identifier)", NULL},
    {"identifier", (getter)get_identifier, NULL,
     "the producer's device identifier, or None for host memory", NULL},
    {"device", (getter)get_device, NULL, "the devbuf.Device the memory is on", NULL},
    {"host_accessible", (getter)get_host_accessible, NULL,
     "True if the host may dereference ptr (after honouring .sync)", NULL},
    {"ptr", (getter)get_ptr, NULL, "the data pointer, as an int", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "Py_buffer.len", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "bytes per item", NULL},
    {"ndim", (getter)get_ndim, NULL, "number of dimensions", NULL},
    {"readonly", (getter)get_readonly, NULL, "True if the producer forbids writes", NULL},
    {"format", (getter)get_format, NULL, "the format string ('B' when the producer gave none)",
     NULL},
    {"shape", (getter)get_shape, NULL, "tuple of dimensions", NULL},
    {"strides", (getter)get_strides, NULL, "tuple of byte strides", NULL},
    {"c_contiguous", (getter)get_c_contiguous, NULL, "True if C-contiguous", NULL},
    {"device_info", (getter)get_device_info, NULL,
     "address of the producer's device_info (None for host memory)", NULL},
    {"sync", (getter)get_sync, NULL,
     "devbuf.Sync(identifier, event, stream) the consumer must honour before touching the "
     "data, or None when the data is ready", NULL},
    {"dtype", (getter)get_dtype, NULL, "the parsed format (devbuf.parse_format); also .format_info", NULL},
    {"format_info", (getter)get_dtype, NULL, "the parsed format (a devbuf.Format), as DeviceBuffer.format_info", NULL},
    {NULL},
};

static PyObject *view_release_m_locked(DbpView *v, PyObject *unused) {
  if (dbp_view_release(v) < 0) return NULL;
  Py_RETURN_NONE;
}
static PyObject *view_synchronize_m_locked(DbpView *v, PyObject *unused) {
  if (dbp_view_synchronize(v) < 0) return NULL;
  Py_RETURN_NONE;
}
static PyObject *view_to_host_m_locked(DbpView *v, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
  PyObject *out;
  if (nargs == 0 && kwnames == NULL) return dbp_view_to_host(v);
  if (dbp_parse_out_kw("to_host", args, nargs, kwnames, 0, NULL, &out) < 0) return NULL;
  if (out == NULL) return dbp_view_to_host(v);
  /* Into the caller's host memory (copy_into.c), after honouring .sync. */
  if (dbp_view_resolve(v) < 0) return NULL;
  const Py_buffer *b = &v->buf.view;
  Py_ssize_t flat[1], st[PyBUF_MAX_NDIM];
  int ndim = b->ndim;
  const Py_ssize_t *shape = b->shape, *strides = b->strides;
  if (shape == NULL && ndim != 0) {
    ndim = 1;
    flat[0] = b->itemsize ? b->len / b->itemsize : b->len;
    shape = flat;
    strides = NULL;
  }
  if (strides == NULL && ndim > 0) strides = (dbp_c_strides(ndim, shape, b->itemsize, st), st);
  dbp_copy_src s = {v->is_device ? &v->dev : NULL,
                    !v->is_device || (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE),
                    b->buf, (size_t)b->len, ndim, shape, strides, b->itemsize,
                    b->format ? b->format : "B", v->is_device ? v->desc.event : NULL};
  v->pins++;
  PyObject *r = dbp_copy_into(&s, out, NULL, 0, "devbuf.DeviceView.to_host(out=...)");
  v->pins--;
  return r;
}
static PyObject *view_enter_locked(DbpView *v, PyObject *unused) {
  if (check_alive(v) < 0) return NULL;
  return Py_NewRef(v);
}
DBP_LOCKED_METH(DbpView, view_release_m)
DBP_LOCKED_METH(DbpView, view_synchronize_m)
DBP_LOCKED_FASTMETH(DbpView, view_to_host_m)
DBP_LOCKED_METH(DbpView, view_enter)
static PyObject *view_exit(PyObject *v, PyObject *args) { return view_release_m(v, NULL); }

static PyMethodDef view_methods[] = {
    {"release", (PyCFunction)view_release_m, METH_NOARGS,
     "release($self, /)\n--\n\n"
     "Release the producer's export now (once; later calls do nothing)."},
    {"synchronize", (PyCFunction)view_synchronize_m, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Block until the producer's event (see .sync) has completed."},
    {"to_host", (PyCFunction)(void (*)(void))view_to_host_m, METH_FASTCALL | METH_KEYWORDS,
     "to_host($self, /, *, out=None)\n--\n\n"
     "to_host(*, out=None) -> DeviceBuffer on the host, C-contiguous, after honouring .sync; "
     "with out (a writable host buffer of the same size, C order, same shape and item type or "
     "flat bytes): copies into it and returns it."},
    {"__array__", (PyCFunction)(void (*)(void))dbp_array_via_memoryview,
     METH_VARARGS | METH_KEYWORDS, "__array__($self, /, dtype=None, copy=None)\n--\n\n"
     "NumPy conversion of host memory; BufferError for device memory."},
    {"__enter__", (PyCFunction)view_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nReturn self (the with statement)."},
    {"__exit__", (PyCFunction)view_exit, METH_VARARGS, "__exit__($self, exc_type, exc, tb, /)\n--\n\nLeave the with block: release() the view."},
    {NULL},
};

/* ---- lifecycle ------------------------------------------------------------------------ */

static int view_traverse(DbpView *v, visitproc visit, void *arg) {
  if (!v->released) Py_VISIT(v->buf.view.obj);
  if (!v->released && v->held != NULL) Py_VISIT(v->held->source);
  Py_VISIT(v->device_obj);
  Py_VISIT(v->dtype_obj);
  return 0;
}

static int view_clear(DbpView *v) {
  /* Breaking a cycle: nothing can hold an export of us (exports keep us
   * alive), so the release goes through. */
  if (!v->released) {
    v->exports = 0;
    dbp_ledger_forget_all(&v->ledger);
    v->pins = 0;
    dbp_view_release(v);
  }
  Py_CLEAR(v->device_obj);
  Py_CLEAR(v->dtype_obj);
  return 0;
}

static void view_dealloc(DbpView *v) {
  PyObject_GC_UnTrack(v);
  if (v->weakreflist) PyObject_ClearWeakRefs((PyObject *)v);
  if (!v->released) {
    v->released = 1;
    view_drop(v);
  }
  Py_CLEAR(v->device_obj);
  Py_CLEAR(v->dtype_obj);
  dbp_ledger_free(&v->ledger);
  if (Py_TYPE(v) != &DbpView_Type || !dbp_freelist_push(&g_view_free, v)) PyObject_GC_Del(v);
}

static PyObject *view_repr_locked(DbpView *v) {
  if (v->released) return PyUnicode_FromString("<devbuf.DeviceView released>");
  PyObject *shape = get_shape_locked(v, NULL);
  if (shape == NULL) return NULL;
  PyObject *r = PyUnicode_FromFormat("<devbuf.DeviceView %s shape=%R format='%s'%s>",
                                     v->is_device ? v->buf.device : "host", shape,
                                     v->buf.view.format ? v->buf.view.format : "B",
                                     v->buf.view.readonly ? " readonly" : "");
  Py_DECREF(shape);
  return r;
}
static PyObject *view_repr(PyObject *v) {
  DBP_RETURN_LOCKED(PyObject *, v, view_repr_locked((DbpView *)v));
}

static PyObject *view_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"obj", "writable", NULL};
  PyObject *obj;
  int writable = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:DeviceView", kwlist, &obj, &writable))
    return NULL;
  return (PyObject *)dbp_view_new(obj, writable ? PyBUF_WRITABLE : 0);
}

PyTypeObject DbpView_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.DeviceView",
    .tp_basicsize = sizeof(DbpView),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_repr = (reprfunc)view_repr,
    .tp_as_buffer = &view_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "DeviceView(obj, *, writable=False)\n--\n\nA view of any buffer exporter, device memory "
              "included. Keeps obj alive; releases its export once (release(), with-block, or "
              "garbage collection).",
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_weaklistoffset = offsetof(DbpView, weakreflist),
    .tp_methods = view_methods,
    .tp_getset = view_getset,
    .tp_new = view_new,
};

static PyStructSequence_Field sync_fields[] = {
    {"identifier", "the device identifier whose specification defines event and stream"},
    {"event", "the producer event to wait on (int handle), or None"},
    {"stream", "the producer stream the data was written on (int handle), or None"},
    {NULL},
};
static PyStructSequence_Desc sync_desc = {
    "devbuf.Sync", "What a consumer must honour before touching a device buffer.", sync_fields, 3};

int dbp_view_init(PyObject *module) {
  if (PyType_Ready(&DbpView_Type) < 0) return -1;
  if (DevbufPy_SetBufferSupportedFlags(&DbpView_Type, DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  if (PyModule_AddObjectRef(module, "DeviceView", (PyObject *)&DbpView_Type) < 0) return -1;
  if (dbp_desc_init(module) < 0) return -1; /* devbuf.ImportInfo */
  g_sync_type = PyStructSequence_NewType(&sync_desc);
  if (g_sync_type == NULL) return -1;
  return PyModule_AddObjectRef(module, "Sync", (PyObject *)g_sync_type);
}
