/* Internal state of libdevbuf shared between core/ and registry/. Not installed. */
#ifndef DEVBUF_INTERNAL_H
#define DEVBUF_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "devbuf/runtime.h"
#include "registry.h" /* registry/src: what the registry below offers */

#ifndef DEVBUF_MAX_PLUGINS /* the fuzz build raises it: records are never freed */
#define DEVBUF_MAX_PLUGINS 4096
#endif
#define DEVBUF_MAX_SEARCH 64

/* Pointer -> size map of live device allocations of one backend: lets the
 * runtime count bytes for leak checks and refuse a double or foreign free
 * instead of handing it to the plugin. Open addressing, guarded by `lock`. */
typedef struct devbuf_allocmap {
  uintptr_t *keys; /* 0 = empty, 1 = tombstone */
  size_t *sizes;
  size_t capacity, count, tombstones;
} devbuf_allocmap;

struct devbuf_backend {
  size_t index;
  _Atomic int state; /* enum devbuf_plugin_state; read without the lock */
  int error_code;  /* why FAILED */
  char *path;
  char *source;
  char *name, *version, *description;
  uint16_t abi_major, abi_minor;
  char *reason;                 /* "" when loaded without remark */
  const char **identifiers;     /* interned, NULL-terminated (empty if failed) */
  devbuf__dtype_provider dtype_provider; /* its dtype_namespaces, added to the registry */
  devbuf_plugin_table table;    /* zero-padded copy: fields past struct_size are NULL */
  void *plugin_state;           /* from init */
  void *dl_handle;              /* NULL for registered tables */

  /* device count, probed once */
  pthread_mutex_t lock;
  int count_probed;
  int count_status;
  int count;
  char count_reason[DEVBUF_ERROR_MESSAGE_SIZE];

  devbuf_allocmap allocs;       /* guarded by lock */
  /* Per device, the alignment mem_alloc's pointers must have (its
   * alloc_alignment, at least 1), UINT32_MAX when they are handles rather
   * than addresses, 0 when not yet asked; `count` entries, guarded by lock. */
  uint32_t *alloc_align;
  /* Streams and events created through the runtime (non-NULL handles),
   * guarded by lock: the default device_info import refuses a handle the
   * plugin never made, and the synchronous defaults of ABI 1.1 check theirs. */
  devbuf_allocmap streams, events;
  _Atomic uint64_t live_allocations, live_bytes, total_allocations;
  _Atomic uint64_t live_streams, live_events, live_host_allocations;
  /* Calls into the table that run with no lock held (the device_count
   * probe): counted under devbuf__rt.lock while the record is LOADED, so
   * that devbuf_plugin_unregister, which flips the state under the same
   * lock and then waits for this to drop to 0, never runs `shutdown` under
   * a call still inside the plugin. */
  _Atomic uint64_t calls_in_flight;
};

/* The global runtime. Backends are appended, never freed or moved: readers
 * load `nbackends` (acquire) and index without the lock. */
typedef struct devbuf_runtime {
  pthread_mutex_t lock;
  devbuf_backend *backends[DEVBUF_MAX_PLUGINS];
  _Atomic size_t nbackends;
  devbuf_search_entry search[DEVBUF_MAX_SEARCH];
  size_t nsearch;
} devbuf_runtime;

extern devbuf_runtime devbuf__rt;

/* util.c */
char *devbuf__strdup(const char *s);
/* suggest.c: near-miss suggestions for a name that was not found. */
int devbuf__near_miss(const char *wanted, const char *known);
void devbuf__suggest(const char *wanted, const char *const *known, size_t n, char *out,
                     size_t cap);
char *devbuf__printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int devbuf__printable(const char *s, size_t max);
int devbuf__status_known(int code);
const char *devbuf__status_text(int code, char *buf, size_t cap);
/* loader.c: every DEVBUF_* variable is read through this (secure_getenv:
 * NULL in secure-execution mode). */
const char *devbuf__getenv(const char *name);

/* loader.c */
void devbuf__discover(void);
int devbuf__load_file(const char *path, const char *source, size_t *index, devbuf_error *err);
int devbuf__add_table(const devbuf_plugin_table *table, const char *path, const char *source,
                      void *dl_handle, size_t *index, devbuf_error *err);

/* state.c */
devbuf_backend *devbuf__backend_get(size_t index);

/* runtime.c */
int devbuf__backend_device_count(devbuf_backend *b, int *count, devbuf_error *err);

#endif /* DEVBUF_INTERNAL_H */
