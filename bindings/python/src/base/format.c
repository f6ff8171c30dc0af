/* format.c: the format-string engine (registry/include/devbuf/format.h) and
 * dtype namespaces defined in Python.
 *
 * parse_format and DeviceView.dtype return a devbuf.Format: a C object over
 * the engine's result whose attributes are made on first read (see "Format
 * and Field" below); devbuf/_format.py registers a hook (_set_format_factory)
 * that turns a custom item's dict into devbuf.Custom.
 *
 * Python namespaces: the registry calls a C trampoline (py_interpret) that
 * enters the namespace's interpreter (base/dbp_enter.h; refused with
 * DEVBUF_ECALLBACK once it finalizes or is gone), calls the Python callable
 * and fills the devbuf_dtype_desc. An exception never crosses into C: it becomes DEVBUF_ECALLBACK with the
 * exception's type and text in the message. Each namespace's record (the
 * devbuf_dtype_namespace, its strings and the callable) lives until
 * unregister_dtype_namespace, which releases the GIL while the registry
 * waits for interpret calls still running in it. (A libffi version that
 * also serves non-Python callers is a later issue.) */
#include "base/dbp.h"

#include <string.h>

#include "devbuf/format.h"

/* The callable(dict) -> devbuf.Custom of this interpreter's devbuf package. */
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

/* ---- Format and Field: C objects over the engine's result ------------------------------
 *
 * A Format owns the engine's devbuf_format (in a FmtData, shared with its
 * Fields because they point into its arena) and builds Python values only
 * when an attribute is read: parse_format then costs about what the parse
 * costs. Fields are made on the first read of Format.fields (or of
 * Field.children / .pointee) and kept, so repeated reads return the same
 * objects. Field.custom is the Python devbuf.Custom, made by the factory
 * devbuf/_format.py registers (custom items are rare; their record is big).
 *
 * No reference cycle: Format -> Field -> FmtData, never back to the Format,
 * so neither type needs the GC. FmtData's count is only touched with the GIL. */

typedef struct FmtData {
  Py_ssize_t refs;
  devbuf_format f; /* never moves: its fields point into its own arena */
} FmtData;

static void fmtdata_decref(FmtData *d) {
  if (d != NULL && --d->refs == 0) {
    devbuf_format_release(&d->f);
    PyMem_RawFree(d);
  }
}

typedef struct DbpFormat {
  PyObject_HEAD
  FmtData *data;
  PyObject *format;    /* the string as given */
  PyObject *canonical; /* made on first read */
  PyObject *fields;    /* tuple of Field, made on first read */
} DbpFormat;

typedef struct DbpField {
  PyObject_HEAD
  FmtData *data;
  const devbuf_format_field *f; /* points into data->f */
  PyObject *children;           /* made on first read */
  PyObject *pointee;            /* made on first read (None when absent) */
  PyObject *custom;             /* made on first read (None when absent) */
} DbpField;

static PyTypeObject DbpFormat_Type, DbpField_Type;
static PyObject *g_mode_str[3], *g_bo_str[128];

static PyObject *field_new(FmtData *data, const devbuf_format_field *f) {
  DbpField *o = PyObject_New(DbpField, &DbpField_Type);
  if (o == NULL) return NULL;
  data->refs++;
  o->data = data;
  o->f = f;
  o->children = o->pointee = o->custom = NULL;
  return (PyObject *)o;
}

/* Tuple of Fields for the sibling list starting at `f`. */
static PyObject *field_tuple(FmtData *data, const devbuf_format_field *first) {
  Py_ssize_t n = 0;
  for (const devbuf_format_field *f = first; f != NULL; f = f->next) n++;
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  Py_ssize_t i = 0;
  for (const devbuf_format_field *f = first; f != NULL; f = f->next, i++) {
    PyObject *o = field_new(data, f);
    if (o == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, o);
  }
  return t;
}

/* Store a lazily made value in its slot, unless another thread filled it
 * while this one made it (making one can run Python code and switch
 * threads): the first one wins, so repeated reads return the same object. */
static PyObject *settle(PyObject **slot, PyObject *made) {
  if (made == NULL) return NULL;
  if (*slot == NULL) *slot = made;
  else Py_DECREF(made);
  return Py_NewRef(*slot);
}

static PyObject *bo_str(char c) {
  unsigned char u = (unsigned char)c;
  return Py_NewRef(u < 128 && g_bo_str[u] != NULL ? g_bo_str[u] : g_bo_str['@']);
}

/* ---- Format attributes ---- */

static PyObject *fmt_format(DbpFormat *o, void *c) { return Py_NewRef(o->format); }
static PyObject *fmt_mode(DbpFormat *o, void *c) {
  return Py_NewRef(g_mode_str[o->data->f.flags & DEVBUF_FORMAT_MODE_MASK & 3]);
}
static PyObject *fmt_itemsize(DbpFormat *o, void *c) {
  return PyLong_FromUnsignedLongLong(o->data->f.itemsize);
}
static PyObject *fmt_alignment(DbpFormat *o, void *c) {
  return PyLong_FromUnsignedLongLong(o->data->f.alignment);
}
static PyObject *fmt_info(DbpFormat *o, void *bit) {
  return PyBool_FromLong((o->data->f.info & (uint32_t)(uintptr_t)bit) != 0);
}
static PyObject *fmt_end_byteorder(DbpFormat *o, void *c) { return bo_str(o->data->f.end_byteorder); }

static PyObject *fmt_canonical(DbpFormat *o, void *c) {
  if (o->canonical != NULL) return Py_NewRef(o->canonical);
  char small[256];
  PyObject *made;
  size_t need = devbuf_format_print(&o->data->f, small, sizeof small);
  if (need < sizeof small) {
    made = PyUnicode_FromStringAndSize(small, (Py_ssize_t)need);
  } else {
    char *big = PyMem_Malloc(need + 1);
    if (big == NULL) return PyErr_NoMemory();
    devbuf_format_print(&o->data->f, big, need + 1);
    made = PyUnicode_FromStringAndSize(big, (Py_ssize_t)need);
    PyMem_Free(big);
  }
  return settle(&o->canonical, made);
}

static PyObject *fmt_fields(DbpFormat *o, void *c) {
  if (o->fields != NULL) return Py_NewRef(o->fields);
  return settle(&o->fields, field_tuple(o->data, o->data->f.fields));
}

static PyGetSetDef fmt_getset[] = {
    {"format", (getter)fmt_format, NULL, "the format string as given", NULL},
    {"mode", (getter)fmt_mode, NULL, "'default', 'struct' or 'numpy'", NULL},
    {"itemsize", (getter)fmt_itemsize, NULL, "bytes per item", NULL},
    {"alignment", (getter)fmt_alignment, NULL, "alignment of an item", NULL},
    {"canonical", (getter)fmt_canonical, NULL, "the format as the engine prints it", NULL},
    {"fields", (getter)fmt_fields, NULL, "top-level fields: a tuple of devbuf.Field", NULL},
    {"has_custom", (getter)fmt_info, NULL, "a [id$payload] item appears",
     (void *)(uintptr_t)DEVBUF_FORMAT_HAS_CUSTOM},
    {"has_unknown", (getter)fmt_info, NULL, "a custom item was not understood",
     (void *)(uintptr_t)DEVBUF_FORMAT_HAS_UNKNOWN},
    {"has_pointers", (getter)fmt_info, NULL, "P, O, & or X appear",
     (void *)(uintptr_t)DEVBUF_FORMAT_HAS_POINTERS},
    {"non_native", (getter)fmt_info, NULL, "some item is not in native byte order",
     (void *)(uintptr_t)DEVBUF_FORMAT_NON_NATIVE},
    {"end_byteorder", (getter)fmt_end_byteorder, NULL, "byte-order state after the last character",
     NULL},
    {NULL},
};

/* ---- Field attributes ---- */

static PyObject *fld_name(DbpField *o, void *c) {
  if (o->f->name == NULL) Py_RETURN_NONE;
  return PyUnicode_FromString(o->f->name);
}
static PyObject *fld_kind(DbpField *o, void *c) {
  unsigned k = o->f->kind;
  return PyUnicode_FromString(field_kind_name((int)k));
}
static PyObject *fld_code(DbpField *o, void *c) {
  /* one-character str are cached by CPython: no allocation for most codes */
  return PyUnicode_FromStringAndSize(o->f->code, (Py_ssize_t)strnlen(o->f->code, sizeof o->f->code));
}
static PyObject *fld_u64(DbpField *o, void *which) {
  const devbuf_format_field *f = o->f;
  uint64_t v;
  switch ((uintptr_t)which) {
    case 0: v = f->offset; break;
    case 1: v = f->size; break;
    case 2: v = f->elem_size; break;
    case 3: v = f->count; break;
    case 4: v = f->alignment; break;
    case 5: v = f->bit_offset; break;
    default: v = f->src_offset; break;
  }
  return PyLong_FromUnsignedLongLong(v);
}
static PyObject *fld_byteorder(DbpField *o, void *c) { return bo_str(o->f->byteorder); }
static PyObject *fld_big_endian(DbpField *o, void *c) { return PyBool_FromLong(o->f->big_endian); }
static PyObject *fld_dtype_kind(DbpField *o, void *c) {
  return PyUnicode_FromString(dtype_kind_name(o->f->dtype_kind));
}
static PyObject *fld_shape(DbpField *o, void *c) {
  PyObject *shape = PyTuple_New(o->f->ndim);
  if (shape == NULL) return NULL;
  for (uint16_t i = 0; i < o->f->ndim; i++) {
    PyObject *x = PyLong_FromUnsignedLongLong(o->f->shape[i]);
    if (x == NULL) {
      Py_DECREF(shape);
      return NULL;
    }
    PyTuple_SET_ITEM(shape, i, x);
  }
  return shape;
}
static PyObject *fld_children(DbpField *o, void *c) {
  if (o->children != NULL) return Py_NewRef(o->children);
  return settle(&o->children, field_tuple(o->data, o->f->children));
}
static PyObject *fld_pointee(DbpField *o, void *c) {
  if (o->pointee != NULL) return Py_NewRef(o->pointee);
  return settle(&o->pointee,
                o->f->pointee ? field_new(o->data, o->f->pointee) : Py_NewRef(Py_None));
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

/* The custom item as a dict, handed to the package's factory (devbuf.Custom). */
static PyObject *custom_dict(const devbuf_format_custom *c) {
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
  if (alts == NULL || desc == NULL) {
    Py_XDECREF(alts);
    Py_XDECREF(desc);
    return NULL;
  }
  return Py_BuildValue("{s:N,s:i,s:O,s:N}", "alternatives", alts, "chosen", c->chosen,
                       "is_complex", c->is_complex ? Py_True : Py_False, "desc", desc);
}

static PyObject *fld_custom(DbpField *o, void *c) {
  if (o->custom != NULL) return Py_NewRef(o->custom);
  if (o->f->custom == NULL) return settle(&o->custom, Py_NewRef(Py_None));
  PyObject *d = custom_dict(o->f->custom);
  PyObject *factory = d != NULL ? dbp_interp_get(DBP_FORMAT_FACTORY_KEY) : NULL;
  if (d == NULL || (factory == NULL && PyErr_Occurred())) {
    Py_XDECREF(d);
    return NULL;
  }
  /* Without the package (the bare extension), the dict itself. */
  PyObject *made = factory != NULL ? PyObject_CallOneArg(factory, d) : Py_NewRef(d);
  Py_DECREF(d);
  return settle(&o->custom, made);
}

static PyGetSetDef fld_getset[] = {
    {"name", (getter)fld_name, NULL, "the field's name, or None", NULL},
    {"kind", (getter)fld_kind, NULL,
     "scalar, padding, struct, pointer, function, custom or bits", NULL},
    {"code", (getter)fld_code, NULL, "the code as written: 'i', 'Zd', 'T', '&', '[' ...", NULL},
    {"offset", (getter)fld_u64, NULL, "bytes from the start of the enclosing struct", (void *)0},
    {"size", (getter)fld_u64, NULL, "bytes the field occupies", (void *)1},
    {"elem_size", (getter)fld_u64, NULL, "bytes of one element", (void *)2},
    {"count", (getter)fld_u64, NULL, "the repeat count written before the code", (void *)3},
    {"alignment", (getter)fld_u64, NULL, "alignment applied to the field", (void *)4},
    {"byteorder", (getter)fld_byteorder, NULL, "byte-order state in force", NULL},
    {"big_endian", (getter)fld_big_endian, NULL, "multi-byte values are big-endian", NULL},
    {"dtype_kind", (getter)fld_dtype_kind, NULL, "kind of the elements (int, float, ...)", NULL},
    {"shape", (getter)fld_shape, NULL, "the (shape) written before the code", NULL},
    {"children", (getter)fld_children, NULL, "members of a struct or function: Fields", NULL},
    {"pointee", (getter)fld_pointee, NULL, "target of & / return of X, or None", NULL},
    {"custom", (getter)fld_custom, NULL, "devbuf.Custom of a [id$payload] item, or None", NULL},
    {"bit_offset", (getter)fld_u64, NULL, "first bit of a t field within its byte", (void *)5},
    {"src_offset", (getter)fld_u64, NULL, "byte offset of the field in the format string",
     (void *)6},
    {NULL},
};

/* ---- repr, equality, hash: as the dataclasses they replace ---- */

static const char *const fmt_attrs[] = {"format",      "mode",        "itemsize",   "alignment",
                                        "canonical",   "fields",      "has_custom", "has_unknown",
                                        "has_pointers", "non_native", "end_byteorder", NULL};
static const char *const fld_attrs[] = {"name",       "kind",     "code",      "offset",    "size",
                                        "elem_size",  "count",    "alignment", "byteorder",
                                        "big_endian", "dtype_kind", "shape",   "children",
                                        "pointee",    "custom",   "bit_offset", "src_offset",
                                        NULL};

/* Every attribute, in declaration order, as a tuple. */
static PyObject *attr_tuple(PyObject *self, const char *const *names) {
  Py_ssize_t n = 0;
  while (names[n] != NULL) n++;
  PyObject *t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
    PyObject *v = PyObject_GetAttrString(self, names[i]);
    if (v == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

static PyObject *obj_repr(PyObject *self, const char *const *names) {
  int rc = Py_ReprEnter(self);
  if (rc != 0) return rc > 0 ? PyUnicode_FromFormat("%s(...)", Py_TYPE(self)->tp_name) : NULL;
  PyObject *parts = PyList_New(0), *out = NULL;
  for (size_t i = 0; parts != NULL && names[i] != NULL; i++) {
    PyObject *v = PyObject_GetAttrString(self, names[i]);
    PyObject *s = v ? PyUnicode_FromFormat("%s=%R", names[i], v) : NULL;
    Py_XDECREF(v);
    if (s == NULL || PyList_Append(parts, s) < 0) Py_CLEAR(parts);
    Py_XDECREF(s);
  }
  PyObject *sep = parts ? PyUnicode_FromString(", ") : NULL;
  PyObject *body = sep ? PyUnicode_Join(sep, parts) : NULL;
  const char *tn = strrchr(Py_TYPE(self)->tp_name, '.');
  if (body) out = PyUnicode_FromFormat("%s(%U)", tn ? tn + 1 : Py_TYPE(self)->tp_name, body);
  Py_XDECREF(sep);
  Py_XDECREF(body);
  Py_XDECREF(parts);
  Py_ReprLeave(self);
  return out;
}

static PyObject *obj_richcompare(PyObject *a, PyObject *b, int op, const char *const *names) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) Py_RETURN_NOTIMPLEMENTED;
  if (a == b) return PyBool_FromLong(op == Py_EQ);
  PyObject *ta = attr_tuple(a, names), *tb = ta ? attr_tuple(b, names) : NULL;
  PyObject *r = tb ? PyObject_RichCompare(ta, tb, op) : NULL;
  Py_XDECREF(ta);
  Py_XDECREF(tb);
  return r;
}

static Py_hash_t obj_hash(PyObject *self, const char *const *names) {
  PyObject *t = attr_tuple(self, names);
  Py_hash_t h = t ? PyObject_Hash(t) : -1;
  Py_XDECREF(t);
  return h;
}

/* Short reprs (a nested struct's full attribute list ran to hundreds of
 * characters): what identifies the item; the attributes hold the rest. */
static PyObject *fmt_repr(PyObject *s) {
  static const char *const short_attrs[] = {"format", "mode", "itemsize", NULL};
  return obj_repr(s, short_attrs);
}
static PyObject *fld_repr(PyObject *s) {
  static const char *const short_attrs[] = {"name", "kind", "code", "offset", "size", NULL};
  return obj_repr(s, short_attrs);
}
static PyObject *fmt_richcompare(PyObject *a, PyObject *b, int op) {
  return obj_richcompare(a, b, op, fmt_attrs);
}
static PyObject *fld_richcompare(PyObject *a, PyObject *b, int op) {
  return obj_richcompare(a, b, op, fld_attrs);
}
static Py_hash_t fmt_hash(PyObject *s) { return obj_hash(s, fmt_attrs); }
static Py_hash_t fld_hash(PyObject *s) { return obj_hash(s, fld_attrs); }

static void fmt_dealloc(DbpFormat *o) {
  Py_XDECREF(o->format);
  Py_XDECREF(o->canonical);
  Py_XDECREF(o->fields);
  fmtdata_decref(o->data);
  PyObject_Free(o);
}

static void fld_dealloc(DbpField *o) {
  Py_XDECREF(o->children);
  Py_XDECREF(o->pointee);
  Py_XDECREF(o->custom);
  fmtdata_decref(o->data);
  PyObject_Free(o);
}

static PyObject *parse_flags(PyObject *fmt, uint32_t flags);

/* Pickled as what parses it again (in the unpickling interpreter's registry). */
static PyObject *fmt_reduce(DbpFormat *o, PyObject *unused) {
  PyObject *mod = PyImport_ImportModule("devbuf._devbuf");
  PyObject *fn = mod ? PyObject_GetAttrString(mod, "_format_from_flags") : NULL;
  Py_XDECREF(mod);
  if (fn == NULL) return NULL;
  return Py_BuildValue("N(OI)", fn, o->format, (unsigned)o->data->f.flags);
}

static PyMethodDef fmt_methods[] = {
    {"__reduce__", (PyCFunction)fmt_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject DbpFormat_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.Format",
    .tp_basicsize = sizeof(DbpFormat),
    .tp_dealloc = (destructor)fmt_dealloc,
    .tp_repr = fmt_repr,
    .tp_hash = fmt_hash,
    .tp_richcompare = fmt_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A parsed buffer-protocol format string (devbuf.parse_format). Immutable; "
              "attributes are computed from the engine's result on first read.",
    .tp_getset = fmt_getset,
    .tp_methods = fmt_methods,
};

static PyTypeObject DbpField_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.Field",
    .tp_basicsize = sizeof(DbpField),
    .tp_dealloc = (destructor)fld_dealloc,
    .tp_repr = fld_repr,
    .tp_hash = fld_hash,
    .tp_richcompare = fld_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One field of a devbuf.Format. Immutable.",
    .tp_getset = fld_getset,
};

/* ---- parsing ---- */

/* Parse `s` (the UTF-8 of `fmt_obj`, or of a C string when fmt_obj is NULL). */
static PyObject *describe_obj(PyObject *fmt_obj, const char *fmt, Py_ssize_t len, uint32_t flags) {
  /* ~2 KiB and never moved (fields point into it): off the stack, not zeroed */
  FmtData *d = PyMem_RawMalloc(sizeof *d);
  if (d == NULL) return PyErr_NoMemory();
  d->refs = 1;
  d->f.struct_size = sizeof d->f;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = devbuf_format_parse(fmt, (size_t)len, flags, &d->f, &err);
  if (rc != DEVBUF_OK) {
    size_t off = (size_t)d->f.error_offset;
    fmtdata_decref(d);
    if (rc == DEVBUF_EFORMAT || rc == DEVBUF_ENOTFOUND || rc == DEVBUF_EINVAL)
      return raise_engine(fmt, (size_t)len, off, &err);
    return dbp_raise(&err);
  }
  PyObject *s = fmt_obj ? Py_NewRef(fmt_obj) : PyUnicode_FromStringAndSize(fmt, len);
  DbpFormat *o = s ? PyObject_New(DbpFormat, &DbpFormat_Type) : NULL;
  if (o == NULL) {
    Py_XDECREF(s);
    fmtdata_decref(d);
    return NULL;
  }
  o->data = d;
  o->format = s;
  o->canonical = NULL;
  o->fields = NULL;
  return (PyObject *)o;
}

static PyObject *describe(const char *fmt, Py_ssize_t len, uint32_t flags) {
  return describe_obj(NULL, fmt, len, flags);
}

static PyObject *parse_flags(PyObject *fmt, uint32_t flags) {
  Py_ssize_t len;
  const char *s = PyUnicode_AsUTF8AndSize(fmt, &len);
  if (s == NULL) return NULL;
  return describe_obj(fmt, s, len, flags);
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

static int mode_flags(PyObject *mode, uint32_t *flags) {
  for (uint32_t i = 0; i < 3; i++)
    if (mode == g_mode_str[i]) {
      *flags = i;
      return 0;
    }
  const char *m = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
  for (uint32_t i = 0; m != NULL && i < 3; i++)
    if (strcmp(m, PyUnicode_AsUTF8(g_mode_str[i])) == 0) {
      *flags = i;
      return 0;
    }
  if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_UnicodeError)) return -1;
  PyErr_Clear();
  PyErr_Format(PyExc_ValueError, "mode must be 'default', 'struct' or 'numpy', not %R", mode);
  return -1;
}

/* parse_format(fmt, mode="default", *, allow_unknown=False, plugins=True, lint=False).
 * Vectorcall with the keywords read by hand: PyArg_ParseTupleAndKeywords
 * alone cost more than parsing a short format. */
static PyObject *parse_format_fast(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *fmt = nargs > 0 ? args[0] : NULL, *mode = nargs > 1 ? args[1] : NULL;
  int opt[3] = {0, 1, 0}; /* allow_unknown, plugins, lint */
  static const char *const opt_names[3] = {"allow_unknown", "plugins", "lint"};
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "parse_format() takes at most 2 positional arguments (%zd given)",
                 nargs);
    return NULL;
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
    int slot = -1;
    for (int j = 0; j < 3; j++)
      if (PyUnicode_CompareWithASCIIString(k, opt_names[j]) == 0) slot = j;
    if (slot >= 0) {
      if ((opt[slot] = PyObject_IsTrue(v)) < 0) return NULL;
    } else if (fmt == NULL && (PyUnicode_CompareWithASCIIString(k, "fmt") == 0 ||
                               PyUnicode_CompareWithASCIIString(k, "format") == 0)) {
      fmt = v;
    } else if (mode == NULL && PyUnicode_CompareWithASCIIString(k, "mode") == 0) {
      mode = v;
    } else {
      PyErr_Format(PyExc_TypeError, "parse_format() got an unexpected or repeated keyword argument %R", k);
      return NULL;
    }
  }
  if (fmt == NULL) {
    PyErr_SetString(PyExc_TypeError, "parse_format() missing required argument 'fmt'");
    return NULL;
  }
  /* bytes too, as calcsize and struct take them: ASCII is the only text a
   * format may hold, so decoding loses nothing. */
  PyObject *decoded = NULL;
  if (PyBytes_Check(fmt)) {
    decoded = PyUnicode_DecodeASCII(PyBytes_AS_STRING(fmt), PyBytes_GET_SIZE(fmt), "strict");
    if (decoded == NULL) return NULL;
    fmt = decoded;
  } else if (!PyUnicode_Check(fmt)) {
    PyErr_Format(PyExc_TypeError, "parse_format() argument 'fmt' must be str or bytes, not %.100s",
                 Py_TYPE(fmt)->tp_name);
    return NULL;
  }
  uint32_t flags = DEVBUF_FORMAT_DEFAULT;
  if (mode != NULL && mode_flags(mode, &flags) < 0) {
    Py_XDECREF(decoded);
    return NULL;
  }
  if (opt[0]) flags |= DEVBUF_FORMAT_ALLOW_UNKNOWN;
  if (!opt[1]) flags |= DEVBUF_FORMAT_NO_PLUGINS;
  if (opt[2]) flags |= DEVBUF_FORMAT_LINT_IDS;
  PyObject *r = parse_flags(fmt, flags);
  Py_XDECREF(decoded);
  return r;
}

PyObject *dbp_parse_format(PyObject *self, PyObject *args, PyObject *kwargs) {
  /* the old METH_VARARGS entry (_devbuf._parse_format): same function */
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject *kwnames = NULL, *stack[8];
  Py_ssize_t nkw = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
  if (n + nkw > 8) {
    PyErr_SetString(PyExc_TypeError, "parse_format() takes at most 5 arguments");
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) stack[i] = PyTuple_GET_ITEM(args, i);
  if (nkw) {
    if ((kwnames = PyTuple_New(nkw)) == NULL) return NULL;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      PyTuple_SET_ITEM(kwnames, i, Py_NewRef(k));
      stack[n + i++] = v;
    }
  }
  PyObject *r = parse_format_fast(self, stack, n, kwnames);
  Py_XDECREF(kwnames);
  return r;
}

static PyObject *format_from_flags(PyObject *self, PyObject *args) {
  PyObject *fmt;
  unsigned flags;
  if (!PyArg_ParseTuple(args, "UI:_format_from_flags", &fmt, &flags)) return NULL;
  return parse_flags(fmt, flags);
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
  dbp_home home; /* where py_interpret enters Python (base/dbp_enter.h) */
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
  dbp_entered g;
  if (dbp_enter(&p->home, &g) < 0)
    return devbuf_error_set(err, DEVBUF_ECALLBACK,
                            "dtype namespace '%s': its Python interpreter is finalizing or gone, "
                            "'%.*s' cannot be interpreted", p->id, (int)(len > 100 ? 100 : len),
                            payload);
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
  dbp_leave(&g);
  return rc;
}

/* Without the GIL, dtype_namespaces() reads a namespace's strings while
 * another thread may be unregistering it: ns_free of a registered record
 * and the listing take this lock (a PyMutex; nothing with the GIL). */
static dbp_mutex g_ns_strings_lock;
static PyObject *list_namespaces_locked(PyObject *out);

static void ns_free(PyNamespace *p) {
  if (p == NULL) return;
  PyMem_RawFree(p->id);
  PyMem_RawFree(p->provider);
  PyMem_RawFree(p->description);
  Py_XDECREF(p->callable);
  dbp_home_drop(&p->home);
  PyMem_RawFree(p);
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = PyMem_RawMalloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static PyObject *register_ns(const char *id, PyObject *callable, const char *provider,
                                 const char *description);

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
  return register_ns(id, callable, provider, description);
}

static PyObject *register_ns(const char *id, PyObject *callable, const char *provider,
                                 const char *description) {
  PyNamespace *p = PyMem_RawCalloc(1, sizeof *p);
  if (p == NULL) return PyErr_NoMemory();
  p->id = dupstr(id);
  p->provider = dupstr(provider);
  p->description = dupstr(description);
  if (!p->id || !p->provider || !p->description) {
    ns_free(p);
    return PyErr_NoMemory();
  }
  if (dbp_home_take(&p->home) < 0) {
    ns_free(p);
    return NULL;
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
  /* Claimed first, in one step: of two threads unregistering one id (the
   * runtime's unregister below runs without the GIL), one gets the capsule
   * and the other a KeyError, so the namespace is unregistered and freed
   * once. */
  PyObject *cap = NULL;
  int found = dbp_compat_DictPop(g_namespaces, arg, &cap);
  if (found <= 0) {
    if (found == 0)
      PyErr_Format(PyExc_KeyError, "no dtype namespace '%s' was registered from Python", id);
    return NULL;
  }
  PyNamespace *p = PyCapsule_GetPointer(cap, NS_CAPSULE);
  if (p == NULL) {
    Py_DECREF(cap);
    return NULL;
  }
  devbuf_error err;
  int rc;
  devbuf_error_clear(&err);
  /* Interpret calls still running need the GIL to finish. */
  DBP_NOGIL(rc = devbuf_dtype_unregister(p->id, &err));
  if (rc != DEVBUF_OK) {
    /* Still registered: give the claim back (it cannot be taken meanwhile:
     * the id is still the runtime's, so nobody else registered it). */
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    if (PyDict_SetItem(g_namespaces, arg, cap) < 0) PyErr_WriteUnraisable(arg);
    PyErr_Restore(et, ev, etb);
    Py_DECREF(cap);
    return dbp_raise(&err);
  }
  Py_DECREF(cap);
  DBP_MUTEX_LOCK(&g_ns_strings_lock);
  ns_free(p);
  DBP_MUTEX_UNLOCK(&g_ns_strings_lock);
  Py_RETURN_NONE;
}

PyObject *dbp_dtype_namespaces(PyObject *self, PyObject *unused) {
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  /* The strings are the registrants'; ours are freed by unregister (ns_free)
   * once the runtime lets go, so the listing holds them still. */
  DBP_MUTEX_LOCK(&g_ns_strings_lock);
  PyObject *r = list_namespaces_locked(out);
  DBP_MUTEX_UNLOCK(&g_ns_strings_lock);
  return r;
}

/* One pass, copied (devbuf_dtype_namespace_list: listing by index could
 * skip a namespace when another thread unregisters one before it, and read
 * a descriptor its registrant had freed), again with a larger array if the
 * set grew meanwhile. */
static PyObject *list_namespaces_locked(PyObject *out) {
  devbuf_dtype_namespace_info *info = NULL;
  size_t cap = 0, n;
  while ((n = devbuf_dtype_namespace_list(info, cap)) > cap) {
    PyMem_Free(info);
    cap = n + 16;
    info = PyMem_New(devbuf_dtype_namespace_info, cap);
    if (info == NULL) {
      Py_DECREF(out);
      return PyErr_NoMemory();
    }
  }
  for (size_t i = 0; i < n && out != NULL; i++) {
    const devbuf_dtype_namespace_info *x = &info[i];
    PyObject *d = Py_BuildValue(
        "{s:s,s:z,s:z,s:s}", "id", x->id, "provider",
        (x->flags & DEVBUF_DTYPE_INFO_HAS_PROVIDER) ? x->provider : NULL, "description",
        (x->flags & DEVBUF_DTYPE_INFO_HAS_DESCRIPTION) ? x->description : NULL, "source", x->source);
    if (d == NULL || PyList_Append(out, d) < 0) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  PyMem_Free(info);
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
  PyObject *hit = NULL; /* a new reference: another thread may clear the memo meanwhile */
  int found = dbp_compat_DictGetItemRef(cache, fmt, &hit);
  if (found != 0) return found > 0 ? hit : NULL;
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
     "calcsize($module, format, mode='default', /)\n--\n\n"
     "calcsize(format, mode='default', /) -> item size in bytes of a str or bytes format (like struct.calcsize; modes: "
     "'default', 'struct', 'numpy'). Raises devbuf.FormatError with .offset."},
    {"_set_format_factory", (PyCFunction)set_format_factory, METH_O,
     "Set the callable that turns a custom item's dict into devbuf.Custom."},
    {"parse_format", (PyCFunction)(void (*)(void))parse_format_fast, METH_FASTCALL | METH_KEYWORDS,
     "parse_format($module, /, fmt, mode='default', *, allow_unknown=False, plugins=True, lint=False)\n--\n\n"
     "parse_format($module, fmt, mode='default', *, allow_unknown=False, plugins=True, lint=False)\n"
     "--\n\n"
     "Parse a buffer-protocol format string, custom dtypes included, into a devbuf.Format.\n\n"
     "mode is 'default' (PEP 3118 + [id$payload]), 'struct' (exactly CPython's struct module,\n"
     "with the complex codes of 3.14 and 3.15: F, D, Zf, Zd) or 'numpy' (NumPy's PEP 3118\n"
     "reader). Raises devbuf.FormatError (a ValueError) with .offset, the byte the problem\n"
     "was found at, and a caret under it in the message.\n\n"
     "lint=True also refuses a space or '[' in a custom dtype id: the draft allows them,\n"
     "but no package name has one."},
    {"_format_from_flags", (PyCFunction)format_from_flags, METH_VARARGS,
     "_format_from_flags(format, flags) -> Format: parse with the engine's flags (pickle)."},
    {NULL},
};

int dbp_format_init(PyObject *module) {
  /* Immortal-enough constants shared by every interpreter, as the static types are. */
  if (g_mode_str[0] == NULL) {
    static const char *const modes[3] = {"default", "struct", "numpy"};
    for (int i = 0; i < 3; i++)
      if ((g_mode_str[i] = PyUnicode_InternFromString(modes[i])) == NULL) return -1;
    static const char bos[] = "@^=<>!";
    for (const char *c = bos; *c; c++)
      if ((g_bo_str[(unsigned char)*c] = PyUnicode_FromStringAndSize(c, 1)) == NULL) return -1;
    if (PyType_Ready(&DbpFormat_Type) < 0 || PyType_Ready(&DbpField_Type) < 0) return -1;
  }
  if (PyModule_AddObjectRef(module, "Format", (PyObject *)&DbpFormat_Type) < 0 ||
      PyModule_AddObjectRef(module, "Field", (PyObject *)&DbpField_Type) < 0)
    return -1;
  g_namespaces = PyDict_New();
  if (g_namespaces == NULL) return -1;
  for (int i = 0; i < 3; i++)
    if ((g_size_cache[i] = PyDict_New()) == NULL) return -1;
  if (PyModule_AddObjectRef(module, "_python_namespaces", g_namespaces) < 0) return -1;
  return PyModule_AddFunctions(module, format_methods);
}
