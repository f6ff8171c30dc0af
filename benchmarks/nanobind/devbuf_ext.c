/* devbuf's side: the same function through the header-only backport
 * (bindings/python/include/devbuf_buffer.h), which also reports the device,
 * the sync to honour (device_info) and the format. An object without the
 * buffer protocol (a DLPack-only producer) goes through devbuf's C API
 * capsule (devbuf_capi.h: devbuf.view in C), still without linking libdevbuf. */
#include <Python.h>

#include "devbuf_capi.h"

static const DevbufPy_CAPI *api;

static PyObject *data_ptr(PyObject *self, PyObject *obj) {
  if (PyObject_CheckBuffer(obj)) {
    DevbufPy_buffer_ext b;
    if (DevbufPy_GetBufferEx(obj, &b, PyBUF_RECORDS_RO | PyBUF_DEVICE) < 0) return NULL;
    void *p = b.view.buf;
    DevbufPy_BufferRelease(&b);
    return PyLong_FromVoidPtr(p);
  }
  PyObject *v = api->View_FromObject(obj, 0);
  if (v == NULL) return NULL;
  DevbufPy_ViewInfo info = {sizeof info};
  void *p = api->View_GetInfo(v, &info) == 0 ? info.ptr : NULL;
  api->View_Release(v);
  Py_DECREF(v);
  if (p == NULL && PyErr_Occurred()) return NULL;
  return PyLong_FromVoidPtr(p);
}

static PyMethodDef methods[] = {
    {"data_ptr", data_ptr, METH_O, "data_ptr(obj) -> address of obj's first item"},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_devbuf_bench", NULL, -1, methods};

PyMODINIT_FUNC PyInit__devbuf_bench(void) {
  api = DevbufPy_ImportCAPI();
  if (api == NULL) return NULL;
  return PyModule_Create(&mod);
}
