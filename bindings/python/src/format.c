/* format.c: the format-string engine (registry/include/devbuf/format.h) and
 * dtype namespaces defined in Python.
 *
 * parse_format builds a tree of dicts; devbuf/_format.py registers a hook
 * (_set_format_factory) that turns it into devbuf.Format objects, so that
 * DeviceView.dtype and devbuf.parse_format return the same thing.
 *
 * Python namespaces: the registry calls a C trampoline (py_interpret) that
 * takes the GIL, calls the Python callable and fills the devbuf_dtype_desc.
 * An exception never crosses into C: it becomes DEVBUF_ECALLBACK with the
 * exception's type and text in the message. Each namespace's record (the
 * devbuf_dtype_namespace, its strings and the callable) lives until
 * unregister_dtype_namespace, which releases the GIL while the registry
 * waits for interpret calls still running in it. (A libffi version that
 * also serves non-Python callers is a later issue.) */
#include "dbp.h"

#include <string.h>

#include "devbuf/format.h"

/* The callable(dict) -> Format of this interpreter's devbuf package. */
#define DBP_FORMAT_FACTORY_KEY "devbuf.format_factory"
static PyObject *g_namespaces;     /* id -> capsule of PyNamespace */

/* ---- the engine ------------------------------------------------------------------- */

static PyObject *raise_engine(const char *fmt, size_t len, size_t offset, devbuf_error *err) {
  /* "format: byte N: what", then the string with a caret under the culprit. */
  char caret[256], tail[300];
  devbuf_format_caret(fmt, len, offset, caret, sizeof caret);
  char *nl = strchr(caret, '\n');
  if (nl != NULL) {
    *nl = '\0';
    snprintf(tail, sizeof tail, "\n  %s\n  %s", caret, nl + 1);
  } else {
    snprintf(tail, sizeof tail, "\n  %s", caret);
  }
  size_t used = strlen(err->message);
  if (used + strlen(tail) < sizeof err->message) memcpy(err->message + used, tail, strlen(tail) + 1);
  return dbp_raise_format(fmt, len, offset, err);
}

int dbp_format_itemsize(const char *fmt, Py_ssize_t *itemsize) {
  devbuf_error err;
  uint64_t size = 0;
  size_t off = 0, len = strlen(fmt);
  devbuf_error_clear(&err);
  if (devbuf_format_itemsize(fmt, len, DEVBUF_FORMAT_DEFAULT, &size, NULL, &off, &err) !=
      DEVBUF_OK) {
    raise_engine(fmt, len, off, &err);
    return -1;
  }
  if (size > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_Format(PyExc_OverflowError, "format '%s': item size too large", fmt);
    return -1;
  }
  *itemsize = (Py_ssize_t)size;
  return 0;
}

static const char *field_kind_name(int k) {
  static const char *const names[] = {"scalar", "padding", "struct", "pointer",
                                      "function", "custom", "bits"};
  return k >= 0 && k < 7 ? names[k] : "unknown";
}

static const char *dtype_kind_name(int k) {
  static const char *const names[] = {"opaque",   "bool",      "int",    "uint",
                                      "float",    "complex",   "datetime", "timedelta",
                                      "string",   "struct",    "pointer"};
  return k >= 0 && k < 11 ? names[k] : "unknown";
}

static const char *alt_state_name(int s) {
  static const char *const names[] = {"not_tried", "chosen", "unknown_id", "refused"};
  return s >= 0 && s < 4 ? names[s] : "unknown";
}

static PyObject *desc_dict(const devbuf_dtype_desc *d) {
  PyObject *dl = d->dlpack_code >= 0 ? Py_BuildValue("(iI)", d->dlpack_code, d->dlpack_bits)
                                     : Py_NewRef(Py_None);
  if (dl == NULL) return NULL;
  return Py_BuildValue("{s:s,s:I,s:I,s:I,s:I,s:N,s:s,s:s}", "kind", dtype_kind_name((int)d->kind),
                       "itemsize", d->itemsize, "alignment", d->alignment, "bits", d->bits,
                       "elements_per_item", d->elements_per_item, "dlpack", dl, "canonical",
                       d->canonical, "plain_format", d->plain_format);
}

static PyObject *fields_list(const devbuf_format_field *f, int depth);

static PyObject *field_dict(const devbuf_format_field *f, int depth) {
  if (depth > 64) {
    PyErr_SetString(PyExc_RecursionError, "format nests too deeply to describe");
    return NULL;
  }
  PyObject *shape = PyTuple_New(f->ndim);
  if (shape == NULL) return NULL;
  for (uint16_t i = 0; i < f->ndim; i++) {
    PyObject *x = PyLong_FromUnsignedLongLong(f->shape[i]);
    if (x == NULL) {
      Py_DECREF(shape);
      return NULL;
    }
    PyTuple_SET_ITEM(shape, i, x);
  }
  PyObject *children = fields_list(f->children, depth + 1);
  PyObject *pointee = f->pointee ? field_dict(f->pointee, depth + 1) : Py_NewRef(Py_None);
  PyObject *custom = Py_NewRef(Py_None);
  if (f->custom != NULL && children && pointee) {
    const devbuf_format_custom *c = f->custom;
    PyObject *alts = PyTuple_New(c->nalts);
    PyObject *desc = c->chosen >= 0 ? desc_dict(&c->desc) : Py_NewRef(Py_None);
    for (uint32_t i = 0; alts && desc && i < c->nalts; i++) {
      const devbuf_format_alt *a = &c->alts[i];
      PyObject *ad = Py_BuildValue("{s:s,s:s,s:I,s:s,s:s}", "id", a->id, "payload", a->payload,
                                   "offset", a->offset, "state", alt_state_name(a->state),
                                   "status", a->status ? devbuf_status_name(a->status) : "");
      if (ad == NULL) {
        Py_CLEAR(alts);
        break;
      }
      PyTuple_SET_ITEM(alts, i, ad);
    }
    Py_DECREF(custom);
    custom = alts && desc ? Py_BuildValue("{s:N,s:i,s:O,s:N}", "alternatives", alts, "chosen",
                                          c->chosen, "is_complex", c->is_complex ? Py_True : Py_False,
                                          "desc", desc)
                          : NULL;
    if (custom == NULL) {
      Py_XDECREF(alts);
      Py_XDECREF(desc);
    }
  }
  if (children == NULL || pointee == NULL || custom == NULL) {
    Py_DECREF(shape);
    Py_XDECREF(children);
    Py_XDECREF(pointee);
    Py_XDECREF(custom);
    return NULL;
  }
  char bo[2] = {f->byteorder, 0};
  return Py_BuildValue(
      "{s:z,s:s,s:s,s:K,s:K,s:K,s:K,s:I,s:s,s:O,s:s,s:N,s:N,s:N,s:N,s:I,s:I}", "name", f->name,
      "kind", field_kind_name(f->kind), "code", f->code, "offset", (unsigned long long)f->offset,
      "size", (unsigned long long)f->size, "elem_size", (unsigned long long)f->elem_size, "count",
      (unsigned long long)f->count, "alignment", f->alignment, "byteorder", bo, "big_endian",
      f->big_endian ? Py_True : Py_False, "dtype_kind", dtype_kind_name(f->dtype_kind), "shape",
      shape, "children", children, "pointee", pointee, "custom", custom, "bit_offset",
      (unsigned)f->bit_offset, "src_offset", f->src_offset);
}

static PyObject *fields_list(const devbuf_format_field *f, int depth) {
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  for (; f != NULL; f = f->next) {
    PyObject *d = field_dict(f, depth);
    if (d == NULL || PyList_Append(out, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  PyObject *t = PyList_AsTuple(out);
  Py_DECREF(out);
  return t;
}

static PyObject *describe(const char *fmt, Py_ssize_t len, uint32_t flags) {
  devbuf_format *f = PyMem_RawMalloc(sizeof *f); /* ~2 KiB: not on the stack */
  if (f == NULL) return PyErr_NoMemory();
  devbuf_error err;
  devbuf_error_clear(&err);
  f->struct_size = sizeof *f;
  int rc = devbuf_format_parse(fmt, (size_t)len, flags, f, &err);
  PyObject *out = NULL;
  if (rc != DEVBUF_OK) {
    size_t off = (size_t)f->error_offset;
    devbuf_format_release(f);
    PyMem_RawFree(f);
    if (rc == DEVBUF_EFORMAT || rc == DEVBUF_ENOTFOUND || rc == DEVBUF_EINVAL)
      return raise_engine(fmt, (size_t)len, off, &err);
    return dbp_raise(&err);
  }
  char canon[512];
  size_t need = devbuf_format_print(f, canon, sizeof canon);
  PyObject *canonical = NULL;
  if (need < sizeof canon) {
    canonical = PyUnicode_FromString(canon);
  } else {
    char *big = PyMem_Malloc(need + 1);
    if (big) {
      devbuf_format_print(f, big, need + 1);
      canonical = PyUnicode_FromString(big);
      PyMem_Free(big);
    } else {
      PyErr_NoMemory();
    }
  }
  PyObject *fields = canonical ? fields_list(f->fields, 0) : NULL;
  const char *mode = (flags & DEVBUF_FORMAT_MODE_MASK) == DEVBUF_FORMAT_STRUCT  ? "struct"
                     : (flags & DEVBUF_FORMAT_MODE_MASK) == DEVBUF_FORMAT_NUMPY ? "numpy"
                                                                                 : "default";
  if (fields != NULL) {
    char bo[2] = {f->end_byteorder, 0};
    out = Py_BuildValue("{s:s#,s:s,s:K,s:K,s:N,s:N,s:O,s:O,s:O,s:O,s:s}", "format", fmt, len,
                        "mode", mode, "itemsize", (unsigned long long)f->itemsize, "alignment",
                        (unsigned long long)f->alignment, "canonical", canonical, "fields",
                        fields, "has_custom",
                        (f->info & DEVBUF_FORMAT_HAS_CUSTOM) ? Py_True : Py_False, "has_unknown",
                        (f->info & DEVBUF_FORMAT_HAS_UNKNOWN) ? Py_True : Py_False,
                        "has_pointers",
                        (f->info & DEVBUF_FORMAT_HAS_POINTERS) ? Py_True : Py_False,
                        "non_native", (f->info & DEVBUF_FORMAT_NON_NATIVE) ? Py_True : Py_False,
                        "end_byteorder", bo);
    canonical = NULL;
    fields = NULL;
  }
  Py_XDECREF(canonical);
  Py_XDECREF(fields);
  devbuf_format_release(f);
  PyMem_RawFree(f);
  PyObject *factory = out != NULL ? dbp_interp_get(DBP_FORMAT_FACTORY_KEY) : NULL;
  if (factory == NULL && PyErr_Occurred()) Py_CLEAR(out);
  if (out != NULL && factory != NULL) {
    PyObject *wrapped = PyObject_CallOneArg(factory, out);
    Py_DECREF(out);
    out = wrapped;
  }
  return out;
}

PyObject *dbp_format_describe(const char *fmt, Py_ssize_t len) {
  return describe(fmt, len, DEVBUF_FORMAT_DEFAULT);
}

/* Size of `fmt` in one mode, or -1 (no exception) when that mode refuses it. */
static Py_ssize_t size_in_mode(const char *fmt, size_t len, uint32_t mode) {
  uint64_t size = 0;
  if (devbuf_format_itemsize(fmt, len, mode, &size, NULL, NULL, NULL) != DEVBUF_OK ||
      size > (uint64_t)PY_SSIZE_T_MAX)
    return -1;
  return (Py_ssize_t)size;
}

PyObject *dbp_format_describe_sized(const char *fmt, Py_ssize_t len, Py_ssize_t itemsize) {
  /* The producer's itemsize is the truth about its memory: describe the
   * items with the first layout rule that agrees with it (C/PEP 3118, then
   * struct's, then NumPy's), so that a view's dtype never sizes items
   * differently from the buffer it describes. */
  Py_ssize_t dflt = size_in_mode(fmt, (size_t)len, DEVBUF_FORMAT_DEFAULT);
  if (dflt < 0 || dflt == itemsize) return describe(fmt, len, DEVBUF_FORMAT_DEFAULT);
  static const uint32_t others[] = {DEVBUF_FORMAT_STRUCT, DEVBUF_FORMAT_NUMPY};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    if (size_in_mode(fmt, (size_t)len, others[i]) == itemsize)
      return describe(fmt, len, others[i]);
  PyErr_Format(PyExc_ValueError,
               "format '%.200s' describes %zd-byte items (C layout), but the producer's itemsize "
               "is %zd, and neither struct's nor NumPy's layout rules give %zd either",
               fmt, dflt, itemsize, itemsize);
  return NULL;
}

char *dbp_format_for_export(const char *fmt, Py_ssize_t itemsize) {
  size_t len = strlen(fmt);
  Py_ssize_t s = size_in_mode(fmt, len, DEVBUF_FORMAT_STRUCT);
  /* Not struct's grammar (T{}, names, custom dtypes...): struct cannot
   * disagree with it, so it goes out as written. */
  size_t ncx = 0;
  if (s >= 0)
    for (size_t i = 0; i < len; i++) ncx += fmt[i] == 'F' || fmt[i] == 'D';
  if (s >= 0 && s > itemsize) {
    PyErr_Format(PyExc_ValueError,
                 "format '%.200s' is %zd bytes under struct's rules, more than the item size %zd",
                 fmt, s, itemsize);
    return NULL;
  }
  /* Room for "Zf" per F/D and a "<digits>x" tail. */
  char *out = PyMem_Malloc(len + ncx + 32);
  if (out == NULL) return (char *)PyErr_NoMemory();
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    /* In struct's grammar every F and D is a complex code: spell it as
     * CPython 3.15, NumPy and PEP 3118 do, which 3.14's struct is alone
     * in not reading. */
    if (s >= 0 && (fmt[i] == 'F' || fmt[i] == 'D')) {
      out[n++] = 'Z';
      out[n++] = fmt[i] == 'F' ? 'f' : 'd';
    } else {
      out[n++] = fmt[i];
    }
  }
  out[n] = '\0';
  if (s >= 0 && s < itemsize) {
    /* A native struct padded at its end (C and NumPy do it, struct.calcsize
     * never does): write the padding as NumPy does, so that
     * struct.calcsize(format) == itemsize. */
    if (itemsize - s == 1) snprintf(out + n, 32, "x");
    else snprintf(out + n, 32, "%zdx", itemsize - s);
    if (size_in_mode(out, strlen(out), DEVBUF_FORMAT_STRUCT) != itemsize) {
      PyErr_Format(PyExc_ValueError,
                   "format '%.200s': cannot pad it to the item size %zd under struct's rules",
                   fmt, itemsize);
      PyMem_Free(out);
      return NULL;
    }
  }
  return out;
}

PyObject *dbp_parse_format(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"format", "mode", "allow_unknown", "plugins", "lint", NULL};
  const char *fmt, *mode = "default";
  Py_ssize_t len;
  int allow_unknown = 0, plugins = 1, lint = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|s$ppp:parse_format", kwlist, &fmt, &len,
                                   &mode, &allow_unknown, &plugins, &lint))
    return NULL;
  uint32_t flags;
  if (strcmp(mode, "default") == 0) flags = DEVBUF_FORMAT_DEFAULT;
  else if (strcmp(mode, "struct") == 0) flags = DEVBUF_FORMAT_STRUCT;
  else if (strcmp(mode, "numpy") == 0) flags = DEVBUF_FORMAT_NUMPY;
  else {
    PyErr_Format(PyExc_ValueError, "mode must be 'default', 'struct' or 'numpy', not '%s'", mode);
    return NULL;
  }
  if (allow_unknown) flags |= DEVBUF_FORMAT_ALLOW_UNKNOWN;
  if (!plugins) flags |= DEVBUF_FORMAT_NO_PLUGINS;
  if (lint) flags |= DEVBUF_FORMAT_LINT_IDS;
  return describe(fmt, len, flags);
}

static PyObject *set_format_factory(PyObject *self, PyObject *arg) {
  if (arg != Py_None && !PyCallable_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "format factory must be callable or None");
    return NULL;
  }
  if (dbp_interp_set(DBP_FORMAT_FACTORY_KEY, arg == Py_None ? NULL : arg) < 0) return NULL;
  Py_RETURN_NONE;
}

/* ---- Python dtype namespaces -------------------------------------------------------- */

typedef struct PyNamespace {
  devbuf_dtype_namespace ns;
  char *id, *provider, *description;
  PyObject *callable;
} PyNamespace;

#define NS_CAPSULE "devbuf._devbuf.PyNamespace"

static const char *const kind_names[] = {"opaque", "bool",     "int",       "uint",
                                         "float",  "complex",  "datetime",  "timedelta",
                                         "string", "struct",   "pointer"};

/* Read `name` from a mapping or an object; NULL without error if absent. */
static PyObject *get_field(PyObject *obj, const char *name) {
  PyObject *v;
  if (PyDict_Check(obj)) {
    v = PyDict_GetItemString(obj, name);
    return Py_XNewRef(v);
  }
  if (PyMapping_Check(obj) && !PyUnicode_Check(obj)) {
    v = PyMapping_GetItemString(obj, name);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
    return v;
  }
  v = PyObject_GetAttrString(obj, name);
  if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
  return v;
}

static int get_u32(PyObject *obj, const char *name, uint32_t dflt, uint32_t *out) {
  PyObject *v = get_field(obj, name);
  if (v == NULL) {
    if (PyErr_Occurred()) return -1;
    *out = dflt;
    return 0;
  }
  unsigned long x = PyLong_AsUnsignedLong(v);
  Py_DECREF(v);
  if (x == (unsigned long)-1 && PyErr_Occurred()) return -1;
  if (x > UINT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "'%s' is too large", name);
    return -1;
  }
  *out = (uint32_t)x;
  return 0;
}

static int get_str(PyObject *obj, const char *name, char *buf, size_t cap) {
  PyObject *v = get_field(obj, name);
  if (v == NULL) return PyErr_Occurred() ? -1 : 0;
  if (v == Py_None) {
    Py_DECREF(v);
    return 0;
  }
  Py_ssize_t n;
  const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
  if (s == NULL) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "'%s' must be a str", name);
    Py_DECREF(v);
    return -1;
  }
  if ((size_t)n >= cap) {
    PyErr_Format(PyExc_ValueError, "'%s' is longer than %zu bytes", name, cap - 1);
    Py_DECREF(v);
    return -1;
  }
  memcpy(buf, s, (size_t)n + 1);
  Py_DECREF(v);
  return 0;
}

/* Fill *out from the callable's answer. 0, or -1 with an exception. */
static int fill_desc(PyNamespace *p, PyObject *r, devbuf_dtype_desc *out) {
  uint32_t itemsize = 0, alignment = 0, bits = 0, epi = 1;
  PyObject *kind = get_field(r, "kind");
  uint32_t k = DEVBUF_KIND_OPAQUE;
  if (kind == NULL && PyErr_Occurred()) return -1;
  if (kind != NULL) {
    if (PyUnicode_Check(kind)) {
      int found = 0;
      for (uint32_t i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
        if (PyUnicode_CompareWithASCIIString(kind, kind_names[i]) == 0) {
          k = i;
          found = 1;
        }
      if (!found) {
        PyErr_Format(PyExc_ValueError, "unknown dtype kind %R", kind);
        Py_DECREF(kind);
        return -1;
      }
    } else {
      long x = PyLong_AsLong(kind);
      if (x == -1 && PyErr_Occurred()) {
        Py_DECREF(kind);
        return -1;
      }
      k = (uint32_t)x;
    }
    Py_DECREF(kind);
  }
  PyObject *isz = get_field(r, "itemsize");
  if (isz == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the answer has no 'itemsize'");
    return -1;
  }
  Py_DECREF(isz);
  if (get_u32(r, "itemsize", 0, &itemsize) < 0) return -1;
  /* Default alignment: the largest power of two dividing itemsize, capped at 16. */
  uint32_t dal = 1;
  while (dal < 16 && itemsize % (dal * 2) == 0) dal *= 2;
  if (get_u32(r, "alignment", dal, &alignment) < 0 || get_u32(r, "bits", itemsize * 8, &bits) < 0 ||
      get_u32(r, "elements_per_item", 1, &epi) < 0)
    return -1;
  out->kind = k;
  out->itemsize = itemsize;
  out->alignment = alignment;
  out->bits = bits;
  out->elements_per_item = epi;
  out->dlpack_code = -1;
  PyObject *dl = get_field(r, "dlpack");
  if (dl == NULL && PyErr_Occurred()) return -1;
  if (dl != NULL && dl != Py_None) {
    int code;
    unsigned int dbits;
    if (!PyArg_ParseTuple(dl, "iI;'dlpack' must be (code, bits)", &code, &dbits)) {
      Py_DECREF(dl);
      return -1;
    }
    out->dlpack_code = code;
    out->dlpack_bits = dbits;
  }
  Py_XDECREF(dl);
  if (get_str(r, "canonical", out->canonical, sizeof out->canonical) < 0 ||
      get_str(r, "plain_format", out->plain_format, sizeof out->plain_format) < 0)
    return -1;
  return 0;
}

static int py_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                        devbuf_error *err) {
  PyNamespace *p = ctx;
  int rc = DEVBUF_OK;
  PyGILState_STATE g = PyGILState_Ensure();
  /* Keep an exception the caller is handling out of our way. */
  PyObject *st, *sv, *stb;
  PyErr_Fetch(&st, &sv, &stb);
  PyObject *arg = PyUnicode_DecodeASCII(payload, (Py_ssize_t)len, "strict");
  PyObject *r = arg ? PyObject_CallOneArg(p->callable, arg) : NULL;
  Py_XDECREF(arg);
  if (r == Py_None) {
    rc = devbuf_error_set(err, DEVBUF_ENOTFOUND, "%s: payload '%.*s' not understood", p->id,
                          (int)(len > 100 ? 100 : len), payload);
  } else if (r == NULL || fill_desc(p, r, out) < 0) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyObject *text = v ? PyObject_Str(v) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    if (s == NULL) PyErr_Clear();
    rc = devbuf_error_set(err, DEVBUF_ECALLBACK,
                          "dtype namespace '%s': the Python interpreter of '%.*s' raised %s: %s",
                          p->id, (int)(len > 100 ? 100 : len), payload,
                          t ? ((PyTypeObject *)t)->tp_name : "an exception", s ? s : "?");
    Py_XDECREF(text);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
  }
  Py_XDECREF(r);
  PyErr_Restore(st, sv, stb);
  PyGILState_Release(g);
  return rc;
}

static void ns_free(PyNamespace *p) {
  if (p == NULL) return;
  PyMem_RawFree(p->id);
  PyMem_RawFree(p->provider);
  PyMem_RawFree(p->description);
  Py_XDECREF(p->callable);
  PyMem_RawFree(p);
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = PyMem_RawMalloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

PyObject *dbp_register_dtype_namespace(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"id", "interpret", "provider", "description", NULL};
  const char *id, *provider = "python", *description = "";
  PyObject *callable;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|$ss:register_dtype_namespace", kwlist, &id,
                                   &callable, &provider, &description))
    return NULL;
  if (!PyCallable_Check(callable)) {
    PyErr_SetString(PyExc_TypeError, "interpret must be callable: interpret(payload) -> dict or None");
    return NULL;
  }
  PyNamespace *p = PyMem_RawCalloc(1, sizeof *p);
  if (p == NULL) return PyErr_NoMemory();
  p->id = dupstr(id);
  p->provider = dupstr(provider);
  p->description = dupstr(description);
  if (!p->id || !p->provider || !p->description) {
    ns_free(p);
    return PyErr_NoMemory();
  }
  p->callable = Py_NewRef(callable);
  p->ns.struct_size = sizeof p->ns;
  p->ns.id = p->id;
  p->ns.provider = p->provider;
  p->ns.description = p->description;
  p->ns.interpret = py_interpret;
  p->ns.ctx = p;
  PyObject *cap = PyCapsule_New(p, NS_CAPSULE, NULL);
  if (cap == NULL) {
    ns_free(p);
    return NULL;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_dtype_register(&p->ns, &err) != DEVBUF_OK) {
    Py_DECREF(cap);
    ns_free(p);
    return dbp_raise(&err);
  }
  if (PyDict_SetItemString(g_namespaces, id, cap) < 0) {
    Py_DECREF(cap);
    devbuf_dtype_unregister(id, NULL); /* nothing else can be inside it yet */
    ns_free(p);
    return NULL;
  }
  Py_DECREF(cap);
  Py_RETURN_NONE;
}

PyObject *dbp_unregister_dtype_namespace(PyObject *self, PyObject *arg) {
  const char *id = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (id == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "id must be a str");
    return NULL;
  }
  PyObject *cap = PyDict_GetItemWithError(g_namespaces, arg);
  if (cap == NULL) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_KeyError, "no dtype namespace '%s' was registered from Python", id);
    return NULL;
  }
  PyNamespace *p = PyCapsule_GetPointer(cap, NS_CAPSULE);
  if (p == NULL) return NULL;
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  /* Interpret calls still running need the GIL to finish. */
  DBP_NOGIL(rc = devbuf_dtype_unregister(p->id, &err));
  if (rc != DEVBUF_OK) return dbp_raise(&err);
  if (PyDict_DelItem(g_namespaces, arg) < 0) return NULL;
  ns_free(p);
  Py_RETURN_NONE;
}

PyObject *dbp_dtype_namespaces(PyObject *self, PyObject *unused) {
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  size_t n = devbuf_dtype_namespace_count();
  for (size_t i = 0; i < n; i++) {
    const devbuf_dtype_namespace *ns = NULL;
    const char *source = NULL;
    if (devbuf_dtype_namespace_get(i, &ns, &source, NULL) != DEVBUF_OK) break;
    PyObject *d = Py_BuildValue("{s:s,s:z,s:z,s:z}", "id", ns->id, "provider", ns->provider,
                                "description", ns->description, "source", source);
    if (d == NULL || PyList_Append(out, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  return out;
}

/* calcsize(format, mode="default", /): the item size, like struct.calcsize.
 * Like struct's own cache, sizes of formats without custom dtypes are kept
 * per mode (bounded), so a repeated string costs a dict lookup. Custom dtypes
 * are never cached: their size depends on the registry, which can change. */
static PyObject *g_size_cache[3];

static PyObject *calcsize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "calcsize(format, mode='default', /) takes 1 or 2 arguments");
    return NULL;
  }
  uint32_t mode = DEVBUF_FORMAT_DEFAULT;
  if (nargs == 2) {
    const char *m = PyUnicode_Check(args[1]) ? PyUnicode_AsUTF8(args[1]) : NULL;
    if (m != NULL && strcmp(m, "default") == 0) mode = DEVBUF_FORMAT_DEFAULT;
    else if (m != NULL && strcmp(m, "struct") == 0) mode = DEVBUF_FORMAT_STRUCT;
    else if (m != NULL && strcmp(m, "numpy") == 0) mode = DEVBUF_FORMAT_NUMPY;
    else {
      PyErr_Format(PyExc_ValueError, "calcsize: mode must be 'default', 'struct' or 'numpy', not %R", args[1]);
      return NULL;
    }
  }
  PyObject *fmt = args[0];
  /* bytes too, as struct.calcsize takes them (struct mode promises to match it) */
  int is_bytes = PyBytes_Check(fmt);
  if (!PyUnicode_Check(fmt) && !is_bytes) {
    PyErr_Format(PyExc_TypeError, "calcsize: format must be str or bytes, not %.100s",
                 Py_TYPE(fmt)->tp_name);
    return NULL;
  }
  PyObject *cache = g_size_cache[mode];
  PyObject *hit = PyDict_GetItemWithError(cache, fmt);
  if (hit != NULL) return Py_NewRef(hit);
  if (PyErr_Occurred()) return NULL;
  Py_ssize_t n;
  const char *s;
  if (is_bytes) {
    s = PyBytes_AS_STRING(fmt);
    n = PyBytes_GET_SIZE(fmt);
  } else {
    s = PyUnicode_AsUTF8AndSize(fmt, &n);
  }
  if (s == NULL) return NULL;
  uint64_t size = 0;
  size_t off = 0;
  devbuf_error err;
  if (devbuf_format_itemsize(s, (size_t)n, mode, &size, NULL, &off, NULL) != DEVBUF_OK) {
    devbuf_error_clear(&err); /* slow path only: get the message */
    devbuf_format_itemsize(s, (size_t)n, mode, &size, NULL, &off, &err);
    return raise_engine(s, (size_t)n, off, &err);
  }
  PyObject *r = PyLong_FromUnsignedLongLong(size);
  if (r != NULL && memchr(s, '[', (size_t)n) == NULL) {
    if (PyDict_GET_SIZE(cache) >= 512) PyDict_Clear(cache);
    if (PyDict_SetItem(cache, fmt, r) < 0) Py_CLEAR(r);
  }
  return r;
}

static PyMethodDef format_methods[] = {
    {"calcsize", (PyCFunction)(void (*)(void))calcsize, METH_FASTCALL,
     "calcsize(format, mode='default', /) -> item size in bytes of a str or bytes format (like struct.calcsize; modes: "
     "'default', 'struct', 'numpy'). Raises devbuf.FormatError with .offset."},
    {"_set_format_factory", (PyCFunction)set_format_factory, METH_O,
     "Set the callable that turns parse results (dicts) into devbuf.Format objects."},
    {NULL},
};

int dbp_format_init(PyObject *module) {
  g_namespaces = PyDict_New();
  if (g_namespaces == NULL) return -1;
  for (int i = 0; i < 3; i++)
    if ((g_size_cache[i] = PyDict_New()) == NULL) return -1;
  if (PyModule_AddObjectRef(module, "_python_namespaces", g_namespaces) < 0) return -1;
  return PyModule_AddFunctions(module, format_methods);
}
