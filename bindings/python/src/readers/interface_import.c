/* interface_import.c: the CUDA Array Interface and array interface reader.
 *
 * The producer's dict (v3 for CAI) is validated as DLPack would be, through
 * the same libdevbuf description, into the one import description (desc.h),
 * which holds a reference to the producer. A CAI stream becomes an event
 * every reader waits on. NumPy's time types and ml_dtypes' types, which the
 * typestr cannot name, get their devbuf format. See docs/interop.md. */
#include "readers/readers.h"

#include <string.h>


static int typestr_to_format(PyObject *ts, char *fmt, size_t cap) {
  Py_ssize_t slen = 0;
  const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8AndSize(ts, &slen) : NULL;
  if (s == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "typestr must be a str");
    return -1;
  }
  if ((size_t)slen != strlen(s)) {
    PyErr_SetString(PyExc_BufferError, "typestr contains a NUL character");
    return -1;
  }
  const uint16_t one = 1;
  char native = *(const unsigned char *)&one == 1 ? '<' : '>';
  char order = s[0], kind = s[0] ? s[1] : 0;
  char *end = NULL;
  long size = (s[0] && s[1]) ? strtol(s + 2, &end, 10) : 0;
  /* The whole string: "<f4junk" or "<f 4" is not "<f4". */
  /* Only for the kinds devbuf maps: '<M8[ns]' keeps its "no devbuf format". */
  if (kind != '\0' && strchr("iufcb", kind) != NULL &&
      (end == NULL || end == s + 2 || *end != '\0' || s[2] < '0' || s[2] > '9')) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' is malformed: expected a byte order, a kind and a size in "
                 "digits, nothing else (e.g. '<f4')",
                 s);
    return -1;
  }
  const char *code = NULL;
  if (order == '<' || order == '>' || order == '|' || order == '=') {
    switch (kind) {
      case 'i': code = size == 1 ? "b" : size == 2 ? "h" : size == 4 ? "i" : size == 8 ? "q" : NULL; break;
      case 'u': code = size == 1 ? "B" : size == 2 ? "H" : size == 4 ? "I" : size == 8 ? "Q" : NULL; break;
      case 'f': code = size == 2 ? "e" : size == 4 ? "f" : size == 8 ? "d" : NULL; break;
      case 'c': code = size == 8 ? "Zf" : size == 16 ? "Zd" : NULL; break;
      case 'b': code = size == 1 ? "?" : NULL; break;
      default: break;
    }
  }
  if (code != NULL && size > 1 && order != native && order != '=' && order != '|') {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not in native byte order", s);
    return -1;
  }
  if (code == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' has no devbuf format (structured, custom or unknown dtypes are "
                 "not read from an array interface: use DLPack or the buffer protocol)",
                 s);
    return -1;
  }
  snprintf(fmt, cap, "%s", code);
  return 0;
}

/* NumPy's datetime64 / timedelta64 typestr ('<M8[D]', '<m8[10s]') as
 * devbuf's "[devbuf$datetime64(D)]" / "[devbuf$timedelta64(10s)]": 8-byte
 * signed counts of the unit since the epoch, NaT the smallest int64. Any
 * unit NumPy has, multiples included; the format engine checks the unit
 * when the ForeignArray is described. 1 if mapped, 0 if not a time kind,
 * -1 with BufferError. */
static int time_format(PyObject *ts, char *fmt, size_t cap) {
  const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8(ts) : NULL;
  if (s == NULL) {
    PyErr_Clear();
    return 0; /* typestr_to_format says what is wrong with it */
  }
  if (s[0] == '\0' || (s[1] != 'M' && s[1] != 'm')) return 0;
  const char *base = s[1] == 'M' ? "datetime64" : "timedelta64";
  const uint16_t one = 1;
  char native = *(const unsigned char *)&one == 1 ? '<' : '>';
  size_t n = strlen(s);
  if (s[2] != '8' || (s[3] != '\0' && s[3] != '[') || (s[3] == '[' && s[n - 1] != ']')) {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not a NumPy %s typestr (e.g. '<%c8[ns]')", s,
                 base, s[1]);
    return -1;
  }
  if (s[3] == '\0' || n == 5) {
    PyErr_Format(PyExc_BufferError,
                 "typestr '%s' is a %s without a unit (NumPy's generic unit): give the array "
                 "one first, e.g. .astype('%c8[s]')",
                 s, base, s[1]);
    return -1;
  }
  if (s[0] != native && s[0] != '=' && s[0] != '|') {
    PyErr_Format(PyExc_BufferError, "typestr '%s' is not in native byte order", s);
    return -1;
  }
  if ((size_t)snprintf(fmt, cap, "[devbuf$%s(%.*s)]", base, (int)(n - 5), s + 4) >= cap) {
    PyErr_Format(PyExc_BufferError, "typestr '%s' has a unit too long for a devbuf format", s);
    return -1;
  }
  return 1;
}

/* getattr(o, name, None) as a new reference; NULL with an exception only
 * for errors other than AttributeError. *out NULL when absent. */
static int optional_attr(PyObject *o, const char *name, PyObject **out) {
  *out = PyObject_GetAttrString(o, name);
  if (*out != NULL) return 0;
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
  PyErr_Clear();
  return 0;
}

/* An ml_dtypes NumPy array says only "<V2" in its array interface, but its
 * dtype names the type exactly, with the names devbuf's builtin namespace
 * uses: "[devbuf$NAME]". 1 if mapped, 0 if not an ml_dtypes dtype, -1 on
 * error. */
static int ml_dtypes_format(PyObject *obj, char *fmt, size_t cap) {
  static const char *const names[] = {
      "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
      "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
      "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2", "int1", "uint1",
      "complex32", "bcomplex32"};
  int found = 0, rc = -1;
  PyObject *dtype = NULL, *type = NULL, *mod = NULL, *name = NULL;
  if (optional_attr(obj, "dtype", &dtype) < 0) goto out;
  if (dtype == NULL || optional_attr(dtype, "type", &type) < 0) goto done;
  if (type == NULL || optional_attr(type, "__module__", &mod) < 0) goto done;
  const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
  if (m == NULL || strncmp(m, "ml_dtypes", 9) != 0) goto done;
  if (optional_attr(dtype, "name", &name) < 0) goto out;
  const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  for (size_t i = 0; n && i < sizeof names / sizeof names[0]; i++)
    if (strcmp(n, names[i]) == 0) {
      snprintf(fmt, cap, "[devbuf$%s]", n);
      found = 1;
    }
  /* A newer ml_dtypes type: refused by its name, not as the anonymous
   * '<V2' its typestr says (which would also fit a wrong same-sized type). */
  if (!found && n != NULL) {
    PyErr_Format(PyExc_BufferError,
                 "ml_dtypes type '%s' is not one devbuf maps (it maps bfloat16, float8_*, "
                 "float6_*, float4_e2m1fn, int4/2/1, uint4/2/1, complex32, bcomplex32): a newer "
                 "ml_dtypes than this devbuf",
                 n);
    goto out;
  }
done:
  rc = found;
  if (PyErr_Occurred()) rc = -1;
out:
  Py_XDECREF(dtype);
  Py_XDECREF(type);
  Py_XDECREF(mod);
  Py_XDECREF(name);
  return rc;
}

/* The owner of an array interface whose 'data' is a buffer object: the
 * memoryview that keeps it alive. */
static void release_held(void *m) { Py_DECREF((PyObject *)m); }

static dbp_desc *dbp_interface_read(PyObject *obj, PyObject *d, int cuda, const char *what,
                                    PyObject *shape, PyObject *typestr, PyObject *data,
                                    const Py_buffer *buf, PyObject *strides, PyObject *offset,
                                    PyObject *stream);

dbp_desc *dbp_interface_import(PyObject *obj, PyObject *d, int cuda) {
  const char *what = cuda ? "__cuda_array_interface__" : "__array_interface__";
  if (!PyDict_Check(d)) {
    PyErr_Format(PyExc_TypeError, "%s must be a dict", what);
    return NULL;
  }
  PyObject *shape = PyDict_GetItemString(d, "shape"), *typestr = PyDict_GetItemString(d, "typestr");
  PyObject *data = PyDict_GetItemString(d, "data"), *strides = PyDict_GetItemString(d, "strides");
  PyObject *mask = PyDict_GetItemString(d, "mask"), *version = PyDict_GetItemString(d, "version");
  PyObject *offset = PyDict_GetItemString(d, "offset");
  PyObject *stream = cuda ? PyDict_GetItemString(d, "stream") : NULL;
  if (shape == NULL || typestr == NULL || data == NULL || !PyTuple_Check(shape)) {
    PyErr_Format(PyExc_BufferError, "%s needs 'shape' (tuple), 'typestr' and 'data'", what);
    return NULL;
  }
  if (version != NULL && PyLong_Check(version) && PyLong_AsLong(version) > 3) {
    PyErr_Format(PyExc_BufferError, "%s version %ld is newer than 3", what, PyLong_AsLong(version));
    return NULL;
  }
  if (mask != NULL && mask != Py_None) {
    PyErr_Format(PyExc_BufferError, "%s with a mask is not supported", what);
    return NULL;
  }
  /* The array interface (not CUDA's) also takes an object exposing the
   * buffer protocol as 'data' (Pillow gives bytes): its export is held by
   * the description (`held`, a memoryview), so the pointer outlives it. */
  PyObject *held = NULL;
  if (!cuda && !PyTuple_Check(data) && PyObject_CheckBuffer(data)) {
    held = PyMemoryView_FromObject(data);
    if (held == NULL) return NULL;
    if (!PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(held), 'C')) {
      Py_DECREF(held);
      PyErr_Format(PyExc_BufferError, "%s 'data' (%.100s) is not a contiguous buffer", what,
                   Py_TYPE(data)->tp_name);
      return NULL;
    }
  } else if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) {
    PyErr_Format(PyExc_BufferError,
                 cuda ? "%s 'data' must be a (pointer, read_only) tuple"
                      : "%s 'data' must be a (pointer, read_only) tuple or a buffer",
                 what);
    return NULL;
  }
  dbp_desc *f = dbp_interface_read(obj, d, cuda, what, shape, typestr, held ? NULL : data,
                                   held ? PyMemoryView_GET_BUFFER(held) : NULL, strides, offset,
                                   stream);
  if (f == NULL) {
    Py_XDECREF(held);
    return NULL;
  }
  if (held != NULL) {
    f->managed = held; /* released with the description (desc.c), by its own release */
    f->release_owner = release_held;
  }
  return f;
}

/* The rest of dbp_interface_import: `data` is the (pointer, read_only)
 * tuple, or NULL with `buf` the buffer that holds the items. */
static dbp_desc *dbp_interface_read(PyObject *obj, PyObject *d, int cuda, const char *what,
                                    PyObject *shape, PyObject *typestr, PyObject *data,
                                    const Py_buffer *buf, PyObject *strides, PyObject *offset,
                                    PyObject *stream) {
  (void)d;
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  if (nd > DEVBUF_DLPACK_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "%s has %zd dimensions; at most %d", what, nd,
                 DEVBUF_DLPACK_MAX_NDIM);
    return NULL;
  }
  char fmt[64], time_fmt[DEVBUF_DLPACK_FORMAT_MAX];
  int ml = ml_dtypes_format(obj, fmt, sizeof fmt);
  if (ml < 0) return NULL;
  int tm = ml == 0 ? time_format(typestr, time_fmt, sizeof time_fmt) : 0;
  if (tm < 0) return NULL;
  /* A time type is stored as int64: described as one, then given its format. */
  if (tm) snprintf(fmt, sizeof fmt, "q");
  if (ml == 0 && !tm && typestr_to_format(typestr, fmt, sizeof fmt) < 0) return NULL;
  DLTensor t;
  memset(&t, 0, sizeof t);
  devbuf_error err;
  devbuf_error_clear(&err);
  int padded = 0;
  if (devbuf_dlpack_dtype_from_format(fmt, (size_t)-1, &t.dtype, &padded, &err) != DEVBUF_OK) {
    dbp_buffer_error(&err);
    return NULL;
  }
  /* ml_dtypes keeps sub-byte types one per byte: DLPack's padded form. */
  int64_t itemsize = padded ? (int64_t)t.dtype.lanes : (int64_t)(t.dtype.bits / 8) * t.dtype.lanes;
  /* PyLong_AsVoidPtr takes negative ints and reinterprets them as high
   * addresses; an address is never negative. */
  PyObject *ptr_obj = data ? PyTuple_GET_ITEM(data, 0) : NULL;
  if (buf != NULL) {
    t.data = buf->buf;
  } else if (!PyLong_Check(ptr_obj)) {
    PyErr_Format(PyExc_BufferError, "%s 'data' pointer must be an int, not %.100s", what,
                 Py_TYPE(ptr_obj)->tp_name);
    return NULL;
  } else if (dbp_compat_LongSign(ptr_obj) < 0) {
    PyErr_Format(PyExc_BufferError, "%s 'data' pointer %R is negative", what, ptr_obj);
    return NULL;
  } else {
    t.data = PyLong_AsVoidPtr(ptr_obj);
    if (t.data == NULL && PyErr_Occurred()) return NULL;
  }
  int ro = buf != NULL ? buf->readonly : PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
  if (ro < 0) return NULL;
  t.device.device_type = cuda ? kDLCUDA : kDLCPU;
  t.device.device_id = 0; /* CAI has no device field: see docs/interop.md */
  t.ndim = (int32_t)nd;
  int64_t sh[DEVBUF_DLPACK_MAX_NDIM], st[DEVBUF_DLPACK_MAX_NDIM];
  for (Py_ssize_t i = 0; i < nd; i++) {
    /* As NumPy: a bool is not a dimension (True would read as 1). */
    if (PyBool_Check(PyTuple_GET_ITEM(shape, i))) {
      PyErr_Format(PyExc_TypeError, "%s 'shape'[%zd] must be an int, not bool", what, i);
      return NULL;
    }
    sh[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (sh[i] == -1 && PyErr_Occurred()) return NULL;
  }
  t.shape = sh;
  if (strides != NULL && strides != Py_None) {
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != nd) {
      PyErr_Format(PyExc_BufferError, "%s 'strides' must be None or a tuple of %zd ints", what, nd);
      return NULL;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
      /* As for 'shape': a bool is not a stride (True would read as 1 byte). */
      if (PyBool_Check(PyTuple_GET_ITEM(strides, i))) {
        PyErr_Format(PyExc_TypeError, "%s 'strides'[%zd] must be an int, not bool", what, i);
        return NULL;
      }
      long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
      if (b == -1 && PyErr_Occurred()) return NULL;
      if (b % itemsize != 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s stride[%zd] = %lld bytes is not a multiple of the item size %lld",
                     what, i, b, (long long)itemsize);
        return NULL;
      }
      st[i] = b / itemsize;
    }
    t.strides = st;
  }
  if (offset != NULL && offset != Py_None) {
    long long o = PyLong_AsLongLong(offset);
    if (o == -1 && PyErr_Occurred()) return NULL;
    if (o < 0) {
      PyErr_Format(PyExc_BufferError, "%s 'offset' is negative", what);
      return NULL;
    }
    t.byte_offset = (uint64_t)o;
  }
  if (buf != NULL) {
    /* The items must lie inside the 'data' buffer, whose size is known. */
    int64_t lo = (int64_t)t.byte_offset, hi = lo + itemsize, n = 1;
    for (int i = 0; i < t.ndim; i++) {
      int64_t s = (t.strides ? t.strides[i] : 0) * itemsize;
      n *= sh[i];
      if (sh[i] > 0 && s > 0) hi += s * (sh[i] - 1);
      if (sh[i] > 0 && s < 0) lo += s * (sh[i] - 1);
    }
    if (t.strides == NULL) hi = lo + n * itemsize;
    if (n > 0 && (lo < 0 || hi > (int64_t)buf->len)) {
      PyErr_Format(PyExc_BufferError,
                   "%s describes bytes %lld to %lld of its 'data' buffer, which holds %zd",
                   what, (long long)lo, (long long)hi, buf->len);
      return NULL;
    }
  }
  dbp_desc *f = dbp_desc_new(cuda ? DBP_DESC_CAI : DBP_DESC_ARRAY_INTERFACE, obj);
  if (f == NULL) return NULL;
  DLPackVersion none = {0, 0};
  uint64_t dlf = (ro ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                 (padded ? DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED : 0);
  if (dbp_desc_describe(f, &t, dlf, none) < 0) {
    dbp_desc_free(f);
    return NULL;
  }
  dbp_desc_own_tensor(f); /* `t` and its arrays are on this stack */
  if (tm) {
    /* Checked as any format (the unit by devbuf's namespace, 8 bytes). */
    memcpy(f->desc.format, time_fmt, sizeof time_fmt);
    f->format_only = 1;
    if (dbp_desc_check(&f->desc, what) < 0) {
      dbp_desc_free(f);
      return NULL;
    }
  }
  if (stream != NULL && stream != Py_None) {
    /* CAI v3: the data is produced on `stream`; the consumer must wait for
     * it. 0 is disallowed, 1 is the legacy and 2 the per-thread default. */
    long long s = PyLong_AsLongLong(stream);
    if (s == -1 && PyErr_Occurred()) {
      dbp_desc_free(f);
      return NULL;
    }
    if (s == 0) {
      PyErr_SetString(PyExc_BufferError,
                      "__cuda_array_interface__ stream 0 is disallowed by CAI v3 (ambiguous)");
      dbp_desc_free(f);
      return NULL;
    }
    if (dbp_desc_record(f, s == 1 ? NULL : (void *)(uintptr_t)s, "__cuda_array_interface__") < 0) {
      dbp_desc_free(f);
      return NULL;
    }
  }
  return f;
}

