/* buffer_api.c: the NumPy-shaped parts of devbuf.DeviceBuffer: len(),
 * .size, .dtype, .format_info, copy_from(), fill() and b[...] = x. The
 * parts that need NumPy or the format parser live in devbuf/_api.py. */
#include "buffer_api.h"

#include "interop.h"

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
