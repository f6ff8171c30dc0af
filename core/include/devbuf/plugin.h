/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/plugin.h: the plugin ABI. This is the one header a plugin author needs.
 *
 * A plugin is a shared object that exports exactly one symbol,
 *
 *     DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void);
 *
 * returning a pointer to a table it owns (normally a `static const`). The
 * table begins with `struct_size` and the ABI major/minor the plugin was built
 * against, then the plugin's name, version, the device identifiers it
 * implements and its function pointers. See docs/plugin-authors.md.
 *
 * Versioning promises
 *  - The table only ever grows at the end. A new minor appends fields.
 *  - The host refuses a plugin of another major (with both versions in the
 *    message), accepts any struct_size >= DEVBUF_PLUGIN_TABLE_V1_SIZE, and
 *    never reads a field past the struct_size the plugin declared: a field
 *    past it counts as NULL. A larger table from a newer plugin is fine.
 *
 * Threading: every function may be called from any thread, concurrently,
 * except `init` (called once, before anything else) and `shutdown` (called
 * once, after everything else).
 *
 * When `shutdown` runs: once per successful `init` (or load, without init),
 * in one of two places, whichever comes first:
 *  - devbuf_plugin_unregister, which refuses while memory, streams or events
 *    made through the plugin are alive;
 *  - process exit (C and Python alike: returning from main, exit(), a Python
 *    interpreter's exit), from an atexit handler the runtime registers when it
 *    initialises: every loaded plugin, in the reverse of load order, before
 *    the destructors of any shared object (the plugin's own included) and
 *    after the Python interpreter has finalized. Memory, streams and events
 *    the program never freed may still be live then: release what outlives
 *    the process (shm names, files, driver contexts) and do not expect them
 *    freed first. A vendor library loaded after devbuf initialised may have
 *    run its own exit handlers already: a call into it may fail (CUDA answers
 *    CUDA_ERROR_DEINITIALIZED); ignore such failures. The runtime calls
 *    nothing of the plugin afterwards. A forked child's exit runs no
 *    shutdown (the parent's resources stay the parent's), nor does _exit()
 *    or a fatal signal. No other thread may be calling devbuf at exit.
 *
 * Ownership and lifetimes
 *  - The table and every string and array it points to belong to the plugin
 *    and must stay valid and unchanged until `shutdown` returns (static
 *    storage is the normal choice). The host never frees or writes them.
 *  - `state` is created by `init` and owned by the plugin; the host passes it
 *    back to every call and never looks inside it.
 *  - Device pointers, streams and events are opaque handles created and
 *    destroyed by the plugin; the host owns the *right to destroy* each one
 *    it created, exactly once, through the matching function.
 *  - `devbuf_error *err` and all output pointers are owned by the caller;
 *    `err` may be NULL; on failure the plugin fills it (devbuf_error_set).
 *
 * Cheap entry, lazy backend: neither the entry symbol nor `init` may load or
 * initialise the vendor driver. Driver work happens at the first call that
 * needs it (normally `device_count`). A plugin whose driver is missing still
 * loads: `device_count` then returns DEVBUF_ENODEV with the reason, e.g.
 * "dlopen libcuda.so.1: cannot open shared object file".
 */
#ifndef DEVBUF_PLUGIN_H
#define DEVBUF_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "devbuf/device_info.h"
#include "devbuf/dtype.h"
#include "devbuf/error.h"
#include "devbuf/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* devbuf_error_set without a format, for languages that cannot call a
 * variadic C function (Go's cgo, many FFIs): sets the code and copies
 * `message` (NULL: empty), truncated to fit. Returns `code`, so that a slot
 * can `return devbuf_error_set_message(err, DEVBUF_EINVAL, msg);`. */
static inline int devbuf_error_set_message(devbuf_error *err, int code, const char *message) {
  if (err != NULL) {
    err->code = code;
    err->backend_code = 0;
    snprintf(err->message, sizeof err->message, "%s", message != NULL ? message : "");
  }
  return code;
}

#define DEVBUF_ABI_MAJOR 1
#define DEVBUF_ABI_MINOR 1

/* The name of the one symbol a plugin exports. */
#define DEVBUF_PLUGIN_ENTRY devbuf_plugin_entry
#define DEVBUF_PLUGIN_ENTRY_NAME "devbuf_plugin_entry"

/* Identifiers: NUL-terminated printable ASCII (0x21..0x7e), 1 to
 * DEVBUF_IDENTIFIER_MAX bytes, optionally followed by nothing else. The
 * host refuses "cpu" (reserved by the buffer-protocol draft) from plugins
 * other than devbuf's own cpu plugin, and refuses ':' because "id:N" names
 * device N of an identifier. */
#define DEVBUF_IDENTIFIER_MAX 63

/* devbuf_device_props.flags */
#define DEVBUF_DEVICE_HOST_ACCESSIBLE 0x1u /* host may dereference device pointers */
#define DEVBUF_DEVICE_UNIFIED 0x2u         /* device may dereference host pointers */
#define DEVBUF_DEVICE_ASYNC 0x4u           /* streams really run asynchronously */

/* DLPack device types (DLDeviceType) that plugins commonly report. */
#define DEVBUF_DL_CPU 1
#define DEVBUF_DL_CUDA 2
#define DEVBUF_DL_CUDA_HOST 3
#define DEVBUF_DL_OPENCL 4
#define DEVBUF_DL_VULKAN 7
#define DEVBUF_DL_METAL 8
#define DEVBUF_DL_VPI 9
#define DEVBUF_DL_ROCM 10
#define DEVBUF_DL_ROCM_HOST 11
#define DEVBUF_DL_EXT_DEV 12 /* reserved by DLPack for testing new devices */
#define DEVBUF_DL_CUDA_MANAGED 13
#define DEVBUF_DL_ONEAPI 14

/* What a device is. Caller-owned; the host sets struct_size before the call
 * and zeroes the rest; the plugin fills what it knows and never writes past
 * struct_size. */
/* The most devices one plugin may report. */
#define DEVBUF_MAX_DEVICES_PER_PLUGIN 4096

typedef struct devbuf_device_props {
  uint32_t struct_size;
  uint32_t flags;               /* DEVBUF_DEVICE_* */
  char name[128];               /* e.g. "NVIDIA H100 80GB HBM3" */
  char vendor[64];              /* e.g. "NVIDIA" */
  uint64_t total_memory;        /* bytes, 0 if unknown */
  uint64_t free_memory;         /* bytes, 0 if unknown */
  uint32_t alloc_alignment;     /* alignment mem_alloc guarantees, bytes */
  int32_t dlpack_device_type;   /* DEVBUF_DL_*, or -1 */
  int32_t dlpack_device_id;     /* DLDevice.device_id */
  uint32_t reserved0;
  uint64_t reserved[6];
} devbuf_device_props;

/* How a plugin's device_info looks to the core, whatever the identifier's own
 * layout: filled by device_info_import. */
typedef struct devbuf_device_info_desc {
  uint32_t struct_size;
  uint32_t flags;           /* DEVBUF_DEVICE_INFO_* */
  int32_t device_ordinal;
  uint32_t reserved0;
  void *event;              /* plugin event to wait on, or NULL */
  void *stream;             /* producer stream, or NULL */
  uint64_t reserved[4];
} devbuf_device_info_desc;

/* Read and check a producer's devbuf_device_info (the layout of every
 * devbuf.* identifier) for a plugin's device_info_import: NULL, a struct
 * smaller than v1 (read without over-reading a shorter writer's struct),
 * another version, non-zero reserved space, flags outside `allowed_flags`,
 * a negative ordinal: each refused with DEVBUF_EINVAL and its reason. On
 * success fills *out (up to out->struct_size, 0 meaning the whole struct).
 * The caller still checks what only it can: the ordinal against its device
 * count, and that `event` / `stream` are handles it recognises.
 * `what` prefixes messages, e.g. "device_info_import". */
static inline int devbuf_device_info_read(const void *info, uint32_t allowed_flags,
                                          devbuf_device_info_desc *out, const char *what,
                                          devbuf_error *err) {
  devbuf_device_info in;
  devbuf_device_info_desc desc;
  size_t n;
  int dirty;
  if (info == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL %s", what, info ? "out" : "info");
  memcpy(&in.struct_size, info, sizeof in.struct_size);
  if (in.struct_size < sizeof in)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: struct_size %u < %zu (devbuf_device_info v1)",
                            what, (unsigned)in.struct_size, sizeof in);
  memcpy(&in, info, sizeof in);
  /* Growth happens through struct_size; a new version would mean a changed
   * meaning this reader cannot know. */
  if (in.version != DEVBUF_DEVICE_INFO_VERSION)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: version %u, this reader knows version %d",
                            what, (unsigned)in.version, DEVBUF_DEVICE_INFO_VERSION);
  dirty = in.reserved0 != 0;
  for (size_t i = 0; i < sizeof in.reserved / sizeof in.reserved[0]; i++)
    dirty |= in.reserved[i] != 0;
  if (dirty) return devbuf_error_set(err, DEVBUF_EINVAL, "%s: reserved fields not zero", what);
  if (in.flags & ~allowed_flags)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: unknown flags 0x%x", what,
                            (unsigned)(in.flags & ~allowed_flags));
  if (in.device_ordinal < 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: device_ordinal %d < 0", what,
                            (int)in.device_ordinal);
  memset(&desc, 0, sizeof desc);
  desc.flags = in.flags;
  desc.device_ordinal = in.device_ordinal;
  desc.event = in.event;
  desc.stream = in.stream;
  n = out->struct_size ? out->struct_size : sizeof desc;
  if (n > sizeof desc) n = sizeof desc;
  desc.struct_size = (uint32_t)n;
  memcpy(out, &desc, n);
  return DEVBUF_OK;
}

/* For a plugin's device_info_export of the devbuf_device_info layout: check
 * the caller's arguments (NULL out or size, capacity, flags outside
 * `allowed_flags`) before any device work, then write with
 * devbuf_device_info_write. `what` prefixes messages. */
static inline int devbuf_device_info_check_out(const void *out, size_t capacity,
                                               const size_t *size, uint32_t flags,
                                               uint32_t allowed_flags, const char *what,
                                               devbuf_error *err) {
  if (out == NULL || size == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL %s", what, out ? "size" : "out");
  if (capacity < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: capacity %zu < %zu bytes of devbuf_device_info",
                            what, capacity, sizeof(devbuf_device_info));
  if (flags & ~allowed_flags)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: unknown flags 0x%x", what,
                            (unsigned)(flags & ~allowed_flags));
  return DEVBUF_OK;
}

/* Write a v1 devbuf_device_info (reserved space zeroed) to `out`, which the
 * caller checked with devbuf_device_info_check_out; *size = bytes written. */
static inline void devbuf_device_info_write(void *out, size_t *size, int32_t ordinal,
                                            uint32_t flags, void *event, void *stream) {
  devbuf_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = (uint32_t)sizeof info;
  info.version = DEVBUF_DEVICE_INFO_VERSION;
  info.device_ordinal = ordinal;
  info.flags = flags;
  info.event = event;
  info.stream = stream;
  memcpy(out, &info, sizeof info);
  *size = sizeof info;
}

/* An extra, plugin-specific function (issue: language-neutral plugins).
 * `signature` is "ret(args)" in the letters of docs/plugin-authors.md,
 * e.g. "i(ip)" for int f(int, void*). */
typedef struct devbuf_ext_function {
  const char *name;
  const char *signature;
  const char *doc;
  void (*fn)(void);
} devbuf_ext_function;

typedef struct devbuf_plugin_table devbuf_plugin_table;

struct devbuf_plugin_table {
  /* ---- header: fixed for every major version -------------------------- */
  uint32_t struct_size;           /* sizeof(devbuf_plugin_table) when built */
  uint16_t abi_major;             /* DEVBUF_ABI_MAJOR when built */
  uint16_t abi_minor;             /* DEVBUF_ABI_MINOR when built */
  const char *name;               /* short name, e.g. "sim" */
  const char *version;            /* the plugin's own version, e.g. "0.1.0" */
  const char *description;        /* one line */
  const char *const *identifiers; /* NULL-terminated, at least one */

  /* ---- lifecycle (optional) ------------------------------------------- */
  /* Called once after loading. Must be cheap: no driver initialisation.
   * Sets *state (may stay NULL). A failure makes the load fail with err. */
  int (*init)(void **state, devbuf_error *err);
  /* Called once: at devbuf_plugin_unregister or at process exit (see the
   * top of this file for the order and what may still be live). */
  void (*shutdown)(void *state);

  /* ---- devices (mandatory) -------------------------------------------- */
  /* Number of devices. The first call may initialise the driver. With no
   * device, return DEVBUF_ENODEV and say why in err. More than
   * DEVBUF_MAX_DEVICES_PER_PLUGIN is refused (DEVBUF_EABI): the core checks
   * a plugin's answers (counts, device_props, device_info_export sizes,
   * mem_alloc pointers) rather than trusting them. */
  int (*device_count)(void *state, int *count, devbuf_error *err);
  int (*device_props)(void *state, int device, devbuf_device_props *props, devbuf_error *err);

  /* ---- memory (mandatory) ---------------------------------------------- */
  /* Allocate `size` bytes (size 0 allowed: returns a unique non-NULL handle)
   * aligned to at least `alignment` (0 = the device's default), ordered on
   * `stream` (NULL = the device's default stream). The memory is usable by
   * work on `stream` at once and by other streams after they sync with it.
   * *ptr is a device pointer or handle owned by the caller until mem_free. */
  int (*mem_alloc)(void *state, int device, size_t size, size_t alignment, void *stream,
                   void **ptr, devbuf_error *err);
  /* Free memory from mem_alloc, ordered on `stream`. */
  int (*mem_free)(void *state, int device, void *ptr, void *stream, devbuf_error *err);

  /* ---- copies (mandatory) ---------------------------------------------- */
  /* Asynchronous with respect to the host: complete only after the stream
   * (or an event recorded after them) is synchronized. The host buffer must
   * stay valid until then. Device memory is addressed as (handle, offset)
   * so that handle-based APIs (OpenCL cl_mem) work too. */
  int (*copy_h2d)(void *state, int device, void *dst, size_t dst_offset, const void *src,
                  size_t nbytes, void *stream, devbuf_error *err);
  int (*copy_d2h)(void *state, int device, void *dst, const void *src, size_t src_offset,
                  size_t nbytes, void *stream, devbuf_error *err);
  int (*copy_d2d)(void *state, int device, void *dst, size_t dst_offset, const void *src,
                  size_t src_offset, size_t nbytes, void *stream, devbuf_error *err);

  /* ---- streams (mandatory) --------------------------------------------- */
  /* stream NULL always names the device's default stream, which exists
   * without being created. A synchronous plugin may hand out NULL. */
  int (*stream_create)(void *state, int device, void **stream, devbuf_error *err);
  int (*stream_destroy)(void *state, int device, void *stream, devbuf_error *err);
  int (*stream_synchronize)(void *state, int device, void *stream, devbuf_error *err);

  /* ---- events (mandatory) ----------------------------------------------- */
  int (*event_create)(void *state, int device, void **event, devbuf_error *err);
  int (*event_destroy)(void *state, int device, void *event, devbuf_error *err);
  /* Capture all work submitted to `stream` so far. */
  int (*event_record)(void *state, int device, void *event, void *stream, devbuf_error *err);
  /* Make future work on `stream` wait for `event` (does not block the host). */
  int (*stream_wait_event)(void *state, int device, void *stream, void *event,
                           devbuf_error *err);
  /* Block the host until `event` completes. */
  int (*event_synchronize)(void *state, int device, void *event, devbuf_error *err);
  /* DEVBUF_OK if complete, DEVBUF_EBUSY if not yet. */
  int (*event_query)(void *state, int device, void *event, devbuf_error *err);

  /* ---- device_info (optional; NULL = the devbuf_device_info layout) ----- */
  /* Write the device_info for `identifier` (one of this plugin's) describing
   * data on `device` that is ready once `event` completes (event may be
   * NULL). *size receives the bytes written (<= capacity). */
  int (*device_info_export)(void *state, const char *identifier, int device, void *event,
                            void *stream, uint32_t flags, void *out, size_t capacity,
                            size_t *size, devbuf_error *err);
  /* Validate a device_info received from a producer for `identifier` and
   * describe it. Must reject what it cannot prove sane (bad size, version,
   * ordinal out of range, nonzero reserved). */
  int (*device_info_import)(void *state, const char *identifier, const void *info,
                            devbuf_device_info_desc *out, devbuf_error *err);

  /* ---- dtype namespaces (optional) ------------------------------------ */
  /* NULL-terminated list of namespaces this plugin interprets, or NULL. */
  const devbuf_dtype_namespace *const *dtype_namespaces;

  /* ---- host staging (optional) ---------------------------------------- */
  /* Page-locked host memory for fast device<->host copies. */
  int (*host_alloc)(void *state, int device, size_t size, void **ptr, devbuf_error *err);
  int (*host_free)(void *state, int device, void *ptr, devbuf_error *err);

  /* ---- extension functions (optional) --------------------------------- */
  /* Array of `ext_function_count` entries, or NULL. */
  const devbuf_ext_function *ext_functions;
  size_t ext_function_count;

  /* New fields go here, and only here. */
};

/* The smallest table a v1 host accepts: up to and including event_query. */
#define DEVBUF_PLUGIN_TABLE_V1_SIZE \
  (offsetof(devbuf_plugin_table, event_query) + sizeof(void (*)(void)))

/* The signature of the entry symbol. */
typedef const devbuf_plugin_table *(*devbuf_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_PLUGIN_H */
