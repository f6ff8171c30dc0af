/* plugins/common: the over-aligned allocation table, the handle registry,
 * and the argument checks every GPU slot repeats. See gpu_common.h. */
#include <stdlib.h>
#include <string.h>

#include "gpu_common.h"

/* ---- over-aligned allocations ---------------------------------------------- */

int gpu_align_init(gpu_align_table *t) {
  memset(t, 0, sizeof *t);
  atomic_init(&t->count, 0);
  return pthread_mutex_init(&t->lock, NULL) == 0;
}

void gpu_align_destroy(gpu_align_table *t) {
  free(t->entries);
  t->entries = NULL;
  pthread_mutex_destroy(&t->lock);
}

int gpu_align_remember(gpu_align_table *t, uintptr_t aligned, uintptr_t base) {
  int ok = 1;
  pthread_mutex_lock(&t->lock);
  size_t n = atomic_load(&t->count);
  if (n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    gpu_align_entry *grown = realloc(t->entries, cap * sizeof *grown);
    if (grown == NULL) {
      ok = 0;
    } else {
      t->entries = grown;
      t->cap = cap;
    }
  }
  if (ok) {
    t->entries[n].aligned = aligned;
    t->entries[n].base = base;
    atomic_store(&t->count, n + 1);
  }
  pthread_mutex_unlock(&t->lock);
  return ok;
}

uintptr_t gpu_align_base(gpu_align_table *t, uintptr_t ptr, int remove) {
  uintptr_t base = ptr;
  if (atomic_load_explicit(&t->count, memory_order_relaxed) == 0) return base;
  pthread_mutex_lock(&t->lock);
  size_t n = atomic_load(&t->count);
  for (size_t i = 0; i < n; i++) {
    if (t->entries[i].aligned == ptr) {
      base = t->entries[i].base;
      if (remove) {
        t->entries[i] = t->entries[n - 1];
        atomic_store(&t->count, n - 1);
      }
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
  return base;
}

int gpu_alloc_request(void **ptr, size_t size, size_t alignment, size_t native, size_t *request,
                      devbuf_error *err) {
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: NULL ptr");
  *ptr = NULL;
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two",
                            alignment);
  *request = size ? size : 1; /* size 0 still yields a unique pointer */
  if (alignment > native) {
    if (*request > SIZE_MAX - alignment)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: %zu bytes aligned to %zu overflows",
                              size, alignment);
    *request += alignment;
  }
  return DEVBUF_OK;
}

uintptr_t gpu_align_up(uintptr_t base, size_t alignment, size_t native) {
  if (alignment <= native) return base;
  return (base + alignment - 1) & ~(uintptr_t)(alignment - 1);
}

int gpu_pool_wanted(const char *env_var) {
  const char *off = secure_getenv(env_var);
  return off == NULL || off[0] == '\0' || strcmp(off, "0") == 0;
}

/* ---- stream and event handles ---------------------------------------------- */

#define GPU_HANDLE_TOMBSTONE ((void *)(uintptr_t)1)

int gpu_handles_init(gpu_handles *h) {
  memset(h, 0, sizeof *h);
  return pthread_mutex_init(&h->lock, NULL) == 0;
}

void gpu_handles_destroy(gpu_handles *h) {
  free(h->entries);
  h->entries = NULL;
  pthread_mutex_destroy(&h->lock);
}

static size_t gpu_handle_slot(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 17) & (cap - 1);
}

/* Called with the lock held. */
static int gpu_handles_grow(gpu_handles *h) {
  size_t cap = h->cap ? h->cap * 2 : 64;
  gpu_handle_entry *old = h->entries, *t = calloc(cap, sizeof *t);
  if (t == NULL) return 0;
  h->used = 0;
  for (size_t i = 0; i < h->cap; i++) {
    if (old[i].ptr == NULL || old[i].ptr == GPU_HANDLE_TOMBSTONE) continue;
    size_t j = gpu_handle_slot(old[i].ptr, cap);
    while (t[j].ptr != NULL) j = (j + 1) & (cap - 1);
    t[j] = old[i];
    h->used++;
  }
  free(old);
  h->entries = t;
  h->cap = cap;
  return 1;
}

int gpu_handle_add(gpu_handles *h, void *p, int kind) {
  int ok = 1;
  pthread_mutex_lock(&h->lock);
  if ((h->used + 1) * 2 > h->cap) ok = gpu_handles_grow(h);
  if (ok) {
    size_t j = gpu_handle_slot(p, h->cap);
    while (h->entries[j].ptr != NULL && h->entries[j].ptr != GPU_HANDLE_TOMBSTONE)
      j = (j + 1) & (h->cap - 1);
    if (h->entries[j].ptr == NULL) h->used++;
    h->entries[j].ptr = p;
    h->entries[j].kind = kind;
  }
  pthread_mutex_unlock(&h->lock);
  return ok;
}

int gpu_handle_find(gpu_handles *h, const void *p, int remove) {
  int kind = 0;
  pthread_mutex_lock(&h->lock);
  if (h->cap != 0 && p != NULL) {
    size_t j = gpu_handle_slot(p, h->cap);
    while (h->entries[j].ptr != NULL) {
      if (h->entries[j].ptr == p) {
        kind = h->entries[j].kind;
        if (remove) h->entries[j].ptr = GPU_HANDLE_TOMBSTONE;
        break;
      }
      j = (j + 1) & (h->cap - 1);
    }
  }
  pthread_mutex_unlock(&h->lock);
  return kind;
}

/* ---- argument checks and slot plumbing ----------------------------------- */

int gpu_check_out(void **out, const char *what, const char *name, devbuf_error *err) {
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL %s", what, name);
  *out = NULL;
  return DEVBUF_OK;
}

static int gpu_add_offset(uintptr_t base, size_t offset, uintptr_t *out) {
  if (offset > UINTPTR_MAX - base) return 0;
  *out = base + offset;
  return 1;
}

int gpu_check_copy(const char *what, void *dst, size_t dst_offset, const void *src,
                   size_t src_offset, size_t nbytes, uintptr_t *to, uintptr_t *from,
                   int *nothing, devbuf_error *err) {
  *nothing = nbytes == 0;
  if (*nothing) return DEVBUF_OK;
  if (dst == NULL || src == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL %s", what, dst ? "src" : "dst");
  if (!gpu_add_offset((uintptr_t)dst, dst_offset, to) ||
      !gpu_add_offset((uintptr_t)src, src_offset, from))
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: offset overflows", what);
  return DEVBUF_OK;
}

int gpu_props_copy_out(devbuf_device_props *props, devbuf_device_props *p, devbuf_error *err) {
  size_t n = props->struct_size ? props->struct_size : sizeof *p;
  if (n > sizeof *p) n = sizeof *p;
  if (n < offsetof(devbuf_device_props, flags) + sizeof p->flags)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: struct_size %u is too small",
                            (unsigned)props->struct_size);
  p->struct_size = (uint32_t)n;
  memcpy(props, p, n);
  return DEVBUF_OK;
}

static int gpu_info_identifier(gpu_lazy *lz, const char *identifier, const char *what,
                               devbuf_error *err) {
  if (identifier != NULL && lz != NULL && strcmp(identifier, lz->plugin) == 0) return DEVBUF_OK;
  return devbuf_error_set(err, DEVBUF_ENOTFOUND, "%s: %s does not implement \"%s\"", what,
                          lz ? lz->plugin : "this plugin", identifier ? identifier : "(null)");
}

int gpu_info_export_check(gpu_lazy *lz, const char *identifier, int device, uint32_t flags,
                          const void *out, size_t capacity, const size_t *size,
                          devbuf_error *err) {
  int rc = gpu_info_identifier(lz, identifier, "device_info_export", err);
  if (rc == DEVBUF_OK)
    rc = devbuf_device_info_check_out(out, capacity, size, flags, GPU_INFO_FLAGS,
                                      "device_info_export", err);
  if (rc == DEVBUF_OK) rc = gpu_lazy_ensure(lz, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= lz->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "device_info_export: no device %d (%d devices)",
                            device, lz->count);
  return DEVBUF_OK;
}

int gpu_info_import(void *state, const char *identifier, const void *info,
                    devbuf_device_info_desc *out, devbuf_error *err) {
  gpu_lazy *lz = state;
  int rc = gpu_info_identifier(lz, identifier, "device_info_import", err);
  if (rc == DEVBUF_OK)
    rc = devbuf_device_info_read(info, GPU_INFO_FLAGS, out, "device_info_import", err);
  if (rc == DEVBUF_OK) rc = gpu_lazy_ensure(lz, err);
  if (rc != DEVBUF_OK) return rc;
  if (out->device_ordinal >= lz->count)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "device_info_import: device_ordinal %d out of range (%d devices)",
                            (int)out->device_ordinal, lz->count);
  return DEVBUF_OK;
}

int gpu_device_count(void *state, int *count, devbuf_error *err) {
  gpu_lazy *lz = state;
  int rc;
  if (count == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_count: NULL count");
  rc = gpu_lazy_ensure(lz, err);
  *count = rc == DEVBUF_OK ? lz->count : 0;
  return rc;
}

int gpu_info_export_raw(void *state, const char *identifier, int device, void *event,
                        void *stream, uint32_t flags, void *out, size_t capacity, size_t *size,
                        devbuf_error *err) {
  int rc = gpu_info_export_check(state, identifier, device, flags, out, capacity, size, err);
  if (rc == DEVBUF_OK) devbuf_device_info_write(out, size, device, flags, event, stream);
  return rc;
}

/* ---- a plugin's state -------------------------------------------------- */

int gpu_base_new(void **state, size_t size, const char *plugin, int (*load)(gpu_lazy *),
                 const struct gpu_vendor *vendor, devbuf_error *err) {
  gpu_base *b;
  int rc;
  *state = NULL;
  b = calloc(1, size);
  if (b == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "%s init: out of memory", plugin);
  rc = gpu_lazy_init(&b->lazy, plugin, load, err);
  if (rc != DEVBUF_OK) {
    free(b);
    return rc;
  }
  if (!gpu_align_init(&b->align)) {
    gpu_lazy_destroy(&b->lazy);
    free(b);
    return devbuf_error_set(err, DEVBUF_EINIT, "%s init: pthread_mutex_init failed", plugin);
  }
  if (!gpu_handles_init(&b->handles)) {
    gpu_align_destroy(&b->align);
    gpu_lazy_destroy(&b->lazy);
    free(b);
    return devbuf_error_set(err, DEVBUF_EINIT, "%s init: pthread_mutex_init failed", plugin);
  }
  b->vendor = vendor;
  *state = b;
  return DEVBUF_OK;
}

void gpu_base_free(void *state) {
  gpu_base *b = state;
  gpu_handles_destroy(&b->handles);
  gpu_align_destroy(&b->align);
  gpu_lazy_destroy(&b->lazy);
  free(b);
}
