/* exporters.h: devbuf's own exports beyond the buffer protocol, the layer
 * above objects/. Not installed.
 *
 *   dlpack_export.c  __dlpack__, __dlpack_device__, __array_interface__,
 *                    __cuda_array_interface__ and the DLPack 1.3 C exchange
 *                    table on DeviceBuffer, DeviceView and ForeignArray
 *   arrow_export.c   __arrow_c_device_array__ / __arrow_c_array__ on
 *                    DeviceBuffer and DeviceView (contiguous, 1-d)
 *   pickle.c         __reduce_ex__ on DeviceBuffer/DeviceView,
 *                    devbuf.HostStaging, the _pickle_* functions
 *
 * Each adds its methods to the types of objects/ at module init, and calls
 * objects/ and the layers below. The C work (validation, mappings,
 * managed-tensor construction) is in libdevbuf's devbuf/dlpack.h; these
 * files only add the Python rules. See docs/interop.md and docs/arrow.md. */
#ifndef DBP_EXPORTERS_H
#define DBP_EXPORTERS_H

#include "objects/objects.h"
#include "devbuf/dlpack.h"

/* ---- dlpack_export.c ------------------------------------------------------- */
/* Export any extended-buffer exporter as an owning versioned (versioned=1)
 * or legacy managed tensor. `stream` is the consumer's stream (Python
 * object, may be NULL = None), honoured when `sync`; `target` the requested
 * device or NULL; copy: -1 None, 0 False, 1 True. 0, or -1 with an exception. */
int dbp_dlpack_export(PyObject *obj, int versioned, PyObject *stream, int sync,
                      const DLDevice *target, int copy, void **out);
/* The devices of a devbuf object as DLPack sees it. */
int dbp_dlpack_device_of(PyObject *obj, DLDevice *out);
int dbp_export_init(PyObject *module);

/* ---- arrow_export.c ------------------------------------------------------- */
/* Types, module functions, and the dunders on DeviceBuffer/DeviceView
 * (devbuf.ArrowArray and devbuf.from_arrow first: objects/arrow_array.c). */
int dbp_arrow_init(PyObject *module);

/* ---- pickle.c ------------------------------------------------------------------- */
/* __reduce_ex__ on DeviceBuffer/DeviceView, devbuf.HostStaging, _pickle_* functions. */
int dbp_pickle_init(PyObject *module);

#endif /* DBP_EXPORTERS_H */
