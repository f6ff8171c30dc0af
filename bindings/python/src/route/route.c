/* route.c: the route chooser of devbuf.view() (and the C API's
 * Import_FromObject) for an object without the buffer protocol: its type's
 * DLPack C exchange table, __dlpack__, then the CUDA Array Interface and the
 * array interface, in that order (dbp_interop_import), and the notes that
 * say why each route failed. It only chooses: each reader (readers/) fills
 * the description. See docs/interop.md and docs/consumers.md. */
#include "route/route.h"
#include "readers/readers.h"

static PyObject *g_s_dlpack, *g_s_cai, *g_s_ai;

int dbp_route_note(PyObject **notes, const char *route) {
  PyObject *t, *e, *tb;
  PyErr_Fetch(&t, &e, &tb);
  if (t == NULL) return 0;
  PyErr_NormalizeException(&t, &e, &tb);
  PyObject *line = PyUnicode_FromFormat("%s: %s: %S", route, ((PyTypeObject *)t)->tp_name,
                                        e ? e : Py_None);
  Py_XDECREF(t);
  Py_XDECREF(e);
  Py_XDECREF(tb);
  if (line == NULL) return -1;
  if (*notes == NULL && (*notes = PyList_New(0)) == NULL) {
    Py_DECREF(line);
    return -1;
  }
  int rc = PyList_Append(*notes, line);
  Py_DECREF(line);
  return rc;
}

void dbp_route_raise(PyObject *type, PyObject *notes, PyObject *obj) {
  PyObject *sep = PyUnicode_FromString("; ");
  PyObject *joined = sep ? PyUnicode_Join(sep, notes) : NULL;
  Py_XDECREF(sep);
  if (joined == NULL) return;
  PyErr_Format(type, "devbuf cannot import %.100s by any route it speaks (%S)",
               Py_TYPE(obj)->tp_name, joined);
  Py_DECREF(joined);
}

dbp_desc *dbp_interop_import(PyObject *obj, PyObject **notes_out) {
  PyObject *descr; /* the type's __dlpack__, borrowed */
  int direct;
  const devbuf_dlpack_exchange_api *api = dbp_dlpack_type_of(Py_TYPE(obj), &descr, &direct);
  if (api != NULL) return dbp_dlpack_import_exchange(obj, api);
  if (PyErr_Occurred()) return NULL;
  /* Each protocol the object speaks, in order; one that cannot describe
   * the data (BufferError: NumPy's __dlpack__ for an ml_dtypes array) hands
   * over to the next. If none can, every route's reason is reported (into
   * *notes_out when the caller collects them, else raised here). */
  static const char *const route[3] = {"__dlpack__", "__cuda_array_interface__",
                                       "__array_interface__"};
  PyObject *notes = notes_out && *notes_out ? *notes_out : NULL;
  dbp_desc *f = NULL;
  for (int step = 0; step < 3 && f == NULL; step++) {
    PyObject *d = NULL;
    if (step == 0) {
      /* The type's method through its cache (no attribute error made and
       * cleared, as PyObject_HasAttr does), else an instance attribute. */
      PyObject *fn = NULL;
      int unbound = 0;
      if (descr == NULL) {
        /* As PyObject_HasAttr did: a failing __getattr__ means "no". */
        if (dbp_compat_LookupAttr(obj, g_s_dlpack, &fn) < 0) PyErr_Clear();
        if (fn == NULL) continue;
      } else if (direct) {
        /* What obj.__dlpack__(...) would call, as from_dlpack() does. */
        fn = Py_NewRef(descr);
        unbound = 1;
      }
      int dropped;
      f = dbp_dlpack_import_call(obj, fn, unbound, Py_None, Py_None, &dropped, 0);
      Py_XDECREF(fn);
    } else {
      if (dbp_compat_LookupAttr(obj, step == 1 ? g_s_cai : g_s_ai, &d) < 0) break;
      if (d == NULL) continue;
      f = dbp_interface_import(obj, d, step == 1);
      Py_DECREF(d);
    }
    if (f == NULL) {
      /* After an earlier route's refusal (Arrow refused pyarrow's nulls), a
       * later route's own error (pyarrow's __dlpack__: ArrowTypeError) is
       * one more reason in the list, and the last: the search stops. */
      int last = !PyErr_ExceptionMatches(PyExc_BufferError);
      if (last && (notes == NULL || !PyErr_ExceptionMatches(PyExc_Exception) ||
                   PyErr_ExceptionMatches(PyExc_MemoryError)))
        break;
      if (dbp_route_note(&notes, route[step]) < 0 || last) break;
    }
  }
  if (notes_out != NULL) {
    *notes_out = notes;
  } else {
    if (f == NULL && notes != NULL && !PyErr_Occurred()) /* a hard error wins */
      dbp_route_raise(PyExc_BufferError, notes, obj);
    Py_XDECREF(notes);
  }
  return f; /* NULL without an exception: speaks none of them (or notes hold why) */
}

int dbp_route_init(void) {
  g_s_dlpack = PyUnicode_InternFromString("__dlpack__");
  g_s_cai = PyUnicode_InternFromString("__cuda_array_interface__");
  g_s_ai = PyUnicode_InternFromString("__array_interface__");
  return g_s_dlpack && g_s_cai && g_s_ai ? 0 : -1;
}
