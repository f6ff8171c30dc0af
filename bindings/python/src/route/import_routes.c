/* import_routes.c: the routes devbuf.view() and the C API's Import_FromObject
 * try besides the buffer protocol, in order: the DLPack exchange table (its
 * types skip the Arrow lookups), Arrow (its capsule carries the producer's
 * sync_event and the custom-dtype extension, which DLPack of the same object
 * would drop), __dlpack__, __cuda_array_interface__, __array_interface__.
 *
 * A route that refuses (BufferError: Pillow's Arrow export of an RGB image,
 * NumPy's __dlpack__ of an ml_dtypes array) hands over to the next; any
 * other exception stops the search and is raised as it is. See
 * docs/interop.md. */
#include "route/route.h"
#include "readers/readers.h"

dbp_desc *dbp_import_routes(PyObject *obj, PyObject **notes, int *arrow) {
  *arrow = 0;
  if (dbp_exchange_api_of(Py_TYPE(obj)) == NULL) {
    if (PyErr_Occurred()) return NULL;
    dbp_desc *d = dbp_arrow_import(obj, 0);
    if (d != NULL) {
      *arrow = 1;
      return d;
    }
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_BufferError)) return NULL;
      if (dbp_route_note(notes, "Arrow") < 0) return NULL;
    }
  }
  return dbp_interop_import(obj, notes);
}
