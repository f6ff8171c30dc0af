/* errors.c: devbuf's exception hierarchy and the mapping from devbuf_error.
 *
 *   devbuf.Error(Exception)                  every failure reported by the runtime
 *     devbuf.PluginError(Error)              a plugin, its driver, or no such device/identifier
 *       devbuf.OutOfMemoryError(PluginError, MemoryError)
 *     devbuf.FormatError(Error, ValueError)  a malformed or not understood format string
 *
 * Every instance carries .code (the DEVBUF_E* name) and .status (its number).
 * BufferError is raised where the buffer protocol says so (exports, flags). */
#include "base/dbp.h"

PyObject *dbp_Error;
PyObject *dbp_PluginError;
PyObject *dbp_FormatError;
PyObject *dbp_OutOfMemoryError;

static PyObject *make(PyObject *module, const char *name, PyObject *bases, const char *doc) {
  PyObject *exc = PyErr_NewExceptionWithDoc(name, doc, bases, NULL);
  if (exc == NULL) return NULL;
  const char *shortname = strrchr(name, '.') + 1;
  if (PyModule_AddObjectRef(module, shortname, exc) < 0) {
    Py_DECREF(exc);
    return NULL;
  }
  return exc;
}

int dbp_errors_init(PyObject *module) {
  PyObject *bases;
  dbp_Error = make(module, "devbuf.Error", PyExc_Exception,
                   "Base class of the errors devbuf reports. .code is the devbuf status name "
                   "(e.g. 'DEVBUF_ENODEV'), .status its number.");
  if (dbp_Error == NULL) return -1;
  dbp_PluginError = make(module, "devbuf.PluginError", dbp_Error,
                         "A plugin or its driver failed, or no plugin implements the device.");
  if (dbp_PluginError == NULL) return -1;
  bases = PyTuple_Pack(2, dbp_Error, PyExc_ValueError);
  if (bases == NULL) return -1;
  dbp_FormatError = make(module, "devbuf.FormatError", bases,
                         "A format string is malformed or names a dtype nobody understands. "
                         ".offset is the byte offset of the culprit, .format the string.");
  Py_DECREF(bases);
  if (dbp_FormatError == NULL) return -1;
  bases = PyTuple_Pack(2, dbp_PluginError, PyExc_MemoryError);
  if (bases == NULL) return -1;
  dbp_OutOfMemoryError = make(module, "devbuf.OutOfMemoryError", bases,
                              "A device (or its host staging memory) is out of memory.");
  Py_DECREF(bases);
  if (dbp_OutOfMemoryError == NULL) return -1;
  return 0;
}

static PyObject *class_for(int code) {
  switch (code) {
    case DEVBUF_EFORMAT: return dbp_FormatError;
    case DEVBUF_ENOMEM: return dbp_OutOfMemoryError;
    case DEVBUF_EINVAL:
    case DEVBUF_EINTERNAL:
    case DEVBUF_ECALLBACK:
    case DEVBUF_EEXIST:
      return dbp_Error;
    default: return dbp_PluginError;
  }
}

static PyObject *raise_with(PyObject *cls, const devbuf_error *err, const char *fallback) {
  const char *msg = err && err->message[0] ? err->message : fallback;
  int code = err ? err->code : DEVBUF_EINTERNAL;
  PyObject *exc = PyObject_CallFunction(cls, "s", msg);
  if (exc == NULL) return NULL;
  PyObject *name = PyUnicode_FromString(devbuf_status_name(code));
  PyObject *num = PyLong_FromLong(code);
  if (name == NULL || num == NULL || PyObject_SetAttrString(exc, "code", name) < 0 ||
      PyObject_SetAttrString(exc, "status", num) < 0) {
    Py_XDECREF(name);
    Py_XDECREF(num);
    Py_DECREF(exc);
    return NULL;
  }
  Py_DECREF(name);
  Py_DECREF(num);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

PyObject *dbp_raise(const devbuf_error *err) {
  int code = err ? err->code : DEVBUF_EINTERNAL;
  if (code == DEVBUF_OK) code = DEVBUF_EINTERNAL; /* a failure without a code is our bug */
  return raise_with(class_for(code), err, "devbuf: unknown error (no message)");
}

int dbp_fail(const devbuf_error *err) {
  dbp_raise(err);
  return -1;
}

PyObject *dbp_raise_format(const char *fmt, size_t len, size_t offset, const devbuf_error *err) {
  PyObject *cls = dbp_FormatError;
  const char *msg = err && err->message[0] ? err->message : "format: malformed";
  PyObject *exc = PyObject_CallFunction(cls, "s", msg);
  if (exc == NULL) return NULL;
  PyObject *off = PyLong_FromSize_t(offset);
  PyObject *f = PyUnicode_DecodeUTF8(fmt, (Py_ssize_t)len, "backslashreplace");
  PyObject *name = PyUnicode_FromString(devbuf_status_name(err ? err->code : DEVBUF_EFORMAT));
  PyObject *num = PyLong_FromLong(err ? err->code : DEVBUF_EFORMAT);
  int bad = off == NULL || f == NULL || name == NULL || num == NULL ||
            PyObject_SetAttrString(exc, "offset", off) < 0 ||
            PyObject_SetAttrString(exc, "format", f) < 0 ||
            PyObject_SetAttrString(exc, "code", name) < 0 ||
            PyObject_SetAttrString(exc, "status", num) < 0;
  Py_XDECREF(off);
  Py_XDECREF(f);
  Py_XDECREF(name);
  Py_XDECREF(num);
  if (bad) {
    Py_DECREF(exc);
    return NULL;
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

int dbp_buffer_error(const devbuf_error *err) {
  PyErr_SetString(PyExc_BufferError, err->message);
  return -1;
}

