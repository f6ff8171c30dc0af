/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/export.h: the one export macro.
 *
 * libdevbuf and every plugin are built with -fvisibility=hidden; only what is
 * marked DEVBUF_API (the runtime) or DEVBUF_PLUGIN_EXPORT (a plugin's single
 * entry symbol) is visible to the dynamic linker. */
#ifndef DEVBUF_EXPORT_H
#define DEVBUF_EXPORT_H

#if defined(_WIN32)
#  define DEVBUF_VISIBLE __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#  define DEVBUF_VISIBLE __attribute__((visibility("default")))
#else
#  define DEVBUF_VISIBLE
#endif

/* Functions of libdevbuf itself. */
#define DEVBUF_API DEVBUF_VISIBLE

#ifdef __cplusplus
#  define DEVBUF_EXTERN_C extern "C"
#else
#  define DEVBUF_EXTERN_C
#endif

/* The one symbol a plugin exports (see devbuf/plugin.h). */
#define DEVBUF_PLUGIN_EXPORT DEVBUF_EXTERN_C DEVBUF_VISIBLE

#endif /* DEVBUF_EXPORT_H */
