/* readers.h: one reader per import protocol, the layer above desc/. Not
 * installed.
 *
 *   dlpack_import.c     DLPack: a type's C exchange table, __dlpack__ (with
 *                       the stream hand-off and the cached device query)
 *   interface_import.c  the CUDA Array Interface and the array interface
 *   arrow_import.c      the Arrow PyCapsule (device) interface
 *
 * A reader validates what its producer handed over and fills a dbp_desc
 * (desc/desc.h), setting the owner and how to release it. Readers call
 * only desc/ and base/: which reader runs is the route chooser's business
 * (route/), and who owns the result is the objects' (objects/). */
#ifndef DBP_READERS_H
#define DBP_READERS_H

#include "base/arrow_c.h"
#include "desc/desc.h"
#include "devbuf/dlpack.h"

/* ---- dlpack_import.c ----------------------------------------------------------- */
/* The exchange table of obj's type (cached per type), NULL if none (an
 * exception is set only when the attribute is malformed). */
const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type);
/* A producer type's exchange table, and (*dlpack, when asked) its
 * __dlpack__ as the type's dict holds it, borrowed, with *direct = 1 when a
 * method call obj.__dlpack__(...) calls exactly it. NULL with an exception
 * when the table attribute is malformed. */
const devbuf_dlpack_exchange_api *dbp_dlpack_type_of(PyTypeObject *type, PyObject **dlpack,
                                                     int *direct);
/* Import through the table: an owning tensor, then the producer's current
 * stream turned into an event. NULL with an exception. */
dbp_desc *dbp_dlpack_import_exchange(PyObject *obj, const devbuf_dlpack_exchange_api *api);
/* Import through obj.__dlpack__ (`fn`, a bound method or attribute, or the
 * type's function called with obj first when `unbound`; NULL: looked up):
 * the device query (cached per type that only answered kDLCPU), the stream
 * hand-off, the capsule consumed. *dropped: the producer did not handle
 * dl_device/copy. NULL with an exception. */
dbp_desc *dbp_dlpack_import_call(PyObject *obj, PyObject *fn, int unbound,
                                 PyObject *dl_device, PyObject *copy, int *dropped,
                                 int legacy_writable);
/* Interned names and keyword tuples; from the module's first exec. 0 or -1. */
int dbp_dlpack_reader_init(void);

/* ---- interface_import.c, arrow_import.c ------------------------------------------ */
/* interface_import.c: obj's __cuda_array_interface__ (cuda) or
 * __array_interface__ dict `dict`, described. NULL with an exception. */
dbp_desc *dbp_interface_import(PyObject *obj, PyObject *dict, int cuda);
/* arrow_import.c: obj's __arrow_c_device_array__ (else __arrow_c_array__)
 * array, moved into the description. NULL with an exception; NULL WITHOUT
 * one when obj has neither method and `need` is 0 (`need`: TypeError then,
 * as devbuf.from_arrow() says it). */
dbp_desc *dbp_arrow_import(PyObject *obj, int need);
/* The export of an Arrow description (an immutable, 1-d, contiguous array),
 * with devbuf.ArrowArray's checks and messages. As dbp_desc_export. */
int dbp_arrow_desc_export(dbp_desc *d, Py_buffer *view, int flags);
/* The description's owner: the moved array, and what the reader made of
 * its schema. */
typedef struct dbp_arrow_owner {
  DbpArrowDeviceArray arr; /* moved in (release non-NULL until released) */
  char *format;            /* PyMem: the devbuf format of one item, any length */
  char *arrow_format;      /* PyMem: the Arrow format as received */
} dbp_arrow_owner;

/* Release the moved Arrow array (its callback, once) and what the reader
 * kept beside it. */
void dbp_arrow_owner_free(void *owner);
/* Interned names; from the module's first exec. 0 or -1. */
int dbp_arrow_reader_init(void);

#endif /* DBP_READERS_H */
