/* benchext: PyObject_GetBuffer + PyBuffer_Release in a C loop, built once
 * per interpreter (patched and unpatched headers). The Py_buffer is the
 * largest either build knows, so asking PyBUF_DEVICE is safe on both. */
#include <Python.h>
#include <time.h>

static PyObject *getbuf_loop(PyObject *mod, PyObject *args) {
  PyObject *obj;
  long n, i;
  int flags;
  struct { Py_buffer view; char room[32]; } b; /* room for the extended fields */
  struct timespec t0, t1;
  if (!PyArg_ParseTuple(args, "Oli", &obj, &n, &flags)) return NULL;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (i = 0; i < n; i++) {
    if (PyObject_GetBuffer(obj, &b.view, flags) < 0) return NULL;
    PyBuffer_Release(&b.view);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return PyFloat_FromDouble(((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
}
static PyMethodDef methods[] = {{"getbuf_loop", getbuf_loop, METH_VARARGS, NULL}, {NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "benchext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_benchext(void) { return PyModule_Create(&moddef); }
