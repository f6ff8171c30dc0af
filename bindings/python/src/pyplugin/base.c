/* base.c: the rules every closure of devbuf._pyplugin shares, the bottom
 * layer of src/pyplugin/: how a Python exception becomes a devbuf status
 * and message, how a devbuf error is raised, how handles cross the boundary
 * (ints; NULL is None), how a closure writes an int return, and the
 * registry that keeps registered tables and namespaces alive. Calls only
 * CPython, libffi and libdevbuf. */
#include "pyplugin.h"

#include <stdio.h>
#include <string.h>

PyObject *g_registry;

/* The thread that finalizes the interpreter (base/dbp_enter.h): this
 * extension's own copy, set by pp_exec. */
unsigned long dbp_enter_main_thread;

/* ---- handles and fields ------------------------------------------------------------ */

int pp_as_handle(PyObject *o, void **out, const char *what) {
  if (o == Py_None) {
    *out = NULL;
    return 0;
  }
  PyObject *idx = PyNumber_Index(o);
  if (idx == NULL) {
    PyErr_Format(PyExc_TypeError, "%s: expected an int handle or None, got %.100s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  unsigned long long v = 0;
  int bad = dbp_compat_LongSign(idx) < 0;
  if (!bad) {
    v = PyLong_AsUnsignedLongLong(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      bad = 1;
    }
  }
  if (bad || v > UINTPTR_MAX) {
    PyErr_Format(PyExc_OverflowError, "%s: %R is not a pointer-sized unsigned value", what, idx);
    Py_DECREF(idx);
    return -1;
  }
  Py_DECREF(idx);
  *out = (void *)(uintptr_t)v;
  return 0;
}

PyObject *pp_from_handle(const void *p) {
  if (p == NULL) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

PyObject *pp_get_field(PyObject *obj, const char *name) {
  PyObject *v;
  if (PyDict_Check(obj)) return Py_XNewRef(PyDict_GetItemString(obj, name));
  if (PyMapping_Check(obj) && !PyUnicode_Check(obj) && !PyTuple_Check(obj) && !PyList_Check(obj)) {
    v = PyMapping_GetItemString(obj, name);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
    return v;
  }
  v = PyObject_GetAttrString(obj, name);
  if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
  return v;
}

/* ---- exceptions -> devbuf status -------------------------------------------------------- */

static int status_of(PyObject *exc, int *explicit_status) {
  *explicit_status = 0;
  PyObject *st = PyObject_GetAttrString(exc, "status");
  if (st == NULL) {
    PyErr_Clear();
  } else {
    long v = PyLong_Check(st) ? PyLong_AsLong(st) : -1;
    Py_DECREF(st);
    if (v == -1 && PyErr_Occurred()) PyErr_Clear();
    if (v > DEVBUF_OK && v <= DEVBUF_ECALLBACK) {
      *explicit_status = 1;
      return (int)v;
    }
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_MemoryError)) return DEVBUF_ENOMEM;
  if (PyErr_GivenExceptionMatches(exc, PyExc_OSError)) {
    PyObject *no = PyObject_GetAttrString(exc, "errno");
    long e = no && PyLong_Check(no) ? PyLong_AsLong(no) : 0;
    Py_XDECREF(no);
    PyErr_Clear();
    if (e == ENOMEM) return DEVBUF_ENOMEM;
    if (PyErr_GivenExceptionMatches(exc, PyExc_TimeoutError)) return DEVBUF_ETIMEDOUT;
    return DEVBUF_ECALLBACK;
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_NotImplementedError)) return DEVBUF_ENOTSUP;
  if (PyErr_GivenExceptionMatches(exc, PyExc_ValueError) ||
      PyErr_GivenExceptionMatches(exc, PyExc_LookupError) ||
      PyErr_GivenExceptionMatches(exc, PyExc_OverflowError))
    return DEVBUF_EINVAL;
  return DEVBUF_ECALLBACK;
}

/* "file:line" of the innermost frame of tb, into buf ("" if unknown). */
static void where(PyObject *tb, char *buf, size_t cap) {
  buf[0] = '\0';
  if (tb == NULL || tb == Py_None) return;
  Py_INCREF(tb);
  for (;;) {
    PyObject *next = PyObject_GetAttrString(tb, "tb_next");
    if (next == NULL || next == Py_None) {
      Py_XDECREF(next);
      break;
    }
    Py_SETREF(tb, next);
  }
  PyErr_Clear();
  PyObject *line = PyObject_GetAttrString(tb, "tb_lineno");
  PyObject *frame = PyObject_GetAttrString(tb, "tb_frame");
  PyObject *code = frame ? PyObject_GetAttrString(frame, "f_code") : NULL;
  PyObject *file = code ? PyObject_GetAttrString(code, "co_filename") : NULL;
  const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
  long ln = line && PyLong_Check(line) ? PyLong_AsLong(line) : -1;
  if (f) {
    const char *slash = strrchr(f, '/');
    snprintf(buf, cap, " (%s:%ld)", slash ? slash + 1 : f, ln);
  }
  PyErr_Clear();
  Py_XDECREF(line);
  Py_XDECREF(frame);
  Py_XDECREF(code);
  Py_XDECREF(file);
  Py_DECREF(tb);
}

int pp_exception_to_error(const char *who, const char *op, devbuf_error *err) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  if (t == NULL) return devbuf_error_set(err, DEVBUF_EINTERNAL, "%s: %s failed without an exception", op, who);
  PyErr_NormalizeException(&t, &v, &tb);
  if (tb) PyException_SetTraceback(v, tb);
  int explicit_status;
  int code = status_of(v, &explicit_status);
  PyObject *text = PyObject_Str(v);
  const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
  if (s == NULL) {
    PyErr_Clear();
    s = "(the exception's str() failed)";
  }
  if (explicit_status) {
    /* A deliberate status (CallbackError, devbuf.Error): its text is the message. */
    devbuf_error_set(err, code, "%s: %s", op, s);
  } else {
    char loc[160];
    where(tb, loc, sizeof loc);
    devbuf_error_set(err, code, "%s: %s raised %s: %s%s", op, who,
                     ((PyTypeObject *)t)->tp_name, s, loc);
  }
  Py_XDECREF(text);
  Py_XDECREF(t);
  Py_XDECREF(v);
  Py_XDECREF(tb);
  PyErr_Clear();
  return code;
}

/* The devbuf exception classes, from devbuf._devbuf (imported lazily: the
 * package imports us). */
static PyObject *exc_class(int code) {
  const char *name;
  switch (code) {
    case DEVBUF_EFORMAT: name = "FormatError"; break;
    case DEVBUF_ENOMEM: name = "OutOfMemoryError"; break;
    case DEVBUF_EINVAL:
    case DEVBUF_EINTERNAL:
    case DEVBUF_ECALLBACK:
    case DEVBUF_EEXIST: name = "Error"; break;
    default: name = "PluginError"; break;
  }
  PyObject *m = PyImport_ImportModule("devbuf._devbuf");
  if (m == NULL) {
    PyErr_Clear();
    return Py_NewRef(PyExc_RuntimeError);
  }
  PyObject *cls = PyObject_GetAttrString(m, name);
  Py_DECREF(m);
  if (cls == NULL) {
    PyErr_Clear();
    return Py_NewRef(PyExc_RuntimeError);
  }
  return cls;
}

PyObject *pp_raise(const devbuf_error *err) {
  int code = err && err->code ? err->code : DEVBUF_EINTERNAL;
  const char *msg = err && err->message[0] ? err->message : "devbuf: unknown error (no message)";
  PyObject *cls = exc_class(code);
  PyObject *exc = PyObject_CallFunction(cls, "s", msg);
  if (exc != NULL) {
    PyObject *name = PyUnicode_FromString(devbuf_status_name(code));
    PyObject *num = PyLong_FromLong(code);
    if (name && num) {
      PyObject_SetAttrString(exc, "code", name);
      PyObject_SetAttrString(exc, "status", num);
    }
    Py_XDECREF(name);
    Py_XDECREF(num);
    PyErr_Clear();
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
  }
  Py_DECREF(cls);
  return NULL;
}

void pp_ret_int(void *ret, int status) {
  /* libffi: integral returns narrower than a register are written as ffi_arg. */
  *(ffi_sarg *)ret = (ffi_sarg)status;
}

