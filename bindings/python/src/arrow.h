/* arrow.h: the Arrow PyCapsule (device) interface of the devbuf extension.
 * Not installed. See docs/arrow.md.
 *
 *   arrow.c         export: __arrow_c_device_array__ / __arrow_c_array__ on
 *                   DeviceBuffer and DeviceView (contiguous, 1-d)
 *   arrow_import.c  import: the reader that fills the one import description
 *                   (desc.h: dbp_arrow_import), devbuf.view(obj)'s Arrow
 *                   route; devbuf.from_arrow(obj) -> devbuf.ArrowArray, the
 *                   description behind a public read-only exporter. */
#ifndef DBP_ARROW_H
#define DBP_ARROW_H

#include "dbp.h"

/* Schema metadata keys both sides use. */
#define EXT_NAME_KEY "ARROW:extension:name"
#define EXT_META_KEY "ARROW:extension:metadata"
#define EXT_NAME "devbuf.dtype"
#define DEVICE_KEY "devbuf.device" /* the identifier behind ARROW_DEVICE_EXT_DEV */

/* Types, module functions, and the dunders on DeviceBuffer/DeviceView. */
int dbp_arrow_init(PyObject *module);
/* arrow_import.c: devbuf.ArrowArray and devbuf.from_arrow. */
int dbp_arrow_import_init(PyObject *module);

#endif /* DBP_ARROW_H */
