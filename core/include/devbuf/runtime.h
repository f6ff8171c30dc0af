/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/runtime.h: the host-side API of libdevbuf, for bindings, tools and
 * C consumers. Plugin authors need only devbuf/plugin.h.
 *
 * Lifecycle: the runtime initialises itself once, thread-safely, on the first
 * call of any function here (or explicitly through devbuf_init). It then
 * discovers plugins, in this order:
 *   1. DEVBUF_PLUGINS       colon-separated list of plugin files
 *   2. DEVBUF_PLUGIN_PATH   colon-separated list of directories
 *   3. the install directory (<libdir>/devbuf/plugins, found relative to
 *      libdevbuf itself), or, when libdevbuf runs from its build tree, the
 *      build tree's plugin directory, so an uninstalled build finds its own
 *   unless DEVBUF_NO_DEFAULT_PLUGINS=1 turns step 3 off.
 * That is the search path as listed; devbuf's own directory (step 3) is
 * loaded first, so that its plugins keep the identifiers that belong to
 * devbuf ("cpu", "devbuf.*"): a plugin from steps 1-2 claiming one of them
 * is refused (DEVBUF_EEXIST, naming both files). One from outside devbuf's
 * directory serves a devbuf.* identifier only where devbuf's own plugin is
 * absent, and its record's `reason` says so. Otherwise the first plugin to
 * claim an identifier keeps it. In a directory, the files named
 * devbuf_plugin_*.so are loaded in name order. Loading runs only each plugin's entry symbol and `init`: no driver
 * is initialised until a device is used.
 *
 * At process exit (not in a forked child), every plugin still loaded gets
 * its `shutdown`, in the reverse of load order; afterwards calls through its
 * devices fail with DEVBUF_ENODEV (see devbuf/plugin.h).
 *
 * Ownership: every `const char *` and struct pointer returned here is owned
 * by the runtime and stays valid until the process exits (records are never
 * freed or moved, only appended), unless a comment says otherwise. Device
 * pointers, streams and events are owned by the caller from the call that
 * creates them until the call that destroys them.
 *
 * Errors: every function returns DEVBUF_OK or a devbuf_status code and fills
 * the caller's devbuf_error (may be NULL). Nothing here prints, aborts or
 * lets a signal or exception escape.
 *
 * Threads: every function here may be called from any thread at once, with
 * or without a Python interpreter (free-threaded CPython included). The
 * plugin, identifier and dtype-namespace registries take their own locks
 * for a registration or an unregistration and are read without one
 * (append-only records published with release/acquire atomics). A call into
 * a plugin holds no runtime lock, so a plugin may call back into the runtime
 * or wait for a lock its caller's thread holds (a Python plugin takes the
 * GIL). Two threads may both run a plugin's first device_count; the first
 * answer published is the one every caller gets. A device, stream or event may be used from several threads as
 * far as its plugin allows (devbuf/plugin.h); one devbuf_error per call. */
#ifndef DEVBUF_RUNTIME_H
#define DEVBUF_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "devbuf/error.h"
#include "devbuf/export.h"
#include "devbuf/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DEVBUF_VERSION_MAJOR 0
#define DEVBUF_VERSION_MINOR 1
#define DEVBUF_VERSION_PATCH 0
#define DEVBUF_VERSION_STRING "0.1.0"

/* ---- versions and errors --------------------------------------------- */
DEVBUF_API const char *devbuf_version(void);          /* "0.1.0" */
DEVBUF_API void devbuf_abi_version(int *major, int *minor);
/* "DEVBUF_EINVAL", ...; "DEVBUF_E?" for unknown codes. Static storage. */
DEVBUF_API const char *devbuf_status_name(int code);

/* ---- initialisation ---------------------------------------------------- */
/* Idempotent and thread-safe; every other function calls it. Only fails on
 * out-of-memory: a plugin that fails to load is recorded, not fatal. */
DEVBUF_API int devbuf_init(devbuf_error *err);

/* ---- the search path, as actually used ------------------------------- */
typedef struct devbuf_search_entry {
  const char *path;    /* a directory or a file */
  const char *source;  /* "DEVBUF_PLUGINS", "DEVBUF_PLUGIN_PATH", "install", "build tree", "explicit" */
  int exists;          /* 1 if it existed when searched */
  int is_file;         /* 1 for an explicit file, 0 for a directory */
} devbuf_search_entry;
/* 1 in secure-execution mode (setuid/setgid or file capabilities,
 * AT_SECURE): every DEVBUF_* variable reads as unset there, so
 * DEVBUF_PLUGINS and DEVBUF_PLUGIN_PATH are ignored. Relative entries in
 * those variables and bare file names are refused in every mode. */
DEVBUF_API int devbuf_secure_execution(void);
DEVBUF_API size_t devbuf_search_path_count(void);
DEVBUF_API const devbuf_search_entry *devbuf_search_path_get(size_t index);

/* ---- plugins ---------------------------------------------------------- */
enum devbuf_plugin_state {
  DEVBUF_PLUGIN_LOADED = 0,    /* usable */
  DEVBUF_PLUGIN_FAILED = 1,    /* not usable; `reason` says why */
  DEVBUF_PLUGIN_UNREGISTERED = 2 /* was registered, then removed */
};

typedef struct devbuf_plugin_info {
  uint32_t struct_size;
  int state;                       /* enum devbuf_plugin_state */
  int error_code;                  /* devbuf_status of the failure, or DEVBUF_OK */
  const char *path;                /* file, or "<registered: ORIGIN>" for tables */
  const char *source;              /* as devbuf_search_entry.source */
  const char *name;                /* table name, or NULL if not read */
  const char *version;             /* or NULL */
  const char *description;         /* or NULL */
  uint16_t abi_major, abi_minor;   /* as declared by the plugin; 0 if unknown */
  const char *reason;              /* why it failed, "" when loaded */
  const char *const *identifiers;  /* NULL-terminated identifiers it owns here (interned) */
  const devbuf_plugin_table *table;/* the host's copy of its table (NULL if failed) */
} devbuf_plugin_info;

DEVBUF_API size_t devbuf_plugin_count(void);
/* Fills *out (set out->struct_size first). */
DEVBUF_API int devbuf_plugin_info_get(size_t index, devbuf_plugin_info *out, devbuf_error *err);

/* Load one more plugin file now. On failure the record is still added (so a
 * listing shows it) and its index returned through *index when non-NULL; a
 * file that fails again exactly as before reuses its record. */
DEVBUF_API int devbuf_plugin_load(const char *path, size_t *index, devbuf_error *err);
/* The same, recording `source` (printable ASCII, 1 to 200 bytes) as where the
 * plugin came from instead of "explicit": the Python package's entry-point
 * discovery says "entry point <dist> <version>" (docs/python-plugins.md).
 * The labels the runtime gives itself ("install", "build tree",
 * "DEVBUF_PLUGINS", "DEVBUF_PLUGIN_PATH", "registered", "explicit") are
 * refused with DEVBUF_EINVAL: "install" and "build tree" carry devbuf's own
 * privileges (the reserved `cpu` identifier). */
DEVBUF_API int devbuf_plugin_load_from(const char *path, const char *source, size_t *index,
                                       devbuf_error *err);

/* Register a table that is already in memory (a plugin produced at run time,
 * e.g. through libffi closures; or a test double). `origin` names it in
 * listings. The table must outlive the registration. On failure no record is
 * added (records are never freed): *index is set to (size_t)-1. */
DEVBUF_API int devbuf_plugin_register(const devbuf_plugin_table *table, const char *origin,
                                      size_t *index, devbuf_error *err);
/* Remove a registered or loaded plugin: its identifiers stop resolving and
 * its `shutdown` runs. Refused with DEVBUF_EBUSY while memory, streams or
 * events created through it are alive (nothing changes then). A
 * device_count probe running in another thread (a listing) is waited for
 * before `shutdown` runs; from inside the plugin's own device_count the call
 * is refused with DEVBUF_EBUSY. The shared object is not dlclosed. */
DEVBUF_API int devbuf_plugin_unregister(size_t index, devbuf_error *err);

/* Devices of a plugin. The first call may initialise the plugin's driver;
 * the answer is cached. With zero devices, returns DEVBUF_ENODEV and the
 * plugin's reason. */
DEVBUF_API int devbuf_plugin_device_count(size_t index, int *count, devbuf_error *err);

/* ---- identifiers ---------------------------------------------------------- */
/* Validate an identifier's spelling: printable ASCII without ':' or spaces,
 * 1..DEVBUF_IDENTIFIER_MAX bytes. */
DEVBUF_API int devbuf_identifier_check(const char *identifier, devbuf_error *err);
/* The interned copy of a registered identifier (compare these by pointer),
 * and the index of the plugin that implements it. */
DEVBUF_API int devbuf_identifier_lookup(const char *identifier, const char **interned,
                                        size_t *plugin_index, devbuf_error *err);
DEVBUF_API size_t devbuf_identifier_count(void);
/* index-th registered identifier (interned) and its plugin; NULL past the end. */
DEVBUF_API const char *devbuf_identifier_get(size_t index, size_t *plugin_index);

/* ---- devices ---------------------------------------------------------------- */
typedef struct devbuf_backend devbuf_backend; /* a loaded plugin; opaque */

typedef struct devbuf_device {
  const char *identifier;  /* interned */
  int ordinal;
  devbuf_backend *backend;
} devbuf_device;

/* Open a device by spec string: "identifier" (ordinal 0) or "identifier:N". */
DEVBUF_API int devbuf_device_open(const char *spec, devbuf_device *out, devbuf_error *err);
/* Open a device by identifier and ordinal, already apart: the same as
 * devbuf_device_open("identifier:ordinal") without formatting and parsing a
 * spec. DEVBUF_ENODEV when the ordinal is out of range (negative included). */
DEVBUF_API int devbuf_device_open_ordinal(const char *identifier, int ordinal,
                                          devbuf_device *out, devbuf_error *err);
/* Deprecated: the old name of devbuf_device_open_ordinal, with the same
 * behaviour. It was exported by libdevbuf.so.0 and declared in this
 * installed header, so a consumer built against an earlier 0.x may link it:
 * it stays exported (removing it would break that binary at load time, an
 * ABI break within one soname), and new code gets a compiler warning. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("use devbuf_device_open_ordinal")))
#endif
DEVBUF_API int devbuf_device_open2(const char *identifier, int ordinal, devbuf_device *out,
                                   devbuf_error *err);
DEVBUF_API int devbuf_device_count(const char *identifier, int *count, devbuf_error *err);
/* Fills *props (struct_size set by the runtime). */
DEVBUF_API int devbuf_device_props_get(const devbuf_device *dev, devbuf_device_props *props,
                                       devbuf_error *err);
/* The index of the plugin behind a device. */
DEVBUF_API size_t devbuf_device_plugin_index(const devbuf_device *dev);
/* 1 while the plugin behind `dev` is still registered (a cached devbuf_device
 * goes stale when its plugin is unregistered, even if another plugin later
 * claims the same identifier), else 0. Cheap: no lock, no call into the plugin. */
DEVBUF_API int devbuf_device_is_live(const devbuf_device *dev);

/* ---- memory, streams, events, copies: thin checked wrappers over the plugin.
 * Same contracts as the slots of the same name in devbuf/plugin.h. */
DEVBUF_API int devbuf_mem_alloc(const devbuf_device *dev, size_t size, size_t alignment,
                                void *stream, void **ptr, devbuf_error *err);
DEVBUF_API int devbuf_mem_free(const devbuf_device *dev, void *ptr, void *stream,
                               devbuf_error *err);
DEVBUF_API int devbuf_host_alloc(const devbuf_device *dev, size_t size, void **ptr,
                                 devbuf_error *err); /* pinned if the plugin can, else malloc */
DEVBUF_API int devbuf_host_free(const devbuf_device *dev, void *ptr, devbuf_error *err);

DEVBUF_API int devbuf_stream_create(const devbuf_device *dev, void **stream, devbuf_error *err);
DEVBUF_API int devbuf_stream_destroy(const devbuf_device *dev, void *stream, devbuf_error *err);
DEVBUF_API int devbuf_stream_synchronize(const devbuf_device *dev, void *stream,
                                         devbuf_error *err);

DEVBUF_API int devbuf_event_create(const devbuf_device *dev, void **event, devbuf_error *err);
DEVBUF_API int devbuf_event_destroy(const devbuf_device *dev, void *event, devbuf_error *err);
DEVBUF_API int devbuf_event_record(const devbuf_device *dev, void *event, void *stream,
                                   devbuf_error *err);
DEVBUF_API int devbuf_stream_wait_event(const devbuf_device *dev, void *stream, void *event,
                                        devbuf_error *err);
DEVBUF_API int devbuf_event_synchronize(const devbuf_device *dev, void *event,
                                        devbuf_error *err);
DEVBUF_API int devbuf_event_query(const devbuf_device *dev, void *event, devbuf_error *err);

DEVBUF_API int devbuf_copy_h2d(const devbuf_device *dev, void *dst, size_t dst_offset,
                               const void *src, size_t nbytes, void *stream, devbuf_error *err);
DEVBUF_API int devbuf_copy_d2h(const devbuf_device *dev, void *dst, const void *src,
                               size_t src_offset, size_t nbytes, void *stream, devbuf_error *err);
DEVBUF_API int devbuf_copy_d2d(const devbuf_device *dev, void *dst, size_t dst_offset,
                               const void *src, size_t src_offset, size_t nbytes, void *stream,
                               devbuf_error *err);

/* Blocking convenience: copy device->host and wait for it, honouring `event`
 * (the producer's, may be NULL) first. */
DEVBUF_API int devbuf_copy_to_host_sync(const devbuf_device *dev, void *dst, const void *src,
                                        size_t src_offset, size_t nbytes, void *event,
                                        devbuf_error *err);
/* Blocking convenience: copy host->device and wait for it. */
DEVBUF_API int devbuf_copy_from_host_sync(const devbuf_device *dev, void *dst, size_t dst_offset,
                                          const void *src, size_t nbytes, devbuf_error *err);

/* ---- device_info ----------------------------------------------------------- */
/* Write the device_info of dev->identifier for data ready after `event`. */
DEVBUF_API int devbuf_device_info_export(const devbuf_device *dev, void *event, void *stream,
                                         uint32_t flags, void *out, size_t capacity,
                                         size_t *size, devbuf_error *err);
/* Validate a producer's device_info for `identifier`, describe it, and open
 * the device it names. */
DEVBUF_API int devbuf_device_info_import(const char *identifier, const void *info,
                                         devbuf_device_info_desc *desc, devbuf_device *dev,
                                         devbuf_error *err);

/* ---- extension functions ------------------------------------------------ */
/* Check one entry of a plugin's ext_functions as every caller must before
 * calling it: a printable name of 1..127 bytes, a non-NULL fn, and a
 * signature in the grammar of docs/plugin-authors.md ("R(A...)", at most 16
 * arguments, at most one 'e', never '*e' or '*v'). DEVBUF_OK, or DEVBUF_EINVAL
 * with the reason (the byte at fault). The same rules as the Python bindings'. */
DEVBUF_API int devbuf_ext_function_check(const devbuf_ext_function *entry, devbuf_error *err);

/* ---- statistics (for leak checks) --------------------------------------- */
typedef struct devbuf_stats {
  uint64_t live_allocations, live_bytes;  /* device memory now allocated */
  uint64_t total_allocations;             /* since load */
  uint64_t live_streams, live_events, live_host_allocations;
} devbuf_stats;
DEVBUF_API int devbuf_plugin_stats(size_t index, devbuf_stats *out, devbuf_error *err);

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_RUNTIME_H */
