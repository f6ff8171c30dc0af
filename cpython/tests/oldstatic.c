/* oldstatic: a static type from a binary built against the UNPATCHED 3.11
 * headers (full API, not abi3), whose PyBufferProcs is the classic
 * two-pointer struct, placed so that it ends at a PROT_NONE guard page:
 * if CPython read bf_supported_flags from it (the field the series adds
 * after the two slots), the test would crash. */
#include <Python.h>
#include <sys/mman.h>
#include <unistd.h>
#include <string.h>

static char payload[16] = "oldstatic";

static int getbuf(PyObject *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, self, payload, sizeof payload, 1, flags);
}

static PyTypeObject OldStatic_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "oldstatic.OldStatic",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "oldstatic", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_oldstatic(void) {
  long page = sysconf(_SC_PAGESIZE);
  char *base = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED || mprotect(base + page, page, PROT_NONE) != 0)
    return PyErr_SetFromErrno(PyExc_OSError);
  PyBufferProcs *procs = (PyBufferProcs *)(base + page - sizeof(PyBufferProcs));
  procs->bf_getbuffer = getbuf;
  procs->bf_releasebuffer = NULL;
  OldStatic_Type.tp_as_buffer = procs; /* never unmapped: the type is immortal */
  if (PyType_Ready(&OldStatic_Type) < 0) return NULL;
  PyObject *m = PyModule_Create(&moddef);
  if (m == NULL) return NULL;
  Py_INCREF(&OldStatic_Type);
  PyModule_AddObject(m, "OldStatic", (PyObject *)&OldStatic_Type);
  PyModule_AddIntConstant(m, "SIZEOF_PROCS", (long)sizeof(PyBufferProcs));
  return m;
}
