/* namespace.c: PpNamespace, a dtype namespace (devbuf/dtype.h) whose
 * `interpret` is a libffi closure around a Python callable, registered with
 * devbuf_dtype_register (registry/include/devbuf/format.h).
 *
 * interpret(payload: str) returns None (payload not understood: the engine
 * tries the next alternative of the custom dtype) or a mapping/object with
 * the fields of devbuf.register_dtype_namespace's answer: kind (name or
 * number), itemsize (required), alignment, bits, elements_per_item,
 * dlpack ((code, bits) or None), canonical, plain_format. Any exception
 * becomes the interpreter's error status (DEVBUF_ECALLBACK unless it maps
 * to another, see pp_exception_to_error) with its type and text.
 *
 * Lifetime: registered namespaces are held by g_registry; unregister()
 * releases the GIL while devbuf_dtype_unregister waits for interpret calls
 * still running, then frees the closure. */
#include "pyplugin.h"

#include <string.h>

#include "devbuf/format.h"

enum { NS_NEW = 0, NS_REGISTERED = 1, NS_UNREGISTERED = 2, NS_FAILED = 3 };
static const char *const state_names[] = {"new", "registered", "unregistered", "failed"};

typedef struct PpNamespace {
  PyObject_HEAD
  devbuf_dtype_namespace ns;
  char *id, *provider, *description, *who;
  PpClosure *interp;  /* strong; released after unregister */
  PyObject *key;      /* g_registry key while registered */
  int state;
  _Atomic long inflight;
} PpNamespace;

static const char *const kind_names[] = {"opaque", "bool",   "int",    "uint",   "float",  "complex",
                                         "datetime", "timedelta", "string", "struct", "pointer"};
enum { NKINDS = sizeof kind_names / sizeof kind_names[0] };

static int u32_field(PyObject *r, const char *name, uint32_t dflt, uint32_t *out) {
  PyObject *v = pp_get_field(r, name);
  if (v == NULL) {
    if (PyErr_Occurred()) return -1;
    *out = dflt;
    return 0;
  }
  if (v == Py_None) {
    Py_DECREF(v);
    *out = dflt;
    return 0;
  }
  unsigned long x = PyLong_Check(v) ? PyLong_AsUnsignedLong(v) : (unsigned long)-1;
  if (!PyLong_Check(v) || (x == (unsigned long)-1 && PyErr_Occurred()) || x > UINT32_MAX) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "'%s' must be an int between 0 and 2**32-1, not %R", name, v);
    Py_DECREF(v);
    return -1;
  }
  Py_DECREF(v);
  *out = (uint32_t)x;
  return 0;
}

static int str_field(PyObject *r, const char *name, char *buf, size_t cap) {
  PyObject *v = pp_get_field(r, name);
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (v == Py_None) {
    Py_DECREF(v);
    return 0;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
  if (s == NULL || (size_t)n >= cap) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "'%s' must be a str of at most %zu bytes", name, cap - 1);
    Py_DECREF(v);
    return -1;
  }
  memcpy(buf, s, (size_t)n + 1);
  Py_DECREF(v);
  return 0;
}

static int fill_desc(PyObject *r, devbuf_dtype_desc *out) {
  devbuf_dtype_desc d;
  memset(&d, 0, sizeof d);
  uint32_t kind = DEVBUF_KIND_OPAQUE;
  PyObject *k = pp_get_field(r, "kind");
  if (k == NULL && PyErr_Occurred()) return -1;
  if (k != NULL && k != Py_None) {
    int found = -1;
    if (PyUnicode_Check(k)) {
      for (int i = 0; i < NKINDS; i++)
        if (PyUnicode_CompareWithASCIIString(k, kind_names[i]) == 0) found = i;
    } else if (PyLong_Check(k)) {
      long x = PyLong_AsLong(k);
      if (x >= 0 && x < NKINDS) found = (int)x;
      PyErr_Clear();
    }
    if (found < 0) {
      PyErr_Format(PyExc_ValueError, "unknown dtype kind %R (one of opaque, bool, int, uint, "
                   "float, complex, datetime, timedelta, string, struct, pointer)", k);
      Py_DECREF(k);
      return -1;
    }
    kind = (uint32_t)found;
  }
  Py_XDECREF(k);
  PyObject *isz = pp_get_field(r, "itemsize");
  if (isz == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the answer has no 'itemsize'");
    return -1;
  }
  Py_DECREF(isz);
  uint32_t itemsize, alignment, bits, epi;
  if (u32_field(r, "itemsize", 0, &itemsize) < 0) return -1;
  if (itemsize == 0) {
    PyErr_SetString(PyExc_ValueError, "'itemsize' must be at least 1");
    return -1;
  }
  uint32_t dal = 1; /* default: the largest power of two dividing itemsize, at most 16 */
  while (dal < 16 && itemsize % (dal * 2) == 0) dal *= 2;
  if (u32_field(r, "alignment", dal, &alignment) < 0 ||
      u32_field(r, "bits", itemsize * 8, &bits) < 0 ||
      u32_field(r, "elements_per_item", 1, &epi) < 0)
    return -1;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    PyErr_Format(PyExc_ValueError, "'alignment' %u is not a power of two", alignment);
    return -1;
  }
  d.kind = kind;
  d.itemsize = itemsize;
  d.alignment = alignment;
  d.bits = bits;
  d.elements_per_item = epi;
  d.dlpack_code = -1;
  PyObject *dl = pp_get_field(r, "dlpack");
  if (dl == NULL && PyErr_Occurred()) return -1;
  if (dl != NULL && dl != Py_None) {
    int code;
    unsigned int dbits;
    int ok = PyArg_ParseTuple(dl, "iI;'dlpack' must be (code, bits)", &code, &dbits);
    Py_DECREF(dl);
    if (!ok) return -1;
    d.dlpack_code = code;
    d.dlpack_bits = dbits;
  } else {
    Py_XDECREF(dl);
  }
  if (str_field(r, "canonical", d.canonical, sizeof d.canonical) < 0 ||
      str_field(r, "plain_format", d.plain_format, sizeof d.plain_format) < 0)
    return -1;
  /* Only what the caller's struct holds; struct_size stays the caller's. */
  uint32_t size = out->struct_size ? out->struct_size : (uint32_t)sizeof d;
  size_t n = size < sizeof d ? size : sizeof d;
  if (n > sizeof d.struct_size)
    memcpy((char *)out + sizeof d.struct_size, (char *)&d + sizeof d.struct_size,
           n - sizeof d.struct_size);
  return 0;
}

/* interpret(ctx, payload, len, out, err) */
static void interp_handler(PpClosure *c, void *ret, void **a) {
  PpNamespace *ns = c->owner;
  const char *payload = *(const char **)a[1];
  size_t len = *(size_t *)a[2];
  devbuf_dtype_desc *out = *(devbuf_dtype_desc **)a[3];
  devbuf_error *err = *(devbuf_error **)a[4];
  int rc = DEVBUF_OK;
  PyObject *arg = PyUnicode_DecodeASCII(payload ? payload : "", (Py_ssize_t)len, "strict");
  PyObject *r = arg ? PyObject_CallOneArg(c->callable, arg) : NULL;
  Py_XDECREF(arg);
  if (r == Py_None) {
    rc = devbuf_error_set(err, DEVBUF_ENOTFOUND, "%s: payload '%.*s' not understood", ns->id,
                          (int)(len > 100 ? 100 : len), payload);
  } else if (r == NULL || out == NULL || fill_desc(r, out) < 0) {
    if (out == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "out is NULL");
    char op[200];
    snprintf(op, sizeof op, "interpret '%.*s'", (int)(len > 100 ? 100 : len), payload);
    rc = pp_exception_to_error(ns->who, op, err);
    if (rc == DEVBUF_ENOTFOUND) rc = DEVBUF_ECALLBACK; /* only None means "not understood" */
    if (err) err->code = rc;
  }
  Py_XDECREF(r);
  pp_ret_int(ret, rc);
}

static void interp_dead(PpClosure *c, void *ret, void **a) {
  PpNamespace *ns = c->owner;
  devbuf_error *err = *(devbuf_error **)a[4];
  pp_ret_int(ret, devbuf_error_set(err, DEVBUF_ECALLBACK,
                                   "%s: the Python interpreter is finalizing", ns->who));
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = PyMem_RawMalloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void release(PpNamespace *n) {
  if (n->interp) pp_closure_release(n->interp);
  Py_CLEAR(n->interp);
}

static PyObject *ns_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"id", "interpret", "provider", "description", NULL};
  const char *id, *provider = "python", *description = "";
  PyObject *fn;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|ss:Namespace", kwlist, &id, &fn, &provider,
                                   &description))
    return NULL;
  PpNamespace *n = PyObject_GC_New(PpNamespace, type);
  if (n == NULL) return NULL;
  memset((char *)n + sizeof(PyObject), 0, sizeof *n - sizeof(PyObject));
  atomic_init(&n->inflight, 0);
  PyObject_GC_Track(n);
  n->id = dupstr(id);
  n->provider = dupstr(provider);
  n->description = dupstr(description);
  size_t wl = strlen(id) + 48;
  n->who = PyMem_RawMalloc(wl);
  if (!n->id || !n->provider || !n->description || !n->who) {
    Py_DECREF(n);
    return PyErr_NoMemory();
  }
  snprintf(n->who, wl, "python dtype namespace '%s'", id);
  n->interp = pp_closure_new("i(ppNpe)", fn, interp_handler, interp_dead, n, &n->inflight,
                             "interpret");
  if (n->interp == NULL) {
    Py_DECREF(n);
    return NULL;
  }
  n->ns.struct_size = sizeof n->ns;
  n->ns.id = n->id;
  n->ns.provider = n->provider;
  n->ns.description = n->description;
  memcpy(&n->ns.interpret, &n->interp->code, sizeof n->ns.interpret);
  n->ns.ctx = n;
  return (PyObject *)n;
}

static int ns_traverse(PpNamespace *n, visitproc visit, void *arg) {
  Py_VISIT(n->interp);
  return 0;
}

static int ns_clear(PpNamespace *n) {
  if (n->state == NS_REGISTERED) return 0; /* held by g_registry */
  release(n);
  return 0;
}

static void ns_dealloc(PpNamespace *n) {
  PyObject_GC_UnTrack(n);
  release(n);
  Py_CLEAR(n->key);
  PyMem_RawFree(n->id);
  PyMem_RawFree(n->provider);
  PyMem_RawFree(n->description);
  PyMem_RawFree(n->who);
  PyObject_GC_Del(n);
}

static PyObject *ns_register_locked(PpNamespace *n, PyObject *unused) {
  if (n->state != NS_NEW) {
    PyErr_Format(PyExc_RuntimeError, "%s is %s; make a new one to register again", n->who,
                 state_names[n->state]);
    return NULL;
  }
  n->key = Py_BuildValue("(ss)", "dtype", n->id);
  if (n->key == NULL) return NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc;
  /* The registry's lock may be wanted by an interpret call that waits for the GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_dtype_register(&n->ns, &err);
  Py_END_ALLOW_THREADS
  if (rc != DEVBUF_OK) {
    n->state = NS_FAILED;
    Py_CLEAR(n->key);
    release(n);
    return pp_raise(&err);
  }
  if (PyDict_SetItem(g_registry, n->key, (PyObject *)n) < 0) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    Py_BEGIN_ALLOW_THREADS
    devbuf_dtype_unregister(n->id, NULL);
    Py_END_ALLOW_THREADS
    n->state = NS_FAILED;
    Py_CLEAR(n->key);
    release(n);
    PyErr_Restore(t, v, tb);
    return NULL;
  }
  n->state = NS_REGISTERED;
  Py_RETURN_NONE;
}

static PyObject *ns_unregister_locked(PpNamespace *n, PyObject *unused) {
  if (n->state != NS_REGISTERED) {
    PyErr_Format(PyExc_RuntimeError, "%s is not registered (it is %s)", n->who,
                 state_names[n->state]);
    return NULL;
  }
  if (pp_in_callback_of(n)) {
    PyErr_Format(PyExc_RuntimeError, "%s cannot be unregistered from inside its own interpret",
                 n->who);
    return NULL;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc;
  /* The registry waits for interpret calls already inside it; they need the GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = devbuf_dtype_unregister(n->id, &err);
  if (rc == DEVBUF_OK) pp_quiesce(&n->inflight);
  Py_END_ALLOW_THREADS
  if (rc != DEVBUF_OK) return pp_raise(&err);
  n->state = NS_UNREGISTERED;
  release(n);
  Py_INCREF(n);
  if (PyDict_DelItem(g_registry, n->key) < 0) PyErr_Clear();
  Py_CLEAR(n->key);
  Py_DECREF(n);
  Py_RETURN_NONE;
}

static PyObject *get_state_locked(PpNamespace *n, void *unused) {
  return PyUnicode_FromString(state_names[n->state]);
}

static PyObject *get_id_locked(PpNamespace *n, void *unused) { return PyUnicode_FromString(n->id); }

static PyObject *get_closure_locked(PpNamespace *n, void *unused) {
  return Py_NewRef(n->interp ? (PyObject *)n->interp : Py_None);
}

/* Entry points lock the object (dbp_lock.h): its state moves only inside them. */
DBP_LOCKED_METH(PpNamespace, ns_register)
DBP_LOCKED_METH(PpNamespace, ns_unregister)
DBP_LOCKED_GETTER(PpNamespace, get_state)
DBP_LOCKED_GETTER(PpNamespace, get_id)
DBP_LOCKED_GETTER(PpNamespace, get_closure)

static PyMethodDef ns_methods[] = {
    {"register", (PyCFunction)ns_register, METH_NOARGS,
     "register(): devbuf_dtype_register; devbuf.Error (DEVBUF_EEXIST) if the id is taken."},
    {"unregister", (PyCFunction)ns_unregister, METH_NOARGS,
     "unregister(): devbuf_dtype_unregister (waits for interpret calls in flight), then free "
     "the closure."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ns_getset[] = {
    {"state", (getter)get_state, NULL, "'new', 'registered', 'unregistered' or 'failed'", NULL},
    {"id", (getter)get_id, NULL, "the dtype id", NULL},
    {"closure", (getter)get_closure, NULL, "the interpret closure, None once released", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PpNamespace_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf._pyplugin.Namespace",
    .tp_basicsize = sizeof(PpNamespace),
    .tp_dealloc = (destructor)ns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Namespace(id, interpret, provider='python', description=''): a dtype namespace "
              "whose interpret is a libffi closure. Use devbuf.plugin.register_dtype_namespace.",
    .tp_traverse = (traverseproc)ns_traverse,
    .tp_clear = (inquiry)ns_clear,
    .tp_methods = ns_methods,
    .tp_getset = ns_getset,
    .tp_new = ns_new,
};

int pp_namespace_init(PyObject *module) {
  if (PyType_Ready(&PpNamespace_Type) < 0) return -1;
  return PyModule_AddObjectRef(module, "Namespace", (PyObject *)&PpNamespace_Type);
}
