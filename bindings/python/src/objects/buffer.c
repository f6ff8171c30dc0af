/* buffer.c: devbuf.DeviceBuffer, memory owned by the bindings on one device.
 *
 * Producer side of the extended buffer protocol:
 *  - with PyBUF_DEVICE in the request, a buffer on a device other than the
 *    host is exported with `device` = the interned identifier and
 *    `device_info` = the device's own layout (devbuf_device_info_export),
 *    which carries the event the consumer must wait on;
 *  - without it, host-readable memory is exported as a plain buffer
 *    (memoryview, numpy.asarray work) and other memory raises BufferError;
 *  - host memory ("cpu") is always a plain CPU buffer: the draft reserves
 *    the "cpu" identifier, so the extended fields are left alone.
 * Exporter discipline as bytearray: `exports` counts live exports, the
 * memory cannot be freed while exported, release never decrefs view->obj.
 *
 * Sync: all work of a buffer is ordered on its device's default stream
 * (NULL). An asynchronous upload records `event` after the copy; every
 * reader (exports, downloads, device copies) honours it. Host staging
 * memory of an upload lives until `event` has completed. */
#include "objects/objects.h"
#include "objects/buffer_api.h"

#include <stdlib.h>
#include <string.h>

#define HOST_ALIGN 64

/* ---- helpers ----------------------------------------------------------------------- */

static int dev_is_async(const DbpDevice *d) { return (d->props_flags & DEVBUF_DEVICE_ASYNC) != 0; }

static int check_alive(DbpBuffer *self) {
  if (self->freed) {
    PyErr_SetString(PyExc_ValueError, "operation on a freed devbuf.DeviceBuffer");
    return -1;
  }
  return 0;
}

#if defined(Py_GIL_DISABLED)
/* ---- the solo export (free-threaded builds) -----------------------------------------
 * Without the GIL the common export and release take no lock: each of the
 * DBP_SOLO_SLOTS atomic words of `solo` holds at most one live export of its
 * own beside the ledger's.
 *
 *   bit 0  DBP_SOLO_LIVE      an export taken by the fast path is alive
 *   bit 1  DBP_SOLO_HOST_OK   a host export needs nothing done first (the host
 *                             may read the memory, no upload is pending)
 *   bit 2  DBP_SOLO_DEVICE_OK a device export needs nothing done first (the
 *                             device_info is ready)
 *   bits 3-4                  the word's own index in `solo`, never changed
 *   bits 5+                   a generation, one more at each release
 *
 * The fast export (buffer_getbuffer) is one compare-exchange on the word its
 * thread id hashes to (the next free one when that holds a live export), from
 * a word without DBP_SOLO_LIVE and with the OK bit its request needs to the
 * same word with DBP_SOLO_LIVE; the export's serial (Py_buffer.internal) is
 * that new word, odd, where the ledger's serials are all even, and it names
 * its word. The fast release is one compare-exchange of that word from the
 * view's serial to the next generation without DBP_SOLO_LIVE. Anything else,
 * including a failed compare-exchange, takes the buffer's critical section
 * and the ledger, as before. Several words, each on its own cache line, let
 * threads that share one buffer export it at once without each other's
 * line (one word served one export at a time: the second thread took the
 * lock, and two threads sharing a buffer ran no faster than one).
 *
 * Why this is sound:
 *  - The fast export reads, besides its word, only fields that never change
 *    once the buffer is published (layout, ptr, fast_flags, device_flag,
 *    format, device): ptr changes only when the memory is freed, and every
 *    state that may change while the buffer is shared is a bit of every
 *    word. An OK bit is set only after what it vouches for is done (a set
 *    is a release, the fast export's compare-exchange an acquire, so the
 *    device_info the export hands out is visible to its consumer), and
 *    cleared (free(), a pending upload) by an atomic read-modify-write of
 *    each word before the change is made, so a fast export either comes
 *    before it in its word's order, and so before the change, or fails.
 *    Every change of state is made in the critical section.
 *  - free() runs in the critical section and, after checking the ledger and
 *    the pins, clears both OK bits of each word with a compare-exchange
 *    from a word without DBP_SOLO_LIVE: a fast export that comes first makes
 *    the compare-exchange fail, free() gives the words it cleared their bits
 *    back and refuses as for any live export; one that comes after finds no
 *    OK bit and takes the locked path, which reports the freed memory.
 *    The release's compare-exchange (a release) orders everything its
 *    consumer did with the memory before free()'s (an acquire).
 *  - A release is counted once: the generation makes every solo serial
 *    unique (2^61 releases before one repeats), a release whose serial is
 *    not the live word (a second release, a ledger serial, NULL) fails the
 *    compare-exchange, and the locked path then finds it neither in `solo`
 *    nor in the ledger and reports it, as before. A state bit that changed
 *    while the export lived only sends its release to the locked path,
 *    which compares generations.
 *  - The fast paths make no call and take no lock, so they cannot deadlock
 *    with, or run inside, any critical section. */
#define DBP_SOLO_LIVE ((uintptr_t)1)
#define DBP_SOLO_HOST_OK ((uintptr_t)2)
#define DBP_SOLO_DEVICE_OK ((uintptr_t)4)
#define DBP_SOLO_SLOT_SHIFT 3
#define DBP_SOLO_SLOT_BITS 2
#define DBP_SOLO_SLOT_MASK ((uintptr_t)(DBP_SOLO_SLOTS - 1) << DBP_SOLO_SLOT_SHIFT)
#define DBP_SOLO_GEN ((uintptr_t)1 << (DBP_SOLO_SLOT_SHIFT + DBP_SOLO_SLOT_BITS))
#define DBP_SOLO_STATE (DBP_SOLO_HOST_OK | DBP_SOLO_DEVICE_OK)
_Static_assert(DBP_SOLO_SLOTS == 1 << DBP_SOLO_SLOT_BITS, "the slot index is DBP_SOLO_SLOT_BITS bits");
/* The word a serial (or a word) names. */
static inline uintptr_t *solo_word(DbpBuffer *self, uintptr_t serial) {
  return &self->solo[(serial & DBP_SOLO_SLOT_MASK) >> DBP_SOLO_SLOT_SHIFT].w;
}
/* The word this thread tries first: threads' control blocks lie pages apart. */
static inline unsigned solo_home(void) {
  uint64_t h = (uint64_t)(_Py_ThreadId() >> 12) * 0x9E3779B97F4A7C15ull;
  return (unsigned)(h >> (64 - DBP_SOLO_SLOT_BITS));
}
/* Exports alive in the words; in the critical section. */
static inline Py_ssize_t solo_live(DbpBuffer *self) {
  Py_ssize_t n = 0;
  for (int i = 0; i < DBP_SOLO_SLOTS; i++)
    n += (Py_ssize_t)(_Py_atomic_load_uintptr(&self->solo[i].w) & DBP_SOLO_LIVE);
  return n;
}
static inline void solo_or(DbpBuffer *self, uintptr_t bits) {
  for (int i = 0; i < DBP_SOLO_SLOTS; i++) (void)_Py_atomic_or_uintptr(&self->solo[i].w, bits);
}
static inline void solo_and(DbpBuffer *self, uintptr_t bits) {
  for (int i = 0; i < DBP_SOLO_SLOTS; i++) (void)_Py_atomic_and_uintptr(&self->solo[i].w, bits);
}
#define DBP_SOLO_OR(self, bits) solo_or((self), (bits))
#define DBP_SOLO_AND(self, bits) solo_and((self), (bits))
#else
static inline Py_ssize_t solo_live(DbpBuffer *self) { return 0; }
#define DBP_SOLO_OR(self, bits) ((void)0)
#define DBP_SOLO_AND(self, bits) ((void)0)
#endif

/* Wait until the contents are ready (the upload's event), and free the
 * upload's staging memory. GIL held on entry and exit, released inside;
 * the buffer is pinned meanwhile. The staging pointer is taken under the
 * GIL, so two threads settling at once never free it twice. */
static int settle(DbpBuffer *self) {
  if (self->event == NULL) return 0;
  devbuf_error err;
  int rc = DEVBUF_OK;
  void *staging = self->staging;
  const devbuf_device *dev = &self->device->dev;
  void *event = self->event;
  devbuf_error_clear(&err);
  self->staging = NULL;
  self->pins++;
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_event_synchronize(dev, event, &err);
  if (rc == DEVBUF_OK && staging != NULL) {
    rc = devbuf_host_free(dev, staging, &err);
    staging = NULL;
  }
  Py_END_ALLOW_THREADS
  self->pins--;
  if (staging != NULL) self->staging = staging; /* not freed: still ours */
  return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
}

/* Give the memory, event and staging back. Any thread state; GIL released
 * inside. Leaves the buffer freed even when the plugin reports an error. */
static int release_memory(DbpBuffer *self, devbuf_error *err) {
  int rc = DEVBUF_OK, rc2;
  void *ptr = self->ptr, *event = self->event, *staging = self->staging;
  int kind = self->kind;
  const devbuf_device *dev = &self->device->dev;
  DBP_SOLO_AND(self, ~DBP_SOLO_STATE); /* free() cleared them already */
  self->ptr = NULL;
  self->event = NULL;
  self->staging = NULL;
  self->freed = 1;
  Py_BEGIN_ALLOW_THREADS
  if (event) rc = devbuf_event_synchronize(dev, event, err);
  if (staging && (rc2 = devbuf_host_free(dev, staging, rc ? NULL : err)) && !rc) rc = rc2;
  if (event && (rc2 = devbuf_event_destroy(dev, event, rc ? NULL : err)) && !rc) rc = rc2;
  if (ptr) {
    if (kind == DBP_MEM_HOST) free(ptr);
    else if (kind == DBP_MEM_DEVICE && (rc2 = devbuf_mem_free(dev, ptr, NULL, rc ? NULL : err)) &&
             !rc)
      rc = rc2;
  }
  Py_END_ALLOW_THREADS
  Py_CLEAR(self->base); /* DBP_MEM_BORROWED: give the lender's export back */
  return rc;
}

PyObject *dbp_array_via_memoryview(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"dtype", "copy", NULL};
  PyObject *dtype = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kwlist, &dtype, &copy))
    return NULL;
  PyObject *mv = PyMemoryView_FromObject(self); /* BufferError with advice for device memory */
  if (mv == NULL) return NULL;
  PyObject *np = PyImport_ImportModule("numpy");
  PyObject *r = NULL;
  if (np != NULL) {
    PyObject *kw = Py_BuildValue("{s:O}", "dtype", dtype);
    PyObject *fn = PyObject_GetAttrString(np, copy == Py_True ? "array" : "asarray");
    PyObject *a = PyTuple_Pack(1, mv);
    if (kw && fn && a) r = PyObject_Call(fn, a, kw);
    Py_XDECREF(kw);
    Py_XDECREF(fn);
    Py_XDECREF(a);
    Py_DECREF(np);
  }
  Py_DECREF(mv);
  return r;
}

/* ---- construction -------------------------------------------------------------------- */

DbpBuffer *dbp_buffer_new(DbpDevice *device, int ndim, const Py_ssize_t *shape,
                          const char *format, Py_ssize_t itemsize, int readonly) {
  if (ndim < 0 || ndim > PyBUF_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "ndim %d is out of range (0..%d)", ndim, PyBUF_MAX_NDIM);
    return NULL;
  }
  if (itemsize <= 0) {
    PyErr_Format(PyExc_ValueError, "format '%s' has item size %zd; need at least 1", format,
                 itemsize);
    return NULL;
  }
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) {
      PyErr_Format(PyExc_ValueError, "shape[%d] is negative (%zd)", i, shape[i]);
      return NULL;
    }
  DbpBuffer *self = PyObject_New(DbpBuffer, &DbpBuffer_Type);
  if (self == NULL) return NULL;
  /* Everything after the header, zeroed, so dealloc is safe at any failure. */
  memset((char *)self + sizeof(PyObject), 0, sizeof(DbpBuffer) - sizeof(PyObject));
  self->device = device;
  Py_INCREF(device);
  self->freed = 1; /* until memory exists */
  self->ndim = ndim;
  self->itemsize = itemsize;
  self->readonly = readonly;
  self->kind = device->dev.backend == NULL ? DBP_MEM_HOST : DBP_MEM_DEVICE;
  self->host_readable = (device->props_flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) != 0;
  if (ndim > 0) {
    self->shape = PyMem_Malloc(2 * (size_t)ndim * sizeof(Py_ssize_t));
    if (self->shape == NULL) {
      Py_DECREF(self);
      return (DbpBuffer *)PyErr_NoMemory();
    }
    self->strides = self->shape + ndim;
    memcpy(self->shape, shape, (size_t)ndim * sizeof(Py_ssize_t));
  }
  Py_ssize_t items = dbp_c_strides(ndim, shape, itemsize, self->strides);
  if (items < 0 || (items && itemsize > PY_SSIZE_T_MAX / items)) {
    Py_DECREF(self);
    PyErr_SetString(PyExc_OverflowError, "buffer size does not fit in Py_ssize_t");
    return NULL;
  }
  self->nbytes = (size_t)(items * itemsize);
  /* Strided copies and exports do their byte arithmetic in Py_ssize_t with
   * room for a sign and an offset: no buffer is larger than half of it. Say
   * so as the size it is, not as a stride overflow. */
  if (self->nbytes > (size_t)(PY_SSIZE_T_MAX / 2)) {
    PyErr_Format(PyExc_MemoryError,
                 "devbuf.DeviceBuffer: %zu bytes (%zd items of %zd bytes) is more than one "
                 "buffer can hold: at most %zd bytes",
                 self->nbytes, items, itemsize, PY_SSIZE_T_MAX / 2);
    Py_DECREF(self);
    return NULL;
  }
  if (dbp_layout_check("devbuf.DeviceBuffer", format, itemsize, ndim, shape, self->strides,
                       (Py_ssize_t)self->nbytes, (Py_ssize_t)self->nbytes, DBP_LAYOUT_OWN) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  self->format = dbp_format_for_export(format, itemsize); /* struct.calcsize == itemsize */
  if (self->format == NULL) {
    Py_DECREF(self);
    return NULL;
  }

  void *ptr = NULL;
  if (self->kind == DBP_MEM_HOST) {
    size_t n = (self->nbytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    ptr = aligned_alloc(HOST_ALIGN, n ? n : HOST_ALIGN);
    if (ptr == NULL) {
      PyErr_Format(PyExc_MemoryError, "devbuf.DeviceBuffer: cannot allocate %zu bytes of host memory",
                   self->nbytes);
      Py_DECREF(self);
      return NULL;
    }
  } else {
    devbuf_error err;
    int rc;
    devbuf_error_clear(&err);
    size_t nbytes = self->nbytes;
    DBP_NOGIL(rc = devbuf_mem_alloc(&device->dev, nbytes, 0, NULL, &ptr, &err));
    if (rc != DEVBUF_OK) {
      Py_DECREF(self);
      return (DbpBuffer *)dbp_raise(&err);
    }
  }
  self->ptr = ptr;
  self->freed = 0;
  dbp_buffer_prepare_exports(self);
  return self;
}

/* Copy `n` contiguous host bytes at `src` into self (offset 0). When the
 * device is asynchronous and `src_stable` is 0, the bytes are staged first so
 * the caller may reuse `src` at once; the copy completes in the background
 * and `event` marks its end. Called with the GIL held. */
static int upload(DbpBuffer *self, Py_buffer *src) {
  devbuf_error err;
  int rc = DEVBUF_OK;
  size_t n = self->nbytes;
  int contiguous = PyBuffer_IsContiguous(src, 'C');
  const devbuf_device *dev = &self->device->dev;
  devbuf_error_clear(&err);
  if ((size_t)src->len != n) {
    PyErr_Format(PyExc_ValueError, "source has %zd bytes, the buffer %zu", src->len, n);
    return -1;
  }
  if (n == 0) return 0;
  if (self->kind == DBP_MEM_HOST) {
    if (contiguous) {
      void *dst = self->ptr, *s = src->buf;
      DBP_NOGIL(memcpy(dst, s, n));
      return 0;
    }
    return PyBuffer_ToContiguous(self->ptr, src, src->len, 'C');
  }
  if (!dev_is_async(self->device)) {
    /* A synchronous device: copy straight from the source. */
    void *tmp = NULL;
    const void *from = src->buf;
    if (!contiguous) {
      tmp = PyMem_Malloc(n);
      if (tmp == NULL) {
        PyErr_NoMemory();
        return -1;
      }
      if (PyBuffer_ToContiguous(tmp, src, src->len, 'C') < 0) {
        PyMem_Free(tmp);
        return -1;
      }
      from = tmp;
    }
    self->pins++;
    DBP_NOGIL(rc = devbuf_copy_from_host_sync(dev, self->ptr, 0, from, n, &err));
    self->pins--;
    PyMem_Free(tmp);
    return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
  }
  /* Asynchronous: stage, enqueue, record. */
  void *staging = NULL, *event = NULL;
  DBP_NOGIL(rc = devbuf_host_alloc(dev, n, &staging, &err));
  if (rc != DEVBUF_OK) return dbp_fail(&err);
  if (contiguous) {
    void *s = src->buf;
    DBP_NOGIL(memcpy(staging, s, n));
  } else if (PyBuffer_ToContiguous(staging, src, src->len, 'C') < 0) {
    devbuf_host_free(dev, staging, NULL);
    return -1;
  }
  self->pins++;
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_copy_h2d(dev, self->ptr, 0, staging, n, NULL, &err);
  if (rc == DEVBUF_OK) rc = devbuf_event_create(dev, &event, &err);
  if (rc == DEVBUF_OK) rc = devbuf_event_record(dev, event, NULL, &err);
  if (rc != DEVBUF_OK) {
    /* Whatever was enqueued must finish before the staging memory goes. */
    devbuf_stream_synchronize(dev, NULL, NULL);
    if (event) devbuf_event_destroy(dev, event, NULL);
    devbuf_host_free(dev, staging, NULL);
  }
  Py_END_ALLOW_THREADS
  self->pins--;
  if (rc != DEVBUF_OK) return dbp_fail(&err);
  DBP_SOLO_AND(self, ~DBP_SOLO_HOST_OK); /* a host export must wait for the event */
  self->event = event;
  self->staging = staging;
  return 0;
}

DbpBuffer *dbp_buffer_from_pybuffer(DbpDevice *device, Py_buffer *src, int readonly) {
  const char *fmt = src->format ? src->format : "B";
  Py_ssize_t one[1];
  const Py_ssize_t *shape = src->shape;
  int ndim = src->ndim;
  if (shape == NULL && ndim != 0) { /* a flat buffer (0-d scalars keep ndim 0) */
    ndim = 1;
    one[0] = src->itemsize ? src->len / src->itemsize : src->len;
    shape = one;
  }
  DbpBuffer *self = dbp_buffer_new(device, ndim, shape, fmt, src->itemsize ? src->itemsize : 1,
                                   readonly);
  if (self == NULL) return NULL;
  if (upload(self, src) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  return self;
}

/* ---- downloads ------------------------------------------------------------------------ */

DbpBuffer *dbp_buffer_download(const devbuf_device *dev, int host_readable, const void *ptr,
                               size_t nbytes, int ndim, const Py_ssize_t *shape,
                               const Py_ssize_t *strides, const char *format,
                               Py_ssize_t itemsize, void *event) {
  DbpDevice *host = dbp_device_host();
  if (host == NULL) return NULL;
  Py_ssize_t flat[1];
  if (shape == NULL && ndim != 0) { /* flat; 0-d scalars keep ndim 0 */
    ndim = 1;
    flat[0] = (Py_ssize_t)nbytes / (itemsize ? itemsize : 1);
    shape = flat;
    strides = NULL;
  }
  DbpBuffer *out = dbp_buffer_new(host, ndim, shape, format ? format : "B",
                                  itemsize ? itemsize : 1, 0);
  if (out == NULL) return NULL;
  if (out->nbytes == 0) return out;
  if (dbp_download_into(dev, host_readable, ptr, ndim, shape, strides, itemsize, event,
                        (char *)out->ptr, out->nbytes) < 0)
    Py_CLEAR(out);
  return out;
}

/* Every entry point below runs with `self` locked (dbp.h: DBP_LOCKED_*). */
static PyObject *buffer_to_host_locked(DbpBuffer *self, PyObject *unused) {
  if (check_alive(self) < 0) return NULL;
  self->pins++;
  DbpBuffer *out = dbp_buffer_download(&self->device->dev, self->host_readable, self->ptr,
                                       self->nbytes, self->ndim, self->shape, self->strides,
                                       self->format, self->itemsize, self->event);
  self->pins--;
  /* The download waited on the upload: its staging memory can go now. */
  if (out != NULL && self->staging != NULL && settle(self) < 0) Py_CLEAR(out);
  return (PyObject *)out;
}

static PyObject *buffer_copy_to_locked(DbpBuffer *self, DbpDevice *target) {
  if (check_alive(self) < 0) return NULL;
  if (target->is_host && target->dev.backend == NULL) return buffer_to_host_locked(self, NULL);
  const devbuf_device *sdev = &self->device->dev;
  if (self->kind == DBP_MEM_DEVICE && target->dev.backend == sdev->backend &&
      target->dev.ordinal == sdev->ordinal) {
    /* Same device: a device-to-device copy ordered after our event. */
    DbpBuffer *out = dbp_buffer_new(target, self->ndim, self->shape, self->format,
                                    self->itemsize, 0);
    if (out == NULL) return NULL;
    devbuf_error err;
    int rc = DEVBUF_OK, async = dev_is_async(target);
    void *ev = NULL;
    devbuf_error_clear(&err);
    self->pins++;
    Py_BEGIN_ALLOW_THREADS
    if (self->event) rc = devbuf_stream_wait_event(sdev, NULL, self->event, &err);
    if (rc == DEVBUF_OK && self->nbytes)
      rc = devbuf_copy_d2d(sdev, out->ptr, 0, self->ptr, 0, self->nbytes, NULL, &err);
    if (rc == DEVBUF_OK && async) {
      rc = devbuf_event_create(sdev, &ev, &err);
      if (rc == DEVBUF_OK) rc = devbuf_event_record(sdev, ev, NULL, &err);
    } else if (rc == DEVBUF_OK) {
      rc = devbuf_stream_synchronize(sdev, NULL, &err);
    }
    Py_END_ALLOW_THREADS
    self->pins--;
    if (rc != DEVBUF_OK) {
      if (ev) devbuf_event_destroy(sdev, ev, NULL);
      Py_DECREF(out);
      return dbp_raise(&err);
    }
    DBP_SOLO_AND(out, ~DBP_SOLO_HOST_OK); /* a host export must wait for the event */
    out->event = ev;
    return (PyObject *)out;
  }
  /* Elsewhere: through the host. */
  DbpBuffer *host = (DbpBuffer *)buffer_to_host_locked(self, NULL);
  if (host == NULL) return NULL;
  if (target->is_host) return (PyObject *)host;
  Py_buffer hv;
  if (PyObject_GetBuffer((PyObject *)host, &hv, PyBUF_FULL_RO) < 0) {
    Py_DECREF(host);
    return NULL;
  }
  DbpBuffer *out = dbp_buffer_from_pybuffer(target, &hv, 0);
  PyBuffer_Release(&hv);
  Py_DECREF(host);
  return (PyObject *)out;
}

PyObject *dbp_buffer_copy_to(DbpBuffer *self, DbpDevice *target) {
  DBP_RETURN_LOCKED(PyObject *, self, buffer_copy_to_locked(self, target));
}

/* ---- the buffer protocol ------------------------------------------------------------ */

static int export_device_info(DbpBuffer *self) {
  devbuf_error err;
  size_t size = 0;
  uint32_t flags = 0;
  devbuf_error_clear(&err);
  if (self->readonly) flags |= DEVBUF_DEVICE_INFO_READONLY;
  if (self->host_readable) flags |= DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  if (devbuf_device_info_export(&self->device->dev, self->event, NULL, flags, &self->info,
                                sizeof self->info, &size, &err) != DEVBUF_OK)
    return dbp_fail(&err);
  self->info_ready = 1;
  DBP_SOLO_OR(self, DBP_SOLO_DEVICE_OK); /* after `info` is written: a release */
  return 0;
}

#if defined(__GNUC__) || defined(__clang__)
#define DBP_COLD __attribute__((noinline, cold))
#define DBP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DBP_COLD
#define DBP_UNLIKELY(x) (x)
#endif

/* The one bit of PyBUF_F_CONTIGUOUS that no other request flag has. */
#define DBP_F_ONLY_BIT (PyBUF_F_CONTIGUOUS & ~PyBUF_STRIDES)

void dbp_buffer_prepare_exports(DbpBuffer *self) {
  int fast = DEVBUFPY_BUF_CLASSIC_FLAGS;
  if (self->readonly) fast &= ~PyBUF_WRITABLE; /* refused: the checks raise */
  /* Always C-contiguous, so every contiguity request is met except Fortran
   * order of a genuinely 2+-D array; an empty array is both. */
  if (self->ndim > 1 && self->nbytes > 0) {
    int dims = 0;
    for (int i = 0; i < self->ndim; i++) dims += self->shape[i] > 1;
    if (dims > 1) fast &= ~DBP_F_ONLY_BIT;
  }
  self->device_flag = self->device->is_host ? 0 : PyBUF_DEVICE;
  /* PyBUF_DEVICE on every device: on the host ("cpu") a PyBUF_DEVICE
   * request is a host export (export_checks: device_export is 0), which the
   * fast path serves as one (device_export = flags & device_flag = 0), so
   * devbuf.view() and __dlpack__ of a host buffer take it too. */
  self->fast_flags = fast | PyBUF_DEVICE;
#if defined(Py_GIL_DISABLED)
  /* Before the buffer is published, with its memory just set (not freed). */
  for (int i = 0; i < DBP_SOLO_SLOTS; i++)
    _Py_atomic_store_uintptr_release(
        &self->solo[i].w, ((uintptr_t)i << DBP_SOLO_SLOT_SHIFT) |
                              (self->host_readable && self->event == NULL ? DBP_SOLO_HOST_OK : 0) |
                              (self->info_ready ? DBP_SOLO_DEVICE_OK : 0));
#endif
}

/* Every check of an export, in order, and what a request needs done first
 * (waiting for the upload, the device_info). The fast path of
 * buffer_getbuffer skips this only when each check would pass with nothing
 * to do. 1 for a device export, 0 for a host one, -1 with BufferError. */
static DBP_COLD int export_checks(DbpBuffer *self, int flags) {
  if (self->freed) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceBuffer: the memory was freed");
    return -1;
  }
  if ((flags & PyBUF_WRITABLE) && self->readonly) {
    PyErr_SetString(PyExc_BufferError, "devbuf.DeviceBuffer is read-only");
    return -1;
  }
#if DBP_CHECK_EXPORTS
  if (dbp_layout_check("devbuf.DeviceBuffer export", self->format, self->itemsize, self->ndim,
                       self->shape, self->strides, (Py_ssize_t)self->nbytes,
                       (Py_ssize_t)self->nbytes, DBP_LAYOUT_BUFFER_ERROR) < 0)
    return -1;
#endif
  int device_export = (flags & PyBUF_DEVICE) && !self->device->is_host;
  if (!device_export) {
    if (!self->host_readable) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.DeviceBuffer on %U is device memory the host cannot read: request it "
                   "with the PyBUF_DEVICE flag (devbuf.view(obj) does), or copy it to the host "
                   "with .to_host()", self->device->spec);
      return -1;
    }
    /* The host is about to read: the upload must have landed. */
    if (self->event && settle(self) < 0) return -1;
  } else if (!self->info_ready && export_device_info(self) < 0) {
    return -1;
  }
  /* As CPython's memoryview: without PyBUF_ND the consumer sees len bytes
   * as a flat array of `len / itemsize` items of `format`, so a format
   * other than bytes would describe itemsize times too much memory. */
  if (dbp_refuse_flat_format("devbuf.DeviceBuffer", self->format, flags) < 0) return -1;
  /* Always C-contiguous, so every contiguity request is met except
   * Fortran order of a genuinely 2+-D array; an empty array is both. */
  if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && self->ndim > 1 &&
      self->nbytes > 0) {
    int dims = 0;
    for (int i = 0; i < self->ndim; i++) dims += self->shape[i] > 1;
    if (dims > 1) {
      PyErr_SetString(PyExc_BufferError, "devbuf.DeviceBuffer is C-contiguous, not Fortran");
      return -1;
    }
  }
  return device_export;
}

/* Fill `view` for a request that passed export_checks (or the fast path's
 * equivalent), after its export has a ledger slot. */
static inline int export_fill(DbpBuffer *self, Py_buffer *view, int flags, int device_export) {
  view->buf = self->ptr;
  view->obj = Py_NewRef((PyObject *)self);
  view->len = (Py_ssize_t)self->nbytes;
  view->itemsize = self->itemsize;
  view->readonly = self->readonly;
  view->format = (flags & PyBUF_FORMAT) ? self->format : NULL;
  if (flags & PyBUF_ND) {
    view->ndim = self->ndim;
    view->shape = self->shape;
  } else {
    view->ndim = 1;
    view->shape = NULL;
  }
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
  if (view->ndim == 0) view->shape = view->strides = NULL; /* 0-d: none */
  view->suboffsets = NULL;
  if (device_export) {
    /* DevbufPy_BufferSetDevice, knowing that flags has PyBUF_DEVICE. */
    DevbufPy_buffer_ext *ext = DEVBUFPY_BUFFER_EXT(view);
    ext->flags |= PyBUF_DEVICE;
    ext->device = (char *)self->device->dev.identifier;
    ext->device_info = &self->info;
  }
  return 0;
}

/* Every request the fast path does not take: all the checks, then the export. */
static DBP_COLD int buffer_getbuffer_slow(DbpBuffer *self, Py_buffer *view, int flags) {
  int device_export = export_checks(self, flags);
  if (device_export < 0 || dbp_ledger_add(&self->ledger, view) < 0) {
    view->obj = NULL; /* bf_getbuffer's contract on error */
    return -1;
  }
  return export_fill(self, view, flags, device_export);
}

/* The fast path: 1 with `view` filled and the export recorded, 0 (nothing
 * done) for every other request. It makes no call. In the critical section
 * (without the GIL, buffer_getbuffer below is the lock-free one). */
static inline int buffer_getbuffer_fast(DbpBuffer *self, Py_buffer *view, int flags) {
  /* The request asks only for what this buffer serves as it is
   * (fast_flags), the memory is alive, there is no PyBUF_FORMAT without
   * PyBUF_ND, the export needs nothing done first (for a device export the
   * device_info is ready; for a host export the host can read the memory and
   * no upload is pending), and the ledger has room. */
  int device_export = flags & self->device_flag; /* 0 on the host, PyBUF_DEVICE or not */
  if (DBP_CHECK_EXPORTS || DBP_UNLIKELY(self->freed) || DBP_UNLIKELY(flags & ~self->fast_flags) ||
      DBP_UNLIKELY((flags & (PyBUF_FORMAT | PyBUF_ND)) == PyBUF_FORMAT) ||
      DBP_UNLIKELY(device_export ? !self->info_ready
                                 : !self->host_readable || self->event != NULL) ||
      DBP_UNLIKELY(self->ledger.n == self->ledger.cap))
    return 0;
  dbp_ledger_add_room(&self->ledger, view);
  export_fill(self, view, flags, device_export);
  return 1;
}

static int buffer_getbuffer_locked(DbpBuffer *self, Py_buffer *view, int flags) {
  /* Anything the fast path does not take goes through buffer_getbuffer_slow,
   * as a tail call, so that the fast path makes no call and saves no
   * registers. */
  if (buffer_getbuffer_fast(self, view, flags)) return 0;
  return buffer_getbuffer_slow(self, view, flags);
}

#if !defined(Py_GIL_DISABLED)
static void buffer_releasebuffer_locked(DbpBuffer *self, Py_buffer *view) {
  /* As bytearray: count down (ledger.n), never touch view->obj (the caller
   * decrefs); but only for an export that is alive (a double release would
   * let free() run under a live one). */
  dbp_ledger_remove(&self->ledger, view, (PyObject *)self, "devbuf.DeviceBuffer");
}
#endif

#if defined(Py_GIL_DISABLED)
/* Without the GIL the common export and release take no lock: the solo
 * export (above, "the solo export", says why that is sound). Any other
 * request, or a failed compare-exchange, takes the buffer's critical
 * section (out of line and a tail call, so that the fast paths need no
 * stack frame), which starts over. */
#if defined(__GNUC__) || defined(__clang__)
#define DBP_NOINLINE __attribute__((noinline))
#else
#define DBP_NOINLINE
#endif
static DBP_NOINLINE int buffer_getbuffer_cs(PyObject *op, Py_buffer *view, int flags) {
  DBP_RETURN_LOCKED(int, op, buffer_getbuffer_locked((DbpBuffer *)op, view, flags));
}

/* In the critical section: the solo export's release if `view` is it, else
 * the ledger's, which reports a release of no live export. */
static void buffer_releasebuffer_locked_ft(DbpBuffer *self, Py_buffer *view) {
  uintptr_t s = (uintptr_t)view->internal;
  if (s & DBP_SOLO_LIVE) {
    uintptr_t *sw = solo_word(self, s);
    uintptr_t w = _Py_atomic_load_uintptr(sw);
    /* The same export: live, and the same generation (its state bits may
     * have changed meanwhile). */
    while ((w & DBP_SOLO_LIVE) && (w | DBP_SOLO_STATE) == (s | DBP_SOLO_STATE)) {
      if (_Py_atomic_compare_exchange_uintptr(sw, &w,
                                              (w & ~DBP_SOLO_LIVE) + DBP_SOLO_GEN)) {
        view->internal = NULL;
        return;
      }
    }
  }
  dbp_ledger_remove_also(&self->ledger, view, (PyObject *)self, "devbuf.DeviceBuffer",
                         solo_live(self));
}
static DBP_NOINLINE void buffer_releasebuffer_cs(PyObject *op, Py_buffer *view) {
  DBP_BEGIN_LOCKED(op);
  buffer_releasebuffer_locked_ft((DbpBuffer *)op, view);
  DBP_END_LOCKED();
}

static int buffer_getbuffer(PyObject *op, Py_buffer *view, int flags) {
  DbpBuffer *self = (DbpBuffer *)op;
  /* As buffer_getbuffer_fast, with the state that may change read from a
   * word of `solo`: the OK bit this request needs, and no export alive in
   * that word (this thread's, else the next free one). */
  int device_export = flags & self->device_flag; /* 0 on the host, PyBUF_DEVICE or not */
  uintptr_t ok = device_export ? DBP_SOLO_DEVICE_OK : DBP_SOLO_HOST_OK;
  if (DBP_CHECK_EXPORTS || DBP_UNLIKELY(flags & ~self->fast_flags) ||
      DBP_UNLIKELY((flags & (PyBUF_FORMAT | PyBUF_ND)) == PyBUF_FORMAT))
    return buffer_getbuffer_cs(op, view, flags);
  unsigned home = solo_home();
  for (unsigned k = 0; k < DBP_SOLO_SLOTS; k++) {
    uintptr_t *sw = &self->solo[(home + k) & (DBP_SOLO_SLOTS - 1)].w;
    uintptr_t w = _Py_atomic_load_uintptr_relaxed(sw);
    if (DBP_UNLIKELY(!(w & ok))) break;
    if (DBP_UNLIKELY(w & DBP_SOLO_LIVE)) continue;
    if (DBP_UNLIKELY(!_Py_atomic_compare_exchange_uintptr(sw, &w, w | DBP_SOLO_LIVE))) break;
    export_fill(self, view, flags, device_export);
    view->internal = (void *)(w | DBP_SOLO_LIVE);
    return 0;
  }
  return buffer_getbuffer_cs(op, view, flags);
}

static void buffer_releasebuffer(PyObject *op, Py_buffer *view) {
  uintptr_t s = (uintptr_t)view->internal;
  if (DBP_UNLIKELY(!(s & DBP_SOLO_LIVE)) ||
      DBP_UNLIKELY(!_Py_atomic_compare_exchange_uintptr(solo_word((DbpBuffer *)op, s), &s,
                                                        s - DBP_SOLO_LIVE + DBP_SOLO_GEN))) {
    buffer_releasebuffer_cs(op, view);
    return;
  }
  view->internal = NULL;
}
#else
DBP_LOCKED_GETBUFFER(DbpBuffer, buffer_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpBuffer, buffer_releasebuffer)
#endif

static PyBufferProcs buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)buffer_releasebuffer,
};

/* ---- methods ------------------------------------------------------------------------ */

static PyObject *buffer_free_locked(DbpBuffer *self, PyObject *unused) {
  if (self->freed) Py_RETURN_NONE;
#if defined(Py_GIL_DISABLED)
  /* No solo export alive, and none from now on (the solo export, above). */
  Py_ssize_t live = self->ledger.n;
  if (live == 0 && self->pins == 0) {
    uintptr_t was[DBP_SOLO_SLOTS];
    int i;
    for (i = 0; i < DBP_SOLO_SLOTS; i++) {
      uintptr_t *sw = &self->solo[i].w;
      uintptr_t w = _Py_atomic_load_uintptr(sw);
      while (!(w & DBP_SOLO_LIVE) &&
             !_Py_atomic_compare_exchange_uintptr(sw, &w, w & ~DBP_SOLO_STATE)) {
      }
      if (w & DBP_SOLO_LIVE) break;
      was[i] = w & DBP_SOLO_STATE;
    }
    if (i < DBP_SOLO_SLOTS) { /* word i holds a live export: refuse, state as it was */
      for (int j = 0; j < i; j++) (void)_Py_atomic_or_uintptr(&self->solo[j].w, was[j]);
      live = 1;
      for (int j = i + 1; j < DBP_SOLO_SLOTS; j++)
        live += (Py_ssize_t)(_Py_atomic_load_uintptr(&self->solo[j].w) & DBP_SOLO_LIVE);
    }
  } else {
    live += solo_live(self);
  }
#else
  Py_ssize_t live = self->ledger.n;
#endif
  if (live > 0 || self->pins > 0) {
    PyErr_Format(PyExc_BufferError,
                 "cannot free a devbuf.DeviceBuffer while it is exported (%zd live export%s%s): "
                 "release the views and memoryviews of it first",
                 live + self->pins, live + self->pins == 1 ? "" : "s",
                 self->pins ? ", or an operation is still running on it" : "");
    return NULL;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  if (release_memory(self, &err) != DEVBUF_OK) return dbp_raise(&err);
  Py_RETURN_NONE;
}

DBP_LOCKED_METH(DbpBuffer, buffer_free)

static PyObject *buffer_synchronize_locked(DbpBuffer *self, PyObject *unused) {
  if (check_alive(self) < 0 || settle(self) < 0) return NULL;
  Py_RETURN_NONE;
}

DBP_LOCKED_METH(DbpBuffer, buffer_synchronize)

/* Copy into the caller's `out` (copy_into.c); target NULL: host only. */
static PyObject *buffer_copy_into(DbpBuffer *self, PyObject *out, DbpDevice *target, int any,
                                  const char *what) {
  if (check_alive(self) < 0) return NULL;
  dbp_copy_src s = {&self->device->dev, self->host_readable, self->ptr, self->nbytes, self->ndim,
                    self->shape, self->strides, self->itemsize, self->format, self->event};
  self->pins++;
  PyObject *r = dbp_copy_into(&s, out, target, any, what);
  self->pins--;
  return r;
}

static PyObject *buffer_to_host_m_locked(DbpBuffer *self, PyObject *const *args,
                                         Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *out;
  if (nargs == 0 && kwnames == NULL) return buffer_to_host_locked(self, NULL);
  if (dbp_parse_out_kw("to_host", args, nargs, kwnames, 0, NULL, &out) < 0) return NULL;
  if (out == NULL) return buffer_to_host_locked(self, NULL);
  return buffer_copy_into(self, out, NULL, 0, "devbuf.DeviceBuffer.to_host(out=...)");
}
DBP_LOCKED_FASTMETH(DbpBuffer, buffer_to_host_m)

static PyObject *buffer_copy_to_m_locked(DbpBuffer *self, PyObject *const *args,
                                         Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *dev_arg = NULL, *out; /* NULL: not given; None: the host */
  if (dbp_parse_out_kw("copy_to", args, nargs, kwnames, 1, &dev_arg, &out) < 0) return NULL;
  if (out == NULL && dev_arg == NULL) {
    PyErr_SetString(PyExc_TypeError, "copy_to() needs a device, or out= (a buffer to copy into)");
    return NULL;
  }
  DbpDevice *d = NULL;
  if (dev_arg != NULL && (d = dbp_device_get(dev_arg)) == NULL) return NULL;
  PyObject *r = out != NULL ? buffer_copy_into(self, out, d, d == NULL,
                                               "devbuf.DeviceBuffer.copy_to(out=...)")
                            : buffer_copy_to_locked(self, d);
  Py_XDECREF(d);
  return r;
}
DBP_LOCKED_FASTMETH(DbpBuffer, buffer_copy_to_m)

static PyObject *buffer_enter_locked(DbpBuffer *self, PyObject *unused) {
  if (check_alive(self) < 0) return NULL;
  return Py_NewRef(self);
}
DBP_LOCKED_METH(DbpBuffer, buffer_enter)

static PyObject *buffer_exit(PyObject *self, PyObject *args) { return buffer_free(self, NULL); }

static PyMethodDef buffer_methods[] = {
    {"to_host", (PyCFunction)(void (*)(void))buffer_to_host_m, METH_FASTCALL | METH_KEYWORDS,
     "to_host($self, /, *, out=None)\n--\n\n"
     "to_host(*, out=None) -> DeviceBuffer on the host: a copy, after waiting for pending work. "
     "memoryview() and numpy.asarray() accept the result. With out (a writable host buffer of "
     "the same size, C order, same shape and item type or flat bytes): copies into it and "
     "returns it."},
    {"copy_to", (PyCFunction)(void (*)(void))buffer_copy_to_m, METH_FASTCALL | METH_KEYWORDS,
     "copy_to($self, /, device=None, *, out=None)\n--\n\n"
     "copy_to(device, *, out=None) -> DeviceBuffer: a copy on `device` (Device, 'id' or "
     "'id:N'; None: the host); with out (a writable buffer on that device, e.g. another DeviceBuffer, or host "
     "memory): copies into it and returns it."},
    {"free", (PyCFunction)buffer_free, METH_NOARGS,
     "free($self, /)\n--\n\n"
     "Give the memory back now. BufferError while exported; later use raises ValueError."},
    {"synchronize", (PyCFunction)buffer_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Block until the work that produced the contents has finished."},
    {"__array__", (PyCFunction)(void (*)(void))dbp_array_via_memoryview,
     METH_VARARGS | METH_KEYWORDS, "__array__($self, /, dtype=None, copy=None)\n--\n\n"
     "NumPy conversion of host memory; BufferError for device memory."},
    {"__enter__", (PyCFunction)buffer_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nReturn self (the with statement)."},
    {"__exit__", (PyCFunction)buffer_exit, METH_VARARGS, "__exit__($self, exc_type, exc, tb, /)\n--\n\nLeave the with block: free() the buffer."},
    DBP_BUFFER_API_METHODS,
    {NULL},
};

static PyObject *get_device(DbpBuffer *self, void *c) { return Py_NewRef(self->device); }
static PyObject *get_shape(DbpBuffer *self, void *c) {
  return dbp_tuple_from_ssize(self->ndim, self->shape);
}
static PyObject *get_strides(DbpBuffer *self, void *c) {
  return dbp_tuple_from_ssize(self->ndim, self->strides);
}
static PyObject *get_format(DbpBuffer *self, void *c) { return PyUnicode_FromString(self->format); }
static PyObject *get_itemsize(DbpBuffer *self, void *c) { return PyLong_FromSsize_t(self->itemsize); }
static PyObject *get_ndim(DbpBuffer *self, void *c) { return PyLong_FromLong(self->ndim); }
static PyObject *get_nbytes(DbpBuffer *self, void *c) { return PyLong_FromSize_t(self->nbytes); }
static PyObject *get_readonly(DbpBuffer *self, void *c) { return PyBool_FromLong(self->readonly); }
static PyObject *get_freed_locked(DbpBuffer *self, void *c) { return PyBool_FromLong(self->freed); }
static PyObject *get_exports_locked(DbpBuffer *self, void *c) { return PyLong_FromSsize_t(self->ledger.n + solo_live(self)); }
static PyObject *get_ptr_locked(DbpBuffer *self, void *c) {
  if (check_alive(self) < 0) return NULL;
  return PyLong_FromVoidPtr(self->ptr);
}
static PyObject *get_event_locked(DbpBuffer *self, void *c) {
  if (self->event == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(self->event);
}
DBP_LOCKED_GETTER(DbpBuffer, get_freed)
DBP_LOCKED_GETTER(DbpBuffer, get_exports)
DBP_LOCKED_GETTER(DbpBuffer, get_ptr)
DBP_LOCKED_GETTER(DbpBuffer, get_event)

static PyGetSetDef buffer_getset[] = {
    {"device", (getter)get_device, NULL, "the Device the memory is on", NULL},
    {"shape", (getter)get_shape, NULL, "tuple of dimensions", NULL},
    {"strides", (getter)get_strides, NULL, "tuple of byte strides (C order)", NULL},
    {"format", (getter)get_format, NULL, "the item's buffer-protocol format string", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "bytes per item", NULL},
    {"ndim", (getter)get_ndim, NULL, "number of dimensions", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "size in bytes", NULL},
    {"readonly", (getter)get_readonly, NULL, "True if exports refuse PyBUF_WRITABLE", NULL},
    {"freed", (getter)get_freed, NULL, "True once free() gave the memory back", NULL},
    {"exports", (getter)get_exports, NULL, "number of live buffer exports", NULL},
    {"ptr", (getter)get_ptr, NULL, "the device pointer, as an int", NULL},
    {"event", (getter)get_event, NULL,
     "the producer event readers wait on (an int handle), or None when the data is ready", NULL},
    DBP_BUFFER_API_GETSET,
    {NULL},
};

static PyObject *buffer_repr(DbpBuffer *self) {
  PyObject *shape = get_shape(self, NULL);
  if (shape == NULL) return NULL;
  PyObject *r = PyUnicode_FromFormat("<devbuf.DeviceBuffer %U shape=%R format='%s' nbytes=%zu%s>",
                                     self->device->spec, shape, self->format, self->nbytes,
                                     self->freed ? " freed" : "");
  Py_DECREF(shape);
  return r;
}

static void buffer_dealloc(DbpBuffer *self) {
  if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
  if (!self->freed && self->device) {
    devbuf_error err;
    devbuf_error_clear(&err);
    if (release_memory(self, &err) != DEVBUF_OK) {
      /* Cannot raise from a destructor: report, as CPython does. */
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      dbp_raise(&err);
      /* Not `self`: its refcount is already zero, and the hook would repr it. */
      PyObject *where = PyUnicode_FromString("devbuf.DeviceBuffer deallocation (freeing its device memory)");
      PyErr_WriteUnraisable(where);
      Py_XDECREF(where);
      PyErr_Restore(t, v, tb);
    }
  }
  PyMem_Free(self->shape);
  PyMem_Free(self->format);
  dbp_ledger_free(&self->ledger);
  Py_XDECREF(self->device);
  PyObject_Free(self);
}

PyTypeObject DbpBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.DeviceBuffer",
    .tp_basicsize = sizeof(DbpBuffer),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_repr = (reprfunc)buffer_repr,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_as_mapping = &dbp_buffer_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory on a device, owned by devbuf. Make one with devbuf.empty() or "
              "devbuf.from_host(). Exports the extended buffer protocol (PyBUF_DEVICE).",
    .tp_weaklistoffset = offsetof(DbpBuffer, weakreflist),
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
};

/* ---- module functions --------------------------------------------------------------- */

static int parse_shape(PyObject *arg, Py_ssize_t *shape, int *ndim) {
  if (PyLong_Check(arg)) {
    shape[0] = PyLong_AsSsize_t(arg);
    if (shape[0] == -1 && PyErr_Occurred()) return -1;
    *ndim = 1;
    return 0;
  }
  PyObject *seq = PySequence_Fast(arg, "shape must be an int or a sequence of ints");
  if (seq == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > PyBUF_MAX_NDIM) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "shape has %zd dimensions; at most %d", n, PyBUF_MAX_NDIM);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    shape[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
    if (shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *ndim = (int)n;
  return 0;
}

PyObject *dbp_empty(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"shape", "format", "device", "readonly", NULL};
  PyObject *shape_arg, *device_arg = Py_None;
  const char *format = "B";
  int readonly = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|sO$p:empty", kwlist, &shape_arg, &format,
                                   &device_arg, &readonly))
    return NULL;
  Py_ssize_t shape[PyBUF_MAX_NDIM];
  int ndim = 0;
  Py_ssize_t itemsize = 0;
  if (parse_shape(shape_arg, shape, &ndim) < 0) return NULL;
  if (dbp_format_itemsize(format, &itemsize) < 0) return NULL;
  DbpDevice *d = dbp_device_get(device_arg);
  if (d == NULL) return NULL;
  DbpBuffer *b = dbp_buffer_new(d, ndim, shape, format, itemsize, readonly);
  Py_DECREF(d);
  return (PyObject *)b;
}

int dbp_buffer_init(PyObject *module) {
  if (PyType_Ready(&DbpBuffer_Type) < 0) return -1;
  /* Every classic flag, PyBUF_INDIRECT included (NULL suboffsets serve it,
   * as memoryview's PyBUF_FULL_RO shows): advertise what is served. */
  if (DevbufPy_SetBufferSupportedFlags(&DbpBuffer_Type,
                                       DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  return PyModule_AddObjectRef(module, "DeviceBuffer", (PyObject *)&DbpBuffer_Type);
}

/* ---- the NumPy-shaped parts: len(), .size, .dtype, .format_info, copy_from(), fill() and
 * b[...] = x (declared in objects/buffer_api.h; the parts that need NumPy or the format
 * parser live in devbuf/_api.py) ---- */


/* devbuf._api.<name>(*args): the Python half. */
static PyObject *call_api(const char *name, PyObject *a, PyObject *b) {
  PyObject *mod = PyImport_ImportModule("devbuf._api");
  if (mod == NULL) return NULL;
  PyObject *r = b ? PyObject_CallMethod(mod, name, "OO", a, b) : PyObject_CallMethod(mod, name, "O", a);
  Py_DECREF(mod);
  return r;
}

PyObject *dbp_buffer_get_size(PyObject *self, void *c) {
  DbpBuffer *b = (DbpBuffer *)self;
  Py_ssize_t n = 1;
  for (int i = 0; i < b->ndim; i++) n *= b->shape[i];
  return PyLong_FromSsize_t(n);
}

PyObject *dbp_buffer_get_dtype(PyObject *self, void *c) { return call_api("buffer_dtype", self, NULL); }

PyObject *dbp_buffer_get_format_info(PyObject *self, void *c) {
  return call_api("format_info", self, NULL);
}

static Py_ssize_t buffer_length(PyObject *self) {
  DbpBuffer *b = (DbpBuffer *)self;
  if (b->ndim == 0) {
    PyErr_SetString(PyExc_TypeError, "len() of a 0-d devbuf.DeviceBuffer (use .size)");
    return -1;
  }
  return b->shape[0];
}

/* Host memory into this buffer: copy_into.c with `self` as `out`. The
 * source's own memory is read in place when it is C-contiguous. */
PyObject *dbp_buffer_copy_from(PyObject *self, PyObject *src) {
  const char *what = "devbuf.DeviceBuffer.copy_from";
  if (PyObject_TypeCheck(src, &DbpBuffer_Type) && !((DbpBuffer *)src)->host_readable) {
    /* Device memory: the source's copy_to(device, out=self). */
    PyObject *m = PyObject_GetAttrString(src, "copy_to");
    if (m == NULL) return NULL;
    PyObject *args = PyTuple_Pack(1, (PyObject *)((DbpBuffer *)self)->device);
    PyObject *kw = args ? Py_BuildValue("{sO}", "out", self) : NULL;
    PyObject *r = kw ? PyObject_Call(m, args, kw) : NULL;
    Py_DECREF(m);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
  }
  Py_buffer v;
  if (PyObject_GetBuffer(src, &v, PyBUF_RECORDS_RO) < 0) {
    if (!PyObject_CheckBuffer(src)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "%s: src must be host memory with the buffer protocol (a NumPy array, bytes, "
                   "memoryview) or a devbuf.DeviceBuffer, not %.100s",
                   what, Py_TYPE(src)->tp_name);
    }
    return NULL;
  }
  Py_ssize_t st[PyBUF_MAX_NDIM];
  const Py_ssize_t *strides = v.strides;
  if (strides == NULL && v.ndim > 0) strides = (dbp_c_strides(v.ndim, v.shape, v.itemsize, st), st);
  dbp_copy_src s = {NULL, 1, v.buf, (size_t)v.len, v.ndim, v.shape, strides, v.itemsize,
                    v.format ? v.format : "B", NULL};
  PyObject *r = dbp_copy_into(&s, self, NULL, 1, what);
  PyBuffer_Release(&v);
  if (r == NULL) return NULL;
  Py_DECREF(r);
  Py_RETURN_NONE;
}

PyObject *dbp_buffer_fill(PyObject *self, PyObject *value) { return call_api("fill", self, value); }

/* b[...] = x and b[:] = x (the whole buffer): copy_from for an array,
 * fill for a scalar. Other keys: index on the host or in a framework. */
static int buffer_ass_subscript(PyObject *self, PyObject *key, PyObject *value) {
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "devbuf.DeviceBuffer items cannot be deleted");
    return -1;
  }
  PyObject *mod = PyImport_ImportModule("devbuf._api");
  if (mod == NULL) return -1;
  PyObject *r = PyObject_CallMethod(mod, "setitem", "OOO", self, key, value);
  Py_DECREF(mod);
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}

PyMappingMethods dbp_buffer_as_mapping = {buffer_length, NULL, buffer_ass_subscript};
