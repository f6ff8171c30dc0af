/* copy_into.c: to_host(out=...) and copy_to(..., out=...), a copy into
 * memory the caller already has.
 *
 * Fresh pages cost more than the copy itself (a 64 MiB to_host() ran at
 * 1-3 GB/s against 15-17 GB/s for a warm np.copyto), so a caller that copies
 * repeatedly hands devbuf its own destination, as CuPy's get(out=) and
 * PyTorch's copy_() allow: a NumPy array, a devbuf.HostStaging from the
 * plugin, a bytearray, or another DeviceBuffer. The destination is asked
 * for a writable extended buffer; its size, layout, item type and device
 * must fit the source, or the error says which does not. */
#include "copies/copies.h"
#include "devbuf/dlpack.h"

#include <string.h>

/* The item types of two formats agree: the same DLPack dtype when both
 * have one ('l' and 'q' are both int64 here), else the same spelling. */
static int same_item(const char *a, const char *b) {
  DLDataType x, y;
  if (devbuf_dlpack_dtype_from_format(a, (size_t)-1, &x, NULL, NULL) == DEVBUF_OK &&
      devbuf_dlpack_dtype_from_format(b, (size_t)-1, &y, NULL, NULL) == DEVBUF_OK)
    return x.code == y.code && x.bits == y.bits && x.lanes == y.lanes;
  if (*a == '@') a++;
  if (*b == '@') b++;
  return strcmp(a, b) == 0;
}

/* A flat byte destination ('B' or no format, one dimension) takes any
 * source of its size: a staging buffer holds bytes, whatever they mean. */
static int is_flat_bytes(const Py_buffer *v) {
  const char *f = v->format;
  int bytes = f == NULL || strcmp(f, "B") == 0 || strcmp(f, "@B") == 0 || strcmp(f, "=B") == 0 ||
              strcmp(f, "<B") == 0 || strcmp(f, ">B") == 0;
  return bytes && v->itemsize == 1 && v->ndim <= 1;
}

static PyObject *shape_tuple(int ndim, const Py_ssize_t *shape) {
  return dbp_tuple_from_ssize(ndim, shape);
}

/* Check `ext` (the destination's export) against the source; 0 or -1. */
static int check_layout(const dbp_copy_src *s, const DevbufPy_buffer_ext *ext, PyObject *out,
                        const char *what) {
  const Py_buffer *v = &ext->view;
  if ((size_t)v->len != s->nbytes) {
    PyErr_Format(PyExc_ValueError, "%s: out (%.100s) has %zd bytes; the copy is %zu bytes", what,
                 Py_TYPE(out)->tp_name, v->len, s->nbytes);
    return -1;
  }
  if (!PyBuffer_IsContiguous(v, 'C')) {
    PyErr_Format(PyExc_ValueError,
                 "%s: out (%.100s) is not C-contiguous; devbuf writes C order into one block",
                 what, Py_TYPE(out)->tp_name);
    return -1;
  }
  if (is_flat_bytes(v)) return 0;
  int same_shape = v->ndim == s->ndim && v->itemsize == s->itemsize;
  for (int i = 0; same_shape && i < s->ndim; i++)
    same_shape = v->shape != NULL && v->shape[i] == s->shape[i];
  if (!same_shape) {
    PyObject *a = v->shape ? shape_tuple(v->ndim, v->shape) : NULL;
    PyObject *b = shape_tuple(s->ndim, s->shape);
    if (a != NULL || v->shape == NULL) {
      if (b != NULL)
        PyErr_Format(PyExc_ValueError,
                     "%s: out (%.100s) has shape %R of %zd-byte items; the source has shape %R "
                     "of %zd-byte items (or pass a flat byte buffer of %zu bytes)",
                     what, Py_TYPE(out)->tp_name, a ? a : Py_None, v->itemsize, b, s->itemsize,
                     s->nbytes);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
  }
  const char *of = v->format ? v->format : "B", *sf = s->format ? s->format : "B";
  if (!same_item(of, sf)) {
    PyErr_Format(PyExc_ValueError,
                 "%s: out (%.100s) holds items of format '%.100s', the source '%.100s': devbuf "
                 "copies bytes and does not convert (or pass a flat byte buffer)",
                 what, Py_TYPE(out)->tp_name, of, sf);
    return -1;
  }
  return 0;
}

/* Bytes [lo, hi) the source spans from s->ptr. */
static void source_span(const dbp_copy_src *s, Py_ssize_t *lo, Py_ssize_t *hi) {
  *lo = 0;
  *hi = (Py_ssize_t)s->nbytes;
  if (s->strides == NULL || s->nbytes == 0) return;
  *hi = s->itemsize;
  for (int i = 0; i < s->ndim; i++) {
    Py_ssize_t ext = (s->shape[i] - 1) * s->strides[i];
    if (ext < 0) *lo += ext;
    else *hi += ext;
  }
}

static int src_contiguous(const dbp_copy_src *s) {
  if (s->strides == NULL) return 1;
  Py_ssize_t expect = s->itemsize;
  for (int i = s->ndim - 1; i >= 0; i--) {
    if (s->shape[i] > 1 && s->strides[i] != expect) return 0;
    expect *= s->shape[i];
  }
  return 1;
}

/* Into device memory on `odev`, after the destination's own pending work
 * (`oevent`). Same device and a contiguous source: one device copy; else
 * through host memory. GIL held on entry; 0 or -1. */
static int copy_to_device(const dbp_copy_src *s, const devbuf_device *odev, void *oevent,
                          void *dst) {
  devbuf_error err;
  int rc = DEVBUF_OK;
  devbuf_error_clear(&err);
  if (s->nbytes == 0) return 0;
  int same = s->dev != NULL && s->dev->backend != NULL && s->dev->backend == odev->backend &&
             s->dev->ordinal == odev->ordinal;
  if (same) { /* one device's addresses: the two must not overlap either */
    Py_ssize_t lo, hi;
    source_span(s, &lo, &hi);
    uintptr_t a = (uintptr_t)s->ptr + (uintptr_t)lo, b = (uintptr_t)s->ptr + (uintptr_t)hi;
    uintptr_t o = (uintptr_t)dst, oe = o + (uintptr_t)s->nbytes;
    if (o < b && a < oe) {
      PyErr_SetString(PyExc_ValueError, "copy_to(out=...): out overlaps the source");
      return -1;
    }
  }
  if (same && src_contiguous(s)) {
    const devbuf_device *d = s->dev;
    const void *src = s->ptr;
    size_t n = s->nbytes;
    void *ev = s->event;
    Py_BEGIN_ALLOW_THREADS
    if (oevent) rc = devbuf_stream_wait_event(d, NULL, oevent, &err);
    if (rc == DEVBUF_OK && ev) rc = devbuf_stream_wait_event(d, NULL, ev, &err);
    if (rc == DEVBUF_OK) rc = devbuf_copy_d2d(d, dst, 0, src, 0, n, NULL, &err);
    if (rc == DEVBUF_OK) rc = devbuf_stream_synchronize(d, NULL, &err);
    Py_END_ALLOW_THREADS
    return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
  }
  if ((s->dev == NULL || s->dev->backend == NULL) && s->host_readable && src_contiguous(s)) {
    /* Contiguous host memory: uploaded from where it is, no host copy. */
    const void *src = s->ptr;
    size_t n = s->nbytes;
    Py_BEGIN_ALLOW_THREADS
    if (oevent) rc = devbuf_event_synchronize(odev, oevent, &err);
    if (rc == DEVBUF_OK) rc = devbuf_copy_from_host_sync(odev, dst, 0, src, n, &err);
    Py_END_ALLOW_THREADS
    return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
  }
  char *tmp = PyMem_RawMalloc(s->nbytes);
  if (tmp == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  if (dbp_download_into(s->dev, s->host_readable, s->ptr, s->ndim, s->shape, s->strides,
                        s->itemsize, s->event, tmp, s->nbytes) < 0) {
    PyMem_RawFree(tmp);
    return -1;
  }
  size_t n = s->nbytes;
  Py_BEGIN_ALLOW_THREADS
  if (oevent) rc = devbuf_event_synchronize(odev, oevent, &err);
  if (rc == DEVBUF_OK) rc = devbuf_copy_from_host_sync(odev, dst, 0, tmp, n, &err);
  Py_END_ALLOW_THREADS
  PyMem_RawFree(tmp);
  return rc == DEVBUF_OK ? 0 : dbp_fail(&err);
}

PyObject *dbp_copy_into(const dbp_copy_src *s, PyObject *out, DbpDevice *target, int any_device,
                        const char *what) {
  DevbufPy_buffer_ext ext;
  if (DevbufPy_GetBufferEx(out, &ext, PyBUF_RECORDS | PyBUF_DEVICE) < 0) {
    if (!PyObject_CheckBuffer(out)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "%s: out must be a writable buffer (a NumPy array, a bytearray, a "
                   "devbuf.HostStaging, a devbuf.DeviceBuffer), not %.100s",
                   what, Py_TYPE(out)->tp_name);
    } else {
      PyObject *t, *e, *tb;
      PyErr_Fetch(&t, &e, &tb);
      PyErr_NormalizeException(&t, &e, &tb);
      PyErr_Format(PyExc_BufferError, "%s: out (%.100s) refused a writable buffer: %S", what,
                   Py_TYPE(out)->tp_name, e ? e : Py_None);
      Py_XDECREF(t);
      Py_XDECREF(e);
      Py_XDECREF(tb);
    }
    return NULL;
  }
  PyObject *result = NULL;
  if (ext.view.readonly) { /* the writable request answered read-only */
    PyErr_Format(PyExc_BufferError, "%s: out (%.100s) is read-only", what, Py_TYPE(out)->tp_name);
    goto done;
  }
  int is_dev = DevbufPy_BufferIsDevice(&ext);
  devbuf_device odev;
  devbuf_device_info_desc desc;
  memset(&desc, 0, sizeof desc);
  if (is_dev) {
    devbuf_error err;
    devbuf_error_clear(&err);
    desc.struct_size = sizeof desc;
    if (devbuf_device_info_import(ext.device, ext.device_info, &desc, &odev, &err) != DEVBUF_OK) {
      devbuf_error_prefix(&err, "out's device_info");
      dbp_fail(&err);
      goto done;
    }
  }
  if (!any_device) {
    int want_dev = target != NULL && !target->is_host;
    int match = want_dev ? is_dev && odev.backend == target->dev.backend &&
                               odev.ordinal == target->dev.ordinal
                         : !is_dev;
    if (!match) {
      char where[96];
      if (is_dev) snprintf(where, sizeof where, "%s:%d", ext.device, (int)odev.ordinal);
      else snprintf(where, sizeof where, "host");
      if (want_dev)
        PyErr_Format(PyExc_ValueError,
                     "%s: device mismatch: out (%.100s) is %s memory, the copy goes to %U", what,
                     Py_TYPE(out)->tp_name, where, target->spec);
      else
        PyErr_Format(PyExc_ValueError,
                     "%s: device mismatch: out (%.100s) is %s memory, the copy goes to the host "
                     "(copy_to(device, out=...) writes device memory)",
                     what, Py_TYPE(out)->tp_name, where);
      goto done;
    }
  }
  if (check_layout(s, &ext, out, what) < 0) goto done;
  if (!is_dev) {
    /* Host into host: the two must not overlap (memcpy). */
    if (s->host_readable || s->dev == NULL || s->dev->backend == NULL) {
      Py_ssize_t lo, hi;
      source_span(s, &lo, &hi);
      uintptr_t a = (uintptr_t)s->ptr + (uintptr_t)lo, b = (uintptr_t)s->ptr + (uintptr_t)hi;
      uintptr_t o = (uintptr_t)ext.view.buf, oe = o + (uintptr_t)ext.view.len;
      if (s->nbytes > 0 && o < b && a < oe) {
        PyErr_Format(PyExc_ValueError, "%s: out (%.100s) overlaps the source", what,
                     Py_TYPE(out)->tp_name);
        goto done;
      }
    }
    int device_src = !s->host_readable && s->dev != NULL && s->dev->backend != NULL;
    if (device_src && src_contiguous(s) && s->nbytes > 0) {
      /* On the device's default stream, where devbuf orders a buffer's work
       * anyway: a fresh stream per copy (devbuf_copy_to_host_sync) costs a
       * worker thread on devbuf.sim, more than the copy of 1 MiB. */
      devbuf_error err;
      int rc = DEVBUF_OK;
      const devbuf_device *d = s->dev;
      const void *src = s->ptr;
      void *dst = ext.view.buf, *ev = s->event;
      size_t n = s->nbytes;
      devbuf_error_clear(&err);
      Py_BEGIN_ALLOW_THREADS
      if (ev) rc = devbuf_stream_wait_event(d, NULL, ev, &err);
      if (rc == DEVBUF_OK) rc = devbuf_copy_d2h(d, dst, src, 0, n, NULL, &err);
      int rc2 = devbuf_stream_synchronize(d, NULL, rc == DEVBUF_OK ? &err : NULL);
      if (rc == DEVBUF_OK) rc = rc2;
      Py_END_ALLOW_THREADS
      if (rc != DEVBUF_OK) {
        dbp_fail(&err);
        goto done;
      }
    } else if (dbp_download_into(s->dev, s->host_readable, s->ptr, s->ndim, s->shape, s->strides,
                                 s->itemsize, s->event, ext.view.buf, s->nbytes) < 0) {
      goto done;
    }
  } else if (copy_to_device(s, &odev, desc.event, ext.view.buf) < 0) {
    goto done;
  }
  result = Py_NewRef(out);
done:
  DevbufPy_BufferRelease(&ext);
  return result;
}

/* (*, out=None) of to_host(); *out NULL when absent. 0 or -1. */
int dbp_parse_out_kw(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, Py_ssize_t npos, PyObject **pos, PyObject **out) {
  *out = NULL;
  if (nargs > npos) {
    PyErr_Format(PyExc_TypeError, "%s() takes %zd positional argument%s (%zd given)", fname,
                 npos, npos == 1 ? "" : "s", nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) pos[i] = args[i];
  Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nk; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(k, "out") == 0) {
      *out = args[nargs + i];
    } else if (npos > 0 && nargs == 0 && PyUnicode_CompareWithASCIIString(k, "device") == 0) {
      pos[0] = args[nargs + i];
    } else {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, k);
      return -1;
    }
  }
  if (*out == Py_None) *out = NULL;
  return 0;
}
