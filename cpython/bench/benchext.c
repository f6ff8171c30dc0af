/* benchext: PyObject_GetBuffer + PyBuffer_Release in a C loop, built once
 * per interpreter (patched and unpatched headers). The Py_buffer is the
 * largest either build knows, so asking PyBUF_DEVICE is safe on both. */
#include <Python.h>
#include <time.h>
/* Callgrind client requests (instr.py): count only the measured loops, one
 * dump per heap state.  Outside valgrind they are a few no-op instructions. */
#if defined(__has_include)
#  if __has_include(<valgrind/callgrind.h>)
#    include <valgrind/callgrind.h>
#    define BENCHEXT_CALLGRIND 1
#  endif
#endif
#ifndef BENCHEXT_CALLGRIND
#  define BENCHEXT_CALLGRIND 0
#  define CALLGRIND_TOGGLE_COLLECT
#  define CALLGRIND_DUMP_STATS_AT(s) ((void)(s))
#endif

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
static PyObject *cg_toggle(PyObject *mod, PyObject *unused) {
  CALLGRIND_TOGGLE_COLLECT;
  Py_RETURN_NONE;
}
static PyObject *cg_dump(PyObject *mod, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8(arg);
  if (name == NULL) return NULL;
  CALLGRIND_DUMP_STATS_AT(name);
  Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
  {"getbuf_loop", getbuf_loop, METH_VARARGS, NULL},
  {"cg_toggle", cg_toggle, METH_NOARGS, "start/stop callgrind's collection"},
  {"cg_dump", cg_dump, METH_O, "write callgrind's counts so far, named, and zero them"},
  {NULL}};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "benchext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_benchext(void) {
  PyObject *m = PyModule_Create(&moddef);
  if (m != NULL && PyModule_AddIntConstant(m, "HAVE_CALLGRIND", BENCHEXT_CALLGRIND) < 0) Py_CLEAR(m);
  return m;
}
