/* state.c: per-interpreter state of the extension. Objects that Python code
 * hands the extension (format factory, pickle reducer) belong to one
 * interpreter: kept in its state dict, never in a C global that another
 * interpreter would see (base/dbp.h: dbp_interp_get/dbp_interp_set). Calls
 * only CPython. */
#include "base/dbp.h"

/* The thread that finalizes the interpreter (base/dbp_enter.h). */
unsigned long dbp_enter_main_thread;

/* ---- per-interpreter objects ------------------------------------------------------------- */

static PyObject *interp_dict(void) {
  PyObject *d = PyInterpreterState_GetDict(PyInterpreterState_Get());
  if (d == NULL && !PyErr_Occurred())
    PyErr_SetString(PyExc_RuntimeError, "devbuf: this interpreter has no state dict");
  return d;
}

PyObject *dbp_interp_get(const char *key) {
  PyObject *d = interp_dict();
  if (d == NULL) return NULL;
  return PyDict_GetItemString(d, key); /* borrowed; NULL without an exception if absent */
}

int dbp_interp_set(const char *key, PyObject *value) {
  PyObject *d = interp_dict();
  if (d == NULL) return -1;
  if (value != NULL) return PyDict_SetItemString(d, key, value);
  if (PyDict_GetItemString(d, key) == NULL) return 0;
  return PyDict_DelItemString(d, key);
}

