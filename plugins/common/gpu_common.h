/* plugins/common: helpers shared by the GPU plugins (devbuf.cuda, devbuf.hip,
 * devbuf.level_zero). Internal: built as a static library that each plugin
 * links, compiled with hidden visibility, so nothing here is ever exported
 * (a plugin still exports only devbuf_plugin_entry). Not part of the ABI and
 * not installed: third-party plugins use devbuf/plugin.h alone.
 *
 * A library of helpers, not a framework: each plugin keeps its own state,
 * its own table and entry symbol, and writes any slot it wants itself; it
 * calls these for the parts that do not depend on the vendor:
 *
 *   gpu_lazy     the vendor library opened at first use, once, and the
 *                "no device" reason kept for every later call
 *   gpu_dlopen / gpu_dlsym_all
 *                the library by environment override or default sonames,
 *                and its entry points into a vendor's table of pointers
 *   gpu_fail_v / gpu_status_lookup
 *                "op: NAME: text (detail)" messages, vendor code -> devbuf code
 *   gpu_align_*  over-aligned allocations: aligned pointer -> base to free
 *   gpu_handles_*
 *                a registry of live stream/event objects, so a bad handle is
 *                refused instead of dereferenced
 *   gpu_check_* / gpu_info_* / gpu_props_copy_out
 *                argument checks and device_info / device_props plumbing that
 *                every slot repeats
 *   gpu_base     the head of every GPU plugin's state (the above, together)
 *   gpu_scoped_* the memory, copy, stream and event slots of a vendor that
 *                makes a device current per call (CUDA, HIP), written once
 *                over the vendor's gpu_vendor hooks (enter, leave, one call
 *                per operation, its error text)
 *
 * The vendor files keep only what is truly theirs: function names, types,
 * error names, and how a device is made current. */
#ifndef DEVBUF_PLUGINS_GPU_COMMON_H
#define DEVBUF_PLUGINS_GPU_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "devbuf/plugin.h"

#if defined(__GNUC__)
#define GPU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GPU_PRINTF(f, a)
#endif

/* Two levels, so that a vendor header's renaming macros apply first
 * (cuda.h maps cuMemAlloc to cuMemAlloc_v2: the symbol to resolve). */
#define GPU_STR_(x) #x
#define GPU_STR(x) GPU_STR_(x)

/* ---- the vendor library, opened once at first use ------------------------ */

/* The first member of gpu_base, and so of a plugin's state (a load function
 * may cast it back). `load` runs once, under `lock`, at the first
 * gpu_lazy_ensure; it opens the library, fills `count` and returns
 * DEVBUF_OK, or returns what gpu_no_device returned (which records why). */
typedef struct gpu_lazy {
  pthread_mutex_t lock; /* lazy set-up: the library, and each device's first use */
  atomic_int loaded;    /* 1 once load ran (status says how it went) */
  int status;           /* DEVBUF_OK, or why there is no device */
  char reason[DEVBUF_ERROR_MESSAGE_SIZE];
  const char *plugin; /* "devbuf.cuda": prefixes messages */
  int (*load)(struct gpu_lazy *lz);
  void *lib;
  int count; /* devices; 0 unless status is DEVBUF_OK */
} gpu_lazy;

/* No dlopen, no vendor call: cheap, as a plugin's init must be. */
int gpu_lazy_init(gpu_lazy *lz, const char *plugin, int (*load)(gpu_lazy *), devbuf_error *err);
void gpu_lazy_destroy(gpu_lazy *lz);

/* Runs load once; then DEVBUF_OK, or the status and reason of the failure.
 * lz may be NULL (a NULL plugin state): DEVBUF_EINVAL. */
int gpu_lazy_ensure(gpu_lazy *lz, devbuf_error *err);

/* Inside load: no device, and why (kept for every later call). Returns code. */
int gpu_no_device(gpu_lazy *lz, int code, const char *fmt, ...) GPU_PRINTF(3, 4);

/* Inside load: DEVBUF_ENODEV, with the message of a failed vendor call. */
int gpu_no_device_err(gpu_lazy *lz, const devbuf_error *e);

/* Inside load, once lz->count is known: a zeroed table of lz->count device
 * records of `size` bytes, or NULL with the reason recorded (`none` when
 * there is no device, out of host memory otherwise). */
void *gpu_device_table(gpu_lazy *lz, size_t size, const char *none);

/* ensure, then `device` in range: "devbuf.cuda: no device 2 (2 devices)". */
int gpu_check_device(gpu_lazy *lz, int device, devbuf_error *err);

/* Double-checked one-time set-up of a device at its first use: runs
 * setup(state, device, err) under lz->lock unless *ready, and sets *ready
 * when it returns DEVBUF_OK. */
int gpu_device_once(gpu_lazy *lz, atomic_int *ready,
                    int (*setup)(void *state, int device, devbuf_error *err), void *state,
                    int device, devbuf_error *err);

/* Open the library: $env_var when set and not empty, else each of
 * `defaults` (NULL-terminated) in turn. Sets lz->lib and *used (the name
 * that was tried last); on failure records "dlopen NAME: why" (with "also
 * tried ..." for the other defaults) and returns 0. */
int gpu_dlopen(gpu_lazy *lz, const char *env_var, const char *const *defaults, const char **used);

/* One entry point: its (already renamed) symbol name and where its pointer
 * lives in the vendor's table of function pointers. */
typedef struct gpu_symbol {
  const char *name;
  size_t offset;
} gpu_symbol;

/* An array of gpu_symbol as the (pointer, count) pair gpu_dlsym_all takes. */
#define GPU_SYMBOLS(array) (array), sizeof(array) / sizeof *(array)

/* Resolve every `required` symbol from lz->lib into `api` (all or none: on
 * a missing one, `api` is zeroed and the reason is "dlsym NAME in LIB:
 * symbol not found (`too_old`)"), then each `optional` one (NULL when the
 * library lacks it). Returns how many optional symbols are missing, or -1
 * when a required one is. */
int gpu_dlsym_all(gpu_lazy *lz, const char *libname, void *api, size_t api_size,
                  const gpu_symbol *required, size_t nrequired, const gpu_symbol *optional,
                  size_t noptional, const char *too_old);

/* ---- errors ------------------------------------------------------------- */

/* A vendor result and the devbuf code it means. */
typedef struct gpu_status_map {
  long long vendor;
  int code;
} gpu_status_map;

/* The devbuf code of `vendor` in `map`, DEVBUF_EBACKEND when absent. */
int gpu_status_lookup(const gpu_status_map *map, size_t n, long long vendor);

/* How the detail follows: "op: NAME: text (detail)" or "op: NAME: detail". */
enum { GPU_DETAIL_PAREN = 0, GPU_DETAIL_COLON = 1 };

/* Set err to "op: NAME: text (detail)" (text left out when NULL or equal to
 * NAME, detail when fmt is NULL or it formats empty) and its backend_code.
 * Returns code. */
int gpu_fail_v(devbuf_error *err, int code, int backend_code, const char *op, const char *name,
               const char *text, int style, const char *fmt, va_list ap) GPU_PRINTF(8, 0);

/* ---- over-aligned allocations ---------------------------------------------- */

/* Alignment beyond what the vendor allocator gives is had by allocating
 * `alignment` more and rounding up; the table gives mem_free the base. */
typedef struct gpu_align_entry {
  uintptr_t aligned, base;
} gpu_align_entry;

typedef struct gpu_align_table {
  pthread_mutex_t lock;
  atomic_size_t count; /* lets gpu_align_base skip the lock when empty */
  gpu_align_entry *entries;
  size_t cap;
} gpu_align_table;

int gpu_align_init(gpu_align_table *t);
void gpu_align_destroy(gpu_align_table *t);
int gpu_align_remember(gpu_align_table *t, uintptr_t aligned, uintptr_t base);
/* The base to free for `ptr` (ptr itself unless it was over-aligned);
 * `remove` forgets it (once the base is freed). */
uintptr_t gpu_align_base(gpu_align_table *t, uintptr_t ptr, int remove);

/* mem_alloc's checks before any device work: ptr not NULL (*ptr cleared), a
 * power-of-two alignment, and the size to ask the vendor for (at least 1,
 * plus `alignment` when it exceeds `native`, checked for overflow). */
int gpu_alloc_request(void **ptr, size_t size, size_t alignment, size_t native, size_t *request,
                      devbuf_error *err);

/* The aligned address within [base, base+request) for `alignment`, or base
 * when `native` already satisfies it. */
uintptr_t gpu_align_up(uintptr_t base, size_t alignment, size_t native);

/* A stream-ordered pool is wanted unless $env_var is set to something other
 * than "" or "0" (DEVBUF_CUDA_NO_POOL=1: plain allocation, for debugging). */
int gpu_pool_wanted(const char *env_var);

/* ---- stream and event handles ---------------------------------------------- */

/* Every plugin object handed out as a stream or event handle, with its kind,
 * so that a stale or foreign pointer is told apart from a live one without
 * being dereferenced. Open addressing over pointer hashes. */
typedef struct gpu_handle_entry {
  void *ptr; /* NULL: empty; GPU_HANDLE_TOMBSTONE: removed */
  int kind;
} gpu_handle_entry;

typedef struct gpu_handles {
  pthread_mutex_t lock;
  gpu_handle_entry *entries;
  size_t cap, used; /* used counts tombstones too, so probing always ends */
} gpu_handles;

enum { GPU_HANDLE_STREAM = 1, GPU_HANDLE_EVENT = 2 };

int gpu_handles_init(gpu_handles *h);
void gpu_handles_destroy(gpu_handles *h);
/* 0 when out of host memory. */
int gpu_handle_add(gpu_handles *h, void *p, int kind);
/* The kind of a registered handle, or 0; `remove` unregisters it. */
int gpu_handle_find(gpu_handles *h, const void *p, int remove);

/* ---- argument checks and slot plumbing ----------------------------------- */

/* A create-style out argument (stream_create, event_create, host_alloc):
 * "what: NULL name" when NULL, else *out cleared. */
int gpu_check_out(void **out, const char *what, const char *name, devbuf_error *err);

/* A copy's arguments, checked after the device: *to and *from are dst+offset
 * and src+offset; returns DEVBUF_OK with *nothing set when nbytes is 0. */
int gpu_check_copy(const char *what, void *dst, size_t dst_offset, const void *src,
                   size_t src_offset, size_t nbytes, uintptr_t *to, uintptr_t *from,
                   int *nothing, devbuf_error *err);

/* device_props: copy `p` out without writing past the caller's struct_size. */
int gpu_props_copy_out(devbuf_device_props *props, devbuf_device_props *p, devbuf_error *err);

/* The device_info flags every GPU plugin accepts. */
#define GPU_INFO_FLAGS (DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | DEVBUF_DEVICE_INFO_READONLY)

/* device_info_export before the handles: the identifier is lz->plugin's,
 * the output arguments are good (both before any device work), then the
 * library is loaded and `device` exists. */
int gpu_info_export_check(gpu_lazy *lz, const char *identifier, int device, uint32_t flags,
                          const void *out, size_t capacity, const size_t *size,
                          devbuf_error *err);


/* ---- a plugin's state -------------------------------------------------- */

struct gpu_vendor;

/* The first member of every GPU plugin's state; the slots of this library
 * that a plugin puts in its table as they are take its state through it. */
typedef struct gpu_base {
  gpu_lazy lazy; /* first */
  const struct gpu_vendor *vendor; /* for the gpu_scoped_* slots; may be NULL */
  gpu_align_table align; /* over-aligned allocations */
  gpu_handles handles;   /* live stream and event objects, where registered */
} gpu_base;

/* A plugin's init: a zeroed state of `size` bytes (a struct that starts
 * with a gpu_base) with its gpu_base set up. No dlopen, no vendor call. */
int gpu_base_new(void **state, size_t size, const char *plugin, int (*load)(gpu_lazy *),
                 const struct gpu_vendor *vendor, devbuf_error *err);

/* The end of a plugin's shutdown, once its vendor objects are released. */
void gpu_base_free(void *state);

/* Slots a plugin can put in its table as they are. */

/* device_count: the number of devices, 0 and the reason when none. */
int gpu_device_count(void *state, int *count, devbuf_error *err);

/* device_info_import for a plugin whose device_info carries no private
 * data: identifier, layout, flags, then the ordinal. */
int gpu_info_import(void *state, const char *identifier, const void *info,
                    devbuf_device_info_desc *out, devbuf_error *err);

/* device_info_export for a plugin whose devbuf stream and event handles are
 * the vendor's own (CUDA: CUstream, CUevent; HIP: hipStream_t, hipEvent_t):
 * they go into the device_info as they are. */
int gpu_info_export_raw(void *state, const char *identifier, int device, void *event,
                        void *stream, uint32_t flags, void *out, size_t capacity, size_t *size,
                        devbuf_error *err);

/* ---- slots for vendors that make a device current per call -------------------
 *
 * CUDA (a context pushed) and HIP (a device selected) run every call the
 * same way: check the arguments that need no device, make the device
 * current, check the rest, make one vendor call, restore, and say what
 * failed in the vendor's words. The gpu_scoped_* slots do all but the vendor
 * call, through the plugin's gpu_vendor; the plugin keeps its entry points,
 * types and error names (and may still write any slot itself). */

/* The vendor calls behind the slots. */
enum {
  GPU_OP_MEM_ALLOC,      /* size bytes on the stream (pools are stream-ordered) -> out */
  GPU_OP_MEM_FREE,       /* ptr (the allocation's base) on the stream */
  GPU_OP_HOST_ALLOC,     /* size bytes of pinned host memory, usable by every device -> out */
  GPU_OP_HOST_FREE,      /* ptr */
  GPU_OP_COPY_H2D,       /* size bytes from host src to device dst on the stream */
  GPU_OP_COPY_D2H,       /* ... device src to host dst */
  GPU_OP_COPY_D2D,       /* ... device src to device dst */
  GPU_OP_STREAM_CREATE,  /* a stream that does not serialise with others -> out */
  GPU_OP_STREAM_DESTROY, /* stream */
  GPU_OP_STREAM_SYNCHRONIZE,
  GPU_OP_EVENT_CREATE, /* an event for synchronisation only (no timing) -> out */
  GPU_OP_EVENT_DESTROY,
  GPU_OP_EVENT_RECORD,      /* event on stream */
  GPU_OP_STREAM_WAIT_EVENT, /* stream waits for event */
  GPU_OP_EVENT_SYNCHRONIZE,
  GPU_OP_EVENT_QUERY,
  GPU_OP_COUNT
};

/* One vendor call: the arguments (which are used depends on op) and what
 * the call made. */
typedef struct gpu_call {
  int op;
  void *stream, *event; /* the vendor's handles, as the caller gave them */
  uintptr_t dst, src;   /* copies: addresses with the offsets applied */
  size_t size;          /* bytes */
  void *ptr;            /* frees */
  void *out;            /* allocations and creations: what was made */
  const char *name;     /* the entry point called, for messages (preset from
                           gpu_vendor.names; the call may change it) */
} gpu_call;

/* The device made current for one call: the vendor's device record and
 * whatever it needs to restore the caller's. */
typedef struct gpu_scope {
  void *dev;
  intptr_t saved;
  int restore;
} gpu_scope;

typedef struct gpu_vendor {
  /* Make `device` current (set-up at its first use included), or fail:
   * DEVBUF_ENODEV and the reason when there is no such device. */
  int (*enter)(void *state, int device, gpu_scope *scope, devbuf_error *err);
  void (*leave)(void *state, gpu_scope *scope);
  /* The vendor call for c->op; returns the vendor's result code. */
  int (*call)(void *state, gpu_scope *scope, gpu_call *c);
  /* Set err to "op: NAME: text (detail)" for a vendor result; returns the
   * devbuf code. */
  int (*fail)(void *state, devbuf_error *err, int result, const char *op, const char *detail);
  const char *const *names; /* GPU_OP_COUNT entry point names */
  int ok;                   /* the vendor's success result */
  int not_ready;            /* what EVENT_QUERY returns for "not yet" */
  size_t native_alignment;  /* what the vendor allocator guarantees */
} gpu_vendor;

/* The slots above (and device_count, device_info_export/import), for the
 * initializer of a plugin's devbuf_plugin_table; the plugin names its own
 * init, shutdown and device_props. */
#define GPU_SCOPED_SLOTS                                  \
  .device_count = gpu_device_count,                       \
  .mem_alloc = gpu_scoped_mem_alloc,                      \
  .mem_free = gpu_scoped_mem_free,                        \
  .copy_h2d = gpu_scoped_copy_h2d,                        \
  .copy_d2h = gpu_scoped_copy_d2h,                        \
  .copy_d2d = gpu_scoped_copy_d2d,                        \
  .stream_create = gpu_scoped_stream_create,              \
  .stream_destroy = gpu_scoped_stream_destroy,            \
  .stream_synchronize = gpu_scoped_stream_synchronize,    \
  .event_create = gpu_scoped_event_create,                \
  .event_destroy = gpu_scoped_event_destroy,              \
  .event_record = gpu_scoped_event_record,                \
  .stream_wait_event = gpu_scoped_stream_wait_event,      \
  .event_synchronize = gpu_scoped_event_synchronize,      \
  .event_query = gpu_scoped_event_query,                  \
  .device_info_export = gpu_info_export_raw,              \
  .device_info_import = gpu_info_import,                  \
  .host_alloc = gpu_scoped_host_alloc,                    \
  .host_free = gpu_scoped_host_free

int gpu_scoped_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err);
int gpu_scoped_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err);
int gpu_scoped_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err);
int gpu_scoped_host_free(void *state, int device, void *ptr, devbuf_error *err);
int gpu_scoped_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err);
int gpu_scoped_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err);
int gpu_scoped_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err);
int gpu_scoped_stream_create(void *state, int device, void **stream, devbuf_error *err);
int gpu_scoped_stream_destroy(void *state, int device, void *stream, devbuf_error *err);
int gpu_scoped_stream_synchronize(void *state, int device, void *stream, devbuf_error *err);
int gpu_scoped_event_create(void *state, int device, void **event, devbuf_error *err);
int gpu_scoped_event_destroy(void *state, int device, void *event, devbuf_error *err);
int gpu_scoped_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err);
int gpu_scoped_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err);
int gpu_scoped_event_synchronize(void *state, int device, void *event, devbuf_error *err);
int gpu_scoped_event_query(void *state, int device, void *event, devbuf_error *err);

#endif
