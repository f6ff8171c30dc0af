/* helpers.c: small layout helpers every layer uses (base/dbp.h): C-order
 * strides of a shape, a tuple of Py_ssize_t values. Calls only CPython. */
#include "base/dbp.h"

Py_ssize_t dbp_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize,
                         Py_ssize_t *strides) {
  Py_ssize_t items = 1, stride = itemsize;
  for (int i = ndim - 1; i >= 0; i--) {
    if (strides) strides[i] = stride;
    if (shape[i] != 0 && items > PY_SSIZE_T_MAX / shape[i]) return -1;
    items *= shape[i];
    if (shape[i] != 0 && stride > PY_SSIZE_T_MAX / shape[i]) return -1;
    /* As CPython's init_strides_from_shape: a zero dimension zeroes every
     * stride outside it ((7, 0, 7) 'h' -> (0, 14, 2)), so that
     * _testbuffer.cmp_contig and friends see the same array. */
    stride *= shape[i];
  }
  return items;
}

PyObject *dbp_tuple_from_ssize(int n, const Py_ssize_t *v) {
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *x = PyLong_FromSsize_t(v[i]);
    if (x == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

