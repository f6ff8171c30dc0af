/* interop.h: DLPack, CUDA Array Interface and array interface for the
 * devbuf extension. Not installed.
 *
 *   dlpack_export.c  producer side: __dlpack__, __dlpack_device__,
 *                    __array_interface__, __cuda_array_interface__ and the
 *                    DLPack 1.3 C exchange table on DeviceBuffer, DeviceView
 *                    and ForeignArray.
 *   dlpack_import.c  consumer side: the DLPack reader, devbuf.from_dlpack(),
 *                    and the route order of devbuf.view() for objects
 *                    without the buffer protocol. The import description,
 *                    ForeignArray and the interface reader: desc.h.
 *
 * The C work (validation, mappings, managed-tensor construction) is in
 * libdevbuf's devbuf/dlpack.h; these files only add the Python rules. See
 * docs/interop.md. */
#ifndef DBP_INTEROP_H
#define DBP_INTEROP_H

#include "dbp.h"
#include "devbuf/dlpack.h"

/* Py_ssize_t arrays are handed out as DLPack int64 arrays and back. */
_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "Py_ssize_t must be 64-bit");

/* ---- dlpack_import.c ------------------------------------------------------- */
typedef struct dbp_desc dbp_desc; /* desc.h */
/* For devbuf.view(): the description of an object without the buffer
 * protocol that speaks the DLPack C exchange table, __dlpack__, the CUDA
 * Array Interface or the array interface (tried in that order). Owned by
 * the caller; NULL with an exception on failure; NULL WITHOUT an exception
 * when obj speaks none of them. When every route fails with BufferError
 * and notes is not NULL, their reasons are appended to *notes (a list,
 * made when NULL; the caller owns it) instead of raised: NULL with no
 * exception then. */
dbp_desc *dbp_interop_import(PyObject *obj, PyObject **notes);
/* Append "route: Type: message" of the pending exception to *notes (made
 * when NULL) and clear it; 0, or -1 with an exception. */
int dbp_route_note(PyObject **notes, const char *route);
/* Raise `type`: "devbuf cannot import T by any route it speaks (...)". */
void dbp_route_raise(PyObject *type, PyObject *notes, PyObject *obj);
/* ---- import_routes.c ------------------------------------------------------ */
/* Every route but the buffer protocol, as devbuf.view() and the C API try
 * them: the exchange table, Arrow (*arrow set to 1 when it answered: export
 * with dbp_arrow_desc_export), then dbp_interop_import's. A route's
 * BufferError hands over to the next, its reason appended to *notes (a
 * list, made when NULL; the caller owns it). NULL with an exception on a
 * hard error; NULL WITHOUT one when no route answered (*notes then holds
 * each refusal, or stays NULL when obj speaks none). */
dbp_desc *dbp_import_routes(PyObject *obj, PyObject **notes, int *arrow);
/* The exchange table of obj's type (cached per type), NULL if none (an
 * exception is set only when the attribute is malformed). */
const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type);
PyObject *dbp_from_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *dbp_exchange_import_bench(PyObject *self, PyObject *args);
int dbp_import_init(PyObject *module);

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

/* ---- both ------------------------------------------------------------------- */
/* Module hook: types, methods on DeviceBuffer/DeviceView/ForeignArray,
 * module functions. Called once, from the first module exec (module.c). */
int dbp_interop_init(PyObject *module);
/* Raise BufferError with err's message; returns -1. */
int dbp_buffer_error(const devbuf_error *err);

#endif /* DBP_INTEROP_H */
