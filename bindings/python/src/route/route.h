/* route.h: the route chooser, the layer above readers/. Not installed.
 *
 * route.c orders the routes of an object without the buffer protocol for
 * devbuf.view() and the C API's Import_FromObject: the DLPack C exchange
 * table, __dlpack__, the CUDA Array Interface, the array interface. It
 * calls the readers (readers/) and base/; the objects above it (view.c)
 * and the C API (api/capi.c) call it. */
#ifndef DBP_ROUTE_H
#define DBP_ROUTE_H

#include "desc/desc.h"

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
/* The exchange table of obj's type (cached per type), NULL if none (an
 * exception is set only when the attribute is malformed). */
const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type);
/* Interned names; from the module's first exec. 0 or -1. */
int dbp_route_init(void);

/* ---- import_routes.c ------------------------------------------------------ */
/* Every route but the buffer protocol, as devbuf.view() and the C API try
 * them: the exchange table, Arrow (*arrow set to 1 when it answered: export
 * with dbp_arrow_desc_export), then dbp_interop_import's. A route's
 * BufferError hands over to the next, its reason appended to *notes (a
 * list, made when NULL; the caller owns it). NULL with an exception on a
 * hard error; NULL WITHOUT one when no route answered (*notes then holds
 * each refusal, or stays NULL when obj speaks none). */
dbp_desc *dbp_import_routes(PyObject *obj, PyObject **notes, int *arrow);

#endif /* DBP_ROUTE_H */
