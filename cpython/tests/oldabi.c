/* oldabi: a stable-ABI (abi3, 3.11) extension built against the UNPATCHED
 * CPython headers (of 3.13, or 3.13t: see below) and loaded unchanged into
 * the patched interpreter.
 * It exports buffers (its own type, made with PyType_FromSpec) and consumes
 * them through PyObject_GetBuffer and PyMemoryView_FromBuffer, with every
 * Py_buffer it owns placed so that it ends exactly at a PROT_NONE guard
 * page: one byte read or written past the classic struct is a SIGSEGV, not
 * a silent corruption.  A canary beside the guard catches nothing more but
 * documents intent for builds where mmap is not available. */
#include <pyconfig.h>
/* The free-threaded build (3.13t) has no limited API: there the "old
 * binary" is a plain extension built against the unpatched 3.13t headers,
 * which is what an old binary for that interpreter is. */
#ifndef Py_GIL_DISABLED
#define Py_LIMITED_API 0x030b0000
#endif
#include <Python.h>
#include <sys/mman.h>
#include <unistd.h>
#include <string.h>

static char payload[64] = "oldabi payload";

typedef struct { PyObject_HEAD } Exporter;

static int exporter_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  /* An old producer: knows only classic flags, writes only classic fields. */
  return PyBuffer_FillInfo(view, self, payload, sizeof payload, 1, flags);
}

static PyType_Slot exporter_slots[] = {
    {Py_bf_getbuffer, (void *)exporter_getbuffer},
    {0, NULL},
};
static PyType_Spec exporter_spec = {"oldabi.Exporter", sizeof(Exporter), 0, Py_TPFLAGS_DEFAULT,
                                    exporter_slots};

/* A Py_buffer whose last byte is the last byte before a guard page. */
static Py_buffer *guarded_buffer(void **base_out) {
  long page = sysconf(_SC_PAGESIZE);
  char *base = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
  if (mprotect(base + page, page, PROT_NONE) != 0) return NULL;
  memset(base, 0xAB, page);
  *base_out = base;
  return (Py_buffer *)(base + page - sizeof(Py_buffer));
}

static void guarded_free(void *base) { munmap(base, 2 * sysconf(_SC_PAGESIZE)); }

/* consume(obj, flags) -> bytes of the first min(len, 16) bytes; the view
 * sits against the guard page while CPython and the producer fill it. */
static PyObject *consume(PyObject *mod, PyObject *args) {
  PyObject *obj, *res;
  int flags;
  void *base;
  Py_buffer *view;
  if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) return NULL;
  view = guarded_buffer(&base);
  if (view == NULL) return PyErr_SetFromErrno(PyExc_OSError);
  if (PyObject_GetBuffer(obj, view, flags) < 0) {
    guarded_free(base);
    return NULL;
  }
  res = PyBytes_FromStringAndSize(view->buf, view->len < 16 ? view->len : 16);
  PyBuffer_Release(view);
  guarded_free(base);
  return res;
}

/* via_memoryview(obj) -> memoryview made by PyMemoryView_FromBuffer from a
 * guarded Py_buffer (CPython must copy only the classic fields). */
static PyObject *via_memoryview(PyObject *mod, PyObject *obj) {
  void *base;
  Py_buffer *view = guarded_buffer(&base);
  PyObject *mv, *res;
  if (view == NULL) return PyErr_SetFromErrno(PyExc_OSError);
  if (PyObject_GetBuffer(obj, view, PyBUF_FULL_RO) < 0) {
    guarded_free(base);
    return NULL;
  }
  mv = PyMemoryView_FromBuffer(view);
  res = mv ? PyObject_CallMethod(mv, "tobytes", NULL) : NULL;
  Py_XDECREF(mv);
  PyBuffer_Release(view);
  guarded_free(base);
  return res;
}

static PyMethodDef methods[] = {
    {"consume", consume, METH_VARARGS, NULL},
    {"via_memoryview", via_memoryview, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "oldabi", NULL, -1, methods};

PyMODINIT_FUNC PyInit_oldabi(void) {
  PyObject *m = PyModule_Create(&moddef), *t;
  if (m == NULL) return NULL;
  t = PyType_FromSpec(&exporter_spec);
  if (t == NULL || PyModule_AddObject(m, "Exporter", t) < 0) {
    Py_XDECREF(t);
    Py_DECREF(m);
    return NULL;
  }
  PyModule_AddIntConstant(m, "SIZEOF_PY_BUFFER", (long)sizeof(Py_buffer));
  return m;
}
