/* sim_arena.h: the device memory of one simulated device.
 *
 * One memfd, mapped twice: `dev_base` is PROT_NONE and is where the
 * addresses handed out point (so a host dereference faults), `rw_base` is a
 * read-write view private to the plugin, through which the stream workers
 * copy. A first-fit allocator with coalescing manages offsets in the arena.
 * The memfd is sparse: pages cost nothing until a copy touches them, and a
 * large freed block gives its pages back (FALLOC_FL_PUNCH_HOLE). */
#ifndef DEVBUF_SIM_ARENA_H
#define DEVBUF_SIM_ARENA_H

#include <pthread.h>
#include <stddef.h>

#include "devbuf/error.h"

/* Every block starts and spans a multiple of this: it is also the default
 * and the minimum alignment mem_alloc guarantees. */
#define SIM_GRANULE ((size_t)256)

enum sim_block_state {
  SIM_BLOCK_FREE = 0,
  SIM_BLOCK_USED = 1,
  SIM_BLOCK_FREEING = 2 /* mem_free accepted; the release waits on a stream */
};

typedef struct sim_block sim_block;
struct sim_block {
  size_t off;           /* from the arena's start, a multiple of SIM_GRANULE */
  size_t span;          /* bytes reserved, a multiple of SIM_GRANULE, > 0 */
  size_t size;          /* bytes the caller asked for (0 allowed) */
  int state;            /* enum sim_block_state */
  sim_block *prev, *next; /* neighbours in address order; the list covers the arena */
};

typedef struct sim_arena {
  int fd;
  size_t size;               /* bytes, a multiple of the page size */
  unsigned char *dev_base;   /* PROT_NONE view: device addresses */
  unsigned char *rw_base;    /* read-write view, plugin only */
  pthread_mutex_t lock;      /* guards everything below */
  sim_block *head;           /* first block, address order */
  sim_block **used;          /* USED and FREEING blocks, sorted by off */
  size_t nused, capused;
  size_t used_bytes;         /* sum of the spans in `used` */
  size_t retained;           /* freed bytes left resident (approximate, see release) */
} sim_arena;

/* Create the memfd and both mappings. `device` only names the device in
 * messages. On failure nothing is left allocated. */
int sim_arena_open(sim_arena *a, size_t bytes, int device, devbuf_error *err);
/* Unmap and free everything, live blocks included. */
void sim_arena_close(sim_arena *a);

/* Allocate. `align` is a power of two (0 = SIM_GRANULE). *ptr is a device
 * address inside dev_base. DEVBUF_ENOMEM when nothing fits. */
int sim_arena_alloc(sim_arena *a, size_t size, size_t align, int device, void **ptr,
                    devbuf_error *err);

/* Accept a free: `ptr` must be the start of a USED block. Marks it FREEING
 * and returns it, so that a later free or copy of it is refused while the
 * release waits on its stream. */
int sim_arena_begin_free(sim_arena *a, void *ptr, int device, sim_block **out,
                         devbuf_error *err);
/* Give a FREEING block back to the allocator (coalescing). */
void sim_arena_release(sim_arena *a, sim_block *b);

/* Outcome of sim_arena_resolve. */
enum sim_resolve {
  SIM_RESOLVE_OK = 0,
  SIM_RESOLVE_NOT_FOUND = 1, /* not inside any live allocation */
  SIM_RESOLVE_FREED = 2      /* inside an allocation whose free is pending */
};
/* Find the live allocation that contains device address `ptr` (its start
 * up to and including its end, so that a zero-size handle resolves).
 * On SIM_RESOLVE_OK, *start is the allocation's device address and *size
 * its requested size. */
int sim_arena_resolve(sim_arena *a, const void *ptr, const unsigned char **start,
                      size_t *size);

/* Does [p, p+n) overlap this arena's device addresses? No lock needed: the
 * mapping is fixed between open and close. */
int sim_arena_overlaps(const sim_arena *a, const void *p, size_t n);

/* Bytes not reserved by live or freeing blocks. */
size_t sim_arena_free_bytes(sim_arena *a);

/* Read-write address of device address `p` (inside this arena). */
static inline unsigned char *sim_arena_rw(const sim_arena *a, const void *p) {
  return a->rw_base + ((const unsigned char *)p - a->dev_base);
}

#endif /* DEVBUF_SIM_ARENA_H */
