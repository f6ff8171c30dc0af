/* devbuf_broken: deliberately broken buffer exporters for the conformance
 * kit's own tests (tests/python/test_check_guarded.py). Each keyword breaks
 * one rule of the buffer protocol or of the device extension; with none, the
 * exporter answers every request as CPython's memoryview would, over the
 * buffer of `base` (any exporter, devbuf device memory included).
 *
 *   Exporter(base, *, lie_readonly, ignore_contig, error=BufferError, refuse=0,
 *            always_format, simple_format, format=None, itemsize=0, leak_ref,
 *            plain_device, no_device_flag, host_answer)
 *   DeviceExporter(...)   the same, advertising PyBUF_DEVICE support
 *
 * Written against the header-only backport only, as a third party would. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "devbuf_buffer.h"

typedef struct {
  PyObject_HEAD
  DevbufPy_buffer_ext base; /* the base's buffer, held for our lifetime */
  int have_base;
  int lie_readonly, ignore_contig, refuse, always_format, simple_format, leak_ref, plain_device;
  int no_device_flag; /* names the device in a PyBUF_DEVICE answer, but not the flag */
  int host_answer;    /* answers PyBUF_DEVICE with device memory marked as host (no flag,
                         no device): what an interpreter with the extension built in
                         leaves of a no_device_flag answer */
  Py_ssize_t itemsize;
  char *format;
  PyObject *error; /* the exception type refusals raise */
  Py_ssize_t exports;
} Broken;

static int broken_init(Broken *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"base", "lie_readonly", "ignore_contig", "error", "refuse",
                           "always_format", "simple_format", "format", "itemsize", "leak_ref",
                           "plain_device", "no_device_flag", "host_answer", NULL};
  PyObject *base, *error = PyExc_BufferError;
  const char *format = NULL;
  if (self->have_base || self->exports) {
    PyErr_SetString(PyExc_TypeError, "devbuf_broken.Exporter: __init__ called twice");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$ppOippznpppp", kwlist, &base, &self->lie_readonly,
                                   &self->ignore_contig, &error, &self->refuse,
                                   &self->always_format, &self->simple_format, &format,
                                   &self->itemsize, &self->leak_ref, &self->plain_device,
                                   &self->no_device_flag, &self->host_answer))
    return -1;
  if (DevbufPy_GetBufferEx(base, &self->base, PyBUF_FULL_RO | PyBUF_DEVICE) < 0) return -1;
  self->have_base = 1;
  if (format != NULL) {
    self->format = PyMem_Malloc(strlen(format) + 1);
    if (self->format == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    strcpy(self->format, format);
  }
  Py_INCREF(error);
  self->error = error;
  return 0;
}

static int refuse(Broken *self, const char *why) {
  PyErr_Format(self->error, "devbuf_broken.Exporter: %s", why);
  return -1;
}

static int broken_getbuffer(Broken *self, Py_buffer *view, int flags) {
  const Py_buffer *b = &self->base.view;
  int is_dev = DevbufPy_BufferIsDevice(&self->base);
  view->obj = NULL;
  if (!self->have_base) return refuse(self, "not initialised");
  if (flags & self->refuse) return refuse(self, "refused on purpose");
  if (is_dev && !(flags & PyBUF_DEVICE) && !self->plain_device)
    return refuse(self, "device memory: request it with PyBUF_DEVICE");
  if ((flags & PyBUF_WRITABLE) && b->readonly && !self->lie_readonly)
    return refuse(self, "read-only");
  if (!self->ignore_contig) {
    int c = PyBuffer_IsContiguous(b, 'C'), f = PyBuffer_IsContiguous(b, 'F');
    if (((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
         (flags & PyBUF_STRIDES) != PyBUF_STRIDES) && !c)
      return refuse(self, "not C-contiguous");
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !f)
      return refuse(self, "not Fortran-contiguous");
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !c && !f)
      return refuse(self, "not contiguous");
  }
  if ((flags & PyBUF_FORMAT) && !(flags & PyBUF_ND) && !self->simple_format &&
      !self->always_format)
    return refuse(self, "PyBUF_FORMAT without PyBUF_ND");
  view->buf = b->buf;
  view->len = b->len;
  view->itemsize = self->itemsize ? self->itemsize : b->itemsize;
  view->readonly = b->readonly;
  view->ndim = (flags & PyBUF_ND) ? b->ndim : 1;
  view->format = (flags & PyBUF_FORMAT) || self->always_format
                     ? (self->format ? self->format : b->format) : NULL;
  view->shape = (flags & PyBUF_ND) ? b->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? b->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  if (is_dev) DevbufPy_BufferSetDevice(view, flags, self->base.device, self->base.device_info);
  if (is_dev && self->no_device_flag && (flags & PyBUF_DEVICE))
    DEVBUFPY_BUFFER_EXT(view)->flags &= ~PyBUF_DEVICE; /* a consumer takes it for host memory */
  if (is_dev && self->host_answer && (flags & PyBUF_DEVICE)) {
    DevbufPy_buffer_ext *ext = DEVBUFPY_BUFFER_EXT(view);
    ext->flags &= ~PyBUF_DEVICE;
    ext->device = NULL;
    ext->device_info = NULL;
  }
  view->obj = (PyObject *)self;
  Py_INCREF(self);
  if (self->leak_ref) Py_INCREF(self); /* never given back: the broken part */
  self->exports++;
  return 0;
}

static void broken_releasebuffer(Broken *self, Py_buffer *view) {
  (void)view;
  self->exports--;
}

static PyBufferProcs broken_as_buffer = {
    .bf_getbuffer = (getbufferproc)broken_getbuffer,
    .bf_releasebuffer = (releasebufferproc)broken_releasebuffer,
};

static void broken_dealloc(Broken *self) {
  if (self->have_base) DevbufPy_BufferRelease(&self->base);
  PyMem_Free(self->format);
  Py_XDECREF(self->error);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *broken_exports(Broken *self, void *c) {
  (void)c;
  return PyLong_FromSsize_t(self->exports);
}

static PyGetSetDef broken_getset[] = {
    {"exports", (getter)broken_exports, NULL, "live exports", NULL},
    {NULL},
};

static PyTypeObject Exporter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_broken.Exporter",
    .tp_basicsize = sizeof(Broken),
    .tp_dealloc = (destructor)broken_dealloc,
    .tp_as_buffer = &broken_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_getset = broken_getset,
    .tp_init = (initproc)broken_init,
    .tp_new = PyType_GenericNew,
};

static PyBufferProcs device_as_buffer = {
    .bf_getbuffer = (getbufferproc)broken_getbuffer,
    .bf_releasebuffer = (releasebufferproc)broken_releasebuffer,
};

static PyTypeObject DeviceExporter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_broken.DeviceExporter",
    .tp_basicsize = sizeof(Broken),
    .tp_dealloc = (destructor)broken_dealloc,
    .tp_as_buffer = &device_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = broken_getset,
    .tp_init = (initproc)broken_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "devbuf_broken", "Deliberately broken buffer exporters (tests only).",
    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_devbuf_broken(void) {
  PyObject *m;
  if (PyType_Ready(&Exporter_Type) < 0 || PyType_Ready(&DeviceExporter_Type) < 0) return NULL;
  if (DevbufPy_SetBufferSupportedFlags(&DeviceExporter_Type,
                                       DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return NULL;
  m = PyModule_Create(&moduledef);
  if (m == NULL) return NULL;
#ifdef Py_GIL_DISABLED
  /* No module state; each exporter object is made and used by one check on
   * one thread, so nothing here is shared between threads. */
  if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
    Py_DECREF(m);
    return NULL;
  }
#endif
  Py_INCREF(&Exporter_Type);
  Py_INCREF(&DeviceExporter_Type);
  if (PyModule_AddObject(m, "Exporter", (PyObject *)&Exporter_Type) < 0 ||
      PyModule_AddObject(m, "DeviceExporter", (PyObject *)&DeviceExporter_Type) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
