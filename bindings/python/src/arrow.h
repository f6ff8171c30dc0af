/* arrow.h: the Arrow PyCapsule (device) interface of the devbuf extension
 * (arrow.c). Not installed. See docs/arrow.md.
 *
 *   export  __arrow_c_device_array__ / __arrow_c_array__ on DeviceBuffer and
 *           DeviceView (contiguous, 1-d)
 *   import  devbuf.from_arrow(obj) -> devbuf.ArrowArray, a buffer exporter
 *           (extended buffer protocol) holding the moved ArrowDeviceArray;
 *           devbuf.view(obj) goes through it for Arrow producers. */
#ifndef DBP_ARROW_H
#define DBP_ARROW_H

#include "dbp.h"

/* For devbuf.view(): a devbuf.ArrowArray for an object without the buffer
 * protocol that has __arrow_c_device_array__ or __arrow_c_array__. New
 * reference; NULL with an exception on failure; NULL WITHOUT an exception
 * when obj has neither method. */
PyObject *dbp_arrow_exporter(PyObject *obj);
/* Types, module functions, and the dunders on DeviceBuffer/DeviceView. */
int dbp_arrow_init(PyObject *module);

#endif /* DBP_ARROW_H */
