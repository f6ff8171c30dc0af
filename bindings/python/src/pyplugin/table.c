/* table.c: PpTable, a Python object made into a devbuf_plugin_table whose
 * function pointers are libffi closures (one PpClosure per slot), then
 * registered with devbuf_plugin_register.
 *
 * The Python-side contract (docs/python-plugins.md): device pointers, streams
 * and events are ints (addresses or opaque handles; NULL is None); host memory
 * comes as a memoryview valid only during the call (read-only for copy_h2d,
 * writable for copy_d2h), released afterwards; a Python exception becomes the
 * slot's status and message (pp_exception_to_error).
 *
 * Lifetime: from register() until unregister() returns, the table, its
 * strings, its closures and the plugin object are kept alive by g_registry,
 * whatever Python code drops. unregister() asks the runtime first (refused
 * with DEVBUF_EBUSY while allocations, streams or events made through the
 * plugin are alive), then waits for calls still in a trampoline, and only
 * then frees the closures and drops the plugin object. */
#include "pyplugin.h"

#include <string.h>

enum { PP_NEW = 0, PP_REGISTERED = 1, PP_UNREGISTERED = 2, PP_FAILED = 3 };
static const char *const state_names[] = {"new", "registered", "unregistered", "failed"};

typedef struct PpTable {
  PyObject_HEAD
  devbuf_plugin_table table;
  char *name, *version, *description, *who, *origin;
  char **ids;              /* NULL-terminated */
  devbuf_ext_function *ext;
  size_t next;
  PyObject *closures;      /* list of PpClosure: slots, then ext functions */
  PyObject *plugin;        /* the Python object, strong until unregistered */
  PyObject *key;           /* g_registry key while registered */
  size_t index;
  int state;
  _Atomic long inflight;
} PpTable;

/* ---- helpers ------------------------------------------------------------------- */

#define A_INT(k) (*(int *)a[k])
#define A_PTR(k) (*(void **)a[k])
#define A_SIZE(k) (*(size_t *)a[k])
#define A_U32(k) (*(uint32_t *)a[k])

/* Call with `n` new references (any NULL: fail after dropping the rest). */
static PyObject *callv(PpClosure *c, PyObject **argv, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad |= argv[i] == NULL;
  PyObject *r = bad ? NULL : PyObject_Vectorcall(c->callable, argv, n, NULL);
  for (size_t i = 0; i < n; i++) Py_XDECREF(argv[i]);
  return r;
}

#define CALL(c, ...)                                            \
  ({                                                            \
    PyObject *argv_[] = {__VA_ARGS__};                          \
    callv((c), argv_, sizeof argv_ / sizeof argv_[0]);          \
  })

static PyObject *call0(PpClosure *c) { return PyObject_CallNoArgs(c->callable); }

static PyObject *py_i(long v) { return PyLong_FromLong(v); }
static PyObject *py_z(size_t v) { return PyLong_FromSize_t(v); }
static PyObject *py_h(const void *p) { return pp_from_handle(p); }

/* A handle the plugin returned; `nonnull` refuses 0/None. */
static int ret_handle(PyObject *r, void **out, int nonnull, const char *op) {
  void *p;
  char what[96];
  snprintf(what, sizeof what, "%s return value", op);
  if (pp_as_handle(r, &p, what) < 0) {
    /* A plugin bug, not a bad caller argument: report it as such. */
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      PyErr_NormalizeException(&t, &v, &tb);
      PyErr_Format(PyExc_TypeError, "%S", v);
      Py_XDECREF(t);
      Py_XDECREF(v);
      Py_XDECREF(tb);
    }
    return -1;
  }
  if (nonnull && p == NULL) {
    PyErr_Format(PyExc_TypeError, "%s returned %R: a non-zero int handle is required", op, r);
    return -1;
  }
  *out = p;
  return 0;
}

/* A memoryview over C memory for the duration of one call. */
static PyObject *host_view(const void *p, size_t n, int writable) {
  static char empty[1];
  if (n > (size_t)PY_SSIZE_T_MAX) {
    PyErr_SetString(PyExc_OverflowError, "host buffer larger than PY_SSIZE_T_MAX");
    return NULL;
  }
  return PyMemoryView_FromMemory(p ? (char *)p : empty, (Py_ssize_t)n,
                                 writable ? PyBUF_WRITE : PyBUF_READ);
}

/* Release the view; if the plugin kept an export, that is its bug. Returns
 * -1 with an exception only when `ok` (the call itself succeeded). */
static int end_view(PyObject *mv, int ok, const char *op) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb); /* the call's own exception, kept aside */
  /* Views made from ours (np.frombuffer(src), memoryview(src)) register on
   * the same managed buffer: watch it, not just our view. */
  PyObject *mbuf = Py_NewRef((PyObject *)((PyMemoryViewObject *)mv)->mbuf);
  PyObject *r = PyObject_CallMethod(mv, "release", NULL);
  Py_DECREF(mv);
  int kept = r == NULL || ((_PyManagedBufferObject *)mbuf)->exports != 0;
  Py_DECREF(mbuf);
  Py_XDECREF(r);
  PyErr_Clear();
  if (!kept || !ok) { /* nothing kept, or the call's exception is the better report */
    PyErr_Restore(t, v, tb);
    return 0;
  }
  Py_XDECREF(t);
  Py_XDECREF(v);
  Py_XDECREF(tb);
  PyErr_Format(PyExc_BufferError,
               "%s kept an export of the host memoryview past the call (the memory is only "
               "lent for the call: copy it if it is needed later)", op);
  return -1;
}

static int u64_field(PyObject *obj, const char *name, uint64_t *out, int *present) {
  PyObject *v = pp_get_field(obj, name);
  *present = 0;
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (v == Py_None) {
    Py_DECREF(v);
    return 0;
  }
  unsigned long long x = PyLong_AsUnsignedLongLong(v);
  Py_DECREF(v);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "device_props: '%s' must be a non-negative int", name);
    return -1;
  }
  *out = x;
  *present = 1;
  return 0;
}

static int i64_field(PyObject *obj, const char *name, long long *out, int *present) {
  PyObject *v = pp_get_field(obj, name);
  *present = 0;
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (v == Py_None) {
    Py_DECREF(v);
    return 0;
  }
  long long x = PyLong_AsLongLong(v);
  Py_DECREF(v);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "'%s' must be an int", name);
    return -1;
  }
  *out = x;
  *present = 1;
  return 0;
}

static int str_field(PyObject *obj, const char *name, char *buf, size_t cap) {
  PyObject *v = pp_get_field(obj, name);
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (v == Py_None) {
    Py_DECREF(v);
    return 0;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
  if (s == NULL) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "device_props: '%s' must be a str", name);
    Py_DECREF(v);
    return -1;
  }
  size_t k = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
  /* Do not cut a UTF-8 sequence in half. */
  while (k > 0 && k < (size_t)n && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  memcpy(buf, s, k);
  buf[k] = '\0';
  Py_DECREF(v);
  return 0;
}

static int flags_field(PyObject *obj, uint32_t *out) {
  PyObject *v = pp_get_field(obj, "flags");
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (PyLong_Check(v)) {
    unsigned long x = PyLong_AsUnsignedLong(v);
    Py_DECREF(v);
    if (x == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (x > UINT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "device_props: 'flags' does not fit 32 bits");
      return -1;
    }
    *out = (uint32_t)x;
    return 0;
  }
  /* An iterable of names. */
  PyObject *it = PyObject_GetIter(v);
  Py_DECREF(v);
  if (it == NULL) return -1;
  uint32_t f = 0;
  PyObject *x;
  while ((x = PyIter_Next(it)) != NULL) {
    const char *s = PyUnicode_Check(x) ? PyUnicode_AsUTF8(x) : NULL;
    if (s && strcmp(s, "host_accessible") == 0) f |= DEVBUF_DEVICE_HOST_ACCESSIBLE;
    else if (s && strcmp(s, "unified") == 0) f |= DEVBUF_DEVICE_UNIFIED;
    else if (s && strcmp(s, "async") == 0) f |= DEVBUF_DEVICE_ASYNC;
    else {
      PyErr_Format(PyExc_ValueError,
                   "device_props: unknown flag %R (host_accessible, unified, async)", x);
      Py_DECREF(x);
      Py_DECREF(it);
      return -1;
    }
    Py_DECREF(x);
  }
  Py_DECREF(it);
  if (PyErr_Occurred()) return -1;
  *out = f;
  return 0;
}

#define FITS(p, field) (offsetof(devbuf_device_props, field) + sizeof((p)->field) <= (p)->struct_size)

static int fill_props(PyObject *r, devbuf_device_props *p) {
  devbuf_device_props tmp = *p;
  uint64_t u;
  long long s;
  int present;
  if (str_field(r, "name", tmp.name, sizeof tmp.name) < 0) return -1;
  if (str_field(r, "vendor", tmp.vendor, sizeof tmp.vendor) < 0) return -1;
  if (u64_field(r, "total_memory", &u, &present) < 0) return -1;
  if (present) tmp.total_memory = u;
  if (u64_field(r, "free_memory", &u, &present) < 0) return -1;
  if (present) tmp.free_memory = u;
  if (u64_field(r, "alloc_alignment", &u, &present) < 0) return -1;
  if (present) {
    if (u > UINT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "device_props: alloc_alignment too large");
      return -1;
    }
    tmp.alloc_alignment = (uint32_t)u;
  }
  if (i64_field(r, "dlpack_device_type", &s, &present) < 0) return -1;
  if (present) tmp.dlpack_device_type = (int32_t)s;
  if (i64_field(r, "dlpack_device_id", &s, &present) < 0) return -1;
  if (present) tmp.dlpack_device_id = (int32_t)s;
  if (flags_field(r, &tmp.flags) < 0) return -1;
  /* Everything converted: write only what the caller's struct holds. */
  if (FITS(p, flags)) p->flags = tmp.flags;
  if (FITS(p, name)) memcpy(p->name, tmp.name, sizeof p->name);
  if (FITS(p, vendor)) memcpy(p->vendor, tmp.vendor, sizeof p->vendor);
  if (FITS(p, total_memory)) p->total_memory = tmp.total_memory;
  if (FITS(p, free_memory)) p->free_memory = tmp.free_memory;
  if (FITS(p, alloc_alignment)) p->alloc_alignment = tmp.alloc_alignment;
  if (FITS(p, dlpack_device_type)) p->dlpack_device_type = tmp.dlpack_device_type;
  if (FITS(p, dlpack_device_id)) p->dlpack_device_id = tmp.dlpack_device_id;
  return 0;
}

/* ---- the slots ----------------------------------------------------------------------- */

typedef int (*slot_fn)(PpTable *t, PpClosure *c, void **a, devbuf_error *err);

static int s_init(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = call0(c);
  if (r == NULL) return -1;
  Py_DECREF(r);
  return DEVBUF_OK; /* *state stays NULL: the closures carry their context */
}

static int s_shutdown(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = call0(c);
  if (r == NULL) PyErr_WriteUnraisable(c->callable); /* nowhere else to report it */
  Py_XDECREF(r);
  return DEVBUF_OK;
}

static int s_device_count(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  int *count = A_PTR(1);
  PyObject *r = call0(c);
  if (r == NULL) return -1;
  long n = PyLong_Check(r) ? PyLong_AsLong(r) : -1;
  if (!PyLong_Check(r) || n < 0 || n > INT32_MAX) {
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "device_count returned %R: expected an int >= 0", r);
    }
    Py_DECREF(r);
    return -1;
  }
  Py_DECREF(r);
  if (count) *count = (int)n;
  return DEVBUF_OK;
}

static int s_device_props(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  devbuf_device_props *p = A_PTR(2);
  PyObject *r = CALL(c, py_i(A_INT(1)));
  if (r == NULL) return -1;
  int rc = p ? fill_props(r, p) : 0;
  Py_DECREF(r);
  return rc < 0 ? -1 : DEVBUF_OK;
}

static int s_mem_alloc(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  void **ptr = A_PTR(5);
  PyObject *r = CALL(c, py_i(A_INT(1)), py_z(A_SIZE(2)), py_z(A_SIZE(3)), py_h(A_PTR(4)));
  if (r == NULL) return -1;
  void *p;
  int rc = ret_handle(r, &p, 1, "mem_alloc");
  Py_DECREF(r);
  if (rc < 0) return -1;
  if (ptr) *ptr = p;
  return DEVBUF_OK;
}

static int s_mem_free(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)), py_h(A_PTR(3)));
  Py_XDECREF(r);
  return r ? DEVBUF_OK : -1;
}

static int s_copy_h2d(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *mv = host_view(A_PTR(4), A_SIZE(5), 0);
  if (mv == NULL) return -1;
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)), py_z(A_SIZE(3)), Py_NewRef(mv), py_h(A_PTR(6)));
  Py_XDECREF(r);
  if (end_view(mv, r != NULL, "copy_h2d") < 0) return -1;
  return r ? DEVBUF_OK : -1;
}

static int s_copy_d2h(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *mv = host_view(A_PTR(2), A_SIZE(5), 1);
  if (mv == NULL) return -1;
  PyObject *r = CALL(c, py_i(A_INT(1)), Py_NewRef(mv), py_h(A_PTR(3)), py_z(A_SIZE(4)), py_h(A_PTR(6)));
  Py_XDECREF(r);
  if (end_view(mv, r != NULL, "copy_d2h") < 0) return -1;
  return r ? DEVBUF_OK : -1;
}

static int s_copy_d2d(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)), py_z(A_SIZE(3)), py_h(A_PTR(4)), py_z(A_SIZE(5)),
                     py_z(A_SIZE(6)), py_h(A_PTR(7)));
  Py_XDECREF(r);
  return r ? DEVBUF_OK : -1;
}

/* stream_create / event_create: (state, device, void **out, err) */
static int create_handle(PpClosure *c, void **a, int nonnull, const char *op) {
  void **out = A_PTR(2);
  PyObject *r = CALL(c, py_i(A_INT(1)));
  if (r == NULL) return -1;
  void *p;
  int rc = ret_handle(r, &p, nonnull, op);
  Py_DECREF(r);
  if (rc < 0) return -1;
  if (out) *out = p;
  return DEVBUF_OK;
}

static int s_stream_create(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  return create_handle(c, a, 0, "stream_create");
}

static int s_event_create(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  return create_handle(c, a, 1, "event_create");
}

/* (state, device, handle, err) */
static int s_one_handle(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)));
  Py_XDECREF(r);
  return r ? DEVBUF_OK : -1;
}

/* (state, device, handle, handle, err) */
static int s_two_handles(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)), py_h(A_PTR(3)));
  Py_XDECREF(r);
  return r ? DEVBUF_OK : -1;
}

static int s_event_query(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  PyObject *r = CALL(c, py_i(A_INT(1)), py_h(A_PTR(2)));
  if (r == NULL) return -1;
  int done = PyObject_IsTrue(r);
  Py_DECREF(r);
  if (done < 0) return -1;
  if (!done) return devbuf_error_set(err, DEVBUF_EBUSY, "event_query: not complete yet");
  return DEVBUF_OK;
}

static int s_device_info_export(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  const char *identifier = A_PTR(1);
  void *out = A_PTR(6);
  size_t cap = A_SIZE(7), *size = A_PTR(8);
  PyObject *r = CALL(c, PyUnicode_FromString(identifier ? identifier : ""), py_i(A_INT(2)),
                     py_h(A_PTR(3)), py_h(A_PTR(4)), PyLong_FromUnsignedLong(A_U32(5)));
  if (r == NULL) return -1;
  Py_buffer view;
  if (PyObject_GetBuffer(r, &view, PyBUF_SIMPLE) < 0) {
    Py_DECREF(r);
    PyErr_Format(PyExc_TypeError, "device_info_export must return a bytes-like object");
    return -1;
  }
  Py_DECREF(r);
  int rc = DEVBUF_OK;
  if ((size_t)view.len > cap || out == NULL) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "device_info_export: the device_info is %zd bytes, the buffer holds %zu",
                          view.len, cap);
  } else {
    memcpy(out, view.buf, (size_t)view.len);
    if (size) *size = (size_t)view.len;
  }
  PyBuffer_Release(&view);
  return rc;
}

/* The largest device_info handed to a Python importer. */
#define PP_DEVICE_INFO_MAX 4096

static int s_device_info_import(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  const char *identifier = A_PTR(1);
  const void *info = A_PTR(2);
  devbuf_device_info_desc *desc = A_PTR(3);
  if (info == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_info_import: info is NULL");
  /* Every device_info starts with its size (docs/python-plugins.md): lend
   * exactly that many bytes. */
  uint32_t size;
  memcpy(&size, info, sizeof size);
  if (size < sizeof size || size > PP_DEVICE_INFO_MAX)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "device_info_import: struct_size %u is not between 4 and %d", size,
                            PP_DEVICE_INFO_MAX);
  PyObject *mv = host_view(info, size, 0);
  if (mv == NULL) return -1;
  PyObject *r = CALL(c, PyUnicode_FromString(identifier ? identifier : ""), Py_NewRef(mv));
  if (end_view(mv, r != NULL, "device_info_import") < 0) {
    Py_XDECREF(r);
    return -1;
  }
  if (r == NULL) return -1;
  PyObject *ord = NULL, *flags = NULL, *ev = NULL, *st = NULL;
  if (PyTuple_Check(r)) {
    Py_ssize_t n = PyTuple_GET_SIZE(r);
    if (n < 1 || n > 4) {
      PyErr_Format(PyExc_TypeError,
                   "device_info_import must return (device_ordinal, flags, event, stream), got %R", r);
      Py_DECREF(r);
      return -1;
    }
    ord = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    if (n > 1) flags = Py_NewRef(PyTuple_GET_ITEM(r, 1));
    if (n > 2) ev = Py_NewRef(PyTuple_GET_ITEM(r, 2));
    if (n > 3) st = Py_NewRef(PyTuple_GET_ITEM(r, 3));
  } else {
    ord = pp_get_field(r, "device_ordinal");
    flags = pp_get_field(r, "flags");
    ev = pp_get_field(r, "event");
    st = pp_get_field(r, "stream");
  }
  Py_DECREF(r);
  int rc = -1;
  long o = -1;
  unsigned long f = 0;
  void *evp = NULL, *stp = NULL;
  if (ord == NULL) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "device_info_import: no device_ordinal in the answer");
    goto done;
  }
  o = PyLong_AsLong(ord);
  if (o == -1 && PyErr_Occurred()) goto done;
  if (o < 0 || o > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "device_info_import: device_ordinal %ld out of range", o);
    goto done;
  }
  if (flags && flags != Py_None) {
    f = PyLong_AsUnsignedLong(flags);
    if (f == (unsigned long)-1 && PyErr_Occurred()) goto done;
    if (f > UINT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "device_info_import: flags do not fit 32 bits");
      goto done;
    }
  }
  if (ev && ret_handle(ev, &evp, 0, "device_info_import event") < 0) goto done;
  if (st && ret_handle(st, &stp, 0, "device_info_import stream") < 0) goto done;
  if (desc) {
    desc->device_ordinal = (int32_t)o;
    desc->flags = (uint32_t)f;
    desc->event = evp;
    desc->stream = stp;
  }
  rc = DEVBUF_OK;
done:
  Py_XDECREF(ord);
  Py_XDECREF(flags);
  Py_XDECREF(ev);
  Py_XDECREF(st);
  return rc;
}

static int s_host_alloc(PpTable *t, PpClosure *c, void **a, devbuf_error *err) {
  void **ptr = A_PTR(3);
  PyObject *r = CALL(c, py_i(A_INT(1)), py_z(A_SIZE(2)));
  if (r == NULL) return -1;
  void *p;
  int rc = ret_handle(r, &p, 1, "host_alloc");
  Py_DECREF(r);
  if (rc < 0) return -1;
  if (ptr) *ptr = p;
  return DEVBUF_OK;
}

typedef struct slot_spec {
  const char *name;
  const char *sig;   /* the slot's C signature in ext-function letters */
  size_t offset;     /* in devbuf_plugin_table */
  slot_fn fn;
} slot_spec;

#define SLOT(n, s, f) {#n, s, offsetof(devbuf_plugin_table, n), f}
static const slot_spec slots[] = {
    SLOT(init, "i(pe)", s_init),
    SLOT(shutdown, "v(p)", s_shutdown),
    SLOT(device_count, "i(ppe)", s_device_count),
    SLOT(device_props, "i(pipe)", s_device_props),
    SLOT(mem_alloc, "i(piNNppe)", s_mem_alloc),
    SLOT(mem_free, "i(pippe)", s_mem_free),
    SLOT(copy_h2d, "i(pipNpNpe)", s_copy_h2d),
    SLOT(copy_d2h, "i(pippNNpe)", s_copy_d2h),
    SLOT(copy_d2d, "i(pipNpNNpe)", s_copy_d2d),
    SLOT(stream_create, "i(pipe)", s_stream_create),
    SLOT(stream_destroy, "i(pipe)", s_one_handle),
    SLOT(stream_synchronize, "i(pipe)", s_one_handle),
    SLOT(event_create, "i(pipe)", s_event_create),
    SLOT(event_destroy, "i(pipe)", s_one_handle),
    SLOT(event_record, "i(pippe)", s_two_handles),
    SLOT(stream_wait_event, "i(pippe)", s_two_handles),
    SLOT(event_synchronize, "i(pipe)", s_one_handle),
    SLOT(event_query, "i(pipe)", s_event_query),
    SLOT(device_info_export, "i(ppippIpNpe)", s_device_info_export),
    SLOT(device_info_import, "i(ppppe)", s_device_info_import),
    SLOT(host_alloc, "i(piNpe)", s_host_alloc),
    SLOT(host_free, "i(pipe)", s_one_handle),
};
enum { NSLOTS = sizeof slots / sizeof slots[0] };

static void slot_handler(PpClosure *c, void *ret, void **args) {
  const slot_spec *s = &slots[c->slot];
  PpTable *t = c->owner;
  devbuf_error *err = c->sig.err_index >= 0 ? *(devbuf_error **)args[c->sig.err_index] : NULL;
  int rc = s->fn(t, c, args, err);
  if (rc < 0) rc = pp_exception_to_error(t->who, s->name, err);
  else if (rc != DEVBUF_OK && err != NULL && err->message[0] == '\0')
    devbuf_error_set(err, rc, "%s: %s failed with %s", s->name, t->who, devbuf_status_name(rc));
  if (c->sig.ret != 'v') pp_ret_int(ret, rc);
}

static void slot_dead(PpClosure *c, void *ret, void **args) {
  PpTable *t = c->owner;
  if (c->sig.ret == 'v') return;
  devbuf_error *err = c->sig.err_index >= 0 ? *(devbuf_error **)args[c->sig.err_index] : NULL;
  pp_ret_int(ret, devbuf_error_set(err, DEVBUF_ECALLBACK, "%s: %s: the Python interpreter is finalizing",
                                   slots[c->slot].name, t->who));
}

/* ---- the object ------------------------------------------------------------------------ */

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = PyMem_RawMalloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void release_closures(PpTable *t) {
  if (t->closures == NULL) return;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(t->closures); i++)
    pp_closure_release((PpClosure *)PyList_GET_ITEM(t->closures, i));
  Py_CLEAR(t->closures);
  memset((unsigned char *)t + offsetof(PpTable, table) + offsetof(devbuf_plugin_table, init), 0,
         sizeof t->table - offsetof(devbuf_plugin_table, init));
}

static void free_strings(PpTable *t) {
  PyMem_RawFree(t->name);
  PyMem_RawFree(t->version);
  PyMem_RawFree(t->description);
  PyMem_RawFree(t->who);
  PyMem_RawFree(t->origin);
  t->name = t->version = t->description = t->who = t->origin = NULL;
  if (t->ids)
    for (char **p = t->ids; *p; p++) PyMem_RawFree(*p);
  PyMem_RawFree(t->ids);
  t->ids = NULL;
  if (t->ext)
    for (size_t i = 0; i < t->next; i++) {
      PyMem_RawFree((char *)t->ext[i].name);
      PyMem_RawFree((char *)t->ext[i].signature);
      PyMem_RawFree((char *)t->ext[i].doc);
    }
  PyMem_RawFree(t->ext);
  t->ext = NULL;
  t->next = 0;
}

static int add_closure(PpTable *t, PpClosure *c, size_t offset) {
  if (PyList_Append(t->closures, (PyObject *)c) < 0) {
    Py_DECREF(c);
    return -1;
  }
  if (offset != (size_t)-1) {
    /* Addressed from the object, not from &t->table, which GCC's object-size
     * tracking takes for its first member. */
    unsigned char *slot = (unsigned char *)t + offsetof(PpTable, table) + offset;
    memcpy(slot, &c->code, sizeof c->code);
  }
  Py_DECREF(c);
  return 0;
}

/* Table(plugin, name, version, description, identifiers, methods, ext, origin) */
static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"plugin", "name", "version", "description", "identifiers",
                           "methods", "ext", "origin", NULL};
  PyObject *plugin, *identifiers, *methods, *ext = Py_None;
  const char *name, *version, *description, *origin = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OsssOO|Oz:Table", kwlist, &plugin, &name,
                                   &version, &description, &identifiers, &methods, &ext, &origin))
    return NULL;
  if (!PyDict_Check(methods)) {
    PyErr_SetString(PyExc_TypeError, "methods must be a dict: slot name -> callable");
    return NULL;
  }
  PpTable *t = PyObject_GC_New(PpTable, type);
  if (t == NULL) return NULL;
  memset((char *)t + sizeof(PyObject), 0, sizeof *t - sizeof(PyObject));
  atomic_init(&t->inflight, 0);
  t->closures = PyList_New(0);
  PyObject_GC_Track(t);
  if (t->closures == NULL) goto fail;
  t->plugin = Py_NewRef(plugin);
  t->name = dupstr(name);
  t->version = dupstr(version);
  t->description = dupstr(description);
  t->origin = dupstr(origin ? origin : name);
  size_t wl = strlen(name) + 32;
  t->who = PyMem_RawMalloc(wl);
  if (!t->name || !t->version || !t->description || !t->origin || !t->who) {
    PyErr_NoMemory();
    goto fail;
  }
  snprintf(t->who, wl, "python plugin '%s'", name);

  /* identifiers */
  PyObject *seq = PySequence_Fast(identifiers, "identifiers must be a sequence of str");
  if (seq == NULL) goto fail;
  Py_ssize_t nid = PySequence_Fast_GET_SIZE(seq);
  t->ids = PyMem_RawCalloc((size_t)nid + 1, sizeof(char *));
  if (t->ids == NULL) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t i = 0; i < nid; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (s == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "identifiers must be str");
      Py_DECREF(seq);
      goto fail;
    }
    if ((t->ids[i] = dupstr(s)) == NULL) {
      Py_DECREF(seq);
      PyErr_NoMemory();
      goto fail;
    }
  }
  Py_DECREF(seq);

  t->table.struct_size = sizeof t->table;
  t->table.abi_major = DEVBUF_ABI_MAJOR;
  t->table.abi_minor = DEVBUF_ABI_MINOR;
  t->table.name = t->name;
  t->table.version = t->version;
  t->table.description = t->description;
  t->table.identifiers = (const char *const *)t->ids;

  /* slots */
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(methods, &pos, &key, &value)) {
    const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    int found = -1;
    for (int i = 0; k && i < NSLOTS; i++)
      if (strcmp(slots[i].name, k) == 0) found = i;
    if (found < 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%R is not a plugin slot", key);
      goto fail;
    }
    if (value == Py_None) continue;
    PpClosure *c = pp_closure_new(slots[found].sig, value, slot_handler, slot_dead, t, &t->inflight,
                                  slots[found].name);
    if (c == NULL) goto fail;
    c->slot = found;
    if (add_closure(t, c, slots[found].offset) < 0) goto fail;
  }

  /* extension functions: (name, signature, doc, callable) */
  if (ext != Py_None) {
    PyObject *eseq = PySequence_Fast(ext, "ext must be a sequence of (name, signature, doc, fn)");
    if (eseq == NULL) goto fail;
    Py_ssize_t ne = PySequence_Fast_GET_SIZE(eseq);
    t->ext = PyMem_RawCalloc(ne ? (size_t)ne : 1, sizeof *t->ext);
    if (t->ext == NULL) {
      Py_DECREF(eseq);
      PyErr_NoMemory();
      goto fail;
    }
    for (Py_ssize_t i = 0; i < ne; i++) {
      const char *en, *es, *ed;
      PyObject *fn;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(eseq, i), "sssO;ext entries are (name, signature, doc, fn)",
                            &en, &es, &ed, &fn)) {
        Py_DECREF(eseq);
        goto fail;
      }
      pp_sig sig;
      if (pp_sig_parse(es, &sig) < 0) {
        Py_DECREF(eseq);
        goto fail;
      }
      int bad_s = sig.ret == 's';
      for (int k = 0; k < sig.nargs; k++) bad_s |= sig.out[k] && sig.letters[k] == 's';
      if (bad_s) {
        PyErr_Format(PyExc_ValueError,
                     "ext function '%s' (%s): a Python function cannot return a string ('s' "
                     "return or '*s'): nothing would own the memory", en, es);
        Py_DECREF(eseq);
        goto fail;
      }
      char cname[64];
      snprintf(cname, sizeof cname, "ext:%s", en);
      PpClosure *c = pp_closure_new(es, fn, pp_ext_handler, pp_ext_dead, t, &t->inflight, cname);
      if (c == NULL) {
        Py_DECREF(eseq);
        goto fail;
      }
      devbuf_ext_function *e = &t->ext[t->next++];
      e->name = dupstr(en);
      e->signature = dupstr(es);
      e->doc = dupstr(ed);
      memcpy(&e->fn, &c->code, sizeof e->fn);
      if (!e->name || !e->signature || !e->doc) {
        Py_DECREF(c);
        Py_DECREF(eseq);
        PyErr_NoMemory();
        goto fail;
      }
      if (add_closure(t, c, (size_t)-1) < 0) {
        Py_DECREF(eseq);
        goto fail;
      }
    }
    Py_DECREF(eseq);
    t->table.ext_functions = t->ext;
    t->table.ext_function_count = t->next;
  }
  return (PyObject *)t;
fail:
  Py_DECREF(t);
  return NULL;
}

static int table_traverse(PpTable *t, visitproc visit, void *arg) {
  Py_VISIT(t->plugin);
  Py_VISIT(t->closures);
  return 0;
}

static int table_clear(PpTable *t) {
  if (t->state == PP_REGISTERED) return 0; /* reachable from g_registry: never garbage */
  release_closures(t);
  Py_CLEAR(t->plugin);
  return 0;
}

static void table_dealloc(PpTable *t) {
  PyObject_GC_UnTrack(t);
  /* A registered table is owned by g_registry, so this is never one. */
  release_closures(t);
  Py_CLEAR(t->plugin);
  Py_CLEAR(t->key);
  free_strings(t);
  PyObject_GC_Del(t);
}

static PyObject *table_register_locked(PpTable *t, PyObject *unused) {
  if (t->state != PP_NEW) {
    PyErr_Format(PyExc_RuntimeError, "%s: this table is %s; make a new one to register again",
                 t->who, state_names[t->state]);
    return NULL;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  size_t idx = (size_t)-1;
  int rc;
  /* init may run (a closure: it takes the GIL itself). */
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_plugin_register(&t->table, t->origin, &idx, &err);
  Py_END_ALLOW_THREADS
  if (rc != DEVBUF_OK) {
    /* The runtime keeps a failed record (listed by devbuf.plugins()) but no
     * pointer into us: nothing can call the closures any more. */
    t->state = PP_FAILED;
    t->index = idx;
    release_closures(t);
    Py_CLEAR(t->plugin);
    return pp_raise(&err);
  }
  t->index = idx;
  t->key = Py_BuildValue("(sn)", "plugin", (Py_ssize_t)idx);
  if (t->key == NULL || PyDict_SetItem(g_registry, t->key, (PyObject *)t) < 0) {
    /* Cannot keep it alive: undo (nothing can be in use yet). */
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    Py_BEGIN_ALLOW_THREADS
    devbuf_plugin_unregister(idx, NULL);
    pp_quiesce(&t->inflight);
    Py_END_ALLOW_THREADS
    t->state = PP_FAILED;
    release_closures(t);
    Py_CLEAR(t->plugin);
    PyErr_Restore(et, ev, etb);
    return NULL;
  }
  t->state = PP_REGISTERED;
  return PyLong_FromSize_t(idx);
}

static PyObject *table_unregister_locked(PpTable *t, PyObject *unused) {
  if (t->state != PP_REGISTERED) {
    PyErr_Format(PyExc_RuntimeError, "%s is not registered (it is %s)", t->who,
                 state_names[t->state]);
    return NULL;
  }
  if (pp_in_callback_of(t)) {
    PyErr_Format(PyExc_RuntimeError,
                 "%s cannot be unregistered from inside one of its own operations", t->who);
    return NULL;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc;
  /* shutdown may run (it takes the GIL); then wait for calls still inside a
   * trampoline, which need the GIL to finish. */
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_plugin_unregister(t->index, &err);
  if (rc == DEVBUF_OK) pp_quiesce(&t->inflight);
  Py_END_ALLOW_THREADS
  if (rc != DEVBUF_OK) return pp_raise(&err);
  t->state = PP_UNREGISTERED;
  release_closures(t);
  Py_CLEAR(t->plugin);
  /* Last: this may drop the last reference to t. */
  Py_INCREF(t);
  if (t->key && PyDict_DelItem(g_registry, t->key) < 0) PyErr_Clear();
  Py_CLEAR(t->key);
  Py_DECREF(t);
  Py_RETURN_NONE;
}

static PyObject *get_state_locked(PpTable *t, void *unused) {
  return PyUnicode_FromString(state_names[t->state]);
}

static PyObject *get_index_locked(PpTable *t, void *unused) {
  if (t->state == PP_NEW || t->index == (size_t)-1) Py_RETURN_NONE;
  return PyLong_FromSize_t(t->index);
}

static PyObject *get_closures_locked(PpTable *t, void *unused) {
  if (t->closures == NULL) return PyTuple_New(0);
  return PyList_AsTuple(t->closures);
}

static PyObject *get_plugin_locked(PpTable *t, void *unused) {
  return Py_NewRef(t->plugin ? t->plugin : Py_None);
}

static PyObject *get_inflight_locked(PpTable *t, void *unused) {
  return PyLong_FromLong(atomic_load(&t->inflight));
}

static PyObject *get_name_locked(PpTable *t, void *unused) {
  return PyUnicode_FromString(t->name ? t->name : "");
}

/* Entry points lock the object (dbp_lock.h): its state moves only inside them. */
DBP_LOCKED_METH(PpTable, table_register)
DBP_LOCKED_METH(PpTable, table_unregister)
DBP_LOCKED_GETTER(PpTable, get_state)
DBP_LOCKED_GETTER(PpTable, get_index)
DBP_LOCKED_GETTER(PpTable, get_closures)
DBP_LOCKED_GETTER(PpTable, get_plugin)
DBP_LOCKED_GETTER(PpTable, get_inflight)
DBP_LOCKED_GETTER(PpTable, get_name)

static PyMethodDef table_methods[] = {
    {"register", (PyCFunction)table_register, METH_NOARGS,
     "register() -> index: devbuf_plugin_register; raises devbuf.PluginError with the loader's "
     "reason (the failed record stays listed)."},
    {"unregister", (PyCFunction)table_unregister, METH_NOARGS,
     "unregister(): devbuf_plugin_unregister, then free the closures. devbuf.PluginError "
     "(DEVBUF_EBUSY) while memory, streams or events of the plugin are alive."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"state", (getter)get_state, NULL, "'new', 'registered', 'unregistered' or 'failed'", NULL},
    {"index", (getter)get_index, NULL, "the runtime's plugin index, or None", NULL},
    {"closures", (getter)get_closures, NULL, "the armed closures (slots, then ext functions)", NULL},
    {"plugin", (getter)get_plugin, NULL, "the Python object, None once unregistered", NULL},
    {"inflight", (getter)get_inflight, NULL, "calls inside a trampoline now", NULL},
    {"name", (getter)get_name, NULL, "the table's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PpTable_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf._pyplugin.Table",
    .tp_basicsize = sizeof(PpTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Table(plugin, name, version, description, identifiers, methods, ext=None, "
              "origin=None): a devbuf_plugin_table of libffi closures. Use devbuf.plugin.",
    .tp_traverse = (traverseproc)table_traverse,
    .tp_clear = (inquiry)table_clear,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
    .tp_new = table_new,
};

static PyObject *slot_names(void) {
  PyObject *t = PyTuple_New(NSLOTS);
  if (t == NULL) return NULL;
  for (int i = 0; i < NSLOTS; i++) {
    PyObject *s = Py_BuildValue("(ss)", slots[i].name, slots[i].sig);
    if (s == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, s);
  }
  return t;
}

int pp_table_init(PyObject *module) {
  if (PyType_Ready(&PpTable_Type) < 0) return -1;
  if (PyModule_AddObjectRef(module, "Table", (PyObject *)&PpTable_Type) < 0) return -1;
  PyObject *names = slot_names();
  if (names == NULL || PyModule_AddObject(module, "SLOTS", names) < 0) {
    Py_XDECREF(names);
    return -1;
  }
  return 0;
}

/* Unregister what can be: called at exit, before closures stop entering
 * Python. Returns how many stayed registered (busy). */
PyObject *pp_shutdown_all(PyObject *self, PyObject *unused) {
  PyObject *items = PyDict_Values(g_registry);
  if (items == NULL) return NULL;
  long stayed = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
    PyObject *o = PyList_GET_ITEM(items, i);
    PyObject *r = PyObject_CallMethod(o, "unregister", NULL);
    if (r == NULL) {
      PyErr_Clear();
      stayed++;
    }
    Py_XDECREF(r);
  }
  Py_DECREF(items);
  return PyLong_FromLong(stayed);
}
