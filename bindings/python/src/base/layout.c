/* layout.c: the one layout invariant, checked where objects are made.
 *
 * Everything devbuf hands out (DeviceBuffer, DeviceView, ForeignArray, their
 * exports) must describe no more memory than it holds, or a consumer that
 * sizes items by the format (memoryview.tolist, NumPy, a 0-d DLPack export)
 * reads and writes past the allocation. dbp_layout_check is the single
 * place that says so; every constructor and reconstructor calls it, and
 * debug/sanitizer builds call it on every export too (DBP_CHECK_EXPORTS). */
#include "base/dbp.h"

#include <string.h>

#include "devbuf/format.h"

/* Item size of the common one-code native formats, without a parse: the
 * check runs on every devbuf.view(), which is a hot path. 0: not one of them. */
static inline Py_ssize_t simple_itemsize(const char *f) {
  if (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '>' || f[0] == '!') {
    /* standard sizes for the explicit byte orders; '@' is native = same here */
    f++;
  }
  if (f[0] == 'Z' && (f[1] == 'f' || f[1] == 'd') && f[2] == '\0') return f[1] == 'f' ? 8 : 16;
  if (f[0] == '\0' || f[1] != '\0') return 0;
  switch (f[0]) {
    case 'b': case 'B': case 'c': case '?': case 'x': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': return 8;
    default: return 0; /* l, n, P, O, ...: native-size codes go through the engine */
  }
}

/* Does `itemsize` agree with `fmt` (one that simple_itemsize does not size:
 * the caller tries that first)? *size gets what the format says (C
 * layout rules); *pointers whether it holds object or pointer items.
 * Returns 1 when it agrees (under C, struct-module or NumPy layout rules:
 * producers follow each of them), 0 when not, 2 when the format names a
 * custom dtype this process does not know (nothing to compare against), -1
 * with FormatError when it does not parse. */
static int format_agrees(const char *fmt, Py_ssize_t itemsize, Py_ssize_t *size, int *pointers) {
  *pointers = 0;
  size_t len = strlen(fmt);
  static const uint32_t modes[3] = {DEVBUF_FORMAT_DEFAULT, DEVBUF_FORMAT_STRUCT,
                                    DEVBUF_FORMAT_NUMPY};
  for (int m = 0; m < 3; m++) {
    devbuf_format f = DEVBUF_FORMAT_INIT;
    devbuf_error err;
    devbuf_error_clear(&err);
    int rc = devbuf_format_parse(fmt, len, modes[m] | DEVBUF_FORMAT_ALLOW_UNKNOWN, &f, &err);
    uint64_t got = f.itemsize;
    uint32_t info = f.info;
    size_t off = (size_t)f.error_offset;
    devbuf_format_release(&f);
    if (rc != DEVBUF_OK) {
      if (m > 0) continue; /* the other rules are only second opinions */
      devbuf_error_prefix(&err, "format");
      dbp_raise_format(fmt, len, off, &err);
      return -1;
    }
    if (m == 0) {
      *pointers = (info & DEVBUF_FORMAT_HAS_POINTERS) != 0;
      if (info & DEVBUF_FORMAT_HAS_UNKNOWN) return 2;
      *size = got > (uint64_t)PY_SSIZE_T_MAX ? -1 : (Py_ssize_t)got;
    }
    if (!(info & DEVBUF_FORMAT_HAS_UNKNOWN) && got == (uint64_t)itemsize) return 1;
  }
  return 0;
}

int dbp_layout_check(const char *what, const char *format, Py_ssize_t itemsize, int ndim,
                     const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t len,
                     Py_ssize_t owned, unsigned flags) {
  PyObject *exc = (flags & DBP_LAYOUT_BUFFER_ERROR) ? PyExc_BufferError : PyExc_ValueError;
  const char *fmt = format ? format : "B";
  if (itemsize < 1) {
    PyErr_Format(exc, "%s: itemsize %zd is not positive (format '%.200s')", what, itemsize, fmt);
    return -1;
  }
  if (ndim < 0 || ndim > PyBUF_MAX_NDIM) {
    PyErr_Format(exc, "%s: ndim %d is out of range (0..%d)", what, ndim, PyBUF_MAX_NDIM);
    return -1;
  }
  /* The common one-code formats are sized here (no call); the rest by the
   * format engine. */
  Py_ssize_t fsize = simple_itemsize(fmt);
  int pointers = 0;
  int rc = fsize > 0 ? fsize == itemsize : format_agrees(fmt, itemsize, &fsize, &pointers);
  if (rc < 0) {
    /* FormatError already names the byte; add where it came from. */
    if (flags & DBP_LAYOUT_BUFFER_ERROR) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      PyErr_Format(PyExc_BufferError, "%s: format '%.200s' cannot be parsed: %S", what, fmt,
                   v ? v : Py_None);
      Py_XDECREF(t);
      Py_XDECREF(v);
      Py_XDECREF(tb);
    }
    return -1;
  }
  if (pointers && (flags & DBP_LAYOUT_OWN)) {
    PyErr_Format(exc,
                 "%s: format '%.200s' holds object or pointer items ('O', 'P', '&', 'X'); devbuf "
                 "refuses them in memory it allocates or rebuilds, because bytes copied or left "
                 "uninitialised there are not valid objects or pointers in this process",
                 what, fmt);
    return -1;
  }
  /* A foreign producer's items may be smaller than its itemsize (ctypes
   * exports a padded struct as 'T{<i:a:<c:b:}' with itemsize 8, and
   * memoryview takes it): reading by the format then stays inside each
   * item. Larger items never pass, and devbuf's own memory must agree. */
  /* A producer that gave no format said 'B' (PEP 3118): its items are
   * bytes, and an itemsize of 4 is a contradiction, not padding. */
  if (rc == 0 && !(flags & DBP_LAYOUT_OWN) && fsize > 0 && fsize < itemsize && format != NULL)
    rc = 1;
  if (rc == 0) {
    PyErr_Format(exc, "%s: itemsize %zd does not match format '%.200s'%s, whose items are %zd bytes",
                 what, itemsize, fmt, format ? "" : " (no format given, which means 'B')", fsize);
    return -1;
  }
  Py_ssize_t items = 1;
  int empty = 0;
  for (int i = 0; shape != NULL && i < ndim; i++) {
    if (shape[i] < 0) {
      PyErr_Format(exc, "%s: shape[%d] is negative (%zd)", what, i, shape[i]);
      return -1;
    }
    /* Overflow tests by multiplication, not division: the same answers
     * (items > MAX / n exactly when items * n > MAX, for n > 0), without a
     * 64-bit divide per dimension on every view. */
    Py_ssize_t prod;
    if (shape[i] == 0) empty = 1;
    else if (__builtin_mul_overflow(items, shape[i], &prod)) {
      PyErr_Format(exc, "%s: shape overflows Py_ssize_t at shape[%d]", what, i);
      return -1;
    } else if (!empty) items = prod;
  }
  if (empty) items = 0;
  if (shape == NULL && ndim == 1) items = len >= 0 ? len / itemsize : 0; /* flat export */
  Py_ssize_t need;
  if (__builtin_mul_overflow(items, itemsize, &need)) {
    PyErr_Format(exc, "%s: shape * itemsize overflows Py_ssize_t", what);
    return -1;
  }
  if (len >= 0 && len != need) {
    PyErr_Format(exc, "%s: nbytes/len %zd does not match shape and itemsize (%zd items of %zd bytes)",
                 what, len, items, itemsize);
    return -1;
  }
  if (owned >= 0 && need > owned) {
    PyErr_Format(exc, "%s: nbytes %zd is more than the %zd bytes of memory it holds", what, need,
                 owned);
    return -1;
  }
  if (strides != NULL && shape != NULL && !empty) {
    /* The lowest and highest byte an item touches: computed without
     * overflow for every layout (copies and gathers do this arithmetic),
     * and inside [0, owned) when the memory's size is known. */
    Py_ssize_t lo = 0, hi = itemsize;
    if (itemsize > PY_SSIZE_T_MAX / 2) {
      PyErr_Format(exc, "%s: itemsize %zd is too large to stride over", what, itemsize);
      return -1;
    }
    for (int i = 0; i < ndim; i++) {
      Py_ssize_t n = shape[i] - 1, s = strides[i], ext, mag;
      /* |s| > (MAX / 2) / n exactly when |s| * n > MAX / 2 (n > 0). */
      if (s != 0 && n > 0 &&
          (s == PY_SSIZE_T_MIN || __builtin_mul_overflow(s < 0 ? -s : s, n, &mag) ||
           mag > PY_SSIZE_T_MAX / 2)) {
        PyErr_Format(exc, "%s: strides[%d] = %zd overflows over shape[%d] = %zd", what, i, s, i,
                     shape[i]);
        return -1;
      }
      ext = n * s;
      if (ext < 0) lo += ext;
      else hi += ext;
      if (lo < -PY_SSIZE_T_MAX / 2 || hi > PY_SSIZE_T_MAX / 2) {
        PyErr_Format(exc, "%s: strides span more than Py_ssize_t can count", what);
        return -1;
      }
    }
    if (owned >= 0 && (lo < 0 || hi > owned)) {
      PyErr_Format(exc, "%s: strides reach bytes [%zd, %zd) outside the %zd bytes it holds", what,
                   lo, hi, owned);
      return -1;
    }
  }
  return 0;
}

int dbp_layout_check_view(const char *what, const Py_buffer *b, Py_ssize_t owned,
                          unsigned flags) {
  return dbp_layout_check(what, b->format, b->itemsize, b->ndim, b->shape, b->strides, b->len,
                          owned, flags);
}

int dbp_refuse_flat_format(const char *what, const char *format, int flags) {
  if (!(flags & PyBUF_FORMAT) || (flags & PyBUF_ND)) return 0;
  PyErr_Format(PyExc_BufferError,
               "%s: PyBUF_FORMAT without PyBUF_ND is refused, as memoryview refuses it: a flat "
               "export is bytes and cannot carry the item format '%.100s'; request PyBUF_ND "
               "too, or drop PyBUF_FORMAT",
               what, format ? format : "B");
  return -1;
}
