/* module.c: devbuf._pyplugin, the libffi layer behind devbuf.plugin, the
 * top layer of src/pyplugin/: the module init that readies the types
 * (Table, Namespace, Closure), the module functions, and the two in-process
 * drivers tests and benchmarks need (the rules every closure shares are in
 * base.c): the conformance suite (tests/conformance/conformance.c compiled in with its main renamed, so the
 * very same checks run against a plugin that only exists in this process)
 * and a timing loop over one runtime call. */
#include "pyplugin.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- module functions ----------------------------------------------------------------- */

static PyObject *m_address_of(PyObject *self, PyObject *obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  void *p = view.buf;
  PyBuffer_Release(&view);
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

static PyObject *m_live_closures(PyObject *self, PyObject *unused) {
  return PyLong_FromLong(atomic_load(&pp_live_closures));
}

static PyObject *m_status_name(PyObject *self, PyObject *arg) {
  long c = PyLong_AsLong(arg);
  if (c == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(devbuf_status_name((int)c));
}

/* tests/conformance/conformance.c, compiled into this module with
 * -Dmain=devbuf_conformance_main (see pyplugin.cmake). */
int devbuf_conformance_main(int argc, char **argv);

static pthread_mutex_t conformance_lock = PTHREAD_MUTEX_INITIALIZER;

/* run_conformance([args...]) -> (exit status, output). The suite prints to
 * stdout; fd 1 is pointed at a temporary file for the run. One run at a
 * time (the suite keeps its context in statics). */
static PyObject *m_run_conformance(PyObject *self, PyObject *arglist) {
  PyObject *seq = PySequence_Fast(arglist, "run_conformance: expected a list of str");
  if (seq == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  char **argv = PyMem_RawCalloc((size_t)n + 2, sizeof *argv);
  PyObject *result = NULL;
  int rc = 0;
  FILE *tmp = NULL;
  if (argv == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  argv[0] = "devbuf_conformance";
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (s == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "run_conformance: arguments must be str");
      goto out;
    }
    argv[i + 1] = (char *)s; /* kept alive by seq */
  }
  tmp = tmpfile();
  if (tmp == NULL) {
    PyErr_SetFromErrno(PyExc_OSError);
    goto out;
  }
  int saved = -1, redirect_ok = 0;
  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&conformance_lock);
  fflush(stdout);
  saved = dup(STDOUT_FILENO);
  if (saved >= 0 && dup2(fileno(tmp), STDOUT_FILENO) >= 0) {
    redirect_ok = 1;
    rc = devbuf_conformance_main((int)n + 1, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
  }
  if (saved >= 0) close(saved);
  pthread_mutex_unlock(&conformance_lock);
  Py_END_ALLOW_THREADS
  if (!redirect_ok) {
    PyErr_SetFromErrno(PyExc_OSError);
    goto out;
  }
  long size = (fseek(tmp, 0, SEEK_END) == 0) ? ftell(tmp) : -1;
  if (size < 0 || fseek(tmp, 0, SEEK_SET) != 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    goto out;
  }
  char *text = PyMem_RawMalloc((size_t)size + 1);
  if (text == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  size_t got = fread(text, 1, (size_t)size, tmp);
  result = Py_BuildValue("(iN)", rc, PyUnicode_DecodeUTF8(text, (Py_ssize_t)got, "replace"));
  PyMem_RawFree(text);
out:
  if (tmp) fclose(tmp);
  PyMem_RawFree(argv);
  Py_DECREF(seq);
  return result;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* _bench(spec, op, n) -> ns per call of one runtime call on device `spec`,
 * in a C loop with the GIL released. op: "event_query" (on a fresh event),
 * "stream_synchronize" (default stream) or "device_props". */
static PyObject *m_bench(PyObject *self, PyObject *args) {
  const char *spec, *op;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "ssn:_bench", &spec, &op, &n)) return NULL;
  if (n <= 0) {
    PyErr_SetString(PyExc_ValueError, "n must be positive");
    return NULL;
  }
  int which = strcmp(op, "event_query") == 0          ? 0
              : strcmp(op, "stream_synchronize") == 0 ? 1
              : strcmp(op, "device_props") == 0       ? 2
                                                      : -1;
  if (which < 0) {
    PyErr_Format(PyExc_ValueError, "unknown op '%s'", op);
    return NULL;
  }
  devbuf_device dev;
  devbuf_error err;
  devbuf_device_props props;
  void *ev = NULL;
  int rc;
  double t0 = 0, t1 = 0;
  devbuf_error_clear(&err);
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_device_open(spec, &dev, &err);
  if (rc == DEVBUF_OK && which == 0) rc = devbuf_event_create(&dev, &ev, &err);
  if (rc == DEVBUF_OK) {
    t0 = now_ns();
    for (Py_ssize_t i = 0; i < n && rc == DEVBUF_OK; i++) {
      if (which == 0) rc = devbuf_event_query(&dev, ev, &err);
      else if (which == 1) rc = devbuf_stream_synchronize(&dev, NULL, &err);
      else rc = devbuf_device_props_get(&dev, &props, &err);
    }
    t1 = now_ns();
  }
  if (ev) devbuf_event_destroy(&dev, ev, NULL);
  Py_END_ALLOW_THREADS
  if (rc != DEVBUF_OK) return pp_raise(&err);
  return PyFloat_FromDouble((t1 - t0) / (double)n);
}

static PyMethodDef methods[] = {
    {"address_of", m_address_of, METH_O,
     "address_of(buffer) -> int: the address of an object's buffer (valid while the object "
     "neither moves nor resizes its memory)."},
    {"ext_functions", pp_ext_functions, METH_O,
     "ext_functions(plugin) -> list of dicts (name, signature, doc, valid, error, plugin)."},
    {"call_ext", pp_call_ext, METH_VARARGS, "call_ext(plugin, name, *args): call through libffi."},
    {"check_signature", pp_check_signature, METH_VARARGS,
     "check_signature(sig) -> dict; ValueError naming the bad byte."},
    {"run_conformance", m_run_conformance, METH_O,
     "run_conformance([args]) -> (exit status, output): the devbuf_conformance suite, in "
     "this process."},
    {"_bench", m_bench, METH_VARARGS, "_bench(spec, op, n) -> ns per call (C loop, GIL released)."},
    {"_live_closures", m_live_closures, METH_NOARGS, "closures armed now (leak checks)."},
    {"_shutdown_all", pp_shutdown_all, METH_NOARGS,
     "unregister every table and namespace that can be; returns how many stayed."},
    {"status_name", m_status_name, METH_O, "status_name(code) -> 'DEVBUF_E...'."},
    {NULL, NULL, 0, NULL},
};

/* Multi-phase, so that the check below runs in the importing interpreter
 * (3.13 runs a single-phase PyInit in the main interpreter even for an
 * import from a subinterpreter) and before anything is made: the registry
 * is process-wide, and a plugin is one table for every interpreter (before
 * 3.15, plugin threads enter Python through PyGILState_Ensure, which knows
 * only the main interpreter). Refused there, a
 * subinterpreter leaves no object of its own behind. */
static int pp_exec(PyObject *m) {
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError,
                    "devbuf._pyplugin (devbuf.plugin) does not support loading in "
                    "subinterpreters: its C callbacks can only enter the main interpreter");
    return -1;
  }
  if (PyType_Ready(&PpClosure_Type) < 0) return -1;
  if (dbp_enter_init() < 0) return -1; /* the finalizing thread, for the trampoline */
  if (g_registry == NULL && (g_registry = PyDict_New()) == NULL) return -1; /* once per process */
  if (PyModule_AddObjectRef(m, "_registry", g_registry) < 0) return -1;
  if (PyModule_AddObjectRef(m, "Closure", (PyObject *)&PpClosure_Type) < 0) return -1;
  if (pp_table_init(m) < 0 || pp_namespace_init(m) < 0) return -1;
#ifdef PP_FFI_VERSION /* from pkg-config, set by pyplugin.cmake */
  if (PyModule_AddStringConstant(m, "ffi_version", PP_FFI_VERSION) < 0) return -1;
#endif
  return 0;
}

static PyModuleDef_Slot pp_slots[] = {
    {Py_mod_exec, (void *)pp_exec},
#ifdef Py_GIL_DISABLED /* 3.13t: safe without the GIL (dbp.h, "locking"); keep it off */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
#ifdef Py_mod_multiple_interpreters /* 3.12+: refused in an isolated one before exec */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "devbuf._pyplugin",
    "libffi closures: plugin tables, dtype namespaces and extension functions written in "
    "Python. Use it through devbuf.plugin.",
    0, methods, pp_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pyplugin(void) { return PyModuleDef_Init(&moddef); }
