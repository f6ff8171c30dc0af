/* sim_arena.c: memfd-backed device memory and its first-fit allocator. */
#include "sim_arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Freed blocks at least this large give their whole pages back to the
 * kernel, so that long tests do not grow the process's memory; but, as a
 * real device's pooling allocator does, up to SIM_RETAIN bytes of freed
 * memory stay resident, so that free-then-allocate of the same size does
 * not pay a page fault per page (which made every sim upload ~10x slower
 * than memcpy). */
#define SIM_PUNCH_MIN ((size_t)64 * 1024)
#define SIM_RETAIN ((size_t)256 * 1024 * 1024)

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

int sim_arena_open(sim_arena *a, size_t bytes, int device, devbuf_error *err) {
  size_t pg = page_size();
  memset(a, 0, sizeof *a);
  a->fd = -1;
  bytes = (bytes + pg - 1) / pg * pg;

  int fd = memfd_create("devbuf-sim", MFD_CLOEXEC);
  if (fd < 0)
    return devbuf_error_set(err, DEVBUF_EBACKEND, "SIM_SYSTEM_ERROR: memfd_create for sim device %d: %s", device,
                            strerror(errno));
  if (ftruncate(fd, (off_t)bytes) != 0) {
    int e = errno;
    close(fd);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "SIM_SYSTEM_ERROR: ftruncate(memfd) for sim device %d to %zu bytes: %s",
                            device, bytes, strerror(e));
  }
  /* MAP_NORESERVE: the arena is sparse; only touched pages count. */
  void *dev = mmap(NULL, bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (dev == MAP_FAILED) {
    int e = errno;
    close(fd);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "SIM_SYSTEM_ERROR: mmap(PROT_NONE) for sim device %d, %zu bytes: %s",
                            device, bytes, strerror(e));
  }
  void *rw = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (rw == MAP_FAILED) {
    int e = errno;
    munmap(dev, bytes);
    close(fd);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "SIM_SYSTEM_ERROR: mmap(PROT_READ|PROT_WRITE) for sim device %d, %zu bytes: %s",
                            device, bytes, strerror(e));
  }
  sim_block *b = calloc(1, sizeof *b);
  if (b == NULL || pthread_mutex_init(&a->lock, NULL) != 0) {
    free(b);
    munmap(rw, bytes);
    munmap(dev, bytes);
    close(fd);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "SIM_SYSTEM_ERROR: out of host memory (sim device %d)", device);
  }
  b->off = 0;
  b->span = bytes;
  b->state = SIM_BLOCK_FREE;
  a->fd = fd;
  a->size = bytes;
  a->dev_base = dev;
  a->rw_base = rw;
  a->head = b;
  return DEVBUF_OK;
}

void sim_arena_close(sim_arena *a) {
  if (a->fd < 0) return;
  sim_block *b = a->head;
  while (b != NULL) {
    sim_block *n = b->next;
    free(b);
    b = n;
  }
  free(a->used);
  munmap(a->rw_base, a->size);
  munmap(a->dev_base, a->size);
  close(a->fd);
  pthread_mutex_destroy(&a->lock);
  memset(a, 0, sizeof *a);
  a->fd = -1;
}

/* Index of the last used block whose off is <= off, or -1. */
static long used_floor(const sim_arena *a, size_t off) {
  long lo = 0, hi = (long)a->nused - 1, found = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    if (a->used[mid]->off <= off) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

int sim_arena_alloc(sim_arena *a, size_t size, size_t align, int device, void **ptr,
                    devbuf_error *err) {
  if (align < SIM_GRANULE) align = SIM_GRANULE;
  if (size > a->size || align > a->size)
    return devbuf_error_set(err, DEVBUF_ENOMEM,
                            "mem_alloc: SIM_OUT_OF_MEMORY: %zu bytes aligned to %zu exceed the "
                            "%zu-byte memory of sim device %d (DEVBUF_SIM_MEMORY_MB)",
                            size, align, a->size, device);
  size_t need = size == 0 ? SIM_GRANULE : (size + SIM_GRANULE - 1) / SIM_GRANULE * SIM_GRANULE;

  /* Get every host allocation first, so that a failure changes nothing. */
  sim_block *pre = malloc(sizeof *pre), *post = malloc(sizeof *post);
  if (pre == NULL || post == NULL) {
    free(pre);
    free(post);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory (sim device %d)",
                            device);
  }

  pthread_mutex_lock(&a->lock);
  if (a->nused == a->capused) {
    size_t cap = a->capused ? a->capused * 2 : 64;
    sim_block **u = realloc(a->used, cap * sizeof *u);
    if (u == NULL) {
      pthread_mutex_unlock(&a->lock);
      free(pre);
      free(post);
      return devbuf_error_set(err, DEVBUF_ENOMEM,
                              "mem_alloc: out of host memory (sim device %d)", device);
    }
    a->used = u;
    a->capused = cap;
  }

  sim_block *b;
  size_t pad = 0;
  for (b = a->head; b != NULL; b = b->next) {
    if (b->state != SIM_BLOCK_FREE || b->span < need) continue;
    uintptr_t addr = (uintptr_t)(a->dev_base + b->off);
    uintptr_t aligned = (addr + (align - 1)) & ~(uintptr_t)(align - 1);
    pad = (size_t)(aligned - addr);
    if (pad <= b->span && b->span - pad >= need) break;
  }
  if (b == NULL) {
    size_t free_bytes = a->size - a->used_bytes;
    pthread_mutex_unlock(&a->lock);
    free(pre);
    free(post);
    return devbuf_error_set(err, DEVBUF_ENOMEM,
                            "mem_alloc: SIM_OUT_OF_MEMORY: no free block of %zu bytes aligned to "
                            "%zu on sim device %d (%zu of %zu bytes free)",
                            size, align, device, free_bytes, a->size);
  }

  if (pad > 0) { /* leading fragment stays free */
    *pre = (sim_block){.off = b->off, .span = pad, .state = SIM_BLOCK_FREE,
                       .prev = b->prev, .next = b};
    if (b->prev) b->prev->next = pre; else a->head = pre;
    b->prev = pre;
    b->off += pad;
    b->span -= pad;
    pre = NULL;
  }
  if (b->span > need) { /* trailing fragment stays free */
    *post = (sim_block){.off = b->off + need, .span = b->span - need, .state = SIM_BLOCK_FREE,
                        .prev = b, .next = b->next};
    if (b->next) b->next->prev = post;
    b->next = post;
    b->span = need;
    post = NULL;
  }
  b->state = SIM_BLOCK_USED;
  b->size = size;

  long i = used_floor(a, b->off) + 1;
  memmove(&a->used[i + 1], &a->used[i], (a->nused - (size_t)i) * sizeof *a->used);
  a->used[i] = b;
  a->nused++;
  a->used_bytes += b->span;
  /* Reused memory is likely to be resident memory: count it out of the retained budget. */
  a->retained = a->retained > b->span ? a->retained - b->span : 0;
  *ptr = a->dev_base + b->off;
  pthread_mutex_unlock(&a->lock);
  free(pre);
  free(post);
  return DEVBUF_OK;
}

int sim_arena_begin_free(sim_arena *a, void *ptr, int device, sim_block **out,
                         devbuf_error *err) {
  const unsigned char *p = ptr;
  if (p < a->dev_base || p >= a->dev_base + a->size)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_free: SIM_INVALID_POINTER: %p is not memory of sim device %d", ptr,
                            device);
  size_t off = (size_t)(p - a->dev_base);
  pthread_mutex_lock(&a->lock);
  long i = used_floor(a, off);
  sim_block *b = i >= 0 ? a->used[i] : NULL;
  int code = DEVBUF_OK;
  if (b == NULL || b->off + (b->size ? b->size : 1) <= off) {
    code = devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_free: SIM_INVALID_POINTER: %p is not a live allocation of sim "
                            "device %d (never allocated, or already freed)", ptr, device);
  } else if (b->off != off) {
    code = devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_free: SIM_INVALID_POINTER: %p points %zu bytes into the "
                            "allocation at %p on sim device %d; free its start", ptr,
                            off - b->off, (void *)(a->dev_base + b->off), device);
  } else if (b->state == SIM_BLOCK_FREEING) {
    code = devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_free: SIM_DOUBLE_FREE: %p on sim device %d was already freed",
                            ptr, device);
  } else {
    b->state = SIM_BLOCK_FREEING;
    *out = b;
  }
  pthread_mutex_unlock(&a->lock);
  return code;
}

void sim_arena_release(sim_arena *a, sim_block *b) {
  size_t pg = page_size();
  pthread_mutex_lock(&a->lock);
  long i = used_floor(a, b->off);
  if (i >= 0 && a->used[i] == b) {
    memmove(&a->used[i], &a->used[i + 1], (a->nused - (size_t)i - 1) * sizeof *a->used);
    a->nused--;
  }
  a->used_bytes -= b->span;
  b->state = SIM_BLOCK_FREE;
  b->size = 0;
  if (b->span >= SIM_PUNCH_MIN && a->retained + b->span <= SIM_RETAIN) {
    a->retained += b->span; /* kept resident for the next allocation */
  } else if (b->span >= SIM_PUNCH_MIN) {
    size_t lo = (b->off + pg - 1) / pg * pg, hi = (b->off + b->span) / pg * pg;
    /* Best effort: a failure only means the pages stay resident. */
    if (hi > lo)
      (void)fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                      (off_t)(hi - lo));
  }
  sim_block *n = b->next;
  if (n != NULL && n->state == SIM_BLOCK_FREE) {
    b->span += n->span;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
  }
  sim_block *p = b->prev;
  if (p != NULL && p->state == SIM_BLOCK_FREE) {
    p->span += b->span;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    free(b);
  }
  pthread_mutex_unlock(&a->lock);
}

int sim_arena_resolve(sim_arena *a, const void *ptr, const unsigned char **start,
                      size_t *size) {
  const unsigned char *p = ptr;
  if (p < a->dev_base || p > a->dev_base + a->size) return SIM_RESOLVE_NOT_FOUND;
  size_t off = (size_t)(p - a->dev_base);
  int r = SIM_RESOLVE_NOT_FOUND;
  pthread_mutex_lock(&a->lock);
  long i = used_floor(a, off);
  if (i >= 0) {
    sim_block *b = a->used[i];
    if (off - b->off <= b->size) {
      r = b->state == SIM_BLOCK_FREEING ? SIM_RESOLVE_FREED : SIM_RESOLVE_OK;
      *start = a->dev_base + b->off;
      *size = b->size;
    }
  }
  pthread_mutex_unlock(&a->lock);
  return r;
}

int sim_arena_overlaps(const sim_arena *a, const void *p, size_t n) {
  if (a->fd < 0) return 0;
  uintptr_t lo = (uintptr_t)p, base = (uintptr_t)a->dev_base;
  uintptr_t hi = n > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + (n ? n : 1);
  return lo < base + a->size && hi > base;
}

size_t sim_arena_free_bytes(sim_arena *a) {
  pthread_mutex_lock(&a->lock);
  size_t f = a->size - a->used_bytes;
  pthread_mutex_unlock(&a->lock);
  return f;
}
