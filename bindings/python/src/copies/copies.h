/* copies.h: the copy engine of devbuf._devbuf, above base/. Not installed.
 *
 *   download.c   device (or host) memory described by a layout, copied into
 *                C-ordered host memory (to_host, pickling, from_dlpack's copy)
 *   copy_into.c  to_host(out=...) and copy_to(..., out=...): a copy into
 *                memory the caller already has
 *
 * Both work on a bare layout (pointer, shape, strides, event), never on a
 * DeviceBuffer or DeviceView, so the objects above call them and they call
 * only base/. */
#ifndef DBP_COPIES_H
#define DBP_COPIES_H

#include "base/dbp.h"

/* ---- download.c ---------------------------------------------------------------- */
/* Host copy into `out_nbytes` (the layout's size) of C-ordered host memory
 * at out_ptr of `ptr` on `dev` described by the layout, honouring `event`
 * first (dbp_buffer_download's copy). 0, or -1 with an exception. */
int dbp_download_into(const devbuf_device *dev, int host_readable, const void *ptr, int ndim,
                      const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t itemsize,
                      void *event, char *out_ptr, size_t out_nbytes);

/* ---- copy_into.c ------------------------------------------------------------- */
/* A copy's source: `nbytes` described by ndim/shape/strides (strides NULL:
 * C order) at `ptr` on `dev` (NULL or no backend: host memory), readable by
 * the host once `event` completed when host_readable. */
typedef struct {
  const devbuf_device *dev;
  int host_readable;
  const void *ptr;
  size_t nbytes;
  int ndim;
  const Py_ssize_t *shape;
  const Py_ssize_t *strides;
  Py_ssize_t itemsize;
  const char *format;
  void *event;
} dbp_copy_src;
/* Copy the source into `out`, a writable buffer of the same size and layout
 * (or flat bytes) on `target` (NULL or the host: host memory), or on any
 * device when any_device. New reference to out, or NULL with an exception
 * (TypeError, BufferError, ValueError naming what does not fit). */
PyObject *dbp_copy_into(const dbp_copy_src *s, PyObject *out, DbpDevice *target, int any_device,
                        const char *what);
/* Parse (pos[0..npos), *, out=None) of a fastcall method (`device` may also
 * be a keyword for pos[0]); *out NULL when absent or None. 0 or -1. */
int dbp_parse_out_kw(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, Py_ssize_t npos, PyObject **pos, PyObject **out);

#endif /* DBP_COPIES_H */
