/* dbp_compat.h: the few C APIs the extensions use that some supported
 * CPython (3.9 to 3.13, see pyproject.toml) lacks, defined the way the newer
 * interpreter does. Not installed. Include after <Python.h>.
 *
 * Each shim exists because the build used to fall through to an implicit
 * declaration: with -Werror off (`pip install .`) that linked, and the
 * extension then failed at import with `undefined symbol`. The build now
 * always has -Werror=implicit-function-declaration, so a new gap is a
 * compile error; close it here. */
#ifndef DBP_COMPAT_H
#define DBP_COMPAT_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before dbp_compat.h"
#endif

/* 3.10 added Py_NewRef, Py_XNewRef and PyModule_AddObjectRef. */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *dbp_compat_NewRef(PyObject *obj) {
  Py_INCREF(obj);
  return obj;
}
static inline PyObject *dbp_compat_XNewRef(PyObject *obj) {
  Py_XINCREF(obj);
  return obj;
}
/* As 3.10's: a new reference is taken only on success, `value` NULL is an
 * error (with the caller's exception, if any, left in place). */
static inline int dbp_compat_AddObjectRef(PyObject *module, const char *name, PyObject *value) {
  if (value == NULL) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_SystemError, "PyModule_AddObjectRef() must be called with an exception "
                                         "raised if value is NULL");
    return -1;
  }
  Py_INCREF(value);
  if (PyModule_AddObject(module, name, value) < 0) {
    Py_DECREF(value);
    return -1;
  }
  return 0;
}
#define Py_NewRef(obj) dbp_compat_NewRef((PyObject *)(obj))
#define Py_XNewRef(obj) dbp_compat_XNewRef((PyObject *)(obj))
#define PyModule_AddObjectRef dbp_compat_AddObjectRef
#endif

/* 3.13 made Py_IsFinalizing public and removed _Py_IsFinalizing. */
#if PY_VERSION_HEX >= 0x030D0000
#define dbp_compat_IsFinalizing() Py_IsFinalizing()
#else
#define dbp_compat_IsFinalizing() _Py_IsFinalizing()
#endif

/* 3.13 renamed _PyObject_LookupAttr (1 found, 0 absent without an
 * exception, -1 error) to PyObject_GetOptionalAttr and removed the old
 * name. */
#if PY_VERSION_HEX >= 0x030D0000
#define dbp_compat_LookupAttr PyObject_GetOptionalAttr
#else
#define dbp_compat_LookupAttr _PyObject_LookupAttr
#endif

/* 3.13 added PyDict_GetItemRef: a new reference (1), absent (0) or an
 * error (-1). Without the GIL a borrowed value (PyDict_GetItemWithError)
 * may be freed by another thread before it is used; this is the safe form
 * everywhere a dict is shared. */
#if PY_VERSION_HEX >= 0x030D0000
#define dbp_compat_DictGetItemRef PyDict_GetItemRef
#else
static inline int dbp_compat_DictGetItemRef(PyObject *d, PyObject *key, PyObject **out) {
  *out = PyDict_GetItemWithError(d, key);
  if (*out != NULL) {
    Py_INCREF(*out);
    return 1;
  }
  return PyErr_Occurred() ? -1 : 0;
}
#endif

/* 3.13 added PyDict_Pop: remove d[key] and hand it over (1), absent (0),
 * error (-1), in one step even without the GIL. Before 3.13 the GIL makes
 * the lookup and the deletion one step, as long as neither runs Python code
 * (str keys, values without finalizers: the callers' case). */
#if PY_VERSION_HEX >= 0x030D0000
#define dbp_compat_DictPop PyDict_Pop
#else
static inline int dbp_compat_DictPop(PyObject *d, PyObject *key, PyObject **out) {
  int found = dbp_compat_DictGetItemRef(d, key, out);
  if (found > 0 && PyDict_DelItem(d, key) < 0) {
    Py_CLEAR(*out);
    return -1;
  }
  return found;
}
#endif

/* The sign of an int (-1, 0, 1). 3.14 deprecated _PyLong_Sign and added
 * PyLong_GetSign, which fails only for a non-int: callers pass ints. */
static inline int dbp_compat_LongSign(PyObject *v) {
#if PY_VERSION_HEX >= 0x030E0000
  int sign = 0;
  if (PyLong_GetSign(v, &sign) < 0) {
    PyErr_Clear();
    return 0;
  }
  return sign;
#else
  return _PyLong_Sign(v);
#endif
}

#endif /* DBP_COMPAT_H */
