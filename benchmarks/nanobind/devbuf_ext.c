/* devbuf's side: the same function through the header-only backport
 * (bindings/python/include/devbuf_buffer.h), which also reports the device,
 * the sync to honour (device_info) and the format. An object without the
 * buffer protocol (a DLPack-only producer) goes through the header-only
 * DLPack route (devbuf_dlpack_import.h: the device query cached per CPU-only
 * producer type, __dlpack__(max_version=(1, 3)), the tensor validated and
 * described, its deleter called once), still without linking libdevbuf and
 * without any devbuf object. data_ptr_capi takes the C API capsule's
 * Import_FromObject instead (devbuf_capi.h: the one import description of
 * devbuf.view(), with a recorded sync), for comparison. */
#include <Python.h>

#include "devbuf/dlpack.h"
#include "devbuf_capi.h"
#include "devbuf_dlpack_import.h"

static const DevbufPy_CAPI *api;

#if defined(__GNUC__) || defined(__clang__)
#define BENCH_NOINLINE __attribute__((noinline))
#else
#define BENCH_NOINLINE
#endif

/* Its own function: the view's ~1.1 KiB stay off the buffer path's frame. */
static BENCH_NOINLINE PyObject *data_ptr_dlpack(PyObject *obj) {
  DevbufPy_DLPackView v;
  if (DevbufPy_DLPackImport(obj, 0, NULL, &v) < 0) return NULL;
  void *p = v.buf;
  DevbufPy_DLPackRelease(&v);
  return PyLong_FromVoidPtr(p);
}

static PyObject *data_ptr(PyObject *self, PyObject *obj) {
  if (!PyObject_CheckBuffer(obj)) return data_ptr_dlpack(obj);
  DevbufPy_buffer_ext b;
  if (DevbufPy_GetBufferEx(obj, &b, PyBUF_RECORDS_RO | PyBUF_DEVICE) < 0) return NULL;
  void *p = b.view.buf;
  DevbufPy_BufferRelease(&b);
  return PyLong_FromVoidPtr(p);
}

static PyObject *data_ptr_capi(PyObject *self, PyObject *obj) {
  if (PyObject_CheckBuffer(obj)) return data_ptr(self, obj);
  DevbufPy_Import imp = {sizeof imp};
  if (api->Import_FromObject(obj, 0, &imp) < 0) return NULL;
  void *p = imp.buffer.view.buf;
  api->Import_Release(&imp);
  return PyLong_FromVoidPtr(p);
}

/* Not a consumer: the floor under any consumer of this producer that asks
 * for a versioned tensor. obj.__dlpack__(max_version=(1, 3)) through the
 * type's method, the pointer taken, the deleter called; no device query, no
 * stream, no validation, no rename, no owner kept. What a real consumer
 * costs above this is its own work (docs/benchmarks.md). */
static PyObject *floor_dlpack(PyObject *self, PyObject *obj) {
  static PyObject *name, *kw, *mv;
  if (name == NULL) {
    name = PyUnicode_InternFromString("__dlpack__");
    PyObject *k = PyUnicode_InternFromString("max_version");
    kw = k ? PyTuple_Pack(1, k) : NULL;
    Py_XDECREF(k);
    mv = Py_BuildValue("(ii)", 1, 3);
    if (name == NULL || kw == NULL || mv == NULL) return NULL;
  }
  PyObject *argv[2] = {obj, mv};
  PyObject *cap = PyObject_VectorcallMethod(name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw);
  if (cap == NULL) return NULL;
  DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
  if (m == NULL || PyCapsule_SetDestructor(cap, NULL) < 0) {
    Py_DECREF(cap);
    return NULL;
  }
  Py_DECREF(cap);
  void *p = (char *)m->dl_tensor.data + m->dl_tensor.byte_offset;
  if (m->deleter) m->deleter(m);
  return PyLong_FromVoidPtr(p);
}

static PyMethodDef methods[] = {
    {"floor_dlpack", floor_dlpack, METH_O,
     "floor_dlpack(obj) -> address; __dlpack__(max_version=(1, 3)) and the deleter only "
     "(the floor under any consumer, not one)"},
    {"data_ptr", data_ptr, METH_O, "data_ptr(obj) -> address of obj's first item"},
    {"data_ptr_capi", data_ptr_capi, METH_O,
     "data_ptr_capi(obj) -> the same, a DLPack-only producer through the C API's "
     "Import_FromObject"},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_devbuf_bench", NULL, -1, methods};

PyMODINIT_FUNC PyInit__devbuf_bench(void) {
  api = DevbufPy_ImportCAPI();
  if (api == NULL) return NULL;
  if (!DEVBUFPY_CAPI_HAS(api, Import_Release)) {
    PyErr_SetString(PyExc_ImportError, "this benchmark needs devbuf C API 1.1 (Import_FromObject)");
    return NULL;
  }
  return PyModule_Create(&mod);
}
