/* See fake_common.h. */
#include "fake_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake_alloc {
  uintptr_t base;
  size_t size;
  intptr_t owner;
  int pooled, host;
  struct fake_alloc *next;
} fake_alloc;

static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc *g_allocs;
static long g_live, g_pool_live;

int fake_track(size_t size, size_t alignment, intptr_t owner, int pooled, int host, void **out) {
  void *p = NULL;
  fake_alloc *a;
  if (size == 0) return FAKE_BAD_SIZE;
  if (alignment & (alignment - 1)) return FAKE_BAD_ALIGNMENT;
  if (size >= FAKE_OOM_BYTES) return FAKE_NO_MEMORY;
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (posix_memalign(&p, alignment, size) != 0) return FAKE_NO_MEMORY;
  a = malloc(sizeof *a);
  if (a == NULL) {
    free(p);
    return FAKE_NO_MEMORY;
  }
  a->base = (uintptr_t)p;
  a->size = size;
  a->owner = owner;
  a->pooled = pooled;
  a->host = host;
  pthread_mutex_lock(&g_alloc_lock);
  a->next = g_allocs;
  g_allocs = a;
  g_live++;
  if (pooled) g_pool_live++;
  pthread_mutex_unlock(&g_alloc_lock);
  *out = p;
  return FAKE_OK;
}

int fake_untrack(void *base, int pooled, int host, intptr_t owner) {
  int ok = 0;
  pthread_mutex_lock(&g_alloc_lock);
  for (fake_alloc **pp = &g_allocs; *pp; pp = &(*pp)->next) {
    fake_alloc *a = *pp;
    if (a->base != (uintptr_t)base) continue;
    if (a->pooled != pooled || (host != FAKE_ANY_KIND && a->host != host))
      break; /* the wrong free function */
    if (owner != FAKE_ANY_OWNER && a->owner != owner) break;  /* another device or context */
    *pp = a->next;
    g_live--;
    if (pooled) g_pool_live--;
    free((void *)a->base);
    free(a);
    ok = 1;
    break;
  }
  pthread_mutex_unlock(&g_alloc_lock);
  return ok;
}

int fake_inside(uintptr_t p, size_t n, int host, intptr_t owner) {
  int ok = 0;
  pthread_mutex_lock(&g_alloc_lock);
  for (fake_alloc *a = g_allocs; a; a = a->next)
    if (a->host == host && (owner == FAKE_ANY_OWNER || a->owner == owner) && p >= a->base &&
        p - a->base <= a->size && n <= a->size - (p - a->base)) {
      ok = 1;
      break;
    }
  pthread_mutex_unlock(&g_alloc_lock);
  return ok;
}

int fake_range_ok(uintptr_t p, size_t n) {
  int ok = 1;
  pthread_mutex_lock(&g_alloc_lock);
  for (fake_alloc *a = g_allocs; a; a = a->next)
    if (!a->host && p >= a->base && p <= a->base + a->size) {
      ok = n <= a->size - (p - a->base);
      break;
    }
  pthread_mutex_unlock(&g_alloc_lock);
  return ok;
}

long fake_live_count(void) {
  pthread_mutex_lock(&g_alloc_lock);
  long n = g_live;
  pthread_mutex_unlock(&g_alloc_lock);
  return n;
}

long fake_pool_count(void) {
  pthread_mutex_lock(&g_alloc_lock);
  long n = g_pool_live;
  pthread_mutex_unlock(&g_alloc_lock);
  return n;
}

void fake_live_add(long delta) {
  pthread_mutex_lock(&g_alloc_lock);
  g_live += delta;
  pthread_mutex_unlock(&g_alloc_lock);
}

const fake_error *fake_error_find(const fake_error *table, size_t n, long long code) {
  for (size_t i = 0; i < n; i++)
    if (table[i].code == code) return &table[i];
  return NULL;
}

void *fake_handle_new(size_t size, unsigned magic, int device) {
  fake_handle *h = calloc(1, size);
  if (h == NULL) return NULL;
  h->magic = magic;
  h->device = device;
  return h;
}

int fake_handle_is(const void *h, unsigned magic) {
  return h != NULL && ((const fake_handle *)h)->magic == magic;
}

void fake_handle_free(void *h) {
  ((fake_handle *)h)->magic = 0;
  free(h);
}
