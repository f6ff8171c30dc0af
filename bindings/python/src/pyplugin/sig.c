/* sig.c: signature strings and plugin extension functions.
 *
 * A signature is "R(A...)" (docs/plugin-authors.md, "Extension functions"):
 *
 *   v void (return only)     p void*  (int address, None, or a buffer)
 *   b int8    B uint8        s const char* (str or bytes, NUL-terminated)
 *   h int16   H uint16       e devbuf_error* (argument only, at most once,
 *   i int32   I uint32         supplied by the caller, never by Python code)
 *   q int64   Q uint64       *X  pointer to an X the function writes (an
 *   n ssize_t N size_t           out-parameter; X is any value letter)
 *   f float   d double
 *
 * "i(...e)" is the status form: the int is a devbuf status and, when not
 * DEVBUF_OK, the error record says why. From Python the out-parameters are
 * not passed but returned; see pp_call_ext for the exact shapes.
 *
 * Calls from Python go through ffi_call with the GIL released; arguments are
 * converted with range checks first (a value that does not fit is an
 * OverflowError, a wrong type a TypeError, before anything is called). */
#include "pyplugin.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define VALUE_LETTERS "bBhHiIqQnNfdps"

static ffi_type *letter_type(char l) {
  switch (l) {
    case 'v': return &ffi_type_void;
    case 'b': return &ffi_type_sint8;
    case 'B': return &ffi_type_uint8;
    case 'h': return &ffi_type_sint16;
    case 'H': return &ffi_type_uint16;
    case 'i': return &ffi_type_sint32;
    case 'I': return &ffi_type_uint32;
    case 'q': return &ffi_type_sint64;
    case 'Q': return &ffi_type_uint64;
    case 'n': return sizeof(ssize_t) == 8 ? &ffi_type_sint64 : &ffi_type_sint32;
    case 'N': return sizeof(size_t) == 8 ? &ffi_type_uint64 : &ffi_type_uint32;
    case 'f': return &ffi_type_float;
    case 'd': return &ffi_type_double;
    case 'p':
    case 's':
    case 'e': return &ffi_type_pointer;
    default: return NULL;
  }
}

int pp_sig_parse_c(const char *text, pp_sig *out, char *why, size_t cap) {
  memset(out, 0, sizeof *out);
  out->err_index = -1;
  if (text == NULL) {
    snprintf(why, cap, "signature is NULL");
    return -1;
  }
  const char *p = text;
  if (*p == '\0' || (strchr(VALUE_LETTERS, *p) == NULL && *p != 'v')) {
    snprintf(why, cap, "signature '%s': byte 0: return type must be one of v%s", text,
             VALUE_LETTERS);
    return -1;
  }
  out->ret = *p++;
  out->rtype = letter_type(out->ret);
  if (*p != '(') {
    snprintf(why, cap, "signature '%s': byte %d: expected '(' after the return type", text,
             (int)(p - text));
    return -1;
  }
  p++;
  while (*p != ')') {
    int is_out = 0;
    long at = p - text;
    if (*p == '\0') {
      snprintf(why, cap, "signature '%s': missing ')'", text);
      return -1;
    }
    if (*p == '*') {
      is_out = 1;
      p++;
    }
    char l = *p;
    if (l == '\0' || l == ')' || (strchr(VALUE_LETTERS, l) == NULL && l != 'e')) {
      snprintf(why, cap, "signature '%s': byte %ld: '%c' is not an argument type (%se, or * + one of %s)",
               text, (long)(p - text), l ? l : '?', VALUE_LETTERS, VALUE_LETTERS);
      return -1;
    }
    if (l == 'e' && is_out) {
      snprintf(why, cap, "signature '%s': byte %ld: 'e' cannot be an out-parameter", text, at);
      return -1;
    }
    if (l == 'e' && out->err_index >= 0) {
      snprintf(why, cap, "signature '%s': byte %ld: a second 'e'", text, at);
      return -1;
    }
    if (out->nargs == PP_SIG_MAX_ARGS) {
      snprintf(why, cap, "signature '%s': more than %d arguments", text, PP_SIG_MAX_ARGS);
      return -1;
    }
    int k = out->nargs++;
    out->letters[k] = l;
    out->out[k] = (unsigned char)is_out;
    out->atypes[k] = is_out ? &ffi_type_pointer : letter_type(l);
    if (l == 'e')
      out->err_index = k;
    else if (is_out)
      out->nout++;
    else
      out->nin++;
    p++;
  }
  if (p[1] != '\0') {
    snprintf(why, cap, "signature '%s': byte %d: text after ')'", text, (int)(p + 1 - text));
    return -1;
  }
  out->status_form = out->ret == 'i' && out->err_index >= 0;
  return 0;
}

int pp_sig_parse(const char *text, pp_sig *out) {
  char why[256];
  if (pp_sig_parse_c(text, out, why, sizeof why) < 0) {
    PyErr_SetString(PyExc_ValueError, why);
    return -1;
  }
  return 0;
}

/* ---- values <-> Python ----------------------------------------------------------- */

typedef union pp_value {
  int8_t b;
  uint8_t B;
  int16_t h;
  uint16_t H;
  int32_t i;
  uint32_t I;
  int64_t q;
  uint64_t Q;
  ssize_t n;
  size_t N;
  float f;
  double d;
  void *p;
  const char *s;
} pp_value;

static const char *letter_name(char l) {
  switch (l) {
    case 'b': return "int8";
    case 'B': return "uint8";
    case 'h': return "int16";
    case 'H': return "uint16";
    case 'i': return "int32";
    case 'I': return "uint32";
    case 'q': return "int64";
    case 'Q': return "uint64";
    case 'n': return "ssize_t";
    case 'N': return "size_t";
    case 'f': return "float";
    case 'd': return "double";
    case 'p': return "pointer";
    case 's': return "string";
    case 'v': return "void";
    default: return "?";
  }
}

/* Python -> one value of letter `l` (not 's'; 'p' only from int/None).
 * 0, or -1 with TypeError/OverflowError naming `what`. */
static int from_py(PyObject *o, char l, pp_value *v, const char *what) {
  if (l == 'f' || l == 'd') {
    if (!PyFloat_Check(o) && !PyLong_Check(o)) {
      PyErr_Format(PyExc_TypeError, "%s: expected a number for %s, got %.100s", what,
                   letter_name(l), Py_TYPE(o)->tp_name);
      return -1;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    if (l == 'f') {
      if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX)) {
        PyErr_Format(PyExc_OverflowError, "%s: %R is out of range for float", what, o);
        return -1;
      }
      v->f = (float)d;
    } else {
      v->d = d;
    }
    return 0;
  }
  if (l == 'p') {
    if (o == Py_None) {
      v->p = NULL;
      return 0;
    }
    if (!PyLong_Check(o) && !PyIndex_Check(o)) {
      PyErr_Format(PyExc_TypeError, "%s: expected an int address or None for pointer, got %.100s",
                   what, Py_TYPE(o)->tp_name);
      return -1;
    }
    return pp_as_handle(o, &v->p, what);
  }
  if (PyFloat_Check(o) || !PyIndex_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s: expected an int for %s, got %.100s", what, letter_name(l),
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  PyObject *idx = PyNumber_Index(o);
  if (idx == NULL) return -1;
  int overflow = 0;
  int is_unsigned = l == 'B' || l == 'H' || l == 'I' || l == 'Q' || l == 'N';
  long long sv = 0;
  unsigned long long uv = 0;
  if (is_unsigned) {
    if (dbp_compat_LongSign(idx) < 0) {
      overflow = 1;
    } else {
      uv = PyLong_AsUnsignedLongLong(idx);
      if (uv == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
          Py_DECREF(idx);
          return -1;
        }
        PyErr_Clear();
        overflow = 1;
      }
    }
  } else {
    sv = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (sv == -1 && PyErr_Occurred()) {
      Py_DECREF(idx);
      return -1;
    }
  }
  if (!overflow) {
    switch (l) {
      case 'b': overflow = sv < INT8_MIN || sv > INT8_MAX; v->b = (int8_t)sv; break;
      case 'B': overflow = uv > UINT8_MAX; v->B = (uint8_t)uv; break;
      case 'h': overflow = sv < INT16_MIN || sv > INT16_MAX; v->h = (int16_t)sv; break;
      case 'H': overflow = uv > UINT16_MAX; v->H = (uint16_t)uv; break;
      case 'i': overflow = sv < INT32_MIN || sv > INT32_MAX; v->i = (int32_t)sv; break;
      case 'I': overflow = uv > UINT32_MAX; v->I = (uint32_t)uv; break;
      case 'q': v->q = (int64_t)sv; break;
      case 'Q': v->Q = (uint64_t)uv; break;
      case 'n': overflow = sv < -SSIZE_MAX - 1 || sv > SSIZE_MAX; v->n = (ssize_t)sv; break;
      case 'N': overflow = uv > SIZE_MAX; v->N = (size_t)uv; break;
      default: break;
    }
  }
  if (overflow) {
    PyErr_Format(PyExc_OverflowError, "%s: %R is out of range for %s", what, idx, letter_name(l));
    Py_DECREF(idx);
    return -1;
  }
  Py_DECREF(idx);
  return 0;
}

/* One value of letter `l` read from `src` -> new reference. */
static PyObject *to_py(char l, const void *src) {
  pp_value v;
  switch (l) {
    case 'b': memcpy(&v.b, src, 1); return PyLong_FromLong(v.b);
    case 'B': memcpy(&v.B, src, 1); return PyLong_FromUnsignedLong(v.B);
    case 'h': memcpy(&v.h, src, 2); return PyLong_FromLong(v.h);
    case 'H': memcpy(&v.H, src, 2); return PyLong_FromUnsignedLong(v.H);
    case 'i': memcpy(&v.i, src, 4); return PyLong_FromLong(v.i);
    case 'I': memcpy(&v.I, src, 4); return PyLong_FromUnsignedLong(v.I);
    case 'q': memcpy(&v.q, src, 8); return PyLong_FromLongLong(v.q);
    case 'Q': memcpy(&v.Q, src, 8); return PyLong_FromUnsignedLongLong(v.Q);
    case 'n': memcpy(&v.n, src, sizeof v.n); return PyLong_FromSsize_t(v.n);
    case 'N': memcpy(&v.N, src, sizeof v.N); return PyLong_FromSize_t(v.N);
    case 'f': memcpy(&v.f, src, sizeof v.f); return PyFloat_FromDouble(v.f);
    case 'd': memcpy(&v.d, src, sizeof v.d); return PyFloat_FromDouble(v.d);
    case 'p': memcpy(&v.p, src, sizeof v.p); return pp_from_handle(v.p);
    case 's':
      memcpy(&v.s, src, sizeof v.s);
      if (v.s == NULL) Py_RETURN_NONE;
      return PyUnicode_DecodeUTF8(v.s, (Py_ssize_t)strlen(v.s), "replace");
    default: Py_RETURN_NONE;
  }
}

/* Size of one value of letter `l`. */
static size_t letter_size(char l) {
  switch (l) {
    case 'b': case 'B': return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': return 8;
    case 'n': return sizeof(ssize_t);
    case 'N': return sizeof(size_t);
    default: return sizeof(void *);
  }
}

/* Pack results the way both directions agree on:
 *   status form or void return: outs -> None | value | tuple
 *   otherwise: no outs -> ret; outs -> (ret, *outs) */
static PyObject *pack_results(const pp_sig *s, PyObject *ret, PyObject **outs) {
  int ret_counts = !(s->status_form || s->ret == 'v');
  int n = s->nout + ret_counts;
  if (n == 0) Py_RETURN_NONE;
  if (n == 1) return Py_NewRef(ret_counts ? ret : outs[0]);
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  int k = 0;
  if (ret_counts) PyTuple_SET_ITEM(t, k++, Py_NewRef(ret));
  for (int j = 0; j < s->nout; j++) PyTuple_SET_ITEM(t, k++, Py_NewRef(outs[j]));
  return t;
}

/* ---- calling an ext function from Python ----------------------------------------------- */

int pp_find_plugin(PyObject *which, size_t *index, devbuf_plugin_info *info) {
  size_t n = devbuf_plugin_count();
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
  PyObject *idx_attr = NULL;
  if (!PyLong_Check(which) && !PyUnicode_Check(which)) {
    /* a registration object: anything with an int .index */
    idx_attr = PyObject_GetAttrString(which, "index");
    if (idx_attr == NULL) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "plugin must be a name, an identifier, an index or a registration, not %.100s",
                   Py_TYPE(which)->tp_name);
      return -1;
    }
    which = idx_attr;
  }
  if (PyLong_Check(which)) {
    size_t i = PyLong_AsSize_t(which);
    Py_XDECREF(idx_attr);
    if (i == (size_t)-1 && PyErr_Occurred()) return -1;
    devbuf_error err;
    if (i >= n || devbuf_plugin_info_get(i, info, &err) != DEVBUF_OK) {
      PyErr_Format(PyExc_LookupError, "no plugin #%zu (%zu known)", i, n);
      return -1;
    }
    if (info->state != DEVBUF_PLUGIN_LOADED) {
      PyErr_Format(PyExc_LookupError, "plugin #%zu (%s) is not loaded: %s", i,
                   info->name ? info->name : info->path, info->reason);
      return -1;
    }
    *index = i;
    return 0;
  }
  Py_XDECREF(idx_attr);
  const char *name = PyUnicode_AsUTF8(which);
  if (name == NULL) return -1;
  /* Newest first: a name registered again after an unregister is the live one. */
  for (size_t k = n; k-- > 0;) {
    if (devbuf_plugin_info_get(k, info, NULL) != DEVBUF_OK || info->state != DEVBUF_PLUGIN_LOADED)
      continue;
    int hit = info->name && strcmp(info->name, name) == 0;
    for (const char *const *id = info->identifiers; !hit && id && *id; id++)
      hit = strcmp(*id, name) == 0;
    if (hit) {
      *index = k;
      return 0;
    }
  }
  PyErr_Format(PyExc_LookupError, "no loaded plugin is named '%s' or implements it", name);
  return -1;
}

static int printable(const char *s, size_t max) {
  if (s == NULL) return 0;
  size_t i = 0;
  for (; s[i]; i++)
    if (i >= max || (unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
  return i > 0;
}

/* Entry `k` of the plugin's ext table, validated. 0 with *fn and *sig, or -1
 * with `why`. */
static int ext_entry(const devbuf_ext_function *e, pp_sig *sig, char *why, size_t cap) {
  if (!printable(e->name, 127)) {
    snprintf(why, cap, "name is NULL, empty, not printable ASCII or too long");
    return -1;
  }
  if (e->fn == NULL) {
    snprintf(why, cap, "'%s' has a NULL function pointer", e->name);
    return -1;
  }
  return pp_sig_parse_c(e->signature, sig, why, cap);
}

static size_t ext_count(const devbuf_plugin_table *t) {
  if (t == NULL || t->struct_size < offsetof(devbuf_plugin_table, ext_function_count) + sizeof(size_t))
    return 0;
  return t->ext_functions ? t->ext_function_count : 0;
}

PyObject *pp_ext_functions(PyObject *self, PyObject *which) {
  size_t index;
  devbuf_plugin_info info;
  if (pp_find_plugin(which, &index, &info) < 0) return NULL;
  size_t n = ext_count(info.table);
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  for (size_t k = 0; k < n; k++) {
    const devbuf_ext_function *e = &info.table->ext_functions[k];
    pp_sig sig;
    char why[256] = "";
    int ok = ext_entry(e, &sig, why, sizeof why) == 0;
    PyObject *d = Py_BuildValue(
        "{s:N,s:N,s:N,s:O,s:s,s:n}", "name",
        printable(e->name, 127) ? PyUnicode_FromString(e->name) : Py_NewRef(Py_None), "signature",
        printable(e->signature, 255) ? PyUnicode_FromString(e->signature) : Py_NewRef(Py_None),
        "doc", printable(e->doc, 4096) ? PyUnicode_FromString(e->doc) : PyUnicode_FromString(""),
        "valid", ok ? Py_True : Py_False, "error", ok ? "" : why, "plugin", (Py_ssize_t)index);
    if (d == NULL || PyList_Append(out, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  return out;
}

PyObject *pp_check_signature(PyObject *self, PyObject *args) {
  const char *text;
  if (!PyArg_ParseTuple(args, "s:check_signature", &text)) return NULL;
  pp_sig s;
  if (pp_sig_parse(text, &s) < 0) return NULL;
  return Py_BuildValue("{s:C,s:i,s:i,s:i,s:O}", "ret", s.ret, "inputs", s.nin, "outputs", s.nout,
                       "nargs", s.nargs, "status_form", s.status_form ? Py_True : Py_False);
}

/* call_ext(plugin, name, *args) */
PyObject *pp_call_ext(PyObject *self, PyObject *args) {
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "call_ext(plugin, name, *args)");
    return NULL;
  }
  PyObject *which = PyTuple_GET_ITEM(args, 0);
  const char *fname = PyUnicode_Check(PyTuple_GET_ITEM(args, 1))
                          ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 1))
                          : NULL;
  if (fname == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "call_ext: name must be a str");
    return NULL;
  }
  size_t index;
  devbuf_plugin_info info;
  if (pp_find_plugin(which, &index, &info) < 0) return NULL;
  size_t n = ext_count(info.table);
  const devbuf_ext_function *e = NULL;
  for (size_t k = 0; k < n; k++)
    if (info.table->ext_functions[k].name && strcmp(info.table->ext_functions[k].name, fname) == 0)
      e = &info.table->ext_functions[k];
  if (e == NULL) {
    PyErr_Format(PyExc_LookupError, "plugin '%s' has no extension function '%s' (it has %zu)",
                 info.name, fname, n);
    return NULL;
  }
  pp_sig s;
  char why[256];
  if (ext_entry(e, &s, why, sizeof why) < 0) {
    PyErr_Format(PyExc_ValueError, "plugin '%s': extension function '%s': %s", info.name, fname,
                 why);
    return NULL;
  }
  if (nargs - 2 != s.nin) {
    PyErr_Format(PyExc_TypeError, "%s.%s() takes %d argument%s (signature '%s'), %zd given",
                 info.name, fname, s.nin, s.nin == 1 ? "" : "s", e->signature, nargs - 2);
    return NULL;
  }
  pp_value vals[PP_SIG_MAX_ARGS], outs[PP_SIG_MAX_ARGS];
  void *avalues[PP_SIG_MAX_ARGS];
  Py_buffer views[PP_SIG_MAX_ARGS];
  int have_view[PP_SIG_MAX_ARGS] = {0};
  PyObject *keep[PP_SIG_MAX_ARGS] = {NULL}; /* encoded strings */
  devbuf_error err;
  devbuf_error_clear(&err);
  PyObject *result = NULL;
  memset(outs, 0, sizeof outs);
  int in = 2;
  for (int k = 0; k < s.nargs; k++) {
    char l = s.letters[k];
    char what[160];
    avalues[k] = &vals[k];
    if (s.out[k]) {
      vals[k].p = &outs[k];
      continue;
    }
    if (l == 'e') {
      vals[k].p = &err;
      continue;
    }
    PyObject *o = PyTuple_GET_ITEM(args, in++);
    snprintf(what, sizeof what, "%s.%s() argument %d ('%c')", info.name, fname, in - 2, l);
    if (l == 's') {
      if (o == Py_None) {
        vals[k].s = NULL;
      } else if (PyUnicode_Check(o)) {
        keep[k] = PyUnicode_AsUTF8String(o);
        if (keep[k] == NULL) goto done;
      } else if (PyBytes_Check(o)) {
        keep[k] = Py_NewRef(o);
      } else {
        PyErr_Format(PyExc_TypeError, "%s: expected str, bytes or None, got %.100s", what,
                     Py_TYPE(o)->tp_name);
        goto done;
      }
      if (keep[k]) {
        if (strlen(PyBytes_AS_STRING(keep[k])) != (size_t)PyBytes_GET_SIZE(keep[k])) {
          PyErr_Format(PyExc_ValueError, "%s: embedded NUL byte", what);
          goto done;
        }
        vals[k].s = PyBytes_AS_STRING(keep[k]);
      }
      continue;
    }
    if (l == 'p' && o != Py_None && !PyIndex_Check(o) && PyObject_CheckBuffer(o)) {
      /* A buffer: its address, held for the call. Writable if it can be. */
      if (PyObject_GetBuffer(o, &views[k], PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(o, &views[k], PyBUF_SIMPLE) < 0) goto done;
      }
      have_view[k] = 1;
      vals[k].p = views[k].buf;
      continue;
    }
    if (from_py(o, l, &vals[k], what) < 0) goto done;
  }
  ffi_cif cif;
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, (unsigned)s.nargs, s.rtype, s.atypes) != FFI_OK) {
    PyErr_Format(PyExc_RuntimeError, "ffi_prep_cif failed for '%s'", e->signature);
    goto done;
  }
  union {
    ffi_arg a;
    ffi_sarg sa;
    float f;
    double d;
    void *p;
    uint64_t u;
  } rv;
  memset(&rv, 0, sizeof rv);
  void (*fn)(void) = e->fn;
  Py_BEGIN_ALLOW_THREADS
  ffi_call(&cif, fn, &rv, avalues);
  Py_END_ALLOW_THREADS
  /* The return value, narrowed from ffi_arg where libffi widened it. */
  pp_value r;
  memset(&r, 0, sizeof r);
  switch (s.ret) {
    case 'b': r.b = (int8_t)rv.sa; break;
    case 'B': r.B = (uint8_t)rv.a; break;
    case 'h': r.h = (int16_t)rv.sa; break;
    case 'H': r.H = (uint16_t)rv.a; break;
    case 'i': r.i = (int32_t)rv.sa; break;
    case 'I': r.I = (uint32_t)rv.a; break;
    case 'f': r.f = rv.f; break;
    case 'd': r.d = rv.d; break;
    case 'p': case 's': r.p = rv.p; break;
    case 'v': break;
    default: r.Q = rv.u; break;
  }
  if (s.status_form && r.i != DEVBUF_OK) {
    if (err.message[0] == '\0')
      snprintf(err.message, sizeof err.message, "%s.%s failed with %s (no message)", info.name,
               fname, devbuf_status_name(r.i));
    err.code = r.i;
    pp_raise(&err);
    goto done;
  }
  PyObject *retobj = s.ret == 'v' ? Py_NewRef(Py_None) : to_py(s.ret, &r);
  if (retobj == NULL) goto done;
  PyObject *outobjs[PP_SIG_MAX_ARGS];
  int no = 0, bad = 0;
  for (int k = 0; k < s.nargs; k++)
    if (s.out[k]) {
      outobjs[no] = to_py(s.letters[k], &outs[k]);
      if (outobjs[no] == NULL) bad = 1;
      no++;
    }
  if (!bad) result = pack_results(&s, retobj, outobjs);
  Py_DECREF(retobj);
  for (int j = 0; j < no; j++) Py_XDECREF(outobjs[j]);
done:
  for (int k = 0; k < s.nargs; k++) {
    if (have_view[k]) PyBuffer_Release(&views[k]);
    Py_XDECREF(keep[k]);
  }
  return result;
}

/* ---- Python-defined ext functions (C -> Python) ------------------------------------------ */

/* Write a Python value as the closure's return of letter `l`. */
static int write_ret(char l, PyObject *o, void *ret, const char *what) {
  pp_value v;
  if (l == 'v') return 0;
  if (from_py(o, l, &v, what) < 0) return -1;
  switch (l) {
    case 'b': *(ffi_sarg *)ret = v.b; break;
    case 'B': *(ffi_arg *)ret = v.B; break;
    case 'h': *(ffi_sarg *)ret = v.h; break;
    case 'H': *(ffi_arg *)ret = v.H; break;
    case 'i': *(ffi_sarg *)ret = v.i; break;
    case 'I': *(ffi_arg *)ret = v.I; break;
    case 'q': *(int64_t *)ret = v.q; break;
    case 'Q': *(uint64_t *)ret = v.Q; break;
    case 'n': *(ssize_t *)ret = v.n; break;
    case 'N': *(size_t *)ret = v.N; break;
    case 'f': *(float *)ret = v.f; break;
    case 'd': *(double *)ret = v.d; break;
    case 'p': *(void **)ret = v.p; break;
    default: break;
  }
  return 0;
}

static void write_zero(char l, void *ret) {
  if (l == 'v') return;
  if (l == 'f') *(float *)ret = 0.0f;
  else if (l == 'd') *(double *)ret = 0.0;
  else if (l == 'p' || l == 's') *(void **)ret = NULL;
  else *(ffi_sarg *)ret = 0;
}

void pp_ext_dead(PpClosure *c, void *ret, void **args) {
  const pp_sig *s = &c->sig;
  if (s->err_index >= 0) {
    devbuf_error *err = *(devbuf_error **)args[s->err_index];
    devbuf_error_set(err, DEVBUF_ECALLBACK, "%s: the Python interpreter is finalizing", c->name);
  }
  if (s->status_form) pp_ret_int(ret, DEVBUF_ECALLBACK);
  else write_zero(s->ret, ret);
}

void pp_ext_handler(PpClosure *c, void *ret, void **args) {
  const pp_sig *s = &c->sig;
  devbuf_error *err = s->err_index >= 0 ? *(devbuf_error **)args[s->err_index] : NULL;
  PyObject *pyargs = PyTuple_New(s->nin);
  PyObject *r = NULL;
  if (pyargs == NULL) goto fail;
  int in = 0;
  for (int k = 0; k < s->nargs; k++) {
    if (s->out[k] || s->letters[k] == 'e') continue;
    PyObject *o = to_py(s->letters[k], args[k]);
    if (o == NULL) goto fail;
    PyTuple_SET_ITEM(pyargs, in++, o);
  }
  r = PyObject_Call(c->callable, pyargs, NULL);
  Py_CLEAR(pyargs);
  if (r == NULL) goto fail;
  /* Unpack into (ret, outs) following pack_results' shapes. */
  int ret_counts = !(s->status_form || s->ret == 'v');
  int n = s->nout + ret_counts;
  PyObject *items[PP_SIG_MAX_ARGS + 1];
  if (n == 1) {
    items[0] = r;
  } else if (n > 1) {
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != n) {
      PyErr_Format(PyExc_TypeError, "%s must return a tuple of %d values, not %R", c->name, n, r);
      goto fail;
    }
    for (int j = 0; j < n; j++) items[j] = PyTuple_GET_ITEM(r, j);
  } else if (r != Py_None) {
    PyErr_Format(PyExc_TypeError, "%s must return None, not %.100s", c->name, Py_TYPE(r)->tp_name);
    goto fail;
  }
  /* Convert everything before writing anything. */
  pp_value outv[PP_SIG_MAX_ARGS];
  int j = ret_counts;
  for (int k = 0; k < s->nargs; k++) {
    if (!s->out[k]) continue;
    char what[96];
    snprintf(what, sizeof what, "%s: out-parameter %d", c->name, j - ret_counts + 1);
    if (from_py(items[j], s->letters[k], &outv[k], what) < 0) goto fail;
    j++;
  }
  char what[96];
  snprintf(what, sizeof what, "%s: return value", c->name);
  if (ret_counts && write_ret(s->ret, items[0], ret, what) < 0) goto fail;
  for (int k = 0; k < s->nargs; k++) {
    if (!s->out[k]) continue;
    void *dst = *(void **)args[k];
    if (dst != NULL) memcpy(dst, &outv[k], letter_size(s->letters[k]));
  }
  if (s->status_form) pp_ret_int(ret, DEVBUF_OK);
  Py_DECREF(r);
  return;
fail:
  Py_XDECREF(pyargs);
  Py_XDECREF(r);
  if (s->status_form || err != NULL) {
    int rc = pp_exception_to_error("python extension function", c->name, err);
    if (s->status_form) {
      pp_ret_int(ret, rc);
      return;
    }
  } else {
    /* No way to report it to C: say so the way ctypes does. */
    PyErr_WriteUnraisable(c->callable);
  }
  write_zero(s->ret, ret);
}
