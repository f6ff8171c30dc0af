/* newabi: built against the PATCHED headers; exercises what the series adds:
 * a device-only exporter declared with Py_bf_supported_flags, a
 * PyBUF_SIMPLE-only exporter (-1), and a consumer that asks for
 * PyBUF_DEVICE with the full Py_buffer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifndef Py_HAVE_BUFFER_DEVICE_EXTENSION
#error "newabi.c needs the patched headers"
#endif

static char payload[32] = "device bytes";
static struct { int size, version; } info = {8, 1};
static const char device_id[] = "cpyref.test";

typedef struct { PyObject_HEAD } Obj;

static int device_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  if (!(flags & PyBUF_DEVICE)) {
    PyErr_SetString(PyExc_BufferError, "cpyref.test memory needs PyBUF_DEVICE");
    view->obj = NULL;
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, payload, sizeof payload, 1, flags) < 0) return -1;
  view->flags |= PyBUF_DEVICE;
  view->device = (char *)device_id;
  view->device_info = &info;
  return 0;
}
static int simple_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, self, payload, sizeof payload, 1, flags);
}

static PyType_Slot device_slots[] = {
    {Py_bf_getbuffer, (void *)device_getbuffer},
    {Py_bf_supported_flags, (void *)(intptr_t)(PyBUF_CLASSIC_FLAGS | PyBUF_DEVICE)},
    {0, NULL},
};
static PyType_Spec device_spec = {"newabi.DeviceExporter", sizeof(Obj), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, device_slots};
static PyType_Slot simple_slots[] = {
    {Py_bf_getbuffer, (void *)simple_getbuffer},
    {Py_bf_supported_flags, (void *)(intptr_t)-1},
    {0, NULL},
};
static PyType_Spec simple_spec = {"newabi.SimpleOnly", sizeof(Obj), 0, Py_TPFLAGS_DEFAULT,
                                  simple_slots};

/* get(obj, flags) -> (view.flags, device or None, first bytes) */
static PyObject *get(PyObject *mod, PyObject *args) {
  PyObject *obj, *res;
  int flags;
  Py_buffer view;
  memset(&view, 0x5A, sizeof view); /* garbage the call must clear */
  if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
  if (PyObject_GetBuffer(obj, &view, flags) < 0) return NULL;
  if (!(flags & PyBUF_DEVICE) && view.flags == 0x5A5A5A5A)
    view.flags = -1; /* untouched, as the rule says: report it */
  res = Py_BuildValue("izy#", view.flags,
                      (view.flags != -1 && (view.flags & PyBUF_DEVICE)) ? view.device : NULL,
                      (const char *)view.buf, (Py_ssize_t)(view.len < 8 ? view.len : 8));
  PyBuffer_Release(&view);
  return res;
}
static PyObject *supports(PyObject *mod, PyObject *args) {
  PyObject *obj;
  int flags;
  if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
  return PyLong_FromLong(PyObject_CheckBufferSupports(obj, flags));
}

static PyMethodDef methods[] = {
    {"get", get, METH_VARARGS, NULL},
    {"supports", supports, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "newabi", NULL, -1, methods};

PyMODINIT_FUNC PyInit_newabi(void) {
  PyObject *m = PyModule_Create(&moddef), *t;
  if (m == NULL) return NULL;
  if ((t = PyType_FromSpec(&device_spec)) == NULL || PyModule_AddObject(m, "DeviceExporter", t) < 0)
    goto fail;
  if ((t = PyType_FromSpec(&simple_spec)) == NULL || PyModule_AddObject(m, "SimpleOnly", t) < 0)
    goto fail;
  PyModule_AddIntConstant(m, "PyBUF_DEVICE", PyBUF_DEVICE);
  PyModule_AddIntConstant(m, "SIZEOF_PY_BUFFER", (long)sizeof(Py_buffer));
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
