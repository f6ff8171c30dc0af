/* devbuf_consumer: a THIRD-PARTY extension written only against the
 * header-only backport (bindings/python/include/devbuf_buffer.h). It does not
 * link libdevbuf nor include any devbuf/ header: what it knows of the
 * "devbuf.*" device_info layout it copied from docs/devices/, as an outside
 * consumer would. The pytest suite uses it to prove that outside code can
 * consume extended buffers, and as a harness for producer rules:
 *
 *   inspect(obj, flags)        DevbufPy_GetBufferEx, and what came back
 *   canary(obj, flags)         raw PyObject_GetBuffer with sentinels in the
 *                              extended fields: which ones the producer wrote
 *   Held(obj, flags)           keep an export alive until .release()
 *   Exporter(data, mode, misbehave=False, itemsize=1, readonly_answer=False)
 *                              a test producer (host, device or both)
 *   SimpleOnly(data)           a producer advertising only PyBUF_SIMPLE
 *   bench_getbuffer(obj, n, flags, extended)
 *                              ns per getbuffer+release, from C
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "devbuf_buffer.h"

/* CPython 3.9 has neither (3.10 added them); a third party carries its own. */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o) {
  Py_INCREF(o);
  return o;
}
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value) {
  Py_INCREF(value);
  if (PyModule_AddObject(m, name, value) < 0) {
    Py_DECREF(value);
    return -1;
  }
  return 0;
}
#endif

/* The devbuf_device_info v1 layout, as docs/devices/ documents it. */
typedef struct consumer_devbuf_info {
  uint32_t struct_size;
  uint16_t version;
  uint16_t reserved0;
  int32_t device_ordinal;
  uint32_t flags;
  void *event;
  void *stream;
  uint64_t reserved[6];
} consumer_devbuf_info;

#define FAKE_DEVICE "consumer.fake"
static const char fake_device[] = FAKE_DEVICE; /* one unique string, as the draft asks */

/* ---- inspect ---------------------------------------------------------------------- */

static PyObject *ssize_tuple(int n, const Py_ssize_t *v) {
  if (v == NULL) Py_RETURN_NONE;
  PyObject *t = PyTuple_New(n);
  for (int i = 0; t && i < n; i++) PyTuple_SET_ITEM(t, i, PyLong_FromSsize_t(v[i]));
  return t;
}

static PyObject *describe(const DevbufPy_buffer_ext *b) {
  PyObject *info = Py_NewRef(Py_None);
  int is_device = DevbufPy_BufferIsDevice(b);
  if (is_device && strncmp(b->device, "devbuf.", 7) == 0 && b->device_info != NULL) {
    const consumer_devbuf_info *di = b->device_info;
    Py_DECREF(info);
    info = Py_BuildValue("{s:I,s:H,s:i,s:I,s:N,s:N}", "struct_size", di->struct_size, "version",
                         di->version, "device_ordinal", di->device_ordinal, "flags", di->flags,
                         "event", PyLong_FromVoidPtr(di->event), "stream",
                         PyLong_FromVoidPtr(di->stream));
    if (info == NULL) return NULL;
  }
  return Py_BuildValue(
      "{s:O,s:z,s:i,s:i,s:N,s:n,s:n,s:i,s:O,s:z,s:N,s:N,s:N,s:O}", "is_device",
      is_device ? Py_True : Py_False, "device", b->device, "flags", b->flags, "ext_flags",
      b->ext_flags, "ptr", PyLong_FromVoidPtr(b->view.buf), "len", b->view.len, "itemsize",
      b->view.itemsize, "ndim", b->view.ndim, "readonly", b->view.readonly ? Py_True : Py_False,
      "format", b->view.format, "shape", ssize_tuple(b->view.ndim, b->view.shape), "strides",
      ssize_tuple(b->view.ndim, b->view.strides), "device_info", info, "obj_is_set",
      b->view.obj ? Py_True : Py_False);
}

static PyObject *inspect(PyObject *self, PyObject *args) {
  PyObject *obj;
  int flags = PyBUF_RECORDS_RO | PyBUF_DEVICE;
  if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
  DevbufPy_buffer_ext b;
  memset(&b, 0xA5, sizeof b); /* GetBufferEx must clear what matters */
  if (DevbufPy_GetBufferEx(obj, &b, flags) < 0) return NULL;
  PyObject *d = describe(&b);
  DevbufPy_BufferRelease(&b);
  return d;
}

/* ---- canary ------------------------------------------------------------------------- */

/* The consumer side of the canary: a raw PyObject_GetBuffer (no zeroing, no
 * backport logic) into an extended struct whose extended fields hold
 * sentinels. Returns the list of fields the producer changed. Without
 * PyBUF_DEVICE in `flags`, a correct producer changes none. */
static PyObject *canary(PyObject *self, PyObject *args) {
  PyObject *obj;
  int flags = PyBUF_FULL_RO;
  if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return NULL;
  struct {
    DevbufPy_buffer_ext b;
    unsigned char tail[64]; /* and nothing past the struct either */
  } c;
  memset(&c, 0x5A, sizeof c);
  c.b.flags = 0x12345678;
  c.b.ext_flags = 0x24681357;
  c.b.device = (char *)(uintptr_t)0xDEADBEEFu;
  c.b.device_info = (void *)(uintptr_t)0xFEEDFACEu;
  if (PyObject_GetBuffer(obj, &c.b.view, flags) < 0) return NULL;
  PyObject *touched = PyList_New(0);
  if (touched == NULL) {
    PyBuffer_Release(&c.b.view);
    return NULL;
  }
#define CHECK_FIELD(cond, name)                                      \
  if (!(cond)) {                                                     \
    PyObject *s_ = PyUnicode_FromString(name);                       \
    if (s_ == NULL || PyList_Append(touched, s_) < 0) Py_CLEAR(touched); \
    Py_XDECREF(s_);                                                  \
  }
  CHECK_FIELD(c.b.flags == 0x12345678, "flags");
  if (touched) CHECK_FIELD(c.b.ext_flags == 0x24681357, "ext_flags");
  if (touched) CHECK_FIELD(c.b.device == (char *)(uintptr_t)0xDEADBEEFu, "device");
  if (touched) CHECK_FIELD(c.b.device_info == (void *)(uintptr_t)0xFEEDFACEu, "device_info");
  int tail_ok = 1;
  for (size_t i = 0; i < sizeof c.tail; i++) tail_ok &= c.tail[i] == 0x5A;
  if (touched) CHECK_FIELD(tail_ok, "past the struct");
#undef CHECK_FIELD
  PyBuffer_Release(&c.b.view);
  return touched;
}

/* ---- Held ---------------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  DevbufPy_buffer_ext b;
  int held;
} Held;

static int held_init(Held *self, PyObject *args, PyObject *kw) {
  PyObject *obj;
  int flags = PyBUF_RECORDS_RO | PyBUF_DEVICE;
  if (!PyArg_ParseTuple(args, "O|i", &obj, &flags)) return -1;
  if (self->held) {
    DevbufPy_BufferRelease(&self->b);
    self->held = 0;
  }
  if (DevbufPy_GetBufferEx(obj, &self->b, flags) < 0) return -1;
  self->held = 1;
  return 0;
}

static PyObject *held_release(Held *self, PyObject *unused) {
  if (self->held) {
    self->held = 0;
    DevbufPy_BufferRelease(&self->b);
  }
  Py_RETURN_NONE;
}

static PyObject *held_info(Held *self, PyObject *unused) {
  if (!self->held) {
    PyErr_SetString(PyExc_ValueError, "released");
    return NULL;
  }
  return describe(&self->b);
}

static void held_dealloc(Held *self) {
  if (self->held) DevbufPy_BufferRelease(&self->b);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef held_methods[] = {
    {"release", (PyCFunction)held_release, METH_NOARGS, NULL},
    {"info", (PyCFunction)held_info, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject Held_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_consumer.Held",
    .tp_basicsize = sizeof(Held),
    .tp_dealloc = (destructor)held_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = held_methods,
    .tp_init = (initproc)held_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Exporter: a test producer ----------------------------------------------------------- */

enum { MODE_HOST = 0, MODE_DEVICE = 1, MODE_BOTH = 2 };

typedef struct {
  PyObject_HEAD
  char *data;
  Py_ssize_t len;
  int mode;
  int misbehave;
  int readonly_answer; /* answers every request, PyBUF_WRITABLE too, with readonly=1 */
  Py_ssize_t exports, getbuffer_calls, release_calls;
  int last_flags;
  Py_ssize_t itemsize;     /* > 1: answers with format NULL and items this large */
  int null_strides;        /* answers strided requests with strides NULL (C order implied) */
  Py_ssize_t shape[1];
  struct { uint32_t magic; } info; /* our identifier's device_info */
} Exporter;

static int exporter_init(Exporter *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"data", "mode", "misbehave", "itemsize", "null_strides",
                           "readonly_answer", NULL};
  const char *data, *mode = "both";
  Py_ssize_t len, itemsize = 1;
  int misbehave = 0, null_strides = 0, readonly_answer = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "y#|s$pnpp", kwlist, &data, &len, &mode, &misbehave,
                                   &itemsize, &null_strides, &readonly_answer))
    return -1;
  self->readonly_answer = readonly_answer;
  self->itemsize = itemsize;
  self->null_strides = null_strides;
  if (self->exports) {
    PyErr_SetString(PyExc_BufferError, "Exporter is exported");
    return -1;
  }
  if (strcmp(mode, "host") == 0) self->mode = MODE_HOST;
  else if (strcmp(mode, "device") == 0) self->mode = MODE_DEVICE;
  else if (strcmp(mode, "both") == 0) self->mode = MODE_BOTH;
  else {
    PyErr_Format(PyExc_ValueError, "mode must be host, device or both, not %s", mode);
    return -1;
  }
  PyMem_Free(self->data);
  self->data = PyMem_Malloc(len ? (size_t)len : 1);
  if (self->data == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  memcpy(self->data, data, (size_t)len);
  self->len = len;
  self->misbehave = misbehave;
  self->info.magic = 0xC0FFEE;
  return 0;
}

static int exporter_getbuffer(Exporter *self, Py_buffer *view, int flags) {
  self->getbuffer_calls++;
  self->last_flags = flags;
  int device = (flags & PyBUF_DEVICE) && self->mode != MODE_HOST;
  if (!device && self->mode == MODE_DEVICE) {
    PyErr_SetString(PyExc_BufferError,
                    "Exporter: device memory; request it with PyBUF_DEVICE");
    return -1;
  }
  if (PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->len, 0, flags) < 0) return -1;
  /* A broken producer (pyarrow's read-only Tensor): read-only, yet it
   * answers a PyBUF_WRITABLE request instead of raising BufferError. */
  if (self->readonly_answer) view->readonly = 1;
  if (self->itemsize > 1) {
    /* A producer that gives no format (which means 'B') but larger items:
     * a contradiction devbuf.view must refuse. */
    view->format = NULL;
    view->itemsize = self->itemsize;
    if (flags & PyBUF_ND) {
      self->shape[0] = self->len / self->itemsize;
      view->shape = self->shape;
    }
  }
  /* The producer sample of old docs/producers.md: C order said with NULL
   * strides, even under PyBUF_STRIDES (devbuf's consumers fill them in). */
  if (self->null_strides) view->strides = NULL;
  if (device) {
    DevbufPy_BufferSetDevice(view, flags, fake_device, &self->info);
  } else if (self->misbehave) {
    /* A broken producer: writes the extended fields without being asked. */
    DevbufPy_buffer_ext *ext = DEVBUFPY_BUFFER_EXT(view);
    ext->flags = PyBUF_DEVICE;
    ext->device = (char *)fake_device;
    ext->device_info = &self->info;
  }
  self->exports++;
  return 0;
}

static void exporter_releasebuffer(Exporter *self, Py_buffer *view) {
  self->exports--;
  self->release_calls++;
}

static PyBufferProcs exporter_as_buffer = {
    .bf_getbuffer = (getbufferproc)exporter_getbuffer,
    .bf_releasebuffer = (releasebufferproc)exporter_releasebuffer,
};

static void exporter_dealloc(Exporter *self) {
  PyMem_Free(self->data);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *exporter_counts(Exporter *self, void *c) {
  return Py_BuildValue("{s:n,s:n,s:n,s:i}", "exports", self->exports, "getbuffer",
                       self->getbuffer_calls, "release", self->release_calls, "last_flags",
                       self->last_flags);
}

static PyObject *exporter_info_ptr(Exporter *self, void *c) {
  return PyLong_FromVoidPtr(&self->info);
}

static PyGetSetDef exporter_getset[] = {
    {"counts", (getter)exporter_counts, NULL, NULL, NULL},
    {"info_ptr", (getter)exporter_info_ptr, NULL, NULL, NULL},
    {NULL},
};

static PyTypeObject Exporter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_consumer.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_as_buffer = &exporter_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = exporter_getset,
    .tp_init = (initproc)exporter_init,
    .tp_new = PyType_GenericNew,
};

/* ---- SimpleOnly: advertises -1 ----------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  char data[16];
} SimpleOnly;

static int simple_getbuffer(SimpleOnly *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, (PyObject *)self, self->data, sizeof self->data, 1, flags);
}

static PyBufferProcs simple_as_buffer = {.bf_getbuffer = (getbufferproc)simple_getbuffer};

static PyTypeObject SimpleOnly_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_consumer.SimpleOnly",
    .tp_basicsize = sizeof(SimpleOnly),
    .tp_as_buffer = &simple_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
};

/* ---- misc ---------------------------------------------------------------------------------- */

static PyObject *check_supports(PyObject *self, PyObject *args) {
  PyObject *obj;
  int flags;
  if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
  int r = DevbufPy_CheckBufferSupports(obj, flags);
  if (r < 0) return NULL;
  return PyBool_FromLong(r);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns per getbuffer+release over n rounds; extended=1 goes through
 * DevbufPy_GetBufferEx/DevbufPy_BufferRelease, 0 through the raw calls. */
static PyObject *bench_getbuffer(PyObject *self, PyObject *args) {
  PyObject *obj;
  Py_ssize_t n;
  int flags, extended;
  if (!PyArg_ParseTuple(args, "Onii", &obj, &n, &flags, &extended)) return NULL;
  DevbufPy_buffer_ext b;
  memset(&b, 0, sizeof b);
  double t0 = now_ns();
  if (extended) {
    for (Py_ssize_t i = 0; i < n; i++) {
      if (DevbufPy_GetBufferEx(obj, &b, flags) < 0) return NULL;
      DevbufPy_BufferRelease(&b);
    }
  } else {
    for (Py_ssize_t i = 0; i < n; i++) {
      if (PyObject_GetBuffer(obj, &b.view, flags) < 0) return NULL;
      PyBuffer_Release(&b.view);
    }
  }
  double t1 = now_ns();
  return PyFloat_FromDouble((t1 - t0) / (double)(n ? n : 1));
}


/* set_device_helper(flags) -> (returned, touched): call the producer helper
 * DevbufPy_BufferSetDevice on an extended struct filled with sentinels, as a
 * producer that relies on it ("it checks for you") would, and report whether
 * it wrote any extended field. Must be (0, False) without PyBUF_DEVICE. */
static PyObject *set_device_helper(PyObject *self, PyObject *args) {
  int flags;
  if (!PyArg_ParseTuple(args, "i", &flags)) return NULL;
  DevbufPy_buffer_ext ext;
  memset(&ext, 0xA5, sizeof ext);
  DevbufPy_buffer_ext before = ext;
  static char info[8];
  int r = DevbufPy_BufferSetDevice(&ext.view, flags, "devbuf.sim", info);
  int touched = memcmp(&ext, &before, sizeof ext) != 0;
  return Py_BuildValue("(iO)", r, touched ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"inspect", inspect, METH_VARARGS, NULL},
    {"canary", canary, METH_VARARGS, NULL},
    {"set_device_helper", set_device_helper, METH_VARARGS, NULL},
    {"check_supports", check_supports, METH_VARARGS, NULL},
    {"bench_getbuffer", bench_getbuffer, METH_VARARGS, NULL},
    {NULL},
};

/* Multi-phase init, declaring what it supports, as devbuf_buffer.h asks of a
 * module whose static types advertise flags: CPython 3.12+ then refuses an
 * isolated (own-GIL) subinterpreter before exec runs, so the static types are
 * never readied with objects of an interpreter that dies. Exec
 * may run again (a legacy subinterpreter): every step is idempotent. */
static int consumer_exec(PyObject *m) {
  if (PyType_Ready(&Held_Type) < 0 || PyType_Ready(&Exporter_Type) < 0 ||
      PyType_Ready(&SimpleOnly_Type) < 0)
    return -1;
  if (DevbufPy_SetBufferSupportedFlags(&Exporter_Type, DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0 ||
      DevbufPy_SetBufferSupportedFlags(&SimpleOnly_Type, -1) < 0)
    return -1;
  if (PyModule_AddObjectRef(m, "Held", (PyObject *)&Held_Type) < 0 ||
      PyModule_AddObjectRef(m, "Exporter", (PyObject *)&Exporter_Type) < 0 ||
      PyModule_AddObjectRef(m, "SimpleOnly", (PyObject *)&SimpleOnly_Type) < 0 ||
      PyModule_AddIntConstant(m, "PyBUF_DEVICE", PyBUF_DEVICE) < 0 ||
      PyModule_AddIntConstant(m, "NATIVE", DEVBUFPY_NATIVE_BUFFER_EXTENSION) < 0 ||
      PyModule_AddIntConstant(m, "PyBUF_REQUIRED_FLAGS", PyBUF_REQUIRED_FLAGS) < 0 ||
      PyModule_AddStringConstant(m, "FAKE_DEVICE", FAKE_DEVICE) < 0)
    return -1;
  return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)consumer_exec},
#ifdef Py_GIL_DISABLED /* no state of its own; the header's cache is per thread */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "devbuf_consumer",
    .m_doc = "A third-party consumer built only on devbuf_buffer.h",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit_devbuf_consumer(void) { return PyModuleDef_Init(&moddef); }
