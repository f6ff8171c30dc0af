/* What the fake vendor libraries of tests/gpu (fake_cuda.c, fake_hip.c,
 * fake_level_zero.c) have in common: the table of live "device" allocations
 * (host memory) that makes them strict about frees and copy ranges, error
 * name tables, and handles that carry a magic number. Compiled into each
 * fake with hidden visibility: a fake exports only its vendor's API and its
 * inspection functions. */
#ifndef DEVBUF_TESTS_GPU_FAKE_COMMON_H
#define DEVBUF_TESTS_GPU_FAKE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
#define FAKE_INTERNAL __attribute__((visibility("hidden")))

/* Requests this large fail as out of memory. */
#define FAKE_OOM_BYTES ((size_t)1 << 40)

/* ---- allocations ------------------------------------------------------- */

/* Why fake_track refused; each fake maps these to its own error codes. */
enum { FAKE_OK = 0, FAKE_BAD_SIZE, FAKE_BAD_ALIGNMENT, FAKE_NO_MEMORY };

/* A new allocation of `size` bytes aligned to `alignment` (a power of two;
 * the real drivers give at least 256), remembered with its owner (a device
 * ordinal or a context, as the fake chooses) and whether it is pooled or
 * host memory. */
FAKE_INTERNAL int fake_track(size_t size, size_t alignment, intptr_t owner, int pooled, int host,
                             void **out);

/* Free a live allocation starting at `base` that has the same pooled and
 * host kind (host FAKE_ANY_KIND: either) and, unless owner is
 * FAKE_ANY_OWNER, the same owner. 1 when freed, 0 when no such allocation
 * (a wrong free function, owner or pointer). */
#define FAKE_ANY_OWNER INTPTR_MIN
#define FAKE_ANY_KIND (-1)
FAKE_INTERNAL int fake_untrack(void *base, int pooled, int host, intptr_t owner);

/* Is [p, p+n) inside one live allocation of this host kind (and owner,
 * unless FAKE_ANY_OWNER)? */
FAKE_INTERNAL int fake_inside(uintptr_t p, size_t n, int host, intptr_t owner);

/* A pointer that starts in a device allocation must end inside it; one
 * that starts in none is not checked. */
FAKE_INTERNAL int fake_range_ok(uintptr_t p, size_t n);

/* Live allocations, of which pooled; plus other objects counted by
 * fake_live_add (contexts, lists, events...), for fakes that count them. */
FAKE_INTERNAL long fake_live_count(void);
FAKE_INTERNAL long fake_pool_count(void);
FAKE_INTERNAL void fake_live_add(long delta);

/* ---- errors -------------------------------------------------------------- */

typedef struct fake_error {
  long long code;
  const char *name, *text;
} fake_error;

/* The entry for `code`, or NULL. */
FAKE_INTERNAL const fake_error *fake_error_find(const fake_error *table, size_t n,
                                                long long code);

/* ---- handles -------------------------------------------------------------- */

/* The first members of a fake stream, event or pool: a stale or foreign
 * handle fails the magic check instead of passing. */
typedef struct fake_handle {
  unsigned magic;
  int device;
} fake_handle;

/* A zeroed object of `size` bytes starting with a fake_handle; NULL when out
 * of memory. */
FAKE_INTERNAL void *fake_handle_new(size_t size, unsigned magic, int device);
/* Does h point at a live handle of this kind? */
FAKE_INTERNAL int fake_handle_is(const void *h, unsigned magic);
/* Clears the magic (so a later use fails) and frees. */
FAKE_INTERNAL void fake_handle_free(void *h);

#endif
