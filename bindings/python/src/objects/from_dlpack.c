/* from_dlpack.c: devbuf.from_dlpack(x, device=, copy=, legacy_writable=):
 * the DLPack reader's description (readers/dlpack_import.c) owned by a new
 * DeviceView, or copied (to the host, then to the device asked for) where
 * the producer did not honour device/copy. Also the module's DLPack
 * constants and the exchange-table benchmark helper. See docs/interop.md. */
#include "objects/objects.h"
#include "readers/readers.h"

#include <string.h>
#include <time.h>

static PyObject *g_s_dlpack;

/* The device a from_dlpack() result must end up on: *id NULL when any. */
static int parse_target(PyObject *device, DLDevice *dl, int *has_dl, const char **id, int *ord) {
  *has_dl = 0;
  *id = NULL;
  if (device == Py_None) return 0;
  DbpDevice *d;
  if (PyTuple_Check(device)) { /* a DLPack (type, id) pair */
    long t = PyTuple_GET_SIZE(device) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(device, 0)) : -1;
    long i = PyTuple_GET_SIZE(device) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(device, 1)) : -1;
    if (PyErr_Occurred()) return -1;
    DLDevice x;
    int32_t ti = (int32_t)t;
    memcpy(&x.device_type, &ti, sizeof ti);
    x.device_id = (int32_t)i;
    devbuf_error err;
    devbuf_error_clear(&err);
    int32_t o;
    if (devbuf_dlpack_device_to_identifier(x, id, &o, NULL, &err) != DEVBUF_OK) {
      dbp_buffer_error(&err);
      return -1;
    }
    *ord = o;
    *dl = x;
    *has_dl = 1;
    return 0;
  }
  d = dbp_device_get(device);
  if (d == NULL) return -1;
  *id = d->is_host ? "cpu" : d->dev.identifier;
  *ord = d->is_host ? 0 : d->dev.ordinal;
  Py_DECREF(d); /* cached Devices live for the process: *id stays valid */
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_dlpack_device_from_identifier(*id, *ord, 0, dl, NULL) == DEVBUF_OK) *has_dl = 1;
  return 0;
}

PyObject *dbp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  PyObject *obj = NULL, *device = Py_None, *copy_o = Py_None, *lw_o = Py_None;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "from_dlpack() takes 1 positional argument");
    return NULL;
  }
  if (nargs == 1) obj = args[0];
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
    if (obj == NULL && PyUnicode_CompareWithASCIIString(k, "x") == 0) obj = v;
    else if (PyUnicode_CompareWithASCIIString(k, "device") == 0) device = v;
    else if (PyUnicode_CompareWithASCIIString(k, "copy") == 0) copy_o = v;
    else if (PyUnicode_CompareWithASCIIString(k, "legacy_writable") == 0) lw_o = v;
    else {
      PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument '%U'", k);
      return NULL;
    }
  }
  if (obj == NULL) {
    PyErr_SetString(PyExc_TypeError, "from_dlpack() missing required argument 'x'");
    return NULL;
  }
  int copy = -1;
  if (copy_o != Py_None) {
    copy = PyObject_IsTrue(copy_o);
    if (copy < 0) return NULL;
  }
  int legacy_writable = lw_o == Py_None ? 0 : PyObject_IsTrue(lw_o);
  if (legacy_writable < 0) return NULL;
  DLDevice tdl;
  int has_dl = 0, tord = 0;
  const char *tid = NULL;
  if (parse_target(device, &tdl, &has_dl, &tid, &tord) < 0) return NULL;

  dbp_desc *f = NULL;
  int dropped = 1; /* the producer did not handle device/copy */
  PyObject *descr; /* the type's __dlpack__, borrowed */
  int direct;
  const devbuf_dlpack_exchange_api *api = dbp_dlpack_type_of(Py_TYPE(obj), &descr, &direct);
  if (api == NULL && PyErr_Occurred()) return NULL;
  /* obj.__dlpack__: the type's method (found through the type's cache
   * above, called without binding it), else an instance attribute. */
  PyObject *fn = NULL;
  int has_method = 0, unbound = 0;
  /* copy=True is never passed on: devbuf copies the producer's plain
   * export itself (docs/interop.md, "copy=True"). A producer's own copy was
   * seen wrong: pyarrow 26's copy of a strided Tensor keeps the strides
   * over a compact buffer, and reads past it. */
  PyObject *producer_copy = copy == 1 ? Py_None : copy_o;
  if (api == NULL) {
    has_method = descr != NULL;
    if (has_method && direct) {
      /* What obj.__dlpack__(...) would call, found once: a new reference,
       * as the call may change the type. */
      fn = Py_NewRef(descr);
      unbound = 1;
    }
    if (!has_method && dbp_compat_LookupAttr(obj, g_s_dlpack, &fn) < 0) return NULL;
  }
  if (api != NULL) {
    f = dbp_dlpack_import_exchange(obj, api);
  } else if (has_method || fn != NULL) {
    PyObject *dl = Py_None;
    if (has_dl) {
      dl = Py_BuildValue("(ii)", (int)tdl.device_type, (int)tdl.device_id);
      if (dl == NULL) {
        Py_XDECREF(fn);
        return NULL;
      }
    } else {
      Py_INCREF(dl);
    }
    f = dbp_dlpack_import_call(obj, fn, unbound, dl, producer_copy, &dropped, legacy_writable);
    Py_DECREF(dl);
    Py_XDECREF(fn);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack() needs an object with __dlpack__ (or a type with %s), not "
                 "%.100s",
                 DEVBUF_DLPACK_EXCHANGE_API_ATTR, Py_TYPE(obj)->tp_name);
    return NULL;
  }
  if (f == NULL) return NULL;

  /* What the producer did not do, devbuf does through its plugins. */
  int elsewhere = tid != NULL && !(strcmp(tid, f->desc.identifier) == 0 && tord == f->desc.ordinal);
  /* A copy the producer made on its own (to reach dl_device) is already
   * fresh memory; anything else is copied here. */
  int want_copy = copy == 1 && !(f->desc.flags & DEVBUF_DLPACK_IS_COPIED);
  if ((dropped && elsewhere) || want_copy) {
    if (tid == NULL) { /* no device asked: the copy stays where the data is */
      tid = f->desc.identifier;
      tord = f->desc.ordinal;
    }
    if (copy == 0) {
      PyErr_Format(PyExc_BufferError,
                   "from_dlpack: copy=False, but the tensor is on %s:%d and device asks for %s:%d",
                   f->desc.identifier, (int)f->desc.ordinal, tid, tord);
      dbp_desc_free(f);
      return NULL;
    }
    DbpView *src = dbp_view_from_desc(f, 0);
    if (src == NULL) return NULL;
    PyObject *host = dbp_view_to_host(src);
    dbp_view_release(src);
    Py_DECREF(src);
    if (host == NULL) return NULL;
    PyObject *buf = host;
    if (tid != NULL && strcmp(tid, "cpu") != 0) {
      PyObject *spec = PyUnicode_FromFormat("%s:%d", tid, tord);
      DbpDevice *td = spec ? dbp_device_get(spec) : NULL;
      Py_XDECREF(spec);
      buf = td ? dbp_buffer_copy_to((DbpBuffer *)host, td) : NULL;
      Py_XDECREF(td);
      Py_DECREF(host);
      if (buf == NULL) return NULL;
    }
    PyObject *result = (PyObject *)dbp_view_new(buf, 0);
    Py_DECREF(buf);
    return result;
  }
  return (PyObject *)dbp_view_from_desc(f, 0);
}

/* Benchmark helper: import `obj` through its type's exchange table `n`
 * times (the borrowed DLTensor when the table has it, else an owning
 * tensor and its deleter), validating each with devbuf_dlpack_describe.
 * Returns the seconds per import. This is the C consumer's fast path. */
PyObject *dbp_exchange_import_bench(PyObject *self, PyObject *args) {
  PyObject *obj;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "On:_exchange_import_bench", &obj, &n)) return NULL;
  devbuf_dlpack_desc d;
  d.struct_size = sizeof d;
  devbuf_error err;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (Py_ssize_t i = 0; i < n; i++) {
    const devbuf_dlpack_exchange_api *api = dbp_exchange_api_of(Py_TYPE(obj));
    if (api == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "no DLPack exchange table");
      return NULL;
    }
    if (api->dltensor_from_py_object_no_sync != NULL) {
      DLTensor t;
      if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
      if (devbuf_dlpack_describe(&t, 0, &d, &err) != DEVBUF_OK) return PyErr_Format(PyExc_BufferError, "%s", err.message);
    } else {
      DLManagedTensorVersioned *m = NULL;
      if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0) return NULL;
      int rc = devbuf_dlpack_describe_versioned(m, &d, &err);
      devbuf_dlpack_delete_versioned(m);
      if (rc != DEVBUF_OK) return PyErr_Format(PyExc_BufferError, "%s", err.message);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return PyFloat_FromDouble(n > 0 ? secs / (double)n : 0.0);
}

static PyMethodDef import_functions[] = {
    {"from_dlpack", (PyCFunction)(void (*)(void))dbp_from_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack($module, x, /, *, device=None, copy=None, legacy_writable=False)\n--\n\n"
     "from_dlpack(x, /, *, device=None, copy=None, legacy_writable=False) -> DeviceView of a "
     "DLPack producer's memory (through its type's C exchange table when it has one, else "
     "x.__dlpack__). device: a devbuf Device or spec, or a DLPack (type, id) pair; copy: None "
     "(only if needed), True, False (BufferError if a copy is needed); legacy_writable: an "
     "unversioned (pre-1.0) capsule cannot say it is read-only, so it is imported read-only "
     "unless this is True (you know the producer allows writes)."},
    {"_exchange_import_bench", dbp_exchange_import_bench, METH_VARARGS,
     "_exchange_import_bench(obj, n) -> seconds per DLPack C-exchange-table import (benchmarks)."},
    {NULL},
};

int dbp_import_init(PyObject *module) {
  if (dbp_dlpack_reader_init() < 0) return -1;
  g_s_dlpack = PyUnicode_InternFromString("__dlpack__");
  if (g_s_dlpack == NULL) return -1;
  if (dbp_foreign_init(module) < 0) return -1;
  if (PyModule_AddFunctions(module, import_functions) < 0) return -1;
  return PyModule_AddIntConstant(module, "DLPACK_MAX_NDIM", DEVBUF_DLPACK_MAX_NDIM);
}

