/* dlpack_export.c: devbuf objects as DLPack producers (and CAI / array
 * interface producers).
 *
 * Every export goes through the extended buffer protocol of the object
 * itself: the managed tensor holds a buffer export (DevbufPy_GetBufferEx,
 * kept in the same block as the tensor) until its deleter runs, so a DeviceBuffer cannot be freed, nor a
 * DeviceView released, while a DLPack consumer still uses the memory. The
 * deleter may run on any thread: it enters Python through base/dbp_enter.h
 * (the export keeps a home in its interpreter), and does nothing of Python
 * once the interpreter finalizes or is gone (the export is then leaked, as
 * NumPy does).
 *
 * Capsules follow the Python specification of DLPack: "dltensor_versioned"
 * when the consumer's max_version is (1, x) or newer, "dltensor" otherwise;
 * a consumer renames the capsule to "used_..." and the capsule's destructor
 * calls the deleter only for a capsule that was never consumed. */
#include "exporters/exporters.h"
#include "base/dbp_freelist.h" /* after Python.h */

#include <stdatomic.h>
#include <string.h>

/* ---- the export block ------------------------------------------------------
 *
 * One block per managed tensor: the tensor itself (versioned or legacy), the
 * buffer export it holds until its deleter runs, and room for shape and
 * strides. A few released blocks are kept for the next export: the block's
 * malloc and free plus a separate hold's were a fifth of an export. */

enum { BLOCK_NDIM = 8 }; /* dims held inline; more go to a separate array */

typedef struct export_block {
  union {
    DLManagedTensorVersioned v;
    DLManagedTensor l;
  } m;
  DevbufPy_buffer_ext ext;
  dbp_home home;                    /* where the deleter enters Python (dbp_enter.h) */
  int64_t *dims;                    /* inline_dims, or PyMem_Raw for ndim > BLOCK_NDIM */
  int64_t inline_dims[2 * BLOCK_NDIM];
} export_block;

/* Only touched with the GIL held (the deleter takes it first), or, without
 * the GIL, through per-thread slots (dbp_freelist.h). */
DBP_FREELIST(g_block_free);

static export_block *block_alloc(void) {
  export_block *b = dbp_freelist_pop(&g_block_free);
  if (b == NULL && (b = PyMem_RawMalloc(sizeof *b)) == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  b->dims = b->inline_dims;
  if (dbp_home_take(&b->home) < 0) {
    if (!dbp_freelist_push(&g_block_free, b)) PyMem_RawFree(b);
    return NULL;
  }
  return b;
}

/* Give back a block whose export is released. */
static void block_free(export_block *b) {
  dbp_home_drop(&b->home);
  if (b->dims != b->inline_dims) PyMem_RawFree(b->dims);
  b->dims = NULL;
  if (!dbp_freelist_push(&g_block_free, b)) PyMem_RawFree(b);
}

/* Deleters that found the interpreter finalizing or gone (dbp_enter
 * refused): their export and block are leaked. Read by the tests through
 * the capsule _devbuf._dlpack_deleters_refused. */
static _Atomic long g_deleters_refused;

/* The deleters: the consumer is done. They may run on any thread, with or
 * without a thread state, also during and after finalization: they enter
 * the export's interpreter for the release (dbp_enter.h); when that is
 * refused, nothing of Python is touched: the export and the block are
 * leaked (never a crash, a hang, or a thread ended under its caller), only
 * the home is given back. The block is not the consumer's any more once
 * called. */
static void block_delete(export_block *b) {
  dbp_entered e;
  if (dbp_enter(&b->home, &e) < 0) {
    dbp_home_drop(&b->home);
    atomic_fetch_add(&g_deleters_refused, 1);
    return;
  }
  DevbufPy_BufferRelease(&b->ext);
  block_free(b);
  dbp_leave(&e);
}
static void block_deleter_v(DLManagedTensorVersioned *m) { block_delete(m->manager_ctx); }
static void block_deleter_l(DLManagedTensor *m) { block_delete(m->manager_ctx); }

/* Where the exported memory lives. */
typedef struct src_info {
  const char *identifier; /* "cpu" or the interned identifier */
  int32_t ordinal;
  int has_dev;
  devbuf_device dev;
  void *event;            /* producer event, or NULL */
  uint32_t info_flags;    /* DEVBUF_DEVICE_INFO_* */
} src_info;

static int src_describe(DevbufPy_buffer_ext *ext, src_info *s) {
  memset(s, 0, sizeof *s);
  if (!DevbufPy_BufferIsDevice(ext)) {
    s->identifier = "cpu";
    s->info_flags = DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | (ext->view.readonly ? DEVBUF_DEVICE_INFO_READONLY : 0);
    return 0;
  }
  devbuf_device_info_desc d;
  devbuf_error err;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  devbuf_error_clear(&err);
  if (devbuf_device_info_import(ext->device, ext->device_info, &d, &s->dev, &err) != DEVBUF_OK) {
    devbuf_error_prefix(&err, "DLPack export: the buffer's device_info");
    return dbp_buffer_error(&err);
  }
  s->has_dev = 1;
  s->identifier = s->dev.identifier;
  s->ordinal = s->dev.ordinal;
  s->event = d.event;
  s->info_flags = d.flags;
  return 0;
}

/* DLPack flags a devbuf device adds: CUDA memory the host may read is
 * managed memory. */
static uint32_t src_dl_flags(const src_info *s) {
  if (!s->has_dev) return 0; /* host memory: identifier "cpu" */
  if (strcmp(s->identifier, "devbuf.cuda") == 0 && (s->info_flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE))
    return DEVBUF_DLPACK_MANAGED;
  return 0;
}

/* The consumer's `stream` for a tensor on `dltype`: *skip = 1 for -1 (no
 * synchronisation wanted). Values follow the DLPack Python specification. */
static int parse_stream(PyObject *stream, int32_t dltype, void **out, int *skip) {
  *out = NULL;
  *skip = 0;
  if (stream == NULL || stream == Py_None) return 0;
  if (!PyLong_Check(stream)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be None or an int, not %.100s",
                 Py_TYPE(stream)->tp_name);
    return -1;
  }
  long long v = PyLong_AsLongLong(stream);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    unsigned long long u = PyLong_AsUnsignedLongLong(stream);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    v = (long long)u;
  } else if (v == -1) {
    *skip = 1;
    return 0;
  }
  switch (dltype) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost:
      PyErr_Format(PyExc_ValueError,
                   "__dlpack__: stream must be None (or -1) for a CPU buffer, got %lld", v);
      return -1;
    case kDLCUDA:
    case kDLCUDAManaged:
      if (v == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "__dlpack__: stream 0 is ambiguous for CUDA; pass 1 for the legacy "
                        "default stream or 2 for the per-thread default stream");
        return -1;
      }
      *out = v == 1 ? NULL : (void *)(uintptr_t)v; /* 2 is CU_STREAM_PER_THREAD itself */
      return 0;
    default: /* ROCm: 0 is the default stream; others: a stream handle of that device */
      *out = (void *)(uintptr_t)v;
      return 0;
  }
}

static int parse_dl_device(PyObject *o, DLDevice *out) {
  if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
    PyErr_SetString(PyExc_TypeError, "dl_device must be a (device_type, device_id) tuple");
    return -1;
  }
  long t = PyLong_AsLong(PyTuple_GET_ITEM(o, 0)); /* works for IntEnum too */
  if (t == -1 && PyErr_Occurred()) return -1;
  long id = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
  if (id == -1 && PyErr_Occurred()) return -1;
  if (t < INT32_MIN || t > INT32_MAX || id < INT32_MIN || id > INT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "dl_device values do not fit in int32");
    return -1;
  }
  int32_t ti = (int32_t)t;
  memcpy(&out->device_type, &ti, sizeof ti);
  out->device_id = (int32_t)id;
  return 0;
}

/* A copy of obj on (identifier, ordinal) as a new DeviceBuffer. */
static PyObject *copy_to_device(PyObject *obj, const char *identifier, int32_t ordinal) {
  DbpDevice *target;
  if (strcmp(identifier, "cpu") == 0) {
    target = dbp_device_host();
    Py_XINCREF(target);
  } else {
    PyObject *spec = PyUnicode_FromFormat("%s:%d", identifier, (int)ordinal);
    if (spec == NULL) return NULL;
    target = dbp_device_get(spec);
    Py_DECREF(spec);
  }
  if (target == NULL) return NULL;
  PyObject *out = NULL;
  if (Py_IS_TYPE(obj, &DbpBuffer_Type)) {
    out = dbp_buffer_copy_to((DbpBuffer *)obj, target);
  } else {
    DbpView *v = dbp_view_new(obj, 0);
    if (v != NULL) {
      DbpBuffer *host = (DbpBuffer *)dbp_view_to_host(v);
      dbp_view_release(v);
      Py_DECREF(v);
      if (host != NULL) {
        if (target->is_host) out = (PyObject *)host;
        else {
          out = dbp_buffer_copy_to(host, target);
          Py_DECREF(host);
        }
      }
    }
  }
  Py_DECREF(target);
  return out;
}

/* DevbufPy_GetBufferEx(obj, ext, PyBUF_RECORDS_RO | PyBUF_DEVICE), with
 * its step 2 (refuse required flags the type does not advertise) skipped for
 * devbuf's own exact DeviceBuffer and DeviceView: static types, whose
 * advertised flags cannot change, checked once here to cover the request.
 * The rest is GetBufferEx's: the type's own bf_getbuffer (so the export is
 * counted exactly as any other), and the CPU-buffer scrub. In the native
 * build (the interpreter's own PyObject_GetBuffer) always GetBufferEx. */
enum { EXPORT_FLAGS = PyBUF_RECORDS_RO | PyBUF_DEVICE };
#ifndef Py_HAVE_BUFFER_DEVICE_EXTENSION
static int g_own_direct = -1; /* unknown yet */

static int own_direct_ok(void) {
  int a = 0, b = 0;
  int required = EXPORT_FLAGS & PyBUF_REQUIRED_FLAGS;
  if (DevbufPy_GetBufferSupportedFlags(&DbpBuffer_Type, &a) < 0 ||
      DevbufPy_GetBufferSupportedFlags(&DbpView_Type, &b) < 0) {
    PyErr_Clear();
    return 0;
  }
  return (required & ~a) == 0 && (required & ~b) == 0;
}
#endif

static int get_export(PyObject *obj, DevbufPy_buffer_ext *ext) {
#ifndef Py_HAVE_BUFFER_DEVICE_EXTENSION
  PyTypeObject *tp = Py_TYPE(obj);
  if (tp == &DbpBuffer_Type || tp == &DbpView_Type) {
    int direct = DBP_LOAD_INT(&g_own_direct);
    if (direct < 0) DBP_STORE_INT(&g_own_direct, direct = own_direct_ok());
    if (direct) {
      ext->flags = 0;
      ext->ext_flags = 0;
      ext->view.obj = NULL;
      if (tp->tp_as_buffer->bf_getbuffer(obj, &ext->view, EXPORT_FLAGS) < 0) {
        ext->view.obj = NULL;
        ext->device = NULL;
        ext->device_info = NULL;
        return -1;
      }
      if (!(ext->flags & PyBUF_DEVICE)) {
        ext->device = NULL;
        ext->device_info = NULL;
      }
      return 0;
    }
  }
#endif
  return DevbufPy_GetBufferEx(obj, ext, EXPORT_FLAGS);
}

int dbp_dlpack_export(PyObject *obj, int versioned, PyObject *stream, int sync,
                      const DLDevice *target, int copy, void **out) {
  devbuf_error err;
  devbuf_error_clear(&err);
  *out = NULL;
  export_block *h = block_alloc();
  if (h == NULL) return -1;
  if (get_export(obj, &h->ext) < 0) {
    block_free(h);
    return -1;
  }
  src_info s;
  if (src_describe(&h->ext, &s) < 0) goto fail;
  uint32_t extra = src_dl_flags(&s);

  /* Is a copy needed, or asked for? */
  int same = 1;
  const char *tid = NULL;
  int32_t tord = 0;
  if (target != NULL) {
    if (devbuf_dlpack_device_to_identifier(*target, &tid, &tord, NULL, &err) != DEVBUF_OK) {
      devbuf_error_prefix(&err, "__dlpack__: dl_device");
      dbp_buffer_error(&err);
      goto fail;
    }
    /* cpu has the single device 0: (kDLCPU, 1) names a device that does
     * not exist, it is not a synonym for (kDLCPU, 0). */
    if (strcmp(tid, "cpu") == 0 && target->device_id != 0) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: dl_device (%d, %d): %s has only device_id 0",
                   (int)target->device_type, (int)target->device_id,
                   devbuf_dlpack_device_type_name((int32_t)target->device_type));
      goto fail;
    }
    /* devbuf answers host memory as kDLCPU (it cannot tell which runtime
     * pinned it): a request for kDLCUDAHost/kDLROCMHost would be answered on
     * another device type, which the consumer did not ask for. */
    if (strcmp(tid, "cpu") == 0 && (int32_t)target->device_type != kDLCPU) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: dl_device (%d, %d) (%s): devbuf exports host memory only as "
                   "kDLCPU",
                   (int)target->device_type, (int)target->device_id,
                   devbuf_dlpack_device_type_name((int32_t)target->device_type));
      goto fail;
    }
    same = strcmp(tid, s.identifier) == 0 && tord == s.ordinal;
  }
  if (copy == 1 || !same) {
    if (copy == 0) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__: copy=False, but the buffer is on %s:%d and dl_device asks for "
                   "%s:%d (%s): that needs a copy",
                   s.identifier, (int)s.ordinal, tid, (int)tord,
                   devbuf_dlpack_device_type_name((int32_t)target->device_type));
      goto fail;
    }
    DevbufPy_BufferRelease(&h->ext);
    block_free(h);
    h = NULL;
    PyObject *c = copy_to_device(obj, tid ? tid : s.identifier, tid ? tord : s.ordinal);
    if (c == NULL) {
      /* The array API: a dl_device the producer cannot serve is a
       * BufferError, whatever the plugin layer said. */
      if (target != NULL && PyErr_ExceptionMatches(dbp_Error) &&
          !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_Format(PyExc_BufferError, "__dlpack__: dl_device (%d, %d) (%s:%d) is not usable: %S",
                     (int)target->device_type, (int)target->device_id, tid, (int)tord,
                     v ? v : Py_None);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
      }
      return -1;
    }
    /* The copy is ready on its device's default stream when copy_to returns
     * (or carries its own event): export it like any other buffer. */
    int rc = dbp_dlpack_export(c, versioned, stream, sync, NULL, -1, out);
    Py_DECREF(c);
    if (rc == 0 && versioned) ((DLManagedTensorVersioned *)*out)->flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
    return rc;
  }
  devbuf_dlpack_export_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.struct_size = sizeof spec;
  spec.flags = extra | (h->ext.view.readonly ? DEVBUF_DLPACK_READONLY : 0);
  spec.identifier = s.identifier;
  spec.ordinal = s.ordinal;
  spec.data = h->ext.view.buf;
  spec.format = h->ext.view.format ? h->ext.view.format : "B";
  int64_t flat_shape[1];
  /* NULL shape with ndim 0 is a 0-d item and stays 0-d; with ndim != 0 it is
   * a producer that ignored PyBUF_ND, exported flat. */
  if (h->ext.view.shape == NULL && h->ext.view.ndim != 0) {
    spec.ndim = 1;
    flat_shape[0] = h->ext.view.itemsize ? h->ext.view.len / h->ext.view.itemsize : h->ext.view.len;
    spec.shape = flat_shape;
  } else {
    spec.ndim = h->ext.view.ndim;
    spec.shape = (const int64_t *)h->ext.view.shape;
    spec.strides = (const int64_t *)h->ext.view.strides;
  }
  /* spec.release stays NULL: the block's deleter releases the export. */
  if (spec.ndim > BLOCK_NDIM &&
      (h->dims = PyMem_RawMalloc(2 * (size_t)spec.ndim * sizeof(int64_t))) == NULL) {
    h->dims = h->inline_dims;
    PyErr_NoMemory();
    goto fail;
  }
  int rc;
  if (versioned) {
    rc = devbuf_dlpack_export_versioned_into(&spec, &h->m.v, h->dims, &err);
    h->m.v.manager_ctx = h;
    h->m.v.deleter = block_deleter_v;
  } else {
    rc = devbuf_dlpack_export_legacy_into(&spec, &h->m.l, h->dims, &err);
    h->m.l.manager_ctx = h;
    h->m.l.deleter = block_deleter_l;
  }
  if (rc != DEVBUF_OK) {
    devbuf_error_prefix(&err, "__dlpack__");
    dbp_buffer_error(&err);
    goto fail;
  }

  /* The consumer's stream, checked against the tensor's DLPack device (the
   * tensor is not handed out on failure: the fail path releases it): make
   * it wait for the data. */
  {
    void *st = NULL;
    int skip = 0;
    DLDevice here = versioned ? h->m.v.dl_tensor.device : h->m.l.dl_tensor.device;
    if (parse_stream(stream, (int32_t)here.device_type, &st, &skip) < 0) goto fail;
    if (sync && !skip && s.event != NULL && s.has_dev) {
      int wrc;
      DBP_NOGIL(wrc = devbuf_stream_wait_event(&s.dev, st, s.event, &err));
      if (wrc != DEVBUF_OK) {
        devbuf_error_prefix(&err, "__dlpack__: making the consumer's stream wait");
        dbp_fail(&err);
        goto fail;
      }
    }
  }
  *out = versioned ? (void *)&h->m.v : (void *)&h->m.l;
  return 0; /* h now belongs to the managed tensor */
fail:
  if (h) {
    DevbufPy_BufferRelease(&h->ext);
    block_free(h);
  }
  return -1;
}

/* ---- capsules ----------------------------------------------------------------- */

static void capsule_destructor(PyObject *cap, int versioned) {
  const char *live = versioned ? DEVBUF_DLPACK_CAPSULE_VERSIONED : DEVBUF_DLPACK_CAPSULE_LEGACY;
  const char *used =
      versioned ? DEVBUF_DLPACK_CAPSULE_VERSIONED_USED : DEVBUF_DLPACK_CAPSULE_LEGACY_USED;
  /* The name read once (a destructor's capsule is valid); the consumed
   * case, the common one, touches no exception state. */
  const char *name = PyCapsule_GetName(cap);
  if (name != NULL && strcmp(name, used) == 0) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb); /* may run while an exception is being handled */
  if (name != NULL && strcmp(name, live) == 0) { /* never consumed: the deleter is ours */
    void *m = PyCapsule_GetPointer(cap, name);
    if (versioned) devbuf_dlpack_delete_versioned(m);
    else devbuf_dlpack_delete_legacy(m);
  } else {
    PyErr_SetString(PyExc_RuntimeError, "DLPack capsule destroyed under an unexpected name");
    PyErr_WriteUnraisable(cap);
  }
  PyErr_Restore(t, v, tb);
}
static void capsule_destructor_v(PyObject *cap) { capsule_destructor(cap, 1); }
static void capsule_destructor_l(PyObject *cap) { capsule_destructor(cap, 0); }

/* __dlpack__'s keywords, interned at init. Callers' keyword names are
 * interned too (the compiler interns identifiers; NumPy's from_dlpack builds
 * its kwnames from interned strings), so a pointer test finds them; the text
 * comparison (a third of an export's cost when it ran first) is the fallback. */
static const char *const g_kw_text[4] = {"stream", "max_version", "dl_device", "copy"};
static PyObject *g_kw[4];

static int kw_index(PyObject *k) {
  for (int i = 0; i < 4; i++)
    if (k == g_kw[i]) return i;
  for (int i = 0; i < 4; i++)
    if (PyUnicode_CompareWithASCIIString(k, g_kw_text[i]) == 0) return i;
  return -1;
}

static PyObject *dlpack_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy_o = Py_None;
  if (nargs > 0) {
    PyErr_SetString(PyExc_TypeError, "__dlpack__() takes keyword arguments only");
    return NULL;
  }
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *val = args[i];
    int w = kw_index(k);
    if (w == 0) stream = val;
    else if (w == 1) max_version = val;
    else if (w == 2) dl_device = val;
    else if (w == 3) copy_o = val;
    else {
      PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument '%U'", k);
      return NULL;
    }
  }
  int versioned = 0;
  if (max_version != Py_None) {
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2) {
      PyErr_SetString(PyExc_TypeError, "__dlpack__: max_version must be a (major, minor) tuple");
      return NULL;
    }
    long major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
    if (major == -1 && PyErr_Occurred()) return NULL;
    versioned = major >= 1;
  }
  DLDevice target;
  int has_target = 0;
  if (dl_device != Py_None) {
    if (parse_dl_device(dl_device, &target) < 0) return NULL;
    has_target = 1;
  }
  int copy = -1;
  if (copy_o != Py_None) {
    copy = PyObject_IsTrue(copy_o);
    if (copy < 0) return NULL;
  }
  void *m = NULL;
  if (dbp_dlpack_export(self, versioned, stream, 1, has_target ? &target : NULL, copy, &m) < 0)
    return NULL;
  PyObject *cap = PyCapsule_New(m, versioned ? DEVBUF_DLPACK_CAPSULE_VERSIONED
                                             : DEVBUF_DLPACK_CAPSULE_LEGACY,
                                versioned ? capsule_destructor_v : capsule_destructor_l);
  if (cap == NULL) {
    if (versioned) devbuf_dlpack_delete_versioned(m);
    else devbuf_dlpack_delete_legacy(m);
  }
  return cap;
}

int dbp_dlpack_device_of(PyObject *obj, DLDevice *out) {
  DevbufPy_buffer_ext ext;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (DevbufPy_GetBufferEx(obj, &ext, PyBUF_RECORDS_RO | PyBUF_DEVICE) < 0) return -1;
  src_info s;
  int rc = src_describe(&ext, &s);
  if (rc == 0 &&
      devbuf_dlpack_device_from_identifier(s.identifier, s.ordinal, src_dl_flags(&s), out, &err) !=
          DEVBUF_OK) {
    devbuf_error_prefix(&err, "__dlpack_device__");
    rc = dbp_buffer_error(&err);
  }
  DevbufPy_BufferRelease(&ext);
  return rc;
}

static PyObject *dlpack_device_method(PyObject *self, PyObject *unused) {
  DLDevice d;
  if (dbp_dlpack_device_of(self, &d) < 0) return NULL;
  return Py_BuildValue("(ii)", (int)d.device_type, (int)d.device_id);
}

/* ---- __array_interface__ / __cuda_array_interface__ ---------------------------- */

/* NumPy typestr of one plain item, or NULL with AttributeError. */
static int typestr_of(const char *format, char *out, size_t cap) {
  DLDataType dt;
  devbuf_error err;
  int padded = 0;
  devbuf_error_clear(&err);
  /* "[devbuf$datetime64(U)]" / "[devbuf$timedelta64(U)]" are NumPy's
   * '<M8[U]' / '<m8[U]' (the unit was checked when the format was made):
   * the way back to NumPy, whose buffer reader has no datetime. */
  const uint16_t one = 1;
  char native = *(const unsigned char *)&one == 1 ? '<' : '>';
  size_t n = strlen(format);
  for (int k = 0; k < 2; k++) {
    const char *pre = k ? "[devbuf$timedelta64(" : "[devbuf$datetime64(";
    size_t pl = strlen(pre);
    if (n > pl + 2 && memcmp(format, pre, pl) == 0 && memcmp(format + n - 2, ")]", 2) == 0 &&
        memchr(format + pl, ';', n - pl) == NULL && (size_t)snprintf(out, cap, "%c%c8[%.*s]", native,
                                                         k ? 'm' : 'M', (int)(n - pl - 2),
                                                         format + pl) < cap)
      return 0;
  }
  if (devbuf_dlpack_dtype_from_format(format, (size_t)-1, &dt, &padded, &err) != DEVBUF_OK) {
    PyErr_Format(PyExc_AttributeError, "no array-interface typestr for format '%s': %s", format,
                 err.message);
    return -1;
  }
  char kind;
  switch (dt.code) {
    case kDLInt: kind = 'i'; break;
    case kDLUInt: kind = 'u'; break;
    case kDLFloat: kind = 'f'; break;
    case kDLComplex: kind = 'c'; break;
    case kDLBool: kind = 'b'; break;
    default: kind = 0; break;
  }
  if (kind == 0 || dt.lanes != 1 || dt.bits % 8 != 0 || (dt.code == kDLComplex && dt.bits < 64)) {
    PyErr_Format(PyExc_AttributeError,
                 "no array-interface typestr for format '%s' (a custom dtype or a vector "
                 "item: use the buffer protocol or DLPack, which carry it)",
                 format);
    return -1;
  }
  char order = dt.bits == 8 ? '|' : native;
  snprintf(out, cap, "%c%c%u", order, kind, (unsigned)(dt.bits / 8));
  return 0;
}

static PyObject *interface_dict(PyObject *self, int cuda) {
  DevbufPy_buffer_ext ext;
  if (DevbufPy_GetBufferEx(self, &ext, PyBUF_RECORDS_RO | PyBUF_DEVICE) < 0) {
    /* Not representable at all: the attribute does not exist. */
    if (PyErr_ExceptionMatches(PyExc_BufferError)) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      PyErr_Format(PyExc_AttributeError, "%R", v ? v : Py_None);
      Py_XDECREF(t);
      Py_XDECREF(v);
      Py_XDECREF(tb);
    }
    return NULL;
  }
  PyObject *d = NULL;
  src_info s;
  if (src_describe(&ext, &s) < 0) {
    PyErr_Clear();
    PyErr_SetString(PyExc_AttributeError, "the buffer's device information is not readable");
    goto done;
  }
  int host = (s.info_flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE) != 0;
  if (cuda && strcmp(s.identifier, "devbuf.cuda") != 0) {
    PyErr_Format(PyExc_AttributeError,
                 "__cuda_array_interface__ exists only for devbuf.cuda memory, not %s",
                 s.identifier);
    goto done;
  }
  if (!cuda && !host) {
    PyErr_Format(PyExc_AttributeError,
                 "__array_interface__ exists only for memory the host can read; this is %s "
                 "device memory (use DLPack, or .to_host())",
                 s.identifier);
    goto done;
  }
  char typestr[DEVBUF_DLPACK_FORMAT_MAX];
  if (typestr_of(ext.view.format ? ext.view.format : "B", typestr, sizeof typestr) < 0) goto done;
  if (!cuda && s.event != NULL && s.has_dev) {
    /* The host reads as soon as it has the dict. */
    devbuf_error err;
    int rc;
    devbuf_error_clear(&err);
    DBP_NOGIL(rc = devbuf_event_synchronize(&s.dev, s.event, &err));
    if (rc != DEVBUF_OK) {
      dbp_fail(&err);
      goto done;
    }
  }
  PyObject *shape, *strides;
  if (ext.view.shape == NULL && ext.view.ndim != 0) { /* ignored PyBUF_ND: flat */
    Py_ssize_t n = ext.view.itemsize ? ext.view.len / ext.view.itemsize : ext.view.len;
    shape = dbp_tuple_from_ssize(1, &n);
    strides = Py_NewRef(Py_None);
  } else {
    shape = dbp_tuple_from_ssize(ext.view.ndim, ext.view.shape);
    strides = (ext.view.strides == NULL || PyBuffer_IsContiguous(&ext.view, 'C'))
                  ? Py_NewRef(Py_None)
                  : dbp_tuple_from_ssize(ext.view.ndim, ext.view.strides);
  }
  if (shape == NULL || strides == NULL) {
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    goto done;
  }
  d = Py_BuildValue("{s:N,s:s,s:(NO),s:N,s:i,s:[(ss)]}", "shape", shape, "typestr", typestr,
                    "data", PyLong_FromVoidPtr(ext.view.buf),
                    ext.view.readonly ? Py_True : Py_False, "strides", strides, "version",
                    3, "descr", "", typestr);
  if (d != NULL && cuda) {
    /* CAI v3: the consumer synchronises with `stream` before use. devbuf
     * orders a buffer's work on the legacy default stream (1). */
    PyObject *st = s.event ? PyLong_FromLong(1) : Py_NewRef(Py_None);
    if (st == NULL || PyDict_SetItemString(d, "stream", st) < 0 ||
        PyDict_SetItemString(d, "mask", Py_None) < 0)
      Py_CLEAR(d);
    Py_XDECREF(st);
  }
done:
  DevbufPy_BufferRelease(&ext);
  return d;
}

static PyObject *get_array_interface(PyObject *self, void *c) { return interface_dict(self, 0); }
static PyObject *get_cuda_array_interface(PyObject *self, void *c) {
  return interface_dict(self, 1);
}

/* ---- the DLPack 1.3 C exchange table ---------------------------------------------- */

static void set_error_from_python(void *error_ctx,
                                  void (*set_error)(void *, const char *, const char *)) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyObject *s = v ? PyObject_Str(v) : NULL;
  const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
  if (msg == NULL) PyErr_Clear();
  set_error(error_ctx, t ? ((PyTypeObject *)t)->tp_name : "RuntimeError",
            msg ? msg : "devbuf: allocation failed");
  Py_XDECREF(s);
  Py_XDECREF(t);
  Py_XDECREF(v);
  Py_XDECREF(tb);
}

static int xa_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                        void (*set_error)(void *, const char *, const char *)) {
  *out = NULL;
  /* The exchange table is process-wide, with no owner to keep a home: it
   * enters the main interpreter, as PyGILState_Ensure did. */
  dbp_entered st;
  if (dbp_enter(NULL, &st) < 0) {
    set_error(error_ctx, "RuntimeError",
              "devbuf allocator: the Python interpreter is finalizing or gone");
    return -1;
  }
  int rc = -1;
  devbuf_error err;
  devbuf_error_clear(&err);
  char fmt[DEVBUF_DLPACK_FORMAT_MAX];
  uint64_t itemsize = 0;
  uint32_t epi = 1;
  const char *id = NULL;
  int32_t ord = 0;
  if (prototype == NULL || prototype->ndim < 0 || prototype->ndim > DEVBUF_DLPACK_MAX_NDIM ||
      (prototype->ndim > 0 && prototype->shape == NULL)) {
    set_error(error_ctx, "ValueError", "devbuf allocator: malformed prototype tensor");
    goto out;
  }
  if (devbuf_dlpack_device_to_identifier(prototype->device, &id, &ord, NULL, &err) != DEVBUF_OK ||
      devbuf_dlpack_dtype_to_format(prototype->dtype, 0, fmt, sizeof fmt, &itemsize, &epi, &err) !=
          DEVBUF_OK) {
    set_error(error_ctx, "BufferError", err.message);
    goto out;
  }
  Py_ssize_t shape[DEVBUF_DLPACK_MAX_NDIM];
  for (int i = 0; i < prototype->ndim; i++) shape[i] = prototype->shape[i];
  if (epi > 1) {
    if (prototype->ndim == 0 || shape[prototype->ndim - 1] % epi) {
      set_error(error_ctx, "BufferError",
                "devbuf allocator: packed sub-byte tensors need a last dimension that fills "
                "whole bytes");
      goto out;
    }
    shape[prototype->ndim - 1] /= epi;
  }
  PyObject *spec = strcmp(id, "cpu") == 0 ? PyUnicode_FromString("cpu")
                                          : PyUnicode_FromFormat("%s:%d", id, (int)ord);
  DbpDevice *dev = spec ? dbp_device_get(spec) : NULL;
  Py_XDECREF(spec);
  DbpBuffer *b = dev ? dbp_buffer_new(dev, prototype->ndim, shape, fmt, (Py_ssize_t)itemsize, 0)
                     : NULL;
  Py_XDECREF(dev);
  void *m = NULL;
  if (b == NULL || dbp_dlpack_export((PyObject *)b, 1, NULL, 0, NULL, -1, &m) < 0) {
    Py_XDECREF(b);
    set_error_from_python(error_ctx, set_error);
    goto out;
  }
  Py_DECREF(b); /* the tensor's held export keeps it alive */
  *out = m;
  rc = 0;
out:
  dbp_leave(&st);
  return rc;
}

static int xa_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  void *m = NULL;
  *out = NULL;
  /* "NoSync" leaves stream work to the consumer, who works on
   * current_work_stream: devbuf's default stream. A pending producer event
   * is made a dependency of that stream (device-side, no host wait), so
   * that what current_work_stream says holds. */
  if (dbp_dlpack_export((PyObject *)py_object, 1, NULL, 1, NULL, -1, &m) < 0) return -1;
  *out = m;
  return 0;
}

static int xa_to_py_object_view(DLManagedTensorVersioned *tensor, void **out_py_object) {
  *out_py_object = NULL;
  dbp_desc *d = dbp_desc_from_versioned(tensor, NULL);
  if (d == NULL) {
    devbuf_dlpack_delete_versioned(tensor); /* ownership was stolen */
    return -1;
  }
  DbpView *v = dbp_view_from_desc(d, 0); /* owns d, even on failure */
  if (v == NULL) return -1;
  *out_py_object = v;
  return 0;
}

static int xa_to_py_object_foreign(DLManagedTensorVersioned *tensor, void **out_py_object) {
  *out_py_object = NULL;
  DbpForeign *f = dbp_foreign_from_versioned(tensor, NULL);
  if (f == NULL) {
    devbuf_dlpack_delete_versioned(tensor);
    return -1;
  }
  *out_py_object = f;
  return 0;
}

/* Borrowed DLTensor of a ForeignArray: its own arrays, no allocation. */
static int xa_dltensor_foreign(void *py_object, DLTensor *out) {
  PyObject *o = py_object;
  if (!PyObject_TypeCheck(o, &DbpForeign_Type)) {
    PyErr_Format(PyExc_TypeError, "devbuf exchange table: expected a devbuf.ForeignArray, got %.100s",
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  const dbp_desc *d = ((DbpForeign *)o)->d;
  if (d->format_only) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf exchange table: this devbuf.ForeignArray holds '%s', which has no DLPack "
                 "dtype", d->desc.format);
    return -1;
  }
  *out = d->tensor;
  return 0;
}

static int xa_current_work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  /* devbuf orders its work on each device's default stream. */
  (void)device_type;
  (void)device_id;
  *out = NULL;
  return 0;
}

/* DeviceBuffer and DeviceView: no borrowed-DLTensor function (their byte
 * strides would need per-object element strides; DLPack allows NULL). */
static const devbuf_dlpack_exchange_api g_api_devbuf = {
    {{DEVBUF_DLPACK_MAJOR, DEVBUF_DLPACK_MINOR}, NULL},
    xa_allocator,
    xa_from_py_object,
    xa_to_py_object_view,
    NULL,
    xa_current_work_stream,
};

static const devbuf_dlpack_exchange_api g_api_foreign = {
    {{DEVBUF_DLPACK_MAJOR, DEVBUF_DLPACK_MINOR}, NULL},
    xa_allocator,
    xa_from_py_object,
    xa_to_py_object_foreign,
    xa_dltensor_foreign,
    xa_current_work_stream,
};

/* ---- installation ------------------------------------------------------------------- */

static PyMethodDef export_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))dlpack_method, METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> PyCapsule of a "
     "DLPack managed tensor (\"dltensor_versioned\" when max_version >= (1, 0), else "
     "\"dltensor\"). The memory stays exported until the consumer calls the deleter."},
    {"__dlpack_device__", dlpack_device_method, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "__dlpack_device__() -> (device_type, device_id) as DLPack numbers them."},
    {NULL},
};

static PyGetSetDef export_getset[] = {
    {"__array_interface__", get_array_interface, NULL,
     "NumPy array interface (v3) of host-readable memory; AttributeError otherwise.", NULL},
    {"__cuda_array_interface__", get_cuda_array_interface, NULL,
     "CUDA Array Interface (v3, with stream) of devbuf.cuda memory; AttributeError otherwise.",
     NULL},
    {NULL},
};

/* Add methods, properties and the exchange table to a ready static type. */
static int install(PyTypeObject *type, const devbuf_dlpack_exchange_api *api) {
  PyObject *dict = type->tp_dict;
  for (PyMethodDef *m = export_methods; m->ml_name; m++) {
    PyObject *d = PyDescr_NewMethod(type, m);
    if (d == NULL || PyDict_SetItemString(dict, m->ml_name, d) < 0) {
      Py_XDECREF(d);
      return -1;
    }
    Py_DECREF(d);
  }
  for (PyGetSetDef *g = export_getset; g->name; g++) {
    PyObject *d = PyDescr_NewGetSet(type, g);
    if (d == NULL || PyDict_SetItemString(dict, g->name, d) < 0) {
      Py_XDECREF(d);
      return -1;
    }
    Py_DECREF(d);
  }
  PyObject *cap = PyCapsule_New((void *)api, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE, NULL);
  if (cap == NULL || PyDict_SetItemString(dict, DEVBUF_DLPACK_EXCHANGE_API_ATTR, cap) < 0) {
    Py_XDECREF(cap);
    return -1;
  }
  Py_DECREF(cap);
  PyType_Modified(type);
  return 0;
}

int dbp_export_init(PyObject *module) {
  /* For tests: the count of deleters refused by a finalizing interpreter
   * (an _Atomic long), readable by C threads after Python is gone. */
  PyObject *counter =
      PyCapsule_New((void *)&g_deleters_refused, "devbuf._devbuf._dlpack_deleters_refused", NULL);
  if (PyModule_AddObjectRef(module, "_dlpack_deleters_refused", counter) < 0) {
    Py_XDECREF(counter);
    return -1;
  }
  Py_DECREF(counter);
  for (int i = 0; i < 4; i++)
    if (g_kw[i] == NULL && (g_kw[i] = PyUnicode_InternFromString(g_kw_text[i])) == NULL) return -1;
  if (install(&DbpBuffer_Type, &g_api_devbuf) < 0) return -1;
  if (install(&DbpView_Type, &g_api_devbuf) < 0) return -1;
  if (install(&DbpForeign_Type, &g_api_foreign) < 0) return -1;
  return 0;
}
