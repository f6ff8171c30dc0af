/* devbuf.from_host(obj, device=None, readonly=False): a DeviceBuffer copied
 * from any host buffer, or, when its buffer format cannot say the dtype
 * (NumPy's datetime64), from what devbuf.view() reads of it. Beside buffer.c
 * and view.c, which it uses, so that neither calls the other. */
#include "objects/objects.h"

PyObject *dbp_from_host(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"obj", "device", "readonly", NULL};
  PyObject *obj, *device_arg = Py_None;
  int readonly = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$p:from_host", kwlist, &obj, &device_arg,
                                   &readonly))
    return NULL;
  DbpDevice *d = dbp_device_get(device_arg);
  if (d == NULL) return NULL;
  Py_buffer src;
  PyObject *via = NULL; /* devbuf.view(obj), when its buffer format cannot say the dtype */
  if (PyObject_GetBuffer(obj, &src, PyBUF_FULL_RO) < 0) {
    /* NumPy's datetime64 has no buffer format (ValueError), yet its array
     * interface describes it: the routes of devbuf.view() read it, and
     * their error names each route's reason when none can. */
    if (PyObject_CheckBuffer(obj) && (PyErr_ExceptionMatches(PyExc_ValueError) ||
                                      PyErr_ExceptionMatches(PyExc_BufferError))) {
      PyErr_Clear();
      via = (PyObject *)dbp_view_new(obj, 0);
    }
    if (via == NULL || PyObject_GetBuffer(via, &src, PyBUF_FULL_RO) < 0) {
      Py_XDECREF(via);
      Py_DECREF(d);
      return NULL;
    }
  }
  DbpBuffer *b = dbp_buffer_from_pybuffer(d, &src, readonly);
  PyBuffer_Release(&src);
  Py_XDECREF(via);
  Py_DECREF(d);
  return (PyObject *)b;
}
