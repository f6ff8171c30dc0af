/* The `cpu` plugin: host memory, synchronous.
 *
 * Implements the identifier "cpu" that the buffer-protocol draft reserves for
 * host memory (the loader lets only devbuf's own cpu plugin claim it). Every
 * operation completes before it returns, so streams and events are trivial:
 * a stream is the NULL handle and an event is a tiny heap object (so that
 * create/destroy are real and leak checks see them). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"

#define CPU_ALIGN 64
#define CPU_EVENT_MAGIC 0x63707565u /* "cpue" */

typedef struct cpu_event { uint32_t magic; } cpu_event;

/* The live events. An event handle arrives from callers and, through
 * device_info, from other producers: it is looked up here, never
 * dereferenced on trust (a stale or foreign pointer would crash; found by
 * fuzz_device_info). A cpu process has few live events: a plain array. */
static pthread_mutex_t g_events_lock = PTHREAD_MUTEX_INITIALIZER;
static const void **g_events;
static size_t g_nevents, g_events_cap;

static int events_add(const void *e) {
  int ok = 1;
  pthread_mutex_lock(&g_events_lock);
  if (g_nevents == g_events_cap) {
    size_t cap = g_events_cap ? g_events_cap * 2 : 16;
    const void **n = realloc(g_events, cap * sizeof *n);
    if (n == NULL) ok = 0;
    else { g_events = n; g_events_cap = cap; }
  }
  if (ok) g_events[g_nevents++] = e;
  pthread_mutex_unlock(&g_events_lock);
  return ok;
}

/* 1 if `e` is a live event (and, with `remove`, no longer one). */
static int events_has(const void *e, int remove) {
  int found = 0;
  pthread_mutex_lock(&g_events_lock);
  for (size_t i = 0; i < g_nevents; i++) {
    if (g_events[i] != e) continue;
    found = 1;
    if (remove) g_events[i] = g_events[--g_nevents];
    break;
  }
  pthread_mutex_unlock(&g_events_lock);
  return found;
}

static int check_device(int device, const char *op, devbuf_error *err) {
  if (device != 0) return devbuf_error_set(err, DEVBUF_ENODEV, "%s: cpu has one device (0), not %d", op, device);
  return DEVBUF_OK;
}

static int cpu_device_count(void *state, int *count, devbuf_error *err) {
  *count = 1;
  return DEVBUF_OK;
}

static int cpu_device_props(void *state, int device, devbuf_device_props *p, devbuf_error *err) {
  int rc = check_device(device, "device_props", err);
  if (rc) return rc;
  snprintf(p->name, sizeof p->name, "host memory");
  snprintf(p->vendor, sizeof p->vendor, "system");
  long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  p->total_memory = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
  p->free_memory = avail > 0 && psz > 0 ? (uint64_t)avail * (uint64_t)psz : 0;
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE | DEVBUF_DEVICE_UNIFIED;
  p->alloc_alignment = CPU_ALIGN;
  p->dlpack_device_type = DEVBUF_DL_CPU;
  p->dlpack_device_id = 0;
  return DEVBUF_OK;
}

static int cpu_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  int rc = check_device(device, "mem_alloc", err);
  if (rc) return rc;
  if (alignment < CPU_ALIGN) alignment = CPU_ALIGN;
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two", alignment);
  /* Size 0 still gets a unique pointer, as the ABI asks. */
  if (posix_memalign(ptr, alignment, size ? size : 1) != 0) {
    *ptr = NULL;
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: posix_memalign: cannot allocate %zu bytes", size);
  }
  return DEVBUF_OK;
}

static int cpu_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  int rc = check_device(device, "mem_free", err);
  if (rc) return rc;
  free(ptr);
  return DEVBUF_OK;
}

static int cpu_copy_h2d(void *state, int device, void *dst, size_t dst_off, const void *src,
                        size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_h2d", err);
  if (rc) return rc;
  if (n) memmove((char *)dst + dst_off, src, n);
  return DEVBUF_OK;
}

static int cpu_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_off,
                        size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_d2h", err);
  if (rc) return rc;
  if (n) memmove(dst, (const char *)src + src_off, n);
  return DEVBUF_OK;
}

static int cpu_copy_d2d(void *state, int device, void *dst, size_t dst_off, const void *src,
                        size_t src_off, size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_d2d", err);
  if (rc) return rc;
  if (n) memmove((char *)dst + dst_off, (const char *)src + src_off, n);
  return DEVBUF_OK;
}

/* Synchronous: the only stream is the default one, NULL. */
static int cpu_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  int rc = check_device(device, "stream_create", err);
  if (rc) return rc;
  *stream = NULL;
  return DEVBUF_OK;
}

static int cpu_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  return check_device(device, "stream_destroy", err);
}

static int cpu_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  return check_device(device, "stream_synchronize", err);
}

static int check_event(void *event, const char *op, devbuf_error *err) {
  if (event == NULL || !events_has(event, 0))
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is not a cpu event", op, event);
  return DEVBUF_OK;
}

static int cpu_event_create(void *state, int device, void **event, devbuf_error *err) {
  int rc = check_device(device, "event_create", err);
  if (rc) return rc;
  cpu_event *e = malloc(sizeof *e);
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of memory");
  e->magic = CPU_EVENT_MAGIC;
  if (!events_add(e)) {
    free(e);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of memory");
  }
  *event = e;
  return DEVBUF_OK;
}

static int cpu_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  if (event == NULL || !events_has(event, 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "event_destroy: %p is not a cpu event", event);
  ((cpu_event *)event)->magic = 0;
  free(event);
  return DEVBUF_OK;
}

static int cpu_event_record(void *state, int device, void *event, void *stream, devbuf_error *err) {
  return check_event(event, "event_record", err);
}

static int cpu_stream_wait_event(void *state, int device, void *stream, void *event, devbuf_error *err) {
  return check_event(event, "stream_wait_event", err);
}

static int cpu_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  return check_event(event, "event_synchronize", err);
}

static int cpu_event_query(void *state, int device, void *event, devbuf_error *err) {
  return check_event(event, "event_query", err);
}

static int cpu_info_export(void *state, const char *identifier, int device, void *event,
                           void *stream, uint32_t flags, void *out, size_t capacity,
                           size_t *size, devbuf_error *err) {
  if (capacity < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info_export: capacity %zu < %zu", capacity,
                            sizeof(devbuf_device_info));
  devbuf_device_info *di = out;
  memset(di, 0, sizeof *di);
  di->struct_size = sizeof *di;
  di->version = DEVBUF_DEVICE_INFO_VERSION;
  di->device_ordinal = device;
  di->flags = flags | DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  /* Synchronous device: data is always ready, there is nothing to wait on. */
  di->event = NULL;
  di->stream = NULL;
  *size = sizeof *di;
  return DEVBUF_OK;
}

static int cpu_info_import(void *state, const char *identifier, const void *info,
                           devbuf_device_info_desc *out, devbuf_error *err) {
  const devbuf_device_info *di = info;
  if (di->struct_size < sizeof *di)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: struct_size %u < %zu", di->struct_size, sizeof *di);
  if (di->version != DEVBUF_DEVICE_INFO_VERSION)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: version %u, expected %d", di->version,
                            DEVBUF_DEVICE_INFO_VERSION);
  if (di->reserved0 != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: reserved0 is 0x%x, must be zero", di->reserved0);
  for (size_t i = 0; i < sizeof di->reserved / sizeof di->reserved[0]; i++)
    if (di->reserved[i] != 0)
      return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: reserved[%zu] is nonzero", i);
  if (di->flags & ~(uint32_t)(DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | DEVBUF_DEVICE_INFO_READONLY))
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: unknown flags 0x%x", di->flags);
  if (di->device_ordinal != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: device_ordinal %d, cpu has only 0", di->device_ordinal);
  if (di->event != NULL && !events_has(di->event, 0))
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_info: event %p is not a live cpu event", di->event);
  out->flags = di->flags;
  out->device_ordinal = 0;
  out->event = di->event;
  out->stream = NULL;
  return DEVBUF_OK;
}

static const char *const cpu_identifiers[] = {"cpu", NULL};

static const devbuf_plugin_table cpu_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "cpu",
    .version = "0.1.0",
    .description = "host memory, synchronous",
    .identifiers = cpu_identifiers,
    .device_count = cpu_device_count,
    .device_props = cpu_device_props,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_synchronize = cpu_event_synchronize,
    .event_query = cpu_event_query,
    .device_info_export = cpu_info_export,
    .device_info_import = cpu_info_import,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &cpu_table; }
