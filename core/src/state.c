/* The runtime's one global record (internal.h): the plugin records and the
 * search path. Every layer of the core reads it; only the loader appends
 * records and only runtime.c changes their state. Kept in a file of its own,
 * below the loader, so that reading it never means calling up. */
#include "internal.h"

devbuf_runtime devbuf__rt = {.lock = PTHREAD_MUTEX_INITIALIZER};

devbuf_backend *devbuf__backend_get(size_t index) {
  size_t n = atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire);
  return index < n ? devbuf__rt.backends[index] : NULL;
}
