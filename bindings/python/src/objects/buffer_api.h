/* buffer_api.h: the NumPy-shaped parts of devbuf.DeviceBuffer (objects/buffer.c):
 * len(), .size, .dtype, .format_info, copy_from(), fill(), b[...] = x. */
#ifndef DBP_BUFFER_API_H
#define DBP_BUFFER_API_H
#include "base/dbp.h"

PyObject *dbp_buffer_get_size(PyObject *self, void *c);
PyObject *dbp_buffer_get_dtype(PyObject *self, void *c);
PyObject *dbp_buffer_get_format_info(PyObject *self, void *c);
PyObject *dbp_buffer_copy_from(PyObject *self, PyObject *src);
PyObject *dbp_buffer_fill(PyObject *self, PyObject *value);
extern PyMappingMethods dbp_buffer_as_mapping;

#define DBP_BUFFER_API_METHODS                                                                  \
  {"copy_from", (PyCFunction)dbp_buffer_copy_from, METH_O,                                      \
   "copy_from($self, src, /)\n--\n\n"                                                           \
   "Copy `src` into this buffer in place and return None.\n\n"                                 \
   "src: host memory with the buffer protocol (a NumPy array, bytes, memoryview) of the "      \
   "same shape and item type (int64 'l' and 'q' agree), or a devbuf.DeviceBuffer (copied "     \
   "device to device where both are on one device). A C-contiguous host source is copied "    \
   "straight from its memory, with no host copy; a non-contiguous one (a slice with steps, a " \
   "Fortran array) is first gathered into one contiguous host temporary of the same size. "   \
   "Raises ValueError naming what does not fit, BufferError if this buffer is read-only or "  \
   "freed."},                                                                                   \
  {"fill", (PyCFunction)dbp_buffer_fill, METH_O,                                                \
   "fill($self, value, /)\n--\n\n"                                                              \
   "Set every item to `value` (a Python or NumPy scalar, or for a struct format a tuple) "     \
   "and return None. The items are made in a host temporary of the buffer's size (with "       \
   "NumPy when the buffer has a NumPy dtype, else with the struct module), then copied in "    \
   "with copy_from()."}

#define DBP_BUFFER_API_GETSET                                                                   \
  {"size", (getter)dbp_buffer_get_size, NULL, "number of items (the product of shape)", NULL}, \
  {"dtype", (getter)dbp_buffer_get_dtype, NULL,                                                 \
   "the numpy.dtype of the items, or None where none maps (a custom dtype without ml_dtypes, " \
   "pointers); needs NumPy. The devbuf Format is .format_info", NULL},                          \
  {"format_info", (getter)dbp_buffer_get_format_info, NULL,                                     \
   "the parsed format (a devbuf.Format, as devbuf.parse_format(self.format))", NULL}

#endif
