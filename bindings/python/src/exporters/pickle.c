/* pickle.c: the C half of pickling DeviceBuffer and DeviceView (PEP 574,
 * pickle protocol 5 with out-of-band buffers). The policy (what goes out
 * in-band or out-of-band, where a buffer lands when unpickled) lives in
 * devbuf/_pickle.py; this file does only what needs C:
 *
 *  - __reduce_ex__ on both types, forwarding to devbuf._pickle._reduce;
 *  - _pickle_download(obj, as_bytes): the ONE device->host copy of device
 *    memory, into host staging memory from the device's own plugin
 *    (devbuf_host_alloc: pinned where the plugin can) wrapped in a
 *    devbuf.HostStaging object that exports it as a plain buffer, or into a
 *    new bytes object for the in-band protocols;
 *  - _pickle_rebuild(device, payload, ...): a DeviceBuffer from a payload
 *    buffer: on "cpu" it BORROWS the payload's memory (no copy: an
 *    in-process round trip with buffers= shares memory, as the PEP allows),
 *    elsewhere one host->device copy straight from the payload;
 *  - counters of the copies made here (_pickle_stats), so tests can prove
 *    "exactly once".
 *
 * Sync: a download waits on the producer's event (devbuf_copy_to_host_sync
 * honours it); a rebuild's upload is synchronous, so the unpickled buffer
 * is ready when loads returns. Objects are pinned while the GIL is
 * released, as everywhere in the bindings. */
#include "exporters/exporters.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Copies made by this file; updated with the GIL held. */
static unsigned long long g_d2h_copies, g_d2h_bytes; /* device -> host (downloads) */
static unsigned long long g_h2d_copies, g_h2d_bytes; /* host -> device (rebuilds) */
static unsigned long long g_host_copies, g_host_bytes; /* host -> host (in-band, read-only payloads) */
static unsigned long long g_borrowed;                 /* rebuilds that borrowed the payload */

/* ---- devbuf.HostStaging: host memory of a device's plugin, as a buffer ---------- */

typedef struct DbpStaging {
  PyObject_HEAD
  DbpDevice *device;   /* strong reference; `ptr` came from devbuf_host_alloc on it */
  void *ptr;           /* NULL when len is 0 */
  Py_ssize_t len;
  size_t cap;          /* bytes allocated at ptr (>= len when reused from the cache) */
  int readonly;
  Py_ssize_t exports;
} DbpStaging;

static PyTypeObject DbpStaging_Type;

/* ---- the staging cache (opt-in) ------------------------------------------------------
 * Fresh host memory costs page faults on first touch, which for large
 * payloads cost more than the copy itself; with CUDA, pinned allocations
 * cost more still. With DEVBUF_PICKLE_STAGING_CACHE_MB=N (or
 * _pickle_staging_cache(bytes)), the most recently freed staging block of
 * up to N MiB is kept and reused by the next download from the same device
 * that fits it (at least half used). Off by default: it keeps host memory
 * after the pickle is gone. All of it runs with the GIL held. */
static struct {
  DbpDevice *device;   /* strong reference while `ptr` is held */
  void *ptr;
  size_t cap;
} g_cache;
static size_t g_cache_limit; /* bytes; 0: off */
/* Guards g_cache, g_cache_limit and every counter of this file (dbp.h). */
static dbp_mutex g_pk_lock;
static unsigned long long g_cache_hits;
#define CACHE_MIN_BYTES ((size_t)1 << 20)

static void free_staging_memory(DbpDevice *device, void *p, PyObject *owner) {
  devbuf_error err;
  int rc;
  const devbuf_device *dev = &device->dev;
  devbuf_error_clear(&err);
  DBP_NOGIL(rc = devbuf_host_free(dev, p, &err));
  if (rc != DEVBUF_OK) {
    /* Called from destructors: report, as CPython does, never raise. */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    dbp_raise(&err);
    PyErr_WriteUnraisable(owner ? owner : Py_None);
    PyErr_Restore(t, v, tb);
  }
}

static void cache_drop(void) {
  void *p = g_cache.ptr;
  DbpDevice *d = g_cache.device;
  g_cache.ptr = NULL;
  g_cache.device = NULL;
  g_cache.cap = 0;
  if (p != NULL) free_staging_memory(d, p, NULL);
  Py_XDECREF(d);
}

static int same_device(const DbpDevice *a, const devbuf_device *b) {
  return a->dev.backend == b->backend && a->dev.ordinal == b->ordinal;
}

/* A cached block for n bytes on dev, or NULL. */
static void *cache_take_locked(const devbuf_device *dev, size_t n, size_t *cap) {
  if (g_cache.ptr == NULL || !same_device(g_cache.device, dev) || g_cache.cap < n ||
      g_cache.cap / 2 > n)
    return NULL;
  void *p = g_cache.ptr;
  *cap = g_cache.cap;
  g_cache.ptr = NULL;
  g_cache.cap = 0;
  Py_CLEAR(g_cache.device);
  g_cache_hits++;
  return p;
}

/* Keep p for reuse if the cache takes it; 1 when kept. */
static void *cache_take(const devbuf_device *dev, size_t n, size_t *cap) {
  DBP_MUTEX_LOCK(&g_pk_lock);
  void *p = cache_take_locked(dev, n, cap);
  DBP_MUTEX_UNLOCK(&g_pk_lock);
  return p;
}

static int cache_put_locked(DbpDevice *d, void *p, size_t cap) {
  if (g_cache_limit == 0 || cap < CACHE_MIN_BYTES || cap > g_cache_limit) return 0;
  cache_drop();
  g_cache.device = (DbpDevice *)Py_NewRef(d);
  g_cache.ptr = p;
  g_cache.cap = cap;
  return 1;
}

static int cache_put(DbpDevice *d, void *p, size_t cap) {
  DBP_MUTEX_LOCK(&g_pk_lock);
  int kept = cache_put_locked(d, p, cap);
  DBP_MUTEX_UNLOCK(&g_pk_lock);
  return kept;
}

static int staging_getbuffer_locked(DbpStaging *self, Py_buffer *view, int flags) {
  static char empty[1];
  if (PyBuffer_FillInfo(view, (PyObject *)self, self->ptr ? self->ptr : empty, self->len,
                        self->readonly, flags) < 0)
    return -1;
  self->exports++;
  return 0;
}

static void staging_releasebuffer_locked(DbpStaging *self, Py_buffer *view) { self->exports--; }
DBP_LOCKED_GETBUFFER(DbpStaging, staging_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpStaging, staging_releasebuffer)

static PyBufferProcs staging_as_buffer = {
    .bf_getbuffer = (getbufferproc)staging_getbuffer,
    .bf_releasebuffer = (releasebufferproc)staging_releasebuffer,
};

static void staging_dealloc(DbpStaging *self) {
  void *p = self->ptr;
  self->ptr = NULL;
  if (p != NULL && !cache_put(self->device, p, self->cap))
    free_staging_memory(self->device, p, (PyObject *)self);
  Py_XDECREF(self->device);
  PyObject_Free(self);
}

static PyObject *staging_get_ptr(DbpStaging *self, void *c) {
  return PyLong_FromVoidPtr(self->ptr);
}
static PyObject *staging_get_nbytes(DbpStaging *self, void *c) {
  return PyLong_FromSsize_t(self->len);
}
static PyObject *staging_get_device(DbpStaging *self, void *c) {
  return Py_NewRef(self->device);
}
static PyObject *staging_get_readonly(DbpStaging *self, void *c) {
  return PyBool_FromLong(self->readonly);
}

static PyGetSetDef staging_getset[] = {
    {"ptr", (getter)staging_get_ptr, NULL, "address of the host memory", NULL},
    {"nbytes", (getter)staging_get_nbytes, NULL, "size in bytes", NULL},
    {"device", (getter)staging_get_device, NULL,
     "the Device whose plugin allocated the memory (devbuf_host_alloc)", NULL},
    {"readonly", (getter)staging_get_readonly, NULL, "True if exports refuse writing", NULL},
    {NULL},
};

static PyObject *staging_repr(DbpStaging *self) {
  return PyUnicode_FromFormat("<devbuf.HostStaging %zd bytes from %U>", self->len,
                              self->device->spec);
}

static void advise_huge_pages(void *p, size_t n);

/* HostStaging(device, nbytes): writable staging memory from the device's
 * plugin (pinned where the plugin pins), for to_host(out=...) and
 * copy_to(out=...) to copy into again and again. */
static PyObject *staging_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"device", "nbytes", NULL};
  PyObject *dev_arg;
  Py_ssize_t n;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On:HostStaging", kwlist, &dev_arg, &n))
    return NULL;
  if (n < 0) {
    PyErr_Format(PyExc_ValueError, "HostStaging: nbytes must be >= 0, not %zd", n);
    return NULL;
  }
  DbpDevice *d = dbp_device_get(dev_arg);
  if (d == NULL) return NULL;
  if (d->dev.backend == NULL) {
    PyErr_SetString(PyExc_ValueError, "HostStaging: the built-in host device has no plugin to "
                                      "allocate from; name a plugin's device");
    Py_DECREF(d);
    return NULL;
  }
  DbpStaging *st = PyObject_New(DbpStaging, &DbpStaging_Type);
  if (st == NULL) {
    Py_DECREF(d);
    return NULL;
  }
  st->device = d;
  st->ptr = NULL;
  st->len = n;
  st->cap = (size_t)n;
  st->readonly = 0;
  st->exports = 0;
  if (n > 0) {
    devbuf_error err;
    int rc;
    void *p = NULL;
    size_t sz = (size_t)n;
    const devbuf_device *dev = &d->dev;
    devbuf_error_clear(&err);
    DBP_NOGIL(rc = devbuf_host_alloc(dev, sz, &p, &err));
    if (rc != DEVBUF_OK) {
      Py_DECREF(st);
      return dbp_raise(&err);
    }
    advise_huge_pages(p, sz);
    st->ptr = p;
  }
  return (PyObject *)st;
}

static PyTypeObject DbpStaging_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.HostStaging",
    .tp_basicsize = sizeof(DbpStaging),
    .tp_dealloc = (destructor)staging_dealloc,
    .tp_repr = (reprfunc)staging_repr,
    .tp_as_buffer = &staging_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HostStaging(device, nbytes): host staging memory that a device's plugin allocated "
              "(devbuf_host_alloc, pinned where the plugin pins), holding the one device-to-host "
              "copy a pickle makes, or made by hand as a reusable destination for "
              "to_host(out=...). Exports the plain buffer protocol (bytes, format 'B'); the "
              "memory goes back to the plugin when the object dies.",
    .tp_getset = staging_getset,
    .tp_new = staging_new,
};

/* ---- downloads --------------------------------------------------------------- */

/* What a download needs to know of its source. */
typedef struct {
  const devbuf_device *dev; /* NULL: memory the host owns outright */
  DbpDevice *device;        /* borrowed: owner of staging memory; NULL for host memory */
  int host;                 /* the host may read `ptr` once `event` has completed */
  const void *ptr;
  size_t nbytes;
  void *event;
  int readonly;
} pk_source;

/* One copy of src into dst. GIL released by the caller; source pinned. */
static int copy_out(const pk_source *s, void *dst, devbuf_error *err) {
  int rc = DEVBUF_OK;
  if (s->nbytes == 0) return DEVBUF_OK;
  if (s->host || s->dev == NULL || s->dev->backend == NULL) {
    if (s->event && s->dev && s->dev->backend) rc = devbuf_event_synchronize(s->dev, s->event, err);
    if (rc == DEVBUF_OK) memcpy(dst, s->ptr, s->nbytes);
    return rc;
  }
  return devbuf_copy_to_host_sync(s->dev, dst, s->ptr, 0, s->nbytes, s->event, err);
}

/* Ask for transparent huge pages on large staging memory before the copy
 * first touches it, as NumPy does for its large arrays: with 4 KiB pages the
 * page faults of a fresh destination cost more than the copy itself. A
 * hint only: errors are ignored, and memory already populated (pinned
 * memory, say) is left as it is. */
static void advise_huge_pages(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
  const size_t huge = (size_t)2 << 20;
  long pg = sysconf(_SC_PAGESIZE);
  if (n < 2 * huge || pg <= 0) return;
  uintptr_t page = (uintptr_t)pg;
  uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t e = ((uintptr_t)p + n) & ~(page - 1);
  if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

/* Allocate the destination (bytes, bytearray or staging) and copy once.
 * `pins` is the source's pin counter. */
static PyObject *download(const pk_source *s, int as_bytes, Py_ssize_t *pins) {
  PyObject *out;
  void *dst;
  int device_copy = !s->host && s->dev && s->dev->backend;
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  if ((size_t)PY_SSIZE_T_MAX < s->nbytes) {
    PyErr_SetString(PyExc_OverflowError, "buffer too large to pickle");
    return NULL;
  }
  if (as_bytes) {
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)s->nbytes);
    if (out == NULL) return NULL;
    dst = PyBytes_AS_STRING(out);
  } else if (!device_copy) {
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)s->nbytes);
    if (out == NULL) return NULL;
    dst = PyByteArray_AS_STRING(out);
  } else {
    DbpStaging *st = PyObject_New(DbpStaging, &DbpStaging_Type);
    if (st == NULL) return NULL;
    st->device = (DbpDevice *)Py_NewRef(s->device);
    st->ptr = NULL;
    st->len = (Py_ssize_t)s->nbytes;
    st->cap = s->nbytes;
    st->readonly = s->readonly;
    st->exports = 0;
    if (s->nbytes) {
      size_t n = s->nbytes;
      void *p = cache_take(s->dev, n, &st->cap);
      if (p == NULL) {
        const devbuf_device *dev = s->dev;
        DBP_NOGIL(rc = devbuf_host_alloc(dev, n, &p, &err));
        if (rc != DEVBUF_OK) {
          Py_DECREF(st);
          return dbp_raise(&err);
        }
        advise_huge_pages(p, n);
      }
      st->ptr = p;
    }
    out = (PyObject *)st;
    dst = st->ptr;
  }
  (*pins)++;
  DBP_NOGIL(rc = copy_out(s, dst, &err));
  (*pins)--;
  if (rc != DEVBUF_OK) {
    Py_DECREF(out);
    return dbp_raise(&err);
  }
  if (s->nbytes) {
    DBP_MUTEX_LOCK(&g_pk_lock);
    if (device_copy) {
      g_d2h_copies++;
      g_d2h_bytes += s->nbytes;
    } else {
      g_host_copies++;
      g_host_bytes += s->nbytes;
    }
    DBP_MUTEX_UNLOCK(&g_pk_lock);
  }
  return out;
}

/* _pickle_download(obj, as_bytes=False): the contents of a DeviceBuffer or
 * DeviceView, in C order, copied once. Device memory lands in a
 * HostStaging (or bytes when as_bytes); host memory in a bytearray (or
 * bytes). A non-C-contiguous view is gathered by DeviceView.to_host() (one
 * copy from the device plus the host gather). */
static PyObject *pk_download_locked(PyObject *obj, int as_bytes);

static PyObject *pk_download(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "_pickle_download(obj, as_bytes=False)");
    return NULL;
  }
  int as_bytes = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
  if (as_bytes < 0) return NULL;
  /* The object's state (freed, event, pins; a view's release) is read and
   * pinned as one step: locked, as every DeviceBuffer/DeviceView entry. */
  DBP_RETURN_LOCKED(PyObject *, args[0], pk_download_locked(args[0], as_bytes));
}

static PyObject *pk_download_locked(PyObject *obj, int as_bytes) {
  pk_source s;
  memset(&s, 0, sizeof s);
  if (Py_IS_TYPE(obj, &DbpBuffer_Type)) {
    DbpBuffer *b = (DbpBuffer *)obj;
    if (b->freed) {
      PyErr_SetString(PyExc_ValueError, "cannot pickle a freed devbuf.DeviceBuffer");
      return NULL;
    }
    s.dev = &b->device->dev;
    s.device = b->device;
    s.host = b->host_readable;
    s.ptr = b->ptr;
    s.nbytes = b->nbytes;
    s.event = b->event;
    s.readonly = b->readonly;
    return download(&s, as_bytes, &b->pins);
  }
  if (Py_IS_TYPE(obj, &DbpView_Type)) {
    DbpView *v = (DbpView *)obj;
    if (dbp_view_resolve(v) < 0) return NULL; /* raises on a released view */
    const Py_buffer *pb = &v->buf.view;
    if (!PyBuffer_IsContiguous(pb, 'C')) {
      PyObject *host = dbp_view_to_host(v);
      if (host == NULL || !as_bytes) return host;
      PyObject *r = PyBytes_FromStringAndSize(((DbpBuffer *)host)->ptr,
                                              (Py_ssize_t)((DbpBuffer *)host)->nbytes);
      Py_DECREF(host);
      return r;
    }
    PyObject *devobj = NULL;
    if (v->is_device) {
      devobj = (PyObject *)dbp_device_from_devbuf(&v->dev);
      if (devobj == NULL) return NULL;
      s.dev = &v->dev;
      s.device = (DbpDevice *)devobj;
      s.event = v->desc.event;
      s.host = (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE) != 0;
    } else {
      s.host = 1;
    }
    s.ptr = pb->buf;
    s.nbytes = (size_t)pb->len;
    s.readonly = pb->readonly;
    PyObject *r = download(&s, as_bytes, &v->pins);
    Py_XDECREF(devobj);
    return r;
  }
  PyErr_Format(PyExc_TypeError, "_pickle_download: expected a DeviceBuffer or DeviceView, not %.100s",
               Py_TYPE(obj)->tp_name);
  return NULL;
}

/* ---- rebuilds ---------------------------------------------------------------- */

/* A DeviceBuffer over memory it does not own: the payload's, held through
 * the memoryview `mv` (its export keeps the lender alive and unresizable).
 * Host device only. Steals nothing. */
static DbpBuffer *borrowed_new(DbpDevice *device, int ndim, const Py_ssize_t *shape,
                               const char *format, Py_ssize_t itemsize, int readonly,
                               PyObject *mv) {
  DbpBuffer *self = PyObject_New(DbpBuffer, &DbpBuffer_Type);
  if (self == NULL) return NULL;
  /* As dbp_buffer_new: everything after the header zeroed, so a failure
   * part-way deallocates safely (freed = 1: nothing to give back). */
  memset((char *)self + sizeof(PyObject), 0, sizeof(DbpBuffer) - sizeof(PyObject));
  self->device = (DbpDevice *)Py_NewRef(device);
  self->freed = 1;
  self->ndim = ndim;
  self->itemsize = itemsize;
  self->readonly = readonly;
  self->kind = DBP_MEM_BORROWED;
  self->host_readable = 1;
  if (ndim > 0) {
    self->shape = PyMem_Malloc(2 * (size_t)ndim * sizeof(Py_ssize_t));
    if (self->shape == NULL) {
      Py_DECREF(self);
      return (DbpBuffer *)PyErr_NoMemory();
    }
    self->strides = self->shape + ndim;
    memcpy(self->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
    dbp_c_strides(ndim, shape, itemsize, self->strides);
  }
  size_t flen = strlen(format);
  self->format = PyMem_Malloc(flen + 1);
  if (self->format == NULL) {
    Py_DECREF(self);
    return (DbpBuffer *)PyErr_NoMemory();
  }
  memcpy(self->format, format, flen + 1);
  const Py_buffer *vb = PyMemoryView_GET_BUFFER(mv);
  self->nbytes = (size_t)vb->len;
  self->ptr = vb->buf;
  self->base = Py_NewRef(mv);
  self->freed = 0;
  dbp_buffer_prepare_exports(self);
  return self;
}

/* _pickle_rebuild(device, payload, shape, format, itemsize, readonly,
 * borrow=True) -> DeviceBuffer. `payload` is any C-contiguous buffer of
 * exactly prod(shape) * itemsize bytes. On the host device the buffer
 * borrows the payload when it may (borrow true, and the payload writable
 * unless the buffer is read-only), else it copies once. `itemsize` comes
 * from the pickle, so a format whose custom dtype this process does not
 * know still round-trips verbatim. */
static PyObject *pk_rebuild(PyObject *mod, PyObject *args) {
  PyObject *device_arg, *payload, *shape_arg;
  const char *format;
  Py_ssize_t itemsize;
  int readonly, borrow = 1;
  if (!PyArg_ParseTuple(args, "OOOsnp|p:_pickle_rebuild", &device_arg, &payload, &shape_arg,
                        &format, &itemsize, &readonly, &borrow))
    return NULL;
  Py_ssize_t shape[PyBUF_MAX_NDIM];
  PyObject *seq = PySequence_Fast(shape_arg, "shape must be a sequence of ints");
  if (seq == NULL) return NULL;
  Py_ssize_t nd = PySequence_Fast_GET_SIZE(seq);
  if (nd > PyBUF_MAX_NDIM) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "shape has %zd dimensions; at most %d", nd, PyBUF_MAX_NDIM);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nd; i++) {
    shape[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
    if (shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return NULL;
    }
    if (shape[i] < 0) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "shape[%zd] is negative (%zd)", i, shape[i]);
      return NULL;
    }
  }
  Py_DECREF(seq);
  int ndim = (int)nd;
  if (itemsize <= 0) {
    PyErr_Format(PyExc_ValueError, "item size %zd in the pickle; need at least 1", itemsize);
    return NULL;
  }
  Py_ssize_t items = dbp_c_strides(ndim, shape, itemsize, NULL);
  if (items < 0 || (items && itemsize > PY_SSIZE_T_MAX / items)) {
    PyErr_SetString(PyExc_OverflowError, "pickled buffer size does not fit in Py_ssize_t");
    return NULL;
  }
  Py_ssize_t nbytes = items * itemsize;
  /* The metadata comes from a frame that may be damaged: format and item
   * size must agree, and no object or pointer items (the layout invariant). */
  if (dbp_layout_check("pickled devbuf.DeviceBuffer", format, itemsize, ndim, shape, NULL, nbytes,
                       nbytes, DBP_LAYOUT_OWN) < 0)
    return NULL;

  PyObject *mv = PyMemoryView_FromObject(payload);
  if (mv == NULL) return NULL;
  const Py_buffer *vb = PyMemoryView_GET_BUFFER(mv);
  if (!PyBuffer_IsContiguous(vb, 'C')) {
    Py_DECREF(mv);
    PyErr_SetString(PyExc_ValueError, "the pickled payload is not C-contiguous");
    return NULL;
  }
  if (vb->len != nbytes) {
    /* Read the length before the memoryview goes: vb points into it. */
    Py_ssize_t got = vb->len;
    Py_DECREF(mv);
    PyErr_Format(PyExc_ValueError,
                 "the pickled payload has %zd bytes; shape and item size say %zd", got, nbytes);
    return NULL;
  }
  DbpDevice *d = dbp_device_get(device_arg);
  if (d == NULL) {
    Py_DECREF(mv);
    return NULL;
  }
  DbpBuffer *out = NULL;
  if (d->is_host && borrow && (readonly || !vb->readonly)) {
    out = borrowed_new(d, ndim, shape, format, itemsize, readonly, mv);
    if (out) {
      DBP_MUTEX_LOCK(&g_pk_lock);
      g_borrowed++;
      DBP_MUTEX_UNLOCK(&g_pk_lock);
    }
  } else {
    out = dbp_buffer_new(d, ndim, shape, format, itemsize, readonly);
    if (out != NULL && nbytes > 0) {
      devbuf_error err;
      int rc = DEVBUF_OK;
      void *dst = out->ptr, *src = vb->buf;
      size_t n = (size_t)nbytes;
      devbuf_error_clear(&err);
      if (out->kind == DBP_MEM_HOST || d->is_host) {
        DBP_NOGIL(memcpy(dst, src, n));
        DBP_MUTEX_LOCK(&g_pk_lock);
        g_host_copies++;
        g_host_bytes += n;
        DBP_MUTEX_UNLOCK(&g_pk_lock);
      } else {
        const devbuf_device *dev = &d->dev;
        out->pins++;
        DBP_NOGIL(rc = devbuf_copy_from_host_sync(dev, dst, 0, src, n, &err));
        out->pins--;
        if (rc != DEVBUF_OK) {
          Py_CLEAR(out);
          dbp_raise(&err);
        } else {
          DBP_MUTEX_LOCK(&g_pk_lock);
          g_h2d_copies++;
          g_h2d_bytes += n;
          DBP_MUTEX_UNLOCK(&g_pk_lock);
        }
      }
    }
  }
  Py_DECREF(d);
  Py_DECREF(mv);
  return (PyObject *)out;
}

/* _pickle_device_usable(device) -> bool: False once the plugin behind a
 * (cached) Device was unregistered, so that loads applies the unpickle
 * policy instead of failing later in an allocation. */
static PyObject *pk_device_usable(PyObject *mod, PyObject *arg) {
  if (!Py_IS_TYPE(arg, &DbpDevice_Type)) {
    PyErr_Format(PyExc_TypeError, "expected a devbuf.Device, not %.100s", Py_TYPE(arg)->tp_name);
    return NULL;
  }
  DbpDevice *d = (DbpDevice *)arg;
  if (d->dev.backend == NULL) Py_RETURN_TRUE; /* the built-in host device */
  devbuf_plugin_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (devbuf_plugin_info_get(d->plugin_index, &info, NULL) != DEVBUF_OK) Py_RETURN_FALSE;
  return PyBool_FromLong(info.state == DEVBUF_PLUGIN_LOADED);
}

/* ---- statistics --------------------------------------------------------------- */

static PyObject *pk_stats(PyObject *mod, PyObject *unused) {
  PyObject *r;
  DBP_MUTEX_LOCK(&g_pk_lock);
  r = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "d2h_copies", g_d2h_copies,
                       "d2h_bytes", g_d2h_bytes, "h2d_copies", g_h2d_copies, "h2d_bytes",
                       g_h2d_bytes, "host_copies", g_host_copies, "host_bytes", g_host_bytes,
                       "borrowed", g_borrowed, "staging_cache_hits", g_cache_hits,
                       "staging_cached_bytes", (unsigned long long)g_cache.cap);
  DBP_MUTEX_UNLOCK(&g_pk_lock);
  return r;
}

static PyObject *pk_stats_reset(PyObject *mod, PyObject *unused) {
  DBP_MUTEX_LOCK(&g_pk_lock);
  g_d2h_copies = g_d2h_bytes = g_h2d_copies = g_h2d_bytes = 0;
  g_host_copies = g_host_bytes = g_borrowed = g_cache_hits = 0;
  DBP_MUTEX_UNLOCK(&g_pk_lock);
  Py_RETURN_NONE;
}

/* _pickle_staging_cache(limit=None) -> the limit in bytes before the call.
 * With an int, set it (0 turns the cache off and frees what it holds). */
static PyObject *pk_staging_cache(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  size_t old;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "_pickle_staging_cache(limit_bytes=None)");
    return NULL;
  }
  if (nargs == 1 && args[0] != Py_None) {
    size_t v = PyLong_AsSize_t(args[0]);
    if (v == (size_t)-1 && PyErr_Occurred()) return NULL;
    DBP_MUTEX_LOCK(&g_pk_lock);
    old = g_cache_limit;
    g_cache_limit = v;
    if (g_cache.ptr != NULL && g_cache.cap > v) cache_drop();
    DBP_MUTEX_UNLOCK(&g_pk_lock);
    return PyLong_FromSize_t(old);
  }
  DBP_MUTEX_LOCK(&g_pk_lock);
  old = g_cache_limit;
  DBP_MUTEX_UNLOCK(&g_pk_lock);
  return PyLong_FromSize_t(old);
}

/* ---- __reduce_ex__ -------------------------------------------------------------- */

/* This interpreter's devbuf._pickle._reduce, imported on first use. */
#define DBP_REDUCE_KEY "devbuf.pickle_reduce"

static PyObject *pk_reduce_ex(PyObject *self, PyObject *protocol) {
  PyObject *reduce = dbp_interp_get(DBP_REDUCE_KEY);
  if (reduce == NULL) {
    if (PyErr_Occurred()) return NULL;
    PyObject *m = PyImport_ImportModule("devbuf._pickle");
    if (m == NULL) return NULL;
    PyObject *fn = PyObject_GetAttrString(m, "_reduce");
    Py_DECREF(m);
    if (fn == NULL) return NULL;
    int rc = dbp_interp_set(DBP_REDUCE_KEY, fn);
    Py_DECREF(fn);
    if (rc < 0) return NULL;
    reduce = dbp_interp_get(DBP_REDUCE_KEY);
    if (reduce == NULL) return NULL;
  }
  return PyObject_CallFunctionObjArgs(reduce, self, protocol, NULL);
}

static PyMethodDef reduce_method = {
    "__reduce_ex__", (PyCFunction)pk_reduce_ex, METH_O,
    "Pickle support (PEP 574). Protocol 5: host-readable memory goes out as a PickleBuffer of "
    "the memory itself, device memory as one copy in host staging memory; protocols 0-4: "
    "in-band bytes. See docs/pickle-and-distributed.md."};

static PyMethodDef pickle_functions[] = {
    {"_pickle_download", (PyCFunction)(void (*)(void))pk_download, METH_FASTCALL,
     "_pickle_download(obj, as_bytes=False): the contents, copied once (pickle support)."},
    {"_pickle_rebuild", pk_rebuild, METH_VARARGS,
     "_pickle_rebuild(device, payload, shape, format, itemsize, readonly, borrow=True) -> "
     "DeviceBuffer (pickle support)."},
    {"_pickle_device_usable", pk_device_usable, METH_O,
     "_pickle_device_usable(device) -> False once its plugin was unregistered."},
    {"_pickle_stats", pk_stats, METH_NOARGS,
     "Copies made by pickling in this process: d2h (device to host), h2d, host, borrowed."},
    {"_pickle_stats_reset", pk_stats_reset, METH_NOARGS, "Zero the _pickle_stats counters."},
    {"_pickle_staging_cache", (PyCFunction)(void (*)(void))pk_staging_cache, METH_FASTCALL,
     "_pickle_staging_cache(limit_bytes=None) -> previous limit: reuse of one freed staging "
     "block up to that size (0: off, frees the cached block)."},
    {NULL},
};

static int install_reduce(PyTypeObject *type) {
  PyObject *d = PyDescr_NewMethod(type, &reduce_method);
  if (d == NULL) return -1;
  int rc = PyDict_SetItemString(type->tp_dict, reduce_method.ml_name, d);
  Py_DECREF(d);
  if (rc == 0) PyType_Modified(type);
  return rc;
}

int dbp_pickle_init(PyObject *module) {
  const char *mb = secure_getenv("DEVBUF_PICKLE_STAGING_CACHE_MB");
  if (mb != NULL && mb[0] != '\0') {
    char *end = NULL;
    unsigned long long v = strtoull(mb, &end, 10);
    if (end == mb || *end != '\0' || v > ((size_t)-1 >> 20)) {
      PyErr_Format(PyExc_ValueError,
                   "DEVBUF_PICKLE_STAGING_CACHE_MB='%s': expected a number of MiB (0: off)", mb);
      return -1;
    }
    g_cache_limit = (size_t)v << 20;
  }
  if (PyType_Ready(&DbpStaging_Type) < 0) return -1;
  if (PyModule_AddObjectRef(module, "HostStaging", (PyObject *)&DbpStaging_Type) < 0) return -1;
  if (PyModule_AddFunctions(module, pickle_functions) < 0) return -1;
  if (install_reduce(&DbpBuffer_Type) < 0 || install_reduce(&DbpView_Type) < 0) return -1;
  return 0;
}
