/* devbuf_capi_consumer: another extension's view of devbuf through the
 * `devbuf._devbuf._C_API` capsule (bindings/python/include/devbuf_capi.h).
 * It includes devbuf's headers for their types but does NOT link libdevbuf:
 * every runtime call goes through the capsule's table. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "devbuf_capi.h"

static const DevbufPy_CAPI *api;

static PyObject *version(PyObject *self, PyObject *unused) {
  return Py_BuildValue("(iin)", api->version_major, api->version_minor,
                       (Py_ssize_t)api->struct_size);
}

/* info(obj): what View_GetInfo reports, then the view is released. */
static PyObject *info(PyObject *self, PyObject *obj) {
  PyObject *v = api->View_FromObject(obj, 0);
  if (v == NULL) return NULL;
  DevbufPy_ViewInfo vi;
  memset(&vi, 0, sizeof vi);
  vi.struct_size = sizeof vi;
  if (api->View_GetInfo(v, &vi) < 0) {
    Py_DECREF(v);
    return NULL;
  }
  PyObject *d = Py_BuildValue("{s:N,s:n,s:n,s:i,s:i,s:s,s:z,s:i,s:i,s:s,s:i,s:N}", "ptr",
                              PyLong_FromVoidPtr(vi.ptr), "nbytes", vi.nbytes, "itemsize",
                              vi.itemsize, "ndim", vi.ndim, "readonly", vi.readonly, "format",
                              vi.format, "device", vi.device, "is_device", vi.is_device,
                              "host_accessible", vi.host_accessible, "dev_identifier",
                              vi.dev.identifier, "dev_ordinal", vi.dev.ordinal, "event",
                              PyLong_FromVoidPtr(vi.event));
  int rc = api->View_Release(v);
  Py_DECREF(v);
  if (rc < 0) {
    Py_XDECREF(d);
    return NULL;
  }
  return d;
}

/* read_bytes(obj): the bytes of a C-contiguous buffer, copied to the host
 * through the runtime table (honouring the producer's event), GIL released. */
static PyObject *read_bytes(PyObject *self, PyObject *obj) {
  PyObject *v = api->View_FromObject(obj, 0);
  if (v == NULL) return NULL;
  DevbufPy_ViewInfo vi;
  memset(&vi, 0, sizeof vi);
  vi.struct_size = sizeof vi;
  if (api->View_GetInfo(v, &vi) < 0) {
    Py_DECREF(v);
    return NULL;
  }
  PyObject *out = PyBytes_FromStringAndSize(NULL, vi.nbytes);
  if (out == NULL) {
    Py_DECREF(v);
    return NULL;
  }
  devbuf_error err;
  memset(&err, 0, sizeof err);
  int rc = 0;
  char *dst = PyBytes_AS_STRING(out);
  if (vi.host_accessible) {
    if (vi.event) {
      Py_BEGIN_ALLOW_THREADS
      rc = api->rt_event_synchronize(&vi.dev, vi.event, &err);
      Py_END_ALLOW_THREADS
    }
    if (rc == 0) memcpy(dst, vi.ptr, (size_t)vi.nbytes);
  } else {
    Py_BEGIN_ALLOW_THREADS
    rc = api->rt_copy_to_host_sync(&vi.dev, dst, vi.ptr, 0, (size_t)vi.nbytes, vi.event, &err);
    Py_END_ALLOW_THREADS
  }
  api->View_Release(v);
  Py_DECREF(v);
  if (rc != 0) {
    Py_DECREF(out);
    return api->SetError(&err);
  }
  return out;
}

/* itemsize(fmt): the format engine through the table. */
static PyObject *itemsize(PyObject *self, PyObject *arg) {
  Py_ssize_t n;
  const char *fmt = PyUnicode_AsUTF8AndSize(arg, &n);
  if (fmt == NULL) return NULL;
  uint64_t size = 0;
  size_t off = 0;
  devbuf_error err;
  memset(&err, 0, sizeof err);
  if (api->fmt_itemsize(fmt, (size_t)n, DEVBUF_FORMAT_DEFAULT, &size, NULL, &off, &err) != 0)
    return api->SetError(&err);
  return PyLong_FromUnsignedLongLong(size);
}

static PyObject *empty(PyObject *self, PyObject *args) {
  PyObject *shape, *device;
  const char *fmt;
  if (!PyArg_ParseTuple(args, "OsO", &shape, &fmt, &device)) return NULL;
  return api->Buffer_Empty(shape, fmt, device);
}

static PyMethodDef methods[] = {
    {"version", version, METH_NOARGS, NULL},
    {"info", info, METH_O, NULL},
    {"read_bytes", read_bytes, METH_O, NULL},
    {"itemsize", itemsize, METH_O, NULL},
    {"empty", empty, METH_VARARGS, NULL},
    {NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "devbuf_capi_consumer",
    .m_doc = "Uses devbuf through its C API capsule only",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_devbuf_capi_consumer(void) {
  api = DevbufPy_ImportCAPI();
  if (api == NULL) return NULL;
  return PyModule_Create(&moddef);
}
