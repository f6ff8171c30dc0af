/* Checked wrappers over a plugin's table: argument checks, error context,
 * allocation bookkeeping (live bytes for leak checks, double and foreign
 * frees caught before they reach the plugin). */
#include <stdlib.h>
#include <string.h>

#include "devbuf/dlpack.h"
#include "internal.h"

/* ---- allocation map ---------------------------------------------------------- */

#define AM_EMPTY ((uintptr_t)0)
#define AM_TOMB ((uintptr_t)1)

static size_t am_hash(uintptr_t k, size_t cap) {
  uint64_t x = (uint64_t)k;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

/* Keys 0 and 1 are reserved markers; store key+2 so that any pointer fits. */
static int am_grow(devbuf_allocmap *m) {
  size_t ncap = m->capacity ? m->capacity * 2 : 64;
  uintptr_t *nk = calloc(ncap, sizeof *nk);
  size_t *ns = calloc(ncap, sizeof *ns);
  if (!nk || !ns) { free(nk); free(ns); return DEVBUF_ENOMEM; }
  for (size_t i = 0; i < m->capacity; i++) {
    uintptr_t k = m->keys[i];
    if (k == AM_EMPTY || k == AM_TOMB) continue;
    size_t j = am_hash(k, ncap);
    while (nk[j] != AM_EMPTY) j = (j + 1) & (ncap - 1);
    nk[j] = k;
    ns[j] = m->sizes[i];
  }
  free(m->keys); free(m->sizes);
  m->keys = nk; m->sizes = ns; m->capacity = ncap; m->tombstones = 0;
  return DEVBUF_OK;
}

/* DEVBUF_EEXIST when p is already live: a plugin handed it out twice. */
static int am_insert(devbuf_allocmap *m, void *p, size_t size) {
  if ((m->count + m->tombstones + 1) * 4 >= m->capacity * 3) {
    if (am_grow(m) != DEVBUF_OK) return DEVBUF_ENOMEM;
  }
  uintptr_t k = (uintptr_t)p + 2;
  size_t j = am_hash(k, m->capacity), slot = (size_t)-1;
  /* Look past tombstones for a live entry before reusing one. */
  while (m->keys[j] != AM_EMPTY) {
    if (m->keys[j] == k) return DEVBUF_EEXIST;
    if (m->keys[j] == AM_TOMB && slot == (size_t)-1) slot = j;
    j = (j + 1) & (m->capacity - 1);
  }
  if (slot != (size_t)-1) j = slot;
  if (m->keys[j] == AM_TOMB) m->tombstones--;
  m->keys[j] = k;
  m->sizes[j] = size;
  m->count++;
  return DEVBUF_OK;
}

/* 1 and *size if found (and removed when `remove`). */
static int am_find(devbuf_allocmap *m, void *p, size_t *size, int remove) {
  if (m->capacity == 0) return 0;
  uintptr_t k = (uintptr_t)p + 2;
  size_t j = am_hash(k, m->capacity);
  while (m->keys[j] != AM_EMPTY) {
    if (m->keys[j] == k) {
      if (size) *size = m->sizes[j];
      if (remove) { m->keys[j] = AM_TOMB; m->tombstones++; m->count--; }
      return 1;
    }
    j = (j + 1) & (m->capacity - 1);
  }
  return 0;
}

/* ---- checks ------------------------------------------------------------------------ */

static int check_dev(const devbuf_device *dev, const char *op, devbuf_error *err) {
  if (dev == NULL || dev->backend == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: device is NULL (open one with devbuf_device_open)", op);
  devbuf_backend *b = dev->backend;
  if (b->state != DEVBUF_PLUGIN_LOADED)
    return devbuf_error_set(err, DEVBUF_ENODEV, "%s: %s:%d: plugin '%s' is no longer registered", op,
                            dev->identifier, dev->ordinal, b->name ? b->name : "?");
  if (dev->ordinal < 0 || dev->ordinal >= b->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "%s: %s:%d: no such device", op, dev->identifier,
                            dev->ordinal);
  return DEVBUF_OK;
}

/* A plugin call failed: make sure the message exists and says where. */
static int plugin_failed(const devbuf_device *dev, const char *op, int rc, devbuf_error *err) {
  if (err == NULL) return devbuf__status_known(rc) ? rc : DEVBUF_EBACKEND;
  char num[48];
  if (!devbuf__status_known(rc)) {
    /* A plugin broke the contract: keep codes in range, and say what it returned. */
    char tmp[DEVBUF_ERROR_MESSAGE_SIZE];
    snprintf(tmp, sizeof tmp, "%s returned %s%s%s", op, devbuf__status_text(rc, num, sizeof num),
             err->message[0] ? ": " : "", err->message);
    memcpy(err->message, tmp, sizeof tmp);
    rc = DEVBUF_EBACKEND;
  }
  if (err->message[0] == '\0')
    snprintf(err->message, sizeof err->message, "%s failed with %s (the plugin gave no message)",
             op, devbuf_status_name(rc));
  err->code = rc;
  char tmp[DEVBUF_ERROR_MESSAGE_SIZE];
  snprintf(tmp, sizeof tmp, "%s:%d: %s", dev->identifier, dev->ordinal, err->message);
  memcpy(err->message, tmp, sizeof tmp);
  return rc;
}

#define CALL(dev, op, slot, ...)                                                        \
  do {                                                                                  \
    int rc_ = check_dev((dev), op, err);                                                \
    if (rc_) return rc_;                                                                \
    devbuf_backend *b_ = (dev)->backend;                                                \
    if (b_->table.slot == NULL)                                                         \
      return devbuf_error_set(err, DEVBUF_ENOTSUP, "%s:%d: %s: plugin '%s' does not implement it", \
                              (dev)->identifier, (dev)->ordinal, op, b_->name);          \
    if (err) devbuf_error_clear(err);                                                   \
    rc_ = b_->table.slot(b_->plugin_state, (dev)->ordinal, __VA_ARGS__, err);           \
    if (rc_) return plugin_failed((dev), op, rc_, err);                                 \
  } while (0)

/* Is `s` a NUL-terminated string within its `cap` bytes, without control
 * characters (UTF-8 is allowed)? The offending byte's offset in *bad. */
static int props_string_ok(const char *s, size_t cap, size_t *bad) {
  for (size_t i = 0; i < cap; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == 0) return 1;
    if (ch < 0x20 || ch == 0x7f) {
      *bad = i;
      return 0;
    }
  }
  *bad = cap;
  return 0;
}

/* -1 (none) or a DLDeviceType that DLPack defines (devbuf/dlpack.h). */
static int props_dlpack_known(int32_t t) {
  return t == -1 || (t >= kDLCPU && t <= kDLOpenCL) || (t >= kDLVulkan && t <= kDLAscend);
}

#define PROPS_LAYOUT_HINT                                                                  \
  " (is devbuf_device_props laid out as in devbuf/plugin.h? In Rust it needs #[repr(C)])"

static int props_layout_check(const devbuf_device *dev, devbuf_device_props *props,
                              devbuf_error *err) {
  devbuf_backend *pb = dev->backend;
  size_t bad = 0;
  if (props->alloc_alignment == 0)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: device_props: plugin '%s' reports alloc_alignment 0: it must "
                            "be the alignment mem_alloc guarantees, a power of two (1 if none)"
                            PROPS_LAYOUT_HINT,
                            dev->identifier, dev->ordinal, pb->name);
  static const struct { const char *what; size_t off, cap; } strs[] = {
      {"name", offsetof(devbuf_device_props, name), sizeof props->name},
      {"vendor", offsetof(devbuf_device_props, vendor), sizeof props->vendor}};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    const char *str = (const char *)props + strs[i].off;
    if (props_string_ok(str, strs[i].cap, &bad)) continue;
    if (bad == strs[i].cap)
      return devbuf_error_set(err, DEVBUF_EABI,
                              "%s:%d: device_props: plugin '%s' reports a %s with no terminating "
                              "NUL within its %zu bytes" PROPS_LAYOUT_HINT,
                              dev->identifier, dev->ordinal, pb->name, strs[i].what, strs[i].cap);
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: device_props: plugin '%s' reports a %s with control character "
                            "0x%02x at byte %zu" PROPS_LAYOUT_HINT,
                            dev->identifier, dev->ordinal, pb->name, strs[i].what,
                            (unsigned)(unsigned char)str[bad], bad);
  }
  if (!props_dlpack_known(props->dlpack_device_type))
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: device_props: plugin '%s' reports dlpack_device_type %d, which "
                            "is neither -1 nor a DLPack DLDeviceType" PROPS_LAYOUT_HINT,
                            dev->identifier, dev->ordinal, pb->name,
                            (int)props->dlpack_device_type);
  return DEVBUF_OK;
}

int devbuf_device_props_get(const devbuf_device *dev, devbuf_device_props *props,
                            devbuf_error *err) {
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: props is NULL");
  memset(props, 0, sizeof *props);
  props->struct_size = sizeof *props;
  props->dlpack_device_type = -1;
  CALL(dev, "device_props", device_props, props);
  props->struct_size = sizeof *props;
  /* Checked, not trusted: callers size and align by these. */
  devbuf_backend *pb = dev->backend;
  if (props->alloc_alignment & (props->alloc_alignment - 1))
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: device_props: plugin '%s' reports alloc_alignment %u, not a "
                            "power of two",
                            dev->identifier, dev->ordinal, pb->name, props->alloc_alignment);
  if (props->total_memory != 0 && props->free_memory > props->total_memory)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: device_props: plugin '%s' reports free memory %llu above its "
                            "total %llu",
                            dev->identifier, dev->ordinal, pb->name,
                            (unsigned long long)props->free_memory,
                            (unsigned long long)props->total_memory);
  /* One rule with the conformance suite's `properties` check:
   * a struct the plugin did not lay out as in C (a Rust struct without
   * #[repr(C)]) reads as garbage here, and must not list as a working device. */
  return props_layout_check(dev, props, err);
}

/* The alignment `dev`'s allocations must have when its pointers are
 * addresses, from its device_props (asked once per device), or 0 when they
 * cannot be checked: handles (OpenCL cl_mem, Vulkan, Metal), or props refused.
 * The same rule as the conformance suite's alloc_alignment check. */
static uint32_t address_alignment(const devbuf_device *dev) {
  devbuf_backend *b = dev->backend;
  uint32_t v = 0;
  pthread_mutex_lock(&b->lock);
  if (b->alloc_align == NULL && b->count > 0) b->alloc_align = calloc((size_t)b->count, sizeof v);
  if (b->alloc_align != NULL) v = b->alloc_align[dev->ordinal];
  pthread_mutex_unlock(&b->lock);
  if (v != 0) return v == UINT32_MAX ? 0 : v;
  devbuf_device_props props;
  devbuf_error e;
  v = UINT32_MAX;
  if (devbuf_device_props_get(dev, &props, &e) == DEVBUF_OK) {
    int dl = props.dlpack_device_type;
    int addresses = (props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) ||
                    (dl != -1 && dl != DEVBUF_DL_OPENCL && dl != DEVBUF_DL_VULKAN &&
                     dl != DEVBUF_DL_METAL);
    if (addresses) v = props.alloc_alignment ? props.alloc_alignment : 1;
  }
  pthread_mutex_lock(&b->lock);
  if (b->alloc_align != NULL) b->alloc_align[dev->ordinal] = v;
  pthread_mutex_unlock(&b->lock);
  return v == UINT32_MAX ? 0 : v;
}

int devbuf_mem_alloc(const devbuf_device *dev, size_t size, size_t alignment, void *stream,
                     void **ptr, devbuf_error *err) {
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: ptr is NULL");
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two", alignment);
  *ptr = NULL;
  CALL(dev, "mem_alloc", mem_alloc, size, alignment, stream, ptr);
  devbuf_backend *b = dev->backend;
  if (*ptr == NULL) /* contract: success gives a non-NULL handle */
    return devbuf_error_set(err, DEVBUF_EBACKEND, "%s:%d: mem_alloc: plugin '%s' returned success and a NULL pointer",
                            dev->identifier, dev->ordinal, b->name);
  /* Checked, not trusted: a pointer off by one byte was accepted,
   * and every consumer that sizes vector loads by the promised alignment
   * would fault or tear later, far from the plugin. A size-0 allocation is
   * a unique handle, not memory, and is not checked. */
  uint32_t dev_align = size ? address_alignment(dev) : 0;
  if (dev_align != 0) {
    size_t want = alignment > dev_align ? alignment : dev_align;
    if ((uintptr_t)*ptr & (want - 1)) {
      void *bad = *ptr;
      *ptr = NULL;
      b->table.mem_free(b->plugin_state, dev->ordinal, bad, stream, NULL);
      return devbuf_error_set(err, DEVBUF_EABI,
                              "%s:%d: mem_alloc: plugin '%s' returned %p, which is not aligned "
                              "to %zu bytes (asked alignment %zu; its device_props promise "
                              "alloc_alignment %u): mem_alloc must align to the larger of the "
                              "two; the allocation was handed back to mem_free",
                              dev->identifier, dev->ordinal, b->name, bad, want, alignment,
                              (unsigned)dev_align);
    }
  }
  pthread_mutex_lock(&b->lock);
  int rc = am_insert(&b->allocs, *ptr, size);
  pthread_mutex_unlock(&b->lock);
  if (rc == DEVBUF_EEXIST) {
    /* The same memory twice: two buffers would alias. Not freed, since it
     * is the earlier allocation's. */
    void *dup = *ptr;
    *ptr = NULL;
    return devbuf_error_set(err, DEVBUF_EABI,
                            "%s:%d: mem_alloc: plugin '%s' returned %p, which is already a live "
                            "allocation (handed out twice)",
                            dev->identifier, dev->ordinal, b->name, dup);
  }
  if (rc != DEVBUF_OK) {
    b->table.mem_free(b->plugin_state, dev->ordinal, *ptr, stream, NULL);
    *ptr = NULL;
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory for bookkeeping");
  }
  atomic_fetch_add(&b->live_allocations, 1);
  atomic_fetch_add(&b->live_bytes, size);
  atomic_fetch_add(&b->total_allocations, 1);
  return DEVBUF_OK;
}

int devbuf_mem_free(const devbuf_device *dev, void *ptr, void *stream, devbuf_error *err) {
  int rc = check_dev(dev, "mem_free", err);
  if (rc) return rc;
  if (ptr == NULL) return DEVBUF_OK; /* like free(NULL) */
  devbuf_backend *b = dev->backend;
  size_t size = 0;
  pthread_mutex_lock(&b->lock);
  int found = am_find(&b->allocs, ptr, &size, 1);
  pthread_mutex_unlock(&b->lock);
  if (!found)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s:%d: mem_free: pointer %p was not allocated through this device, "
                            "or was already freed", dev->identifier, dev->ordinal, ptr);
  if (err) devbuf_error_clear(err);
  rc = b->table.mem_free(b->plugin_state, dev->ordinal, ptr, stream, err);
  if (rc) {
    pthread_mutex_lock(&b->lock); /* still the caller's: put it back */
    am_insert(&b->allocs, ptr, size);
    pthread_mutex_unlock(&b->lock);
    return plugin_failed(dev, "mem_free", rc, err);
  }
  atomic_fetch_sub(&b->live_allocations, 1);
  atomic_fetch_sub(&b->live_bytes, size);
  return DEVBUF_OK;
}

int devbuf_host_alloc(const devbuf_device *dev, size_t size, void **ptr, devbuf_error *err) {
  int rc = check_dev(dev, "host_alloc", err);
  if (rc) return rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "host_alloc: ptr is NULL");
  devbuf_backend *b = dev->backend;
  if (b->table.host_alloc == NULL) {
    /* No staging memory: plain page-aligned host memory, freed with host_free. */
    if (posix_memalign(ptr, 4096, size ? size : 1) != 0)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "host_alloc: cannot allocate %zu host bytes", size);
  } else {
    CALL(dev, "host_alloc", host_alloc, size, ptr);
  }
  atomic_fetch_add(&b->live_host_allocations, 1);
  return DEVBUF_OK;
}

int devbuf_host_free(const devbuf_device *dev, void *ptr, devbuf_error *err) {
  int rc = check_dev(dev, "host_free", err);
  if (rc) return rc;
  if (ptr == NULL) return DEVBUF_OK;
  devbuf_backend *b = dev->backend;
  if (b->table.host_free == NULL || b->table.host_alloc == NULL) {
    free(ptr);
  } else {
    CALL(dev, "host_free", host_free, ptr);
  }
  atomic_fetch_sub(&b->live_host_allocations, 1);
  return DEVBUF_OK;
}

/* ---- synchronous defaults (ABI 1.1) ---------------------------------------------
 * A plugin of ABI minor >= 1 may leave the copy, stream and event slots NULL
 * when its device is host-accessible: copies are then memcpy, done when they
 * return, so every stream and event is complete at once. Default handles are
 * small tokens the runtime makes and checks, never NULL, so that the default
 * stream (NULL) stays distinct from a created one. */

/* 1 when `dev`'s plugin leaves `slot` NULL and the runtime stands in; 0 when
 * the plugin implements it; -1 (err set) when it may not be left NULL. */
static int use_default(const devbuf_device *dev, const void *slot, const char *op,
                       devbuf_error *err) {
  if (slot != NULL) return 0;
  devbuf_backend *b = dev->backend;
  devbuf_device_props props;
  devbuf_error e;
  if (devbuf_device_props_get(dev, &props, &e) != DEVBUF_OK) {
    if (err) *err = e;
    return -1;
  }
  if (!(props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE)) {
    devbuf_error_set(err, DEVBUF_ENOTSUP,
                     "%s:%d: %s: plugin '%s' leaves the slot NULL, which only a host-accessible "
                     "device may do (its device_props lacks DEVBUF_DEVICE_HOST_ACCESSIBLE)",
                     dev->identifier, dev->ordinal, op, b->name);
    return -1;
  }
  return 1;
}

/* Remember a handle the runtime handed out (NULL is the default stream). */
static void track(devbuf_backend *b, devbuf_allocmap *m, void *h) {
  if (h == NULL) return;
  pthread_mutex_lock(&b->lock);
  am_insert(m, h, 0);
  pthread_mutex_unlock(&b->lock);
}

static int known(devbuf_backend *b, devbuf_allocmap *m, void *h, int remove) {
  pthread_mutex_lock(&b->lock);
  int k = am_find(m, h, NULL, remove);
  pthread_mutex_unlock(&b->lock);
  return k;
}

/* A default stream or event handle must be one the runtime made. */
static int default_handle(const devbuf_device *dev, devbuf_allocmap *m, void *h, int remove,
                          const char *op, const char *what, devbuf_error *err) {
  if (known(dev->backend, m, h, remove)) return DEVBUF_OK;
  return devbuf_error_set(err, DEVBUF_EINVAL, "%s:%d: %s: %p is not a live %s of this device",
                          dev->identifier, dev->ordinal, op, h, what);
}

#define DEFAULT_OR_CALL(dev, op, slot, dflt, ...)                                       \
  do {                                                                                  \
    int crc_ = check_dev((dev), op, err);                                               \
    if (crc_) return crc_;                                                              \
    int d_ = use_default((dev), (const void *)(dev)->backend->table.slot, op, err);     \
    if (d_ < 0) return err ? err->code : DEVBUF_ENOTSUP;                                \
    if (d_ > 0) { dflt; }                                                               \
    else CALL(dev, op, slot, __VA_ARGS__);                                              \
  } while (0)

int devbuf_stream_create(const devbuf_device *dev, void **stream, devbuf_error *err) {
  if (stream == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "stream_create: stream is NULL");
  *stream = NULL;
  DEFAULT_OR_CALL(dev, "stream_create", stream_create, {
    if ((*stream = calloc(1, 1)) == NULL)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  }, stream);
  track(dev->backend, &dev->backend->streams, *stream);
  atomic_fetch_add(&dev->backend->live_streams, 1);
  return DEVBUF_OK;
}

int devbuf_stream_destroy(const devbuf_device *dev, void *stream, devbuf_error *err) {
  DEFAULT_OR_CALL(dev, "stream_destroy", stream_destroy, {
    if (stream == NULL)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "%s:%d: stream_destroy: the default stream (NULL) cannot be destroyed",
                              dev->identifier, dev->ordinal);
    int r_ = default_handle(dev, &dev->backend->streams, stream, 1, "stream_destroy", "stream", err);
    if (r_) return r_;
    free(stream);
  }, stream);
  if (stream) known(dev->backend, &dev->backend->streams, stream, 1);
  atomic_fetch_sub(&dev->backend->live_streams, 1);
  return DEVBUF_OK;
}

int devbuf_stream_synchronize(const devbuf_device *dev, void *stream, devbuf_error *err) {
  DEFAULT_OR_CALL(dev, "stream_synchronize", stream_synchronize, {
    if (stream) {
      int r_ = default_handle(dev, &dev->backend->streams, stream, 0, "stream_synchronize", "stream", err);
      if (r_) return r_;
    }
  }, stream);
  return DEVBUF_OK;
}

int devbuf_event_create(const devbuf_device *dev, void **event, devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_create: event is NULL");
  *event = NULL;
  DEFAULT_OR_CALL(dev, "event_create", event_create, {
    if ((*event = calloc(1, 1)) == NULL)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  }, event);
  track(dev->backend, &dev->backend->events, *event);
  atomic_fetch_add(&dev->backend->live_events, 1);
  return DEVBUF_OK;
}

int devbuf_event_destroy(const devbuf_device *dev, void *event, devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_destroy: event is NULL");
  DEFAULT_OR_CALL(dev, "event_destroy", event_destroy, {
    int r_ = default_handle(dev, &dev->backend->events, event, 1, "event_destroy", "event", err);
    if (r_) return r_;
    free(event);
  }, event);
  known(dev->backend, &dev->backend->events, event, 1);
  atomic_fetch_sub(&dev->backend->live_events, 1);
  return DEVBUF_OK;
}

/* Every default event and stream is complete at once: only the handle is checked. */
#define DEFAULT_EVENT_OP(dev, op)                                                       \
  {                                                                                     \
    int r_ = default_handle(dev, &dev->backend->events, event, 0, op, "event", err);     \
    if (r_) return r_;                                                                  \
  }

int devbuf_event_record(const devbuf_device *dev, void *event, void *stream, devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_record: event is NULL");
  DEFAULT_OR_CALL(dev, "event_record", event_record, DEFAULT_EVENT_OP(dev, "event_record"),
                  event, stream);
  return DEVBUF_OK;
}

int devbuf_stream_wait_event(const devbuf_device *dev, void *stream, void *event,
                             devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "stream_wait_event: event is NULL");
  DEFAULT_OR_CALL(dev, "stream_wait_event", stream_wait_event,
                  DEFAULT_EVENT_OP(dev, "stream_wait_event"), stream, event);
  return DEVBUF_OK;
}

int devbuf_event_synchronize(const devbuf_device *dev, void *event, devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_synchronize: event is NULL");
  DEFAULT_OR_CALL(dev, "event_synchronize", event_synchronize,
                  DEFAULT_EVENT_OP(dev, "event_synchronize"), event);
  return DEVBUF_OK;
}

int devbuf_event_query(const devbuf_device *dev, void *event, devbuf_error *err) {
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_query: event is NULL");
  int rc = check_dev(dev, "event_query", err);
  if (rc) return rc;
  devbuf_backend *b = dev->backend;
  int d = use_default(dev, (const void *)b->table.event_query, "event_query", err);
  if (d < 0) return err ? err->code : DEVBUF_ENOTSUP;
  if (d > 0) return default_handle(dev, &b->events, event, 0, "event_query", "event", err);
  if (err) devbuf_error_clear(err);
  rc = b->table.event_query(b->plugin_state, dev->ordinal, event, err);
  if (rc == DEVBUF_EBUSY || rc == DEVBUF_OK) return rc; /* EBUSY = not yet: not an error */
  return plugin_failed(dev, "event_query", rc, err);
}

/* Bounds of a copy against the runtime's own record, when it has one. */
static int check_range(const devbuf_device *dev, const char *op, const void *ptr, size_t off,
                       size_t n, devbuf_error *err) {
  devbuf_backend *b = dev->backend;
  size_t size = 0;
  pthread_mutex_lock(&b->lock);
  int known = am_find(&b->allocs, (void *)ptr, &size, 0);
  pthread_mutex_unlock(&b->lock);
  if (known && (off > size || n > size - off))
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s:%d: %s: range [%zu, %zu+%zu) is outside the %zu-byte allocation %p",
                            dev->identifier, dev->ordinal, op, off, off, n, size, ptr);
  return DEVBUF_OK;
}

int devbuf_copy_h2d(const devbuf_device *dev, void *dst, size_t dst_offset, const void *src,
                    size_t nbytes, void *stream, devbuf_error *err) {
  int rc = check_dev(dev, "copy_h2d", err);
  if (rc) return rc;
  if ((dst == NULL || src == NULL) && nbytes)
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: NULL %s", dst ? "source" : "destination");
  if ((rc = check_range(dev, "copy_h2d", dst, dst_offset, nbytes, err))) return rc;
  DEFAULT_OR_CALL(dev, "copy_h2d", copy_h2d,
                  if (nbytes) memcpy((char *)dst + dst_offset, src, nbytes),
                  dst, dst_offset, src, nbytes, stream);
  return DEVBUF_OK;
}

int devbuf_copy_d2h(const devbuf_device *dev, void *dst, const void *src, size_t src_offset,
                    size_t nbytes, void *stream, devbuf_error *err) {
  int rc = check_dev(dev, "copy_d2h", err);
  if (rc) return rc;
  if ((dst == NULL || src == NULL) && nbytes)
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: NULL %s", dst ? "source" : "destination");
  if ((rc = check_range(dev, "copy_d2h", src, src_offset, nbytes, err))) return rc;
  DEFAULT_OR_CALL(dev, "copy_d2h", copy_d2h,
                  if (nbytes) memcpy(dst, (const char *)src + src_offset, nbytes),
                  dst, src, src_offset, nbytes, stream);
  return DEVBUF_OK;
}

int devbuf_copy_d2d(const devbuf_device *dev, void *dst, size_t dst_offset, const void *src,
                    size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  int rc = check_dev(dev, "copy_d2d", err);
  if (rc) return rc;
  if ((dst == NULL || src == NULL) && nbytes)
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: NULL %s", dst ? "source" : "destination");
  if ((rc = check_range(dev, "copy_d2d", src, src_offset, nbytes, err))) return rc;
  if ((rc = check_range(dev, "copy_d2d", dst, dst_offset, nbytes, err))) return rc;
  /* memmove: two ranges of one allocation may overlap. */
  DEFAULT_OR_CALL(dev, "copy_d2d", copy_d2d,
                  if (nbytes) memmove((char *)dst + dst_offset, (const char *)src + src_offset, nbytes),
                  dst, dst_offset, src, src_offset, nbytes, stream);
  return DEVBUF_OK;
}

int devbuf_copy_to_host_sync(const devbuf_device *dev, void *dst, const void *src,
                             size_t src_offset, size_t nbytes, void *event, devbuf_error *err) {
  void *stream = NULL;
  int rc = devbuf_stream_create(dev, &stream, err);
  if (rc) return rc;
  if (event) rc = devbuf_stream_wait_event(dev, stream, event, err);
  if (!rc) rc = devbuf_copy_d2h(dev, dst, src, src_offset, nbytes, stream, err);
  int src_rc = devbuf_stream_synchronize(dev, stream, rc ? NULL : err);
  if (!rc) rc = src_rc;
  devbuf_stream_destroy(dev, stream, NULL);
  return rc;
}

int devbuf_copy_from_host_sync(const devbuf_device *dev, void *dst, size_t dst_offset,
                               const void *src, size_t nbytes, devbuf_error *err) {
  void *stream = NULL;
  int rc = devbuf_stream_create(dev, &stream, err);
  if (rc) return rc;
  rc = devbuf_copy_h2d(dev, dst, dst_offset, src, nbytes, stream, err);
  int src_rc = devbuf_stream_synchronize(dev, stream, rc ? NULL : err);
  if (!rc) rc = src_rc;
  devbuf_stream_destroy(dev, stream, NULL);
  return rc;
}

/* ---- device_info ------------------------------------------------------------------ */

int devbuf_device_info_export(const devbuf_device *dev, void *event, void *stream,
                              uint32_t flags, void *out, size_t capacity, size_t *size,
                              devbuf_error *err) {
  int rc = check_dev(dev, "device_info_export", err);
  if (rc) return rc;
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_info_export: out is NULL");
  devbuf_backend *b = dev->backend;
  if (b->table.device_info_export) {
    size_t written = 0;
    if (err) devbuf_error_clear(err);
    rc = b->table.device_info_export(b->plugin_state, dev->identifier, dev->ordinal, event,
                                     stream, flags, out, capacity, &written, err);
    if (rc) return plugin_failed(dev, "device_info_export", rc, err);
    /* More than the buffer holds means it wrote past it, or lies: either
     * way the consumer would read past the end. */
    if (written == 0 || written > capacity)
      return devbuf_error_set(err, DEVBUF_EABI,
                              "%s:%d: device_info_export: plugin '%s' reports %zu bytes written "
                              "into a %zu-byte buffer",
                              dev->identifier, dev->ordinal, b->name, written, capacity);
    if (size) *size = written;
    return DEVBUF_OK;
  }
  /* Default: the devbuf_device_info layout, held to what a plugin of its own
   * must do (docs/plugin-authors.md): the caller's flags checked, and
   * HOST_ACCESSIBLE set exactly when the device is. */
  size_t written = 0;
  rc = devbuf_device_info_check_out(out, capacity, &written, flags,
                                    DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | DEVBUF_DEVICE_INFO_READONLY,
                                    "device_info_export", err);
  if (rc) {
    if (err) devbuf_error_prefix(err, dev->identifier);
    return rc;
  }
  devbuf_device_props props;
  rc = devbuf_device_props_get(dev, &props, err);
  if (rc) return rc;
  flags &= ~DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  if (props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) flags |= DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  devbuf_device_info_write(out, &written, dev->ordinal, flags, event, stream);
  if (size) *size = written;
  return DEVBUF_OK;
}

int devbuf_device_info_import(const char *identifier, const void *info,
                              devbuf_device_info_desc *desc, devbuf_device *dev,
                              devbuf_error *err) {
  const char *in = NULL;
  size_t idx = 0;
  int rc = devbuf_identifier_lookup(identifier, &in, &idx, err);
  if (rc) return rc;
  devbuf_backend *b = devbuf__backend_get(idx);
  devbuf_device_info_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  if (info == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: device_info is NULL", identifier);
  if (b->table.device_info_import) {
    if (err) devbuf_error_clear(err);
    rc = b->table.device_info_import(b->plugin_state, in, info, &d, err);
    if (rc) {
      char num[48];
      if (err && !err->message[0])
        snprintf(err->message, sizeof err->message, "device_info rejected (%s)",
                 devbuf__status_text(rc, num, sizeof num));
      if (!devbuf__status_known(rc)) rc = DEVBUF_EBACKEND;
      if (err) {
        err->code = rc;
        devbuf_error_prefix(err, identifier);
      }
      return rc;
    }
  } else {
    /* The default: the checks devbuf_device_info_read makes for every
     * devbuf.* plugin (size, version, reserved space, flags, ordinal), then
     * the handles: an event or stream this plugin never made through the
     * runtime would be handed to its wait and sync slots. */
    rc = devbuf_device_info_read(info, DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE |
                                           DEVBUF_DEVICE_INFO_READONLY,
                                 &d, "device_info", err);
    if (rc) {
      if (err) devbuf_error_prefix(err, identifier);
      return rc;
    }
    if (d.event && !known(b, &b->events, d.event, 0))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "%s: device_info: event %p is not a live event of plugin '%s'",
                              identifier, d.event, b->name);
    if (d.stream && !known(b, &b->streams, d.stream, 0))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "%s: device_info: stream %p is not a live stream of plugin '%s'",
                              identifier, d.stream, b->name);
  }
  devbuf_device tmp;
  rc = devbuf_device_open_ordinal(in, d.device_ordinal, &tmp, err);
  if (rc) return rc;
  if (desc) *desc = d;
  if (dev) *dev = tmp;
  return DEVBUF_OK;
}
