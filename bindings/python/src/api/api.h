/* api.h: the top layer of devbuf._devbuf. Not installed.
 *
 *   capi.c    fills the _C_API capsule's table (devbuf_capi.h)
 *   module.c  module functions that belong to no type (plugins, stats,
 *             search path) and the multi-phase init that readies every
 *             layer below, bottom to top
 *
 * They may call every layer below; nothing calls them. */
#ifndef DBP_API_H
#define DBP_API_H

#include "exporters/exporters.h"
#include "route/route.h"

/* ---- capi.c ----------------------------------------------------------------------- */
int dbp_capi_init(PyObject *module);

/* ---- module.c --------------------------------------------------------------------- */
/* The DLPack hook: the route chooser, the DLPack reader and from_dlpack
 * (ForeignArray first), then the DLPack exports on DeviceBuffer/DeviceView/
 * ForeignArray. Called once, from the first module exec. */
int dbp_interop_init(PyObject *module);

#endif /* DBP_API_H */
