/* hints.c: "did you mean ...?" for an identifier no plugin implements. The
 * suggestion (difflib, and the identifier whose last dotted part is what was
 * typed: "cuda" -> devbuf.cuda) is made by devbuf/_api.py. */
#include "base/dbp.h"

void dbp_device_hint(PyObject *spec);

/* With the device-open error set: let devbuf._api.add_device_hint append a
 * suggestion to its message. The original error stands if that fails. */
void dbp_device_hint(PyObject *spec) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  PyObject *mod = v ? PyImport_ImportModule("devbuf._api") : NULL;
  if (mod != NULL) {
    PyObject *r = PyObject_CallMethod(mod, "add_device_hint", "OO", v, spec);
    Py_XDECREF(r);
    Py_DECREF(mod);
  }
  PyErr_Clear();
  if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
  PyErr_Restore(t, v, tb);
}
