/* devbuf_capi_consumer: another extension's view of devbuf through the
 * `devbuf._devbuf._C_API` capsule (bindings/python/include/devbuf_capi.h).
 * It includes devbuf's headers for their types but does NOT link libdevbuf:
 * every runtime call goes through the capsule's table. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf_capi.h"
#include "devbuf/dlpack.h" /* DLManagedTensorVersioned: types only */

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
  PyObject *shape = Py_None, *strides = Py_None; /* Py_NewRef is 3.10+ */
  Py_INCREF(shape);
  Py_INCREF(strides);
  for (int k = 0; k < 2; k++) {
    const Py_ssize_t *src = k ? vi.strides : vi.shape;
    if (src == NULL) continue;
    PyObject *t = PyTuple_New(vi.ndim);
    for (int i = 0; t && i < vi.ndim; i++) PyTuple_SET_ITEM(t, i, PyLong_FromSsize_t(src[i]));
    if (t == NULL) break;
    if (k) Py_SETREF(strides, t);
    else Py_SETREF(shape, t);
  }
  PyObject *d = Py_BuildValue("{s:N,s:n,s:n,s:i,s:i,s:s,s:z,s:i,s:i,s:s,s:i,s:N,s:N,s:N}", "ptr",
                              PyLong_FromVoidPtr(vi.ptr), "nbytes", vi.nbytes, "itemsize",
                              vi.itemsize, "ndim", vi.ndim, "readonly", vi.readonly, "format",
                              vi.format, "device", vi.device, "is_device", vi.is_device,
                              "host_accessible", vi.host_accessible, "dev_identifier",
                              vi.dev.identifier, "dev_ordinal", vi.dev.ordinal, "event",
                              PyLong_FromVoidPtr(vi.event), "shape", shape, "strides", strides);
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


/* dlpack_on_own_stream(obj, spec, producer_event): a stream-ordered DLPack
 * consumer, as the Python specification describes one. It opens `spec`,
 * creates its own stream S, asks obj.__dlpack__(stream=S), and then:
 *   1. records an event E on S and waits for E on the host: the producer
 *      must have made S wait for its pending work, so by then
 *      `producer_event` (an int handle, or None) is complete;
 *   2. copies the tensor to the host on S, without waiting on anything
 *      else, and returns (bytes, producer_event_done_when_S_drained).
 * It never looks at the producer's event to order its own work: only the
 * stream hand-off makes the result right. */
static PyObject *dlpack_on_own_stream(PyObject *self, PyObject *args) {
  PyObject *obj, *pev_o;
  const char *spec;
  if (!PyArg_ParseTuple(args, "OsO", &obj, &spec, &pev_o)) return NULL;
  void *pev = pev_o == Py_None ? NULL : PyLong_AsVoidPtr(pev_o);
  if (PyErr_Occurred()) return NULL;
  devbuf_error err;
  memset(&err, 0, sizeof err);
  devbuf_device dev;
  if (api->rt_device_open(spec, &dev, &err) != 0) return api->SetError(&err);
  void *st = NULL, *ev = NULL;
  if (api->rt_stream_create(&dev, &st, &err) != 0) return api->SetError(&err);
  PyObject *result = NULL, *cap = NULL, *kw = NULL, *fn = NULL, *noargs = NULL;
  kw = Py_BuildValue("{s:N,s:(ii)}", "stream", PyLong_FromVoidPtr(st), "max_version", 1, 3);
  fn = kw ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
  noargs = fn ? PyTuple_New(0) : NULL;
  cap = noargs ? PyObject_Call(fn, noargs, kw) : NULL;
  if (cap == NULL) goto done;
  DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
  if (m == NULL) goto done;
  size_t n = (m->dl_tensor.dtype.bits * m->dl_tensor.dtype.lanes + 7) / 8;
  for (int i = 0; i < m->dl_tensor.ndim; i++) n *= (size_t)m->dl_tensor.shape[i];
  int done_flag = 0, rc;
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
  if (out == NULL) goto done;
  Py_BEGIN_ALLOW_THREADS
  rc = api->rt_event_create(&dev, &ev, &err);
  if (rc == 0) rc = api->rt_event_record(&dev, ev, st, &err);
  if (rc == 0) rc = api->rt_event_synchronize(&dev, ev, &err);
  if (rc == 0 && pev != NULL) done_flag = api->rt_event_query(&dev, pev, &err) == 0;
  if (rc == 0 && pev == NULL) done_flag = 1;
  if (rc == 0)
    rc = api->rt_copy_d2h(&dev, PyBytes_AS_STRING(out), m->dl_tensor.data,
                          (size_t)m->dl_tensor.byte_offset, n, st, &err);
  if (rc == 0) rc = api->rt_stream_synchronize(&dev, st, &err);
  Py_END_ALLOW_THREADS
  if (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0) {
    Py_DECREF(out);
    goto done;
  }
  if (m->deleter) m->deleter(m);
  if (rc != 0) {
    Py_DECREF(out);
    api->SetError(&err);
    goto done;
  }
  result = Py_BuildValue("(NO)", out, done_flag ? Py_True : Py_False);
done:
  Py_XDECREF(cap);
  Py_XDECREF(noargs);
  Py_XDECREF(fn);
  Py_XDECREF(kw);
  if (ev) api->rt_event_destroy(&dev, ev, NULL);
  api->rt_stream_destroy(&dev, st, NULL);
  return result;
}


/* delete_at_exit(capsule): consume a DLPack capsule now and run its deleter
 * from a C atexit handler, i.e. after the interpreter has finalized, as a
 * library that frees tensors at process exit would. The producer's deleter
 * must not crash then. */
static struct {
  void *m;
  int versioned;
} g_at_exit[8];
static int g_at_exit_n;

static void run_deleters_at_exit(void) {
  for (int i = 0; i < g_at_exit_n; i++) {
    if (g_at_exit[i].versioned) {
      DLManagedTensorVersioned *m = g_at_exit[i].m;
      if (m->deleter) m->deleter(m);
    } else {
      DLManagedTensor *m = g_at_exit[i].m;
      if (m->deleter) m->deleter(m);
    }
  }
  /* Reached only if no deleter crashed: the test looks for this line. */
  fputs("deleters ran after finalization\n", stdout);
  fflush(stdout);
}

static PyObject *delete_at_exit(PyObject *self, PyObject *cap) {
  int versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
  const char *name = versioned ? "dltensor_versioned" : "dltensor";
  void *m = PyCapsule_GetPointer(cap, name);
  if (m == NULL) return NULL;
  if (g_at_exit_n == (int)(sizeof g_at_exit / sizeof g_at_exit[0])) {
    PyErr_SetString(PyExc_RuntimeError, "delete_at_exit: too many tensors");
    return NULL;
  }
  if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0)
    return NULL;
  if (g_at_exit_n == 0 && atexit(run_deleters_at_exit) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "delete_at_exit: atexit failed");
    return NULL;
  }
  g_at_exit[g_at_exit_n].m = m;
  g_at_exit[g_at_exit_n].versioned = versioned;
  g_at_exit_n++;
  Py_RETURN_NONE;
}


/* stream_create(spec) -> int handle, stream_destroy(spec, handle): a stream
 * of the consumer's own, for hand-off tests (a CAI producer's `stream`). */
static PyObject *stream_create(PyObject *self, PyObject *args) {
  const char *spec;
  if (!PyArg_ParseTuple(args, "s", &spec)) return NULL;
  devbuf_error err;
  memset(&err, 0, sizeof err);
  devbuf_device dev;
  void *st = NULL;
  if (api->rt_device_open(spec, &dev, &err) != 0 || api->rt_stream_create(&dev, &st, &err) != 0)
    return api->SetError(&err);
  return PyLong_FromVoidPtr(st);
}

static PyObject *stream_destroy(PyObject *self, PyObject *args) {
  const char *spec;
  PyObject *h;
  if (!PyArg_ParseTuple(args, "sO", &spec, &h)) return NULL;
  void *st = PyLong_AsVoidPtr(h);
  if (PyErr_Occurred()) return NULL;
  devbuf_error err;
  memset(&err, 0, sizeof err);
  devbuf_device dev;
  if (api->rt_device_open(spec, &dev, &err) != 0 || api->rt_stream_destroy(&dev, st, &err) != 0)
    return api->SetError(&err);
  Py_RETURN_NONE;
}

/* import_info(obj, writable=0, release_twice=0): what Import_FromObject
 * reports (C API 1.1: no view object), then the import is released (twice
 * when asked: the second must do nothing). */
static PyObject *import_info(PyObject *self, PyObject *args) {
  PyObject *obj;
  int writable = 0, twice = 0;
  if (!PyArg_ParseTuple(args, "O|ii", &obj, &writable, &twice)) return NULL;
  if (!DEVBUFPY_CAPI_HAS(api, Import_Release)) {
    PyErr_SetString(PyExc_RuntimeError, "devbuf C API without Import_FromObject");
    return NULL;
  }
  DevbufPy_Import imp;
  memset(&imp, 0, sizeof imp);
  imp.struct_size = sizeof imp;
  if (api->Import_FromObject(obj, writable ? PyBUF_WRITABLE : 0, &imp) < 0) return NULL;
  const Py_buffer *b = &imp.buffer.view;
  PyObject *shape = PyTuple_New(b->ndim), *strides = PyTuple_New(b->ndim);
  for (int i = 0; shape && strides && i < b->ndim; i++) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromSsize_t(b->shape[i]));
    PyTuple_SET_ITEM(strides, i, PyLong_FromSsize_t(b->strides[i]));
  }
  PyObject *d = NULL;
  if (shape && strides)
    d = Py_BuildValue("{s:N,s:n,s:n,s:i,s:s,s:O,s:O,s:z,s:i,s:i,s:i,s:N,s:i}", "ptr",
                      PyLong_FromVoidPtr(b->buf), "nbytes", b->len, "itemsize", b->itemsize,
                      "readonly", b->readonly, "format", b->format, "shape", shape, "strides",
                      strides, "device", imp.buffer.device, "is_device", imp.is_device,
                      "host_accessible", imp.host_accessible, "has_device_info",
                      imp.buffer.device_info != NULL, "event", PyLong_FromVoidPtr(imp.event),
                      "obj_is_null", b->obj == NULL);
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  api->Import_Release(&imp);
  if (twice) api->Import_Release(&imp);
  return d;
}

static PyMethodDef methods[] = {
    {"import_info", import_info, METH_VARARGS, NULL},
    {"version", version, METH_NOARGS, NULL},
    {"info", info, METH_O, NULL},
    {"read_bytes", read_bytes, METH_O, NULL},
    {"itemsize", itemsize, METH_O, NULL},
    {"empty", empty, METH_VARARGS, NULL},
    {"dlpack_on_own_stream", dlpack_on_own_stream, METH_VARARGS, NULL},
    {"delete_at_exit", delete_at_exit, METH_O, NULL},
    {"stream_create", stream_create, METH_VARARGS, NULL},
    {"stream_destroy", stream_destroy, METH_VARARGS, NULL},
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
  PyObject *m = PyModule_Create(&moddef);
#ifdef Py_GIL_DISABLED /* single-phase init: declared on the module object */
  if (m != NULL && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) Py_CLEAR(m);
#endif
  return m;
}
