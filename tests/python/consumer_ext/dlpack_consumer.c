/* A third-party consumer of DLPack-only producers through the header-only
 * route (bindings/python/include/devbuf_dlpack_import.h): Python.h and that
 * header, nothing of devbuf linked or imported. Built twice, as C
 * (devbuf_dlpack_consumer) and as C++ (devbuf_dlpack_consumer_cpp, from
 * dlpack_consumer.cpp), for tests/python/test_dlpack_header.py.
 *
 *   import_(obj, flags=0, stream=None) -> dict   import, describe, release
 *   hold(obj, flags=0, stream=None) -> handle    import and keep (a capsule)
 *   info(handle) -> dict                          the held description
 *   release(handle)                               the deleter, once (twice: nothing)
 *   import_capsule(cap, producer=None, flags=0) -> dict
 *   release_keeps_error(obj) -> exception         release with an exception pending */
#include <Python.h>

#include "devbuf_dlpack_import.h"

#ifndef DLPACK_CONSUMER_NAME
#define DLPACK_CONSUMER_NAME "devbuf_dlpack_consumer"
#define DLPACK_CONSUMER_INIT PyInit_devbuf_dlpack_consumer
#endif

#define HANDLE_NAME "devbuf_dlpack_consumer.view"

static PyObject *ssize_tuple(const Py_ssize_t *v, int n) {
  PyObject *t = PyTuple_New(n);
  int i;
  if (t == NULL) return NULL;
  for (i = 0; i < n; i++) {
    PyObject *x = PyLong_FromSsize_t(v[i]);
    if (x == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

/* Every field of the description, as Python values. */
static PyObject *as_dict(const DevbufPy_DLPackView *v) {
  PyObject *shape = ssize_tuple(v->shape, v->ndim);
  PyObject *strides = shape ? ssize_tuple(v->strides, v->ndim) : NULL;
  PyObject *d = NULL;
  if (strides != NULL)
    d = Py_BuildValue(
        "{s:K,s:n,s:n,s:i,s:i,s:n,s:i,s:i,s:i,s:i,s:i,s:i,s:O,s:(II),s:K,s:i,s:K,s:K,"
        "s:(iii),s:I,s:s,s:O,s:O,s:O,s:i}",
        "buf", (unsigned long long)(uintptr_t)v->buf, "len", v->len, "itemsize", v->itemsize,
        "ndim", v->ndim, "readonly", v->readonly, "nitems", v->nitems, "c_contiguous",
        v->c_contiguous, "f_contiguous", v->f_contiguous, "device_type", (int)v->device_type,
        "device_id", (int)v->device_id, "host_accessible", v->host_accessible, "is_handle",
        v->is_handle, "stream", v->stream ? v->stream : Py_None, "version",
        (unsigned)v->version_major, (unsigned)v->version_minor, "dl_flags",
        (unsigned long long)v->dl_flags, "is_copied", v->is_copied, "data",
        (unsigned long long)(uintptr_t)v->data, "byte_offset", (unsigned long long)v->byte_offset,
        "dtype", (int)v->dtype_code, (int)v->dtype_bits, (int)v->dtype_lanes,
        "elements_per_item", (unsigned)v->elements_per_item, "format", v->format, "shape", shape,
        "strides", strides, "producer", v->producer ? v->producer : Py_None, "has_tensor",
        v->tensor != NULL);
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return d;
}

static PyObject *import_(PyObject *self, PyObject *args) {
  PyObject *obj, *stream = Py_None, *d;
  int flags = 0;
  DevbufPy_DLPackView v;
  (void)self;
  if (!PyArg_ParseTuple(args, "O|iO:import_", &obj, &flags, &stream)) return NULL;
  if (DevbufPy_DLPackImport(obj, flags, stream == Py_None ? NULL : stream, &v) < 0) {
    /* A failed import holds nothing. */
    if (v.producer != NULL || v.tensor != NULL || v.stream != NULL)
      PyErr_SetString(PyExc_AssertionError, "a failed import left something held");
    return NULL;
  }
  d = as_dict(&v);
  DevbufPy_DLPackRelease(&v);
  if (d != NULL && (v.producer != NULL || v.tensor != NULL || v.stream != NULL)) {
    Py_DECREF(d);
    PyErr_SetString(PyExc_AssertionError, "the release left something held");
    return NULL;
  }
  return d;
}

static void handle_free(PyObject *cap) {
  DevbufPy_DLPackView *v = (DevbufPy_DLPackView *)PyCapsule_GetPointer(cap, HANDLE_NAME);
  if (v == NULL) {
    PyErr_Clear();
    return;
  }
  DevbufPy_DLPackRelease(v);
  PyMem_Free(v);
}

static PyObject *hold(PyObject *self, PyObject *args) {
  PyObject *obj, *stream = Py_None, *cap;
  int flags = 0;
  DevbufPy_DLPackView *v;
  (void)self;
  if (!PyArg_ParseTuple(args, "O|iO:hold", &obj, &flags, &stream)) return NULL;
  v = (DevbufPy_DLPackView *)PyMem_Malloc(sizeof *v);
  if (v == NULL) return PyErr_NoMemory();
  if (DevbufPy_DLPackImport(obj, flags, stream == Py_None ? NULL : stream, v) < 0) {
    PyMem_Free(v);
    return NULL;
  }
  cap = PyCapsule_New(v, HANDLE_NAME, handle_free);
  if (cap == NULL) {
    DevbufPy_DLPackRelease(v);
    PyMem_Free(v);
  }
  return cap;
}

static PyObject *info(PyObject *self, PyObject *cap) {
  DevbufPy_DLPackView *v = (DevbufPy_DLPackView *)PyCapsule_GetPointer(cap, HANDLE_NAME);
  (void)self;
  return v ? as_dict(v) : NULL;
}

static PyObject *release(PyObject *self, PyObject *cap) {
  DevbufPy_DLPackView *v = (DevbufPy_DLPackView *)PyCapsule_GetPointer(cap, HANDLE_NAME);
  (void)self;
  if (v == NULL) return NULL;
  DevbufPy_DLPackRelease(v);
  Py_RETURN_NONE;
}

static PyObject *import_capsule(PyObject *self, PyObject *args) {
  PyObject *cap, *producer = Py_None, *d;
  int flags = 0;
  DevbufPy_DLPackView v;
  (void)self;
  if (!PyArg_ParseTuple(args, "O|Oi:import_capsule", &cap, &producer, &flags)) return NULL;
  if (DevbufPy_DLPackImportCapsule(cap, producer == Py_None ? NULL : producer, flags, &v) < 0)
    return NULL;
  d = as_dict(&v);
  DevbufPy_DLPackRelease(&v);
  return d;
}

/* Release with an exception pending: it must still be pending afterwards
 * (and the deleter still called). Returns the exception. */
static PyObject *release_keeps_error(PyObject *self, PyObject *obj) {
  DevbufPy_DLPackView v;
  PyObject *t, *e, *tb;
  (void)self;
  if (DevbufPy_DLPackImport(obj, 0, NULL, &v) < 0) return NULL;
  PyErr_SetString(PyExc_KeyError, "pending");
  DevbufPy_DLPackRelease(&v);
  if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
    PyErr_SetString(PyExc_AssertionError, "the release lost the pending exception");
    return NULL;
  }
  PyErr_Fetch(&t, &e, &tb);
  PyErr_NormalizeException(&t, &e, &tb);
  Py_XDECREF(t);
  Py_XDECREF(tb);
  return e;
}

static PyMethodDef methods[] = {
    {"import_", import_, METH_VARARGS, "import_(obj, flags=0, stream=None) -> dict"},
    {"hold", hold, METH_VARARGS, "hold(obj, flags=0, stream=None) -> handle"},
    {"info", info, METH_O, "info(handle) -> dict"},
    {"release", release, METH_O, "release(handle)"},
    {"import_capsule", import_capsule, METH_VARARGS,
     "import_capsule(cap, producer=None, flags=0) -> dict"},
    {"release_keeps_error", release_keeps_error, METH_O, "release_keeps_error(obj) -> exception"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, DLPACK_CONSUMER_NAME, NULL, -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC DLPACK_CONSUMER_INIT(void) {
  PyObject *m = PyModule_Create(&moddef);
  if (m == NULL) return NULL;
#ifdef Py_GIL_DISABLED
  PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
  if (PyModule_AddIntConstant(m, "WRITABLE", DEVBUFPY_DLPACK_WRITABLE) < 0 ||
      PyModule_AddIntConstant(m, "LEGACY_WRITABLE", DEVBUFPY_DLPACK_LEGACY_WRITABLE) < 0 ||
      PyModule_AddIntConstant(m, "MAX_NDIM", DEVBUFPY_DLPACK_MAX_NDIM) < 0 ||
#ifdef __cplusplus
      PyModule_AddIntConstant(m, "CPLUSPLUS", 1) < 0
#else
      PyModule_AddIntConstant(m, "CPLUSPLUS", 0) < 0
#endif
  ) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
