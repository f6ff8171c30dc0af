/* download.c: device (or host) memory described by a layout, copied into C-ordered
 * host memory (copies/copies.h: dbp_download_into), honouring the source's event:
 * contiguous spans in one copy, sparse views run by run, strided ones gathered on
 * the host. Calls base only. */
#include "copies/copies.h"

#include <string.h>

/* Gather a strided array into C order. */
static void gather(char *dst, const char *src, int ndim, const Py_ssize_t *shape,
                   const Py_ssize_t *strides, Py_ssize_t itemsize, char **out) {
  if (ndim == 0) {
    memcpy(*out, src, (size_t)itemsize);
    *out += itemsize;
    return;
  }
  for (Py_ssize_t i = 0; i < shape[0]; i++)
    gather(dst, src + i * strides[0], ndim - 1, shape + 1, strides + 1, itemsize, out);
}

/* Copy a strided device array into C order one contiguous run at a time:
 * only the bytes the view holds cross, however far apart they lie. The
 * innermost dimensions that are contiguous form one run. GIL released. */
static int copy_runs_at(const devbuf_device *dev, const char *src, int ndim, int inner,
                        const Py_ssize_t *shape, const Py_ssize_t *strides, size_t run,
                        void *event, char **out, devbuf_error *err) {
  if (ndim == inner) {
    int rc = devbuf_copy_to_host_sync(dev, *out, src, 0, run, event, err);
    *out += run;
    return rc;
  }
  for (Py_ssize_t i = 0; i < shape[0]; i++) {
    int rc = copy_runs_at(dev, src + i * strides[0], ndim - 1, inner, shape + 1, strides + 1, run,
                          event, out, err);
    if (rc != DEVBUF_OK) return rc;
  }
  return DEVBUF_OK;
}

static int copy_runs(const devbuf_device *dev, const char *src, int ndim,
                     const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                     void *event, char **out, devbuf_error *err) {
  int inner = 0; /* how many trailing dimensions are C-contiguous */
  Py_ssize_t expect = itemsize;
  for (int i = ndim - 1; i >= 0 && (shape[i] <= 1 || strides[i] == expect); i--) {
    expect *= shape[i];
    inner++;
  }
  /* The run is the contiguous tail; its first element sits at src. */
  return copy_runs_at(dev, src, ndim, inner, shape, strides, (size_t)expect, event, out, err);
}

int dbp_download_into(const devbuf_device *dev, int host_readable, const void *ptr, int ndim,
                      const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                      void *event, char *out_ptr, size_t out_nbytes) {
  /* The destination under the name the copy below was written with. */
  struct {
    char *ptr;
    size_t nbytes;
  } out_s = {out_ptr, out_nbytes}, *out = &out_s;
  if (out->nbytes == 0) return 0;
  /* The byte range [lo, hi) the source covers, so strided and negative-
   * stride sources copy what they span and are gathered on the host. */
  Py_ssize_t lo = 0, hi = itemsize;
  int contiguous = 1;
  if (strides != NULL) {
    Py_ssize_t expect = itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
      if (shape[i] > 1 && strides[i] != expect) contiguous = 0;
      expect *= shape[i];
      Py_ssize_t ext = (shape[i] - 1) * strides[i];
      if (ext < 0) lo += ext;
      else hi += ext;
    }
  } else {
    hi = (Py_ssize_t)out->nbytes;
  }
  size_t span = (size_t)(hi - lo);
  int direct = host_readable || dev == NULL || dev->backend == NULL;
  /* A sparse view (a[::1<<20]) must not cost its whole span: the host
   * gathers straight from the source, and a device copies it run by run
   * once the span is much larger than the data (34 GB were
   * allocated for 108 bytes). Dense views still take one bulk copy. */
  int by_runs = !contiguous && !direct && span / 2 > out->nbytes && span - out->nbytes > ((size_t)1 << 20);
  char *tmp = NULL, *dst = out->ptr;
  if (!contiguous && !direct && !by_runs) {
    tmp = PyMem_RawMalloc(span);
    if (tmp == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    dst = tmp;
  }
  devbuf_error err;
  int rc = DEVBUF_OK;
  devbuf_error_clear(&err);
  const char *base = (const char *)ptr;
  Py_BEGIN_ALLOW_THREADS
  if (direct) {
    if (event && dev && dev->backend) rc = devbuf_event_synchronize(dev, event, &err);
    if (rc == DEVBUF_OK && contiguous) memcpy(dst, base + lo, span);
    else if (rc == DEVBUF_OK) {
      char *o = out->ptr;
      gather(o, base, ndim, shape, strides, itemsize, &o);
    }
  } else if (by_runs) {
    char *o = out->ptr;
    rc = copy_runs(dev, base, ndim, shape, strides, itemsize, event, &o, &err);
  } else if (lo < 0) {
    rc = devbuf_copy_to_host_sync(dev, dst, base + lo, 0, span, event, &err);
  } else {
    rc = devbuf_copy_to_host_sync(dev, dst, base, (size_t)lo, span, event, &err);
  }
  if (rc == DEVBUF_OK && tmp) {
    char *o = out->ptr;
    gather(o, tmp - lo, ndim, shape, strides, itemsize, &o);
  }
  Py_END_ALLOW_THREADS
  PyMem_RawFree(tmp);
  if (rc != DEVBUF_OK) {
    dbp_raise(&err);
    return -1;
  }
  return 0;
}

