/* devbuf.level_zero: oneAPI Level Zero devices (Intel GPUs, NPUs...) through
 * the Level Zero loader (libze_loader.so.1).
 *
 * The loader is dlopen'd at the first call that needs a device (never in the
 * entry symbol or init); ze_api.h is used only for types and constants.
 *
 * Devices: every device of every driver, numbered in driver order then
 * device order. Each driver gets one context, made at first use of one of
 * its devices. A devbuf stream is an immediate command list on the device's
 * compute queue group; Level Zero may overlap the commands of one list, so a
 * barrier follows every command to give stream (in-order) semantics.
 * Command lists are not thread-safe, so each stream carries a mutex.
 * devbuf events are Level Zero events from host-visible event pools.
 *
 * Stream and event handles handed out are plugin objects, kept in a registry
 * so that a bad handle is refused rather than dereferenced. device_info
 * carries the raw ze_event_handle_t / ze_command_list_handle_t, and the
 * event slots accept such a raw event from another producer
 * (docs/devices/level_zero.md). */
#include <level_zero/ze_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"
#include "gpu_common.h"

#define LZ_PLUGIN_VERSION "0.1.0"
#define LZ_IDENTIFIER "devbuf.level_zero"
#define LZ_ALIGNMENT 256u
#define LZ_EVENTS_PER_POOL 64u

#define LZ_REQUIRED(X)                       \
  X(zeInit)                                  \
  X(zeDriverGet)                             \
  X(zeDeviceGet)                             \
  X(zeDeviceGetProperties)                   \
  X(zeDeviceGetMemoryProperties)             \
  X(zeDeviceGetCommandQueueGroupProperties)  \
  X(zeContextCreate)                         \
  X(zeContextDestroy)                        \
  X(zeMemAllocDevice)                        \
  X(zeMemAllocHost)                          \
  X(zeMemFree)                               \
  X(zeCommandListCreateImmediate)            \
  X(zeCommandListDestroy)                    \
  X(zeCommandListAppendMemoryCopy)           \
  X(zeCommandListAppendBarrier)              \
  X(zeCommandListAppendWaitOnEvents)         \
  X(zeEventPoolCreate)                       \
  X(zeEventPoolDestroy)                      \
  X(zeEventCreate)                           \
  X(zeEventDestroy)                          \
  X(zeEventHostSynchronize)                  \
  X(zeEventQueryStatus)                      \
  X(zeEventHostReset)

#define LZ_FIELD(name) __typeof__(&name) p_##name;
typedef struct lz_api {
  LZ_REQUIRED(LZ_FIELD)
} lz_api;
#undef LZ_FIELD

#define LZ_SYMBOL(name) {GPU_STR(name), offsetof(lz_api, p_##name)},
static const gpu_symbol lz_required[] = {LZ_REQUIRED(LZ_SYMBOL)};
#undef LZ_SYMBOL

/* A block of events. Indices are recycled through the driver's free list. */
typedef struct lz_pool {
  ze_event_pool_handle_t pool;
  struct lz_pool *next;
} lz_pool;

typedef struct lz_slot {
  lz_pool *pool;
  uint32_t index;
} lz_slot;

/* One context per driver, made at first use of one of its devices. */
typedef struct lz_driver {
  ze_driver_handle_t driver;
  atomic_int ready;
  ze_context_handle_t ctx;
  pthread_mutex_t ev_lock; /* guards pools and free slots */
  lz_pool *pools;
  lz_slot *free_slots;
  size_t free_count, free_cap, total_slots; /* free_cap >= total_slots */
} lz_driver;

/* A devbuf event (registered as GPU_HANDLE_EVENT). */
typedef struct lz_event {
  ze_event_handle_t ev;
  lz_slot slot;
  int device;
  atomic_int recorded; /* never-recorded events count as complete, as in CUDA */
} lz_event;

/* A devbuf stream (registered as GPU_HANDLE_STREAM). */
typedef struct lz_stream {
  ze_command_list_handle_t list;
  pthread_mutex_t lock; /* command lists are not thread-safe */
  int device;
  lz_event *sync; /* signalled by stream_synchronize */
} lz_stream;

typedef struct lz_device {
  ze_device_handle_t dev;
  int driver;          /* index into lz_state.drivers */
  uint32_t queue_group; /* compute queue group ordinal */
  atomic_int ready;
  lz_stream *default_stream;
} lz_device;

/* base.handles holds every stream and event handed out, so that a bad
 * handle is refused instead of dereferenced, and a foreign ze_event_handle_t
 * (from another producer's device_info) is told apart from a devbuf event. */
typedef struct lz_state {
  gpu_base base; /* first: the loader, tried once (base.lazy.count devices) */
  lz_api api;
  int ndrivers;
  lz_driver *drivers;
  lz_device *devs;
} lz_state;

/* ---- errors ----------------------------------------------------------- */

static const char *lz_result_name(ze_result_t r) {
  switch (r) {
#define LZ_NAME(n) \
  case n:          \
    return #n;
    LZ_NAME(ZE_RESULT_SUCCESS)
    LZ_NAME(ZE_RESULT_NOT_READY)
    LZ_NAME(ZE_RESULT_ERROR_DEVICE_LOST)
    LZ_NAME(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    LZ_NAME(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
    LZ_NAME(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)
    LZ_NAME(ZE_RESULT_ERROR_MODULE_LINK_FAILURE)
    LZ_NAME(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET)
    LZ_NAME(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE)
    LZ_NAME(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
    LZ_NAME(ZE_RESULT_ERROR_NOT_AVAILABLE)
    LZ_NAME(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)
    LZ_NAME(ZE_RESULT_ERROR_UNINITIALIZED)
    LZ_NAME(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
    LZ_NAME(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    LZ_NAME(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_SIZE)
    LZ_NAME(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
    LZ_NAME(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT)
    LZ_NAME(ZE_RESULT_ERROR_INVALID_ENUMERATION)
    LZ_NAME(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)
    LZ_NAME(ZE_RESULT_ERROR_OVERLAPPING_REGIONS)
    LZ_NAME(ZE_RESULT_ERROR_UNKNOWN)
#undef LZ_NAME
    default:
      return "ZE_RESULT_ERROR_UNRECOGNIZED";
  }
}

static const gpu_status_map lz_status[] = {
    {ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY, DEVBUF_ENOMEM},
    {ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, DEVBUF_ENOMEM},
    {ZE_RESULT_ERROR_DEVICE_LOST, DEVBUF_ENODEV},
    {ZE_RESULT_ERROR_UNINITIALIZED, DEVBUF_ENODEV},
    {ZE_RESULT_ERROR_INVALID_ARGUMENT, DEVBUF_EINVAL},
    {ZE_RESULT_ERROR_INVALID_NULL_HANDLE, DEVBUF_EINVAL},
    {ZE_RESULT_ERROR_INVALID_NULL_POINTER, DEVBUF_EINVAL},
    {ZE_RESULT_ERROR_INVALID_SIZE, DEVBUF_EINVAL},
    {ZE_RESULT_ERROR_UNSUPPORTED_SIZE, DEVBUF_EINVAL},
    {ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, DEVBUF_EINVAL},
    {ZE_RESULT_NOT_READY, DEVBUF_EBUSY},
    {ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, DEVBUF_ENOTSUP},
    {ZE_RESULT_ERROR_UNSUPPORTED_VERSION, DEVBUF_ENOTSUP},
};

/* "op: ZE_RESULT_NAME (0x...): detail". Level Zero has no error-string
 * function: name and number it is. */
GPU_PRINTF(4, 5)
static int lz_fail(devbuf_error *err, ze_result_t r, const char *op, const char *fmt, ...) {
  char name[96];
  va_list ap;
  int code;
  snprintf(name, sizeof name, "%s (0x%x)", lz_result_name(r), (unsigned)r);
  va_start(ap, fmt);
  code = gpu_fail_v(err, gpu_status_lookup(lz_status, sizeof lz_status / sizeof *lz_status, r),
                    (int)r, op, name, NULL, GPU_DETAIL_COLON, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- lazy loader set-up ------------------------------------------------ */

static void lz_forget_devices(lz_state *st) {
  for (int i = 0; i < st->ndrivers; i++) pthread_mutex_destroy(&st->drivers[i].ev_lock);
  free(st->drivers);
  free(st->devs);
  st->drivers = NULL;
  st->devs = NULL;
  st->ndrivers = 0;
  st->base.lazy.count = 0;
}

/* The compute queue group of a device, or UINT32_MAX. */
static uint32_t lz_compute_group(lz_state *st, ze_device_handle_t dev) {
  uint32_t n = 0, found = UINT32_MAX;
  ze_command_queue_group_properties_t *props;
  if (st->api.p_zeDeviceGetCommandQueueGroupProperties(dev, &n, NULL) != ZE_RESULT_SUCCESS ||
      n == 0)
    return UINT32_MAX;
  props = calloc(n, sizeof *props);
  if (props == NULL) return UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) props[i].stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  if (st->api.p_zeDeviceGetCommandQueueGroupProperties(dev, &n, props) == ZE_RESULT_SUCCESS) {
    for (uint32_t i = 0; i < n && found == UINT32_MAX; i++)
      if (props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) found = i;
    /* A copy-only device (none known yet) still moves bytes. */
    for (uint32_t i = 0; i < n && found == UINT32_MAX; i++)
      if (props[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) found = i;
  }
  free(props);
  return found;
}

static int lz_load(gpu_lazy *lz) {
  static const char *const defaults[] = {"libze_loader.so.1", NULL};
  lz_state *st = (lz_state *)lz; /* lz is its first member */
  const char *libname = NULL;
  ze_driver_handle_t *drivers = NULL;
  uint32_t ndrivers = 0, total = 0;
  ze_result_t r;
  if (!gpu_dlopen(lz, "DEVBUF_LEVEL_ZERO_LIBRARY", defaults, &libname)) return lz->status;
  if (gpu_dlsym_all(lz, libname, &st->api, sizeof st->api, GPU_SYMBOLS(lz_required), NULL, 0,
                    "loader too old") < 0)
    return lz->status;

  r = st->api.p_zeInit(0);
  if (r != ZE_RESULT_SUCCESS) {
    devbuf_error e;
    lz_fail(&e, r, "zeInit", "no Level Zero driver could be initialised");
    return gpu_no_device_err(lz, &e);
  }
  r = st->api.p_zeDriverGet(&ndrivers, NULL);
  if (r != ZE_RESULT_SUCCESS || ndrivers == 0) {
    devbuf_error e;
    if (r != ZE_RESULT_SUCCESS)
      lz_fail(&e, r, "zeDriverGet", NULL);
    else
      devbuf_error_set(&e, DEVBUF_ENODEV, "zeDriverGet: the loader reports 0 drivers");
    return gpu_no_device_err(lz, &e);
  }
  drivers = calloc(ndrivers, sizeof *drivers);
  st->drivers = calloc(ndrivers, sizeof *st->drivers);
  if (drivers == NULL || st->drivers == NULL) goto oom;
  r = st->api.p_zeDriverGet(&ndrivers, drivers);
  if (r != ZE_RESULT_SUCCESS) {
    devbuf_error e;
    lz_fail(&e, r, "zeDriverGet", NULL);
    free(drivers);
    lz_forget_devices(st);
    return gpu_no_device_err(lz, &e);
  }
  for (uint32_t i = 0; i < ndrivers; i++) {
    uint32_t n = 0;
    st->drivers[i].driver = drivers[i];
    pthread_mutex_init(&st->drivers[i].ev_lock, NULL);
    st->ndrivers = (int)i + 1;
    if (st->api.p_zeDeviceGet(drivers[i], &n, NULL) == ZE_RESULT_SUCCESS) total += n;
  }
  if (total == 0) {
    free(drivers);
    lz_forget_devices(st);
    return gpu_no_device(lz, DEVBUF_ENODEV, "zeDeviceGet: %u driver%s, 0 devices",
                         (unsigned)ndrivers, ndrivers == 1 ? "" : "s");
  }
  st->devs = calloc(total, sizeof *st->devs);
  if (st->devs == NULL) goto oom;
  for (uint32_t i = 0; i < ndrivers; i++) {
    uint32_t n = 0;
    ze_device_handle_t *handles;
    if (st->api.p_zeDeviceGet(drivers[i], &n, NULL) != ZE_RESULT_SUCCESS || n == 0) continue;
    handles = calloc(n, sizeof *handles);
    if (handles == NULL) goto oom;
    if (st->api.p_zeDeviceGet(drivers[i], &n, handles) == ZE_RESULT_SUCCESS) {
      for (uint32_t j = 0; j < n && (uint32_t)lz->count < total; j++) {
        lz_device *d = &st->devs[lz->count++];
        d->dev = handles[j];
        d->driver = (int)i;
        d->queue_group = lz_compute_group(st, handles[j]);
      }
    }
    free(handles);
  }
  free(drivers);
  if (lz->count == 0) {
    lz_forget_devices(st);
    return gpu_no_device(lz, DEVBUF_ENODEV, "zeDeviceGet: no device could be listed");
  }
  return DEVBUF_OK;
oom:
  free(drivers);
  lz_forget_devices(st);
  return gpu_no_device(lz, DEVBUF_ENOMEM, "level_zero: out of host memory for the device table");
}

/* ---- events (internal) ------------------------------------------------ */

static int lz_event_new(lz_state *st, lz_driver *drv, int device, lz_event **out,
                        devbuf_error *err) {
  lz_event *e = calloc(1, sizeof *e);
  ze_event_desc_t desc;
  ze_result_t r;
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  pthread_mutex_lock(&drv->ev_lock);
  if (drv->free_count == 0) {
    /* A fresh pool; all its indices go to the free list. */
    ze_event_pool_desc_t pdesc;
    lz_pool *p = calloc(1, sizeof *p);
    lz_slot *grown;
    size_t need = drv->total_slots + LZ_EVENTS_PER_POOL;
    if (p == NULL) goto oom_locked;
    if (need > drv->free_cap) {
      grown = realloc(drv->free_slots, need * sizeof *grown);
      if (grown == NULL) {
        free(p);
        goto oom_locked;
      }
      drv->free_slots = grown;
      drv->free_cap = need;
    }
    memset(&pdesc, 0, sizeof pdesc);
    pdesc.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC;
    pdesc.flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE;
    pdesc.count = LZ_EVENTS_PER_POOL;
    r = st->api.p_zeEventPoolCreate(drv->ctx, &pdesc, 0, NULL, &p->pool);
    if (r != ZE_RESULT_SUCCESS) {
      free(p);
      pthread_mutex_unlock(&drv->ev_lock);
      free(e);
      return lz_fail(err, r, "zeEventPoolCreate", "%u events", LZ_EVENTS_PER_POOL);
    }
    p->next = drv->pools;
    drv->pools = p;
    drv->total_slots += LZ_EVENTS_PER_POOL;
    for (uint32_t i = LZ_EVENTS_PER_POOL; i-- > 0;) {
      drv->free_slots[drv->free_count].pool = p;
      drv->free_slots[drv->free_count].index = i;
      drv->free_count++;
    }
  }
  e->slot = drv->free_slots[--drv->free_count];
  pthread_mutex_unlock(&drv->ev_lock);

  memset(&desc, 0, sizeof desc);
  desc.stype = ZE_STRUCTURE_TYPE_EVENT_DESC;
  desc.index = e->slot.index;
  /* Host scope: the host reads what the device wrote once the event fires. */
  desc.signal = ZE_EVENT_SCOPE_FLAG_HOST;
  desc.wait = ZE_EVENT_SCOPE_FLAG_HOST;
  r = st->api.p_zeEventCreate(e->slot.pool->pool, &desc, &e->ev);
  if (r != ZE_RESULT_SUCCESS) {
    pthread_mutex_lock(&drv->ev_lock);
    drv->free_slots[drv->free_count++] = e->slot;
    pthread_mutex_unlock(&drv->ev_lock);
    free(e);
    return lz_fail(err, r, "zeEventCreate", "device %d", device);
  }
  e->device = device;
  atomic_init(&e->recorded, 0);
  *out = e;
  return DEVBUF_OK;
oom_locked:
  pthread_mutex_unlock(&drv->ev_lock);
  free(e);
  return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
}

static ze_result_t lz_event_delete(lz_state *st, lz_driver *drv, lz_event *e) {
  ze_result_t r = st->api.p_zeEventDestroy(e->ev);
  /* The slot list has room: it held this slot before. */
  pthread_mutex_lock(&drv->ev_lock);
  drv->free_slots[drv->free_count++] = e->slot;
  pthread_mutex_unlock(&drv->ev_lock);
  free(e);
  return r;
}

/* ---- streams (internal) ------------------------------------------------ */

static int lz_stream_new(lz_state *st, int device, lz_stream **out, devbuf_error *err) {
  lz_device *d = &st->devs[device];
  lz_driver *drv = &st->drivers[d->driver];
  ze_command_queue_desc_t desc;
  ze_result_t r;
  int rc;
  lz_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    return devbuf_error_set(err, DEVBUF_EINTERNAL, "stream_create: pthread_mutex_init failed");
  }
  memset(&desc, 0, sizeof desc);
  desc.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
  desc.ordinal = d->queue_group;
  desc.index = 0;
  desc.mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS;
  desc.priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL;
  r = st->api.p_zeCommandListCreateImmediate(drv->ctx, d->dev, &desc, &s->list);
  if (r != ZE_RESULT_SUCCESS) {
    pthread_mutex_destroy(&s->lock);
    free(s);
    return lz_fail(err, r, "zeCommandListCreateImmediate", "device %d", device);
  }
  rc = lz_event_new(st, drv, device, &s->sync, err);
  if (rc != DEVBUF_OK) {
    st->api.p_zeCommandListDestroy(s->list);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
  }
  s->device = device;
  *out = s;
  return DEVBUF_OK;
}

static ze_result_t lz_stream_delete(lz_state *st, lz_stream *s) {
  lz_driver *drv = &st->drivers[st->devs[s->device].driver];
  ze_result_t r = st->api.p_zeCommandListDestroy(s->list);
  lz_event_delete(st, drv, s->sync);
  pthread_mutex_destroy(&s->lock);
  free(s);
  return r;
}

/* First use of a device (under the lazy lock): its driver's context (first
 * use of the driver) and its default stream. */
static int lz_device_setup(void *state, int device, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = &st->devs[device];
  lz_driver *drv = &st->drivers[d->driver];
  if (d->queue_group == UINT32_MAX)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "devbuf.level_zero: device %d has no compute or copy queue group",
                            device);
  if (!atomic_load_explicit(&drv->ready, memory_order_relaxed)) {
    ze_context_desc_t cdesc;
    ze_result_t r;
    memset(&cdesc, 0, sizeof cdesc);
    cdesc.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
    r = st->api.p_zeContextCreate(drv->driver, &cdesc, &drv->ctx);
    if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeContextCreate", "device %d", device);
    atomic_store_explicit(&drv->ready, 1, memory_order_release);
  }
  return lz_stream_new(st, device, &d->default_stream, err);
}

/* The device, set up at its first use. */
static int lz_device_get(lz_state *st, int device, lz_device **out, devbuf_error *err) {
  int rc = gpu_check_device(st ? &st->base.lazy : NULL, device, err);
  if (rc == DEVBUF_OK)
    rc = gpu_device_once(&st->base.lazy, &st->devs[device].ready, lz_device_setup, st, device,
                         err);
  if (rc == DEVBUF_OK) *out = &st->devs[device];
  return rc;
}

/* NULL is the device's default stream; anything else must be a live
 * stream of this plugin on `device`. */
static int lz_stream_get(lz_state *st, lz_device *d, int device, void *stream, lz_stream **out,
                         const char *op, devbuf_error *err) {
  lz_stream *s = NULL;
  if (stream == NULL) {
    *out = d->default_stream;
    return DEVBUF_OK;
  }
  if (gpu_handle_find(&st->base.handles, stream, 0) != GPU_HANDLE_STREAM)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is not a live devbuf.level_zero stream",
                            op, stream);
  s = stream;
  if (s->device != device)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: the stream belongs to device %d, not %d", op,
                            s->device, device);
  *out = s;
  return DEVBUF_OK;
}

/* ---- lifecycle --------------------------------------------------------- */

static int lz_init(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no driver call. */
  return gpu_base_new(state, sizeof(lz_state), LZ_IDENTIFIER, lz_load, NULL, err);
}

static void lz_shutdown(void *state) {
  lz_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->base.lazy.count; i++)
    if (atomic_load(&st->devs[i].ready) && st->devs[i].default_stream != NULL)
      lz_stream_delete(st, st->devs[i].default_stream);
  for (int i = 0; i < st->ndrivers; i++) {
    lz_driver *drv = &st->drivers[i];
    for (lz_pool *p = drv->pools, *next; p != NULL; p = next) {
      next = p->next;
      st->api.p_zeEventPoolDestroy(p->pool);
      free(p);
    }
    free(drv->free_slots);
    if (atomic_load(&drv->ready)) st->api.p_zeContextDestroy(drv->ctx);
  }
  lz_forget_devices(st);
  gpu_base_free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int lz_device_props(void *state, int device, devbuf_device_props *props,
                           devbuf_error *err) {
  lz_state *st = state;
  devbuf_device_props p;
  ze_device_properties_t zp;
  uint32_t nmem = 0;
  lz_device *d = NULL;
  ze_result_t r;
  int rc;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = gpu_check_device(st ? &st->base.lazy : NULL, device, err);
  if (rc != DEVBUF_OK) return rc;
  d = &st->devs[device];
  memset(&p, 0, sizeof p);
  memset(&zp, 0, sizeof zp);
  zp.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  r = st->api.p_zeDeviceGetProperties(d->dev, &zp);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeDeviceGetProperties", "device %d", device);
  {
    size_t len = strnlen(zp.name, sizeof zp.name);
    if (len >= sizeof p.name) len = sizeof p.name - 1; /* ZE_MAX_DEVICE_NAME is 256 */
    memcpy(p.name, zp.name, len);
    p.name[len] = '\0';
  }
  if (zp.vendorId == 0x8086)
    snprintf(p.vendor, sizeof p.vendor, "Intel");
  else
    snprintf(p.vendor, sizeof p.vendor, "PCI vendor 0x%04x", (unsigned)zp.vendorId);
  if (st->api.p_zeDeviceGetMemoryProperties(d->dev, &nmem, NULL) == ZE_RESULT_SUCCESS &&
      nmem > 0) {
    ze_device_memory_properties_t *mp = calloc(nmem, sizeof *mp);
    if (mp != NULL) {
      for (uint32_t i = 0; i < nmem; i++) mp[i].stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
      if (st->api.p_zeDeviceGetMemoryProperties(d->dev, &nmem, mp) == ZE_RESULT_SUCCESS)
        for (uint32_t i = 0; i < nmem; i++) p.total_memory += mp[i].totalSize;
      free(mp);
    }
  }
  /* Free memory needs the Sysman API (zes); left 0, i.e. unknown. */
  p.flags = DEVBUF_DEVICE_ASYNC;
  p.alloc_alignment = LZ_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_ONEAPI;
  p.dlpack_device_id = device;
  return gpu_props_copy_out(props, &p, err);
}

/* ---- streams ---------------------------------------------------------- */

/* Host-wait for everything appended to `s` so far. */
static int lz_stream_wait_host(lz_state *st, lz_stream *s, devbuf_error *err) {
  ze_result_t r;
  pthread_mutex_lock(&s->lock);
  r = st->api.p_zeEventHostReset(s->sync->ev);
  if (r == ZE_RESULT_SUCCESS) r = st->api.p_zeCommandListAppendBarrier(s->list, s->sync->ev, 0, NULL);
  pthread_mutex_unlock(&s->lock);
  if (r != ZE_RESULT_SUCCESS)
    return lz_fail(err, r, "zeCommandListAppendBarrier", "device %d", s->device);
  /* Outside the lock: a second synchronizer may reset and re-signal the
   * event, which only makes this wait longer, never shorter. */
  r = st->api.p_zeEventHostSynchronize(s->sync->ev, UINT64_MAX);
  if (r != ZE_RESULT_SUCCESS)
    return lz_fail(err, r, "zeEventHostSynchronize", "device %d", s->device);
  return DEVBUF_OK;
}

static int lz_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_stream *s = NULL;
  int rc = gpu_check_out(stream, "stream_create", "stream", err);
  if (rc == DEVBUF_OK) rc = lz_device_get(st, device, &d, err);
  if (rc == DEVBUF_OK) rc = lz_stream_new(st, device, &s, err);
  if (rc != DEVBUF_OK) return rc;
  if (!gpu_handle_add(&st->base.handles, s, GPU_HANDLE_STREAM)) {
    lz_stream_delete(st, s);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  }
  *stream = s;
  return DEVBUF_OK;
}

static int lz_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_stream *s = NULL;
  ze_result_t r;
  int rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL) /* the default stream was never created, so cannot be destroyed */
    return devbuf_error_set(err, DEVBUF_EINVAL, "stream_destroy: NULL is the default stream");
  rc = lz_stream_get(st, d, device, stream, &s, "stream_destroy", err);
  if (rc != DEVBUF_OK) return rc;
  /* Destroying an immediate list with work in flight is undefined: drain. */
  rc = lz_stream_wait_host(st, s, err);
  if (rc != DEVBUF_OK) return rc;
  gpu_handle_find(&st->base.handles, s, 1);
  r = lz_stream_delete(st, s);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeCommandListDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int lz_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_stream *s = NULL;
  int rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  rc = lz_stream_get(st, d, device, stream, &s, "stream_synchronize", err);
  if (rc != DEVBUF_OK) return rc;
  return lz_stream_wait_host(st, s, err);
}

/* ---- memory ------------------------------------------------------------ */

static int lz_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                        void **ptr, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  ze_device_mem_alloc_desc_t desc;
  ze_result_t r;
  size_t request;
  /* The allocator takes the alignment itself: nothing is over-allocated. */
  int rc = gpu_alloc_request(ptr, size, alignment, SIZE_MAX, &request, err);
  if (rc == DEVBUF_OK) rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  memset(&desc, 0, sizeof desc);
  desc.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
  desc.ordinal = 0;
  /* Allocation is immediate (Level Zero has no stream-ordered allocator), so
   * the memory is usable on every stream at once. */
  r = st->api.p_zeMemAllocDevice(st->drivers[d->driver].ctx, &desc, request,
                                 alignment > LZ_ALIGNMENT ? alignment : LZ_ALIGNMENT, d->dev, ptr);
  if (r != ZE_RESULT_SUCCESS) {
    *ptr = NULL;
    return lz_fail(err, r, "zeMemAllocDevice", "%zu bytes on device %d", size, device);
  }
  return DEVBUF_OK;
}

static int lz_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  ze_result_t r;
  int rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: NULL pointer");
  /* zeMemFree is immediate: wait for the stream the free is ordered on, so
   * that work already queued there is done with the memory. */
  {
    lz_stream *s = NULL;
    rc = lz_stream_get(st, d, device, stream, &s, "mem_free", err);
    if (rc == DEVBUF_OK) rc = lz_stream_wait_host(st, s, err);
    if (rc != DEVBUF_OK) return rc;
  }
  r = st->api.p_zeMemFree(st->drivers[d->driver].ctx, ptr);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeMemFree", "%p on device %d", ptr, device);
  return DEVBUF_OK;
}

static int lz_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  ze_host_mem_alloc_desc_t desc;
  ze_result_t r;
  int rc = gpu_check_out(ptr, "host_alloc", "ptr", err);
  if (rc == DEVBUF_OK) rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  memset(&desc, 0, sizeof desc);
  desc.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC;
  r = st->api.p_zeMemAllocHost(st->drivers[d->driver].ctx, &desc, size ? size : 1, 64, ptr);
  if (r != ZE_RESULT_SUCCESS) {
    *ptr = NULL;
    return lz_fail(err, r, "zeMemAllocHost", "%zu bytes", size);
  }
  return DEVBUF_OK;
}

static int lz_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  ze_result_t r;
  int rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "host_free: NULL pointer");
  r = st->api.p_zeMemFree(st->drivers[d->driver].ctx, ptr);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeMemFree", "host %p", ptr);
  return DEVBUF_OK;
}

/* ---- copies -------------------------------------------------------------- */

/* Append one copy and the barrier that keeps the stream in order. `dst`
 * and `src` are (pointer, offset) pairs checked here, after the device. */
static int lz_copy(lz_state *st, int device, void *stream, void *dst, size_t dst_offset,
                   const void *src, size_t src_offset, size_t nbytes, const char *what,
                   devbuf_error *err) {
  lz_device *d = NULL;
  lz_stream *s = NULL;
  ze_result_t r;
  uintptr_t to = 0, from = 0;
  const char *op = "zeCommandListAppendMemoryCopy";
  int nothing = 0;
  int rc = lz_device_get(st, device, &d, err);
  if (rc == DEVBUF_OK)
    rc = gpu_check_copy(what, dst, dst_offset, src, src_offset, nbytes, &to, &from, &nothing, err);
  if (rc != DEVBUF_OK || nothing) return rc;
  rc = lz_stream_get(st, d, device, stream, &s, what, err);
  if (rc != DEVBUF_OK) return rc;
  pthread_mutex_lock(&s->lock);
  r = st->api.p_zeCommandListAppendMemoryCopy(s->list, (void *)to, (const void *)from, nbytes,
                                              NULL, 0, NULL);
  if (r == ZE_RESULT_SUCCESS) {
    op = "zeCommandListAppendBarrier";
    r = st->api.p_zeCommandListAppendBarrier(s->list, NULL, 0, NULL);
  }
  pthread_mutex_unlock(&s->lock);
  if (r != ZE_RESULT_SUCCESS)
    return lz_fail(err, r, op, "%s of %zu bytes on device %d", what, nbytes, device);
  return DEVBUF_OK;
}

static int lz_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                       size_t nbytes, void *stream, devbuf_error *err) {
  return lz_copy(state, device, stream, dst, dst_offset, src, 0, nbytes, "copy_h2d", err);
}

static int lz_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                       size_t nbytes, void *stream, devbuf_error *err) {
  return lz_copy(state, device, stream, dst, 0, src, src_offset, nbytes, "copy_d2h", err);
}

static int lz_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                       size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  return lz_copy(state, device, stream, dst, dst_offset, src, src_offset, nbytes, "copy_d2d",
                 err);
}

/* ---- events --------------------------------------------------------- */

static int lz_event_create(void *state, int device, void **event, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  int rc = gpu_check_out(event, "event_create", "event", err);
  if (rc == DEVBUF_OK) rc = lz_device_get(st, device, &d, err);
  if (rc == DEVBUF_OK) rc = lz_event_new(st, &st->drivers[d->driver], device, &e, err);
  if (rc != DEVBUF_OK) return rc;
  if (!gpu_handle_add(&st->base.handles, e, GPU_HANDLE_EVENT)) {
    lz_event_delete(st, &st->drivers[d->driver], e);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  }
  *event = e;
  return DEVBUF_OK;
}

/* An event argument: one of ours (*own set), or, when `foreign_ok`, a raw
 * ze_event_handle_t from another producer's device_info (*own NULL). */
static int lz_event_get(lz_state *st, int device, void *event, int foreign_ok, const char *op,
                        lz_device **d, lz_event **own, ze_event_handle_t *raw,
                        devbuf_error *err) {
  int rc = lz_device_get(st, device, d, err);
  if (rc != DEVBUF_OK) return rc;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL event", op);
  if (gpu_handle_find(&st->base.handles, event, 0) == GPU_HANDLE_EVENT) {
    *own = event;
    *raw = (*own)->ev;
    if ((*own)->device != device)
      return devbuf_error_set(err, DEVBUF_EINVAL, "%s: the event belongs to device %d, not %d",
                              op, (*own)->device, device);
    return DEVBUF_OK;
  }
  if (!foreign_ok || gpu_handle_find(&st->base.handles, event, 0) != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is not a live devbuf.level_zero event",
                            op, event);
  *own = NULL;
  *raw = (ze_event_handle_t)event;
  return DEVBUF_OK;
}

static int lz_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  ze_event_handle_t raw = NULL;
  ze_result_t r;
  int rc = lz_event_get(st, device, event, 0, "event_destroy", &d, &e, &raw, err);
  if (rc != DEVBUF_OK) return rc;
  gpu_handle_find(&st->base.handles, e, 1);
  r = lz_event_delete(st, &st->drivers[d->driver], e);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, "zeEventDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int lz_event_record(void *state, int device, void *event, void *stream,
                           devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  lz_stream *s = NULL;
  ze_event_handle_t raw = NULL;
  ze_result_t r;
  const char *op = "zeEventHostReset";
  int rc = lz_event_get(st, device, event, 0, "event_record", &d, &e, &raw, err);
  if (rc != DEVBUF_OK) return rc;
  rc = lz_stream_get(st, d, device, stream, &s, "event_record", err);
  if (rc != DEVBUF_OK) return rc;
  /* Re-recording replaces the previous capture, as a CUDA event does: reset
   * on the host, then signal after everything appended so far. */
  pthread_mutex_lock(&s->lock);
  r = st->api.p_zeEventHostReset(raw);
  if (r == ZE_RESULT_SUCCESS) {
    op = "zeCommandListAppendBarrier";
    r = st->api.p_zeCommandListAppendBarrier(s->list, raw, 0, NULL);
  }
  if (r == ZE_RESULT_SUCCESS) atomic_store(&e->recorded, 1);
  pthread_mutex_unlock(&s->lock);
  if (r != ZE_RESULT_SUCCESS) return lz_fail(err, r, op, "device %d", device);
  return DEVBUF_OK;
}

static int lz_stream_wait_event(void *state, int device, void *stream, void *event,
                                devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  lz_stream *s = NULL;
  ze_event_handle_t raw = NULL;
  ze_result_t r;
  int rc = lz_event_get(st, device, event, 1, "stream_wait_event", &d, &e, &raw, err);
  if (rc != DEVBUF_OK) return rc;
  rc = lz_stream_get(st, d, device, stream, &s, "stream_wait_event", err);
  if (rc != DEVBUF_OK) return rc;
  if (e != NULL && !atomic_load(&e->recorded)) return DEVBUF_OK; /* nothing captured */
  pthread_mutex_lock(&s->lock);
  r = st->api.p_zeCommandListAppendWaitOnEvents(s->list, 1, &raw);
  pthread_mutex_unlock(&s->lock);
  if (r != ZE_RESULT_SUCCESS)
    return lz_fail(err, r, "zeCommandListAppendWaitOnEvents", "device %d", device);
  return DEVBUF_OK;
}

static int lz_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  ze_event_handle_t raw = NULL;
  ze_result_t r;
  int rc = lz_event_get(st, device, event, 1, "event_synchronize", &d, &e, &raw, err);
  if (rc != DEVBUF_OK) return rc;
  if (e != NULL && !atomic_load(&e->recorded)) return DEVBUF_OK;
  r = st->api.p_zeEventHostSynchronize(raw, UINT64_MAX);
  if (r != ZE_RESULT_SUCCESS)
    return lz_fail(err, r, "zeEventHostSynchronize", "device %d", device);
  return DEVBUF_OK;
}

static int lz_event_query(void *state, int device, void *event, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_event *e = NULL;
  ze_event_handle_t raw = NULL;
  ze_result_t r;
  int rc = lz_event_get(st, device, event, 1, "event_query", &d, &e, &raw, err);
  if (rc != DEVBUF_OK) return rc;
  if (e != NULL && !atomic_load(&e->recorded)) return DEVBUF_OK;
  r = st->api.p_zeEventQueryStatus(raw);
  if (r == ZE_RESULT_SUCCESS) return DEVBUF_OK;
  if (r == ZE_RESULT_NOT_READY) return DEVBUF_EBUSY;
  return lz_fail(err, r, "zeEventQueryStatus", "device %d", device);
}

/* ---- device_info ------------------------------------------------------ */

static int lz_device_info_export(void *state, const char *identifier, int device, void *event,
                                 void *stream, uint32_t flags, void *out, size_t capacity,
                                 size_t *size, devbuf_error *err) {
  lz_state *st = state;
  lz_device *d = NULL;
  lz_stream *s = NULL;
  ze_event_handle_t raw = NULL;
  int rc = gpu_info_export_check(state, identifier, device, flags, out, capacity, size, err);
  if (rc == DEVBUF_OK) rc = lz_device_get(st, device, &d, err);
  if (rc != DEVBUF_OK) return rc;
  /* Consumers get raw Level Zero handles, usable without devbuf. */
  rc = lz_stream_get(st, d, device, stream, &s, "device_info_export", err);
  if (rc != DEVBUF_OK) return rc;
  if (event != NULL) {
    lz_event *own = NULL;
    lz_device *d2 = NULL;
    rc = lz_event_get(st, device, event, 1, "device_info_export", &d2, &own, &raw, err);
    if (rc != DEVBUF_OK) return rc;
    /* An event never recorded has nothing to wait for. */
    if (own != NULL && !atomic_load(&own->recorded)) raw = NULL;
  }
  /* event: ze_event_handle_t, or NULL; stream: ze_command_list_handle_t (immediate) */
  devbuf_device_info_write(out, size, device, flags, raw, s->list);
  return DEVBUF_OK;
}

/* ---- the table --------------------------------------------------------- */

static const char *const lz_identifiers[] = {LZ_IDENTIFIER, NULL};

static const devbuf_plugin_table lz_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "level_zero",
    .version = LZ_PLUGIN_VERSION,
    .description = "oneAPI Level Zero devices (libze_loader.so.1, loaded at first use)",
    .identifiers = lz_identifiers,
    .init = lz_init,
    .shutdown = lz_shutdown,
    .device_count = gpu_device_count,
    .device_props = lz_device_props,
    .mem_alloc = lz_mem_alloc,
    .mem_free = lz_mem_free,
    .copy_h2d = lz_copy_h2d,
    .copy_d2h = lz_copy_d2h,
    .copy_d2d = lz_copy_d2d,
    .stream_create = lz_stream_create,
    .stream_destroy = lz_stream_destroy,
    .stream_synchronize = lz_stream_synchronize,
    .event_create = lz_event_create,
    .event_destroy = lz_event_destroy,
    .event_record = lz_event_record,
    .stream_wait_event = lz_stream_wait_event,
    .event_synchronize = lz_event_synchronize,
    .event_query = lz_event_query,
    .device_info_export = lz_device_info_export,
    .device_info_import = gpu_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = lz_host_alloc,
    .host_free = lz_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &lz_table; }
