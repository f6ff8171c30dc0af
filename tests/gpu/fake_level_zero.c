/* A fake Level Zero loader (the subset of libze_loader.so.1 that
 * devbuf.level_zero uses), so that the plugin runs on machines without an
 * Intel GPU; Debian's loader ships no null driver (there is no libze_null):
 *
 *     DEVBUF_LEVEL_ZERO_LIBRARY=.../libdevbuf_fake_level_zero.so
 *
 * Two drivers with one device each (FAKE_ZE_DRIVERS changes the number), so
 * the flat device numbering and the context per driver are exercised.
 * Commands run synchronously when appended. Strict where the plugin could
 * be wrong: every handle carries a magic number and its owner is checked
 * (a context of another driver, a device of another context), descriptors
 * must have the right stype, an event index may not be used twice, an event
 * pool with live events may not be destroyed, copies that touch device
 * memory must stay inside one allocation, and a host wait on an event that
 * nothing will signal fails at once (ZE_RESULT_NOT_READY) instead of
 * hanging. Queue group 0 is copy-only, group 1 compute+copy.
 * Inspection for tests: fake_ze_live_objects(). */
#include <level_zero/ze_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_common.h"

#define FAKE_MAX_DRIVERS 4
#define FAKE_DEVICE_MEM ((uint64_t)8 << 30)

enum {
  M_DRIVER = 0x44525652,
  M_DEVICE = 0x44455643,
  M_CONTEXT = 0x43545854,
  M_LIST = 0x4c495354,
  M_POOL = 0x504f4f4c,
  M_EVENT = 0x45564e54
};

struct _ze_driver_handle_t {
  unsigned magic;
  int index;
};
struct _ze_device_handle_t {
  unsigned magic;
  int driver;
};
struct _ze_context_handle_t {
  unsigned magic;
  int driver;
};
struct _ze_command_list_handle_t {
  unsigned magic;
  struct _ze_context_handle_t *ctx;
};
struct _ze_event_pool_handle_t {
  unsigned magic;
  struct _ze_context_handle_t *ctx;
  uint32_t count;
  int host_visible;
  unsigned char *used;
  int live;
};
struct _ze_event_handle_t {
  unsigned magic;
  struct _ze_event_pool_handle_t *pool;
  uint32_t index;
  int signaled;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init, g_ndrivers = 2;
static struct _ze_driver_handle_t g_drivers[FAKE_MAX_DRIVERS];
static struct _ze_device_handle_t g_devices[FAKE_MAX_DRIVERS];

/* Contexts, lists, pools, events and allocations alive. */
FAKE_EXPORT long fake_ze_live_objects(void);
long fake_ze_live_objects(void) { return fake_live_count(); }

static void live(int delta) { fake_live_add(delta); }

#define NEED_INIT() \
  if (!g_init) return ZE_RESULT_ERROR_UNINITIALIZED
#define NEED(h, m) \
  if ((h) == NULL || (h)->magic != (m)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE

ze_result_t ZE_APICALL zeInit(ze_init_flags_t flags) {
  const char *n = getenv("FAKE_ZE_DRIVERS");
  (void)flags;
  pthread_mutex_lock(&g_lock);
  if (!g_init) {
    g_ndrivers = n && n[0] ? atoi(n) : 2;
    if (g_ndrivers < 0) g_ndrivers = 0;
    if (g_ndrivers > FAKE_MAX_DRIVERS) g_ndrivers = FAKE_MAX_DRIVERS;
    for (int i = 0; i < FAKE_MAX_DRIVERS; i++) {
      g_drivers[i].magic = M_DRIVER;
      g_drivers[i].index = i;
      g_devices[i].magic = M_DEVICE;
      g_devices[i].driver = i;
    }
    g_init = 1;
  }
  pthread_mutex_unlock(&g_lock);
  return g_ndrivers ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_UNINITIALIZED;
}

ze_result_t ZE_APICALL zeDriverGet(uint32_t *pCount, ze_driver_handle_t *phDrivers) {
  NEED_INIT();
  if (pCount == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (phDrivers == NULL || *pCount == 0) {
    *pCount = (uint32_t)g_ndrivers;
    return ZE_RESULT_SUCCESS;
  }
  if (*pCount > (uint32_t)g_ndrivers) *pCount = (uint32_t)g_ndrivers;
  for (uint32_t i = 0; i < *pCount; i++) phDrivers[i] = &g_drivers[i];
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeDeviceGet(ze_driver_handle_t hDriver, uint32_t *pCount,
                                   ze_device_handle_t *phDevices) {
  NEED_INIT();
  NEED(hDriver, M_DRIVER);
  if (pCount == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (phDevices == NULL || *pCount == 0) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  *pCount = 1;
  phDevices[0] = &g_devices[hDriver->index];
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeDeviceGetProperties(ze_device_handle_t hDevice,
                                             ze_device_properties_t *p) {
  NEED_INIT();
  NEED(hDevice, M_DEVICE);
  if (p == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (p->stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0x8086;
  p->deviceId = 0x0bd5;
  snprintf(p->name, sizeof p->name, "Fake Level Zero Device %d", hDevice->driver);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeDeviceGetMemoryProperties(ze_device_handle_t hDevice, uint32_t *pCount,
                                                   ze_device_memory_properties_t *p) {
  NEED_INIT();
  NEED(hDevice, M_DEVICE);
  if (pCount == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (p == NULL || *pCount == 0) {
    *pCount = 1;
    return ZE_RESULT_SUCCESS;
  }
  if (p[0].stype != ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *pCount = 1;
  p[0].totalSize = FAKE_DEVICE_MEM;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeDeviceGetCommandQueueGroupProperties(
    ze_device_handle_t hDevice, uint32_t *pCount, ze_command_queue_group_properties_t *p) {
  NEED_INIT();
  NEED(hDevice, M_DEVICE);
  if (pCount == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (p == NULL || *pCount == 0) {
    *pCount = 2;
    return ZE_RESULT_SUCCESS;
  }
  for (uint32_t i = 0; i < *pCount && i < 2; i++) {
    if (p[i].stype != ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES)
      return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    p[i].flags = i == 0 ? ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY
                        : ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE |
                              ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    p[i].numQueues = 1;
  }
  if (*pCount > 2) *pCount = 2;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeContextCreate(ze_driver_handle_t hDriver, const ze_context_desc_t *desc,
                                       ze_context_handle_t *phContext) {
  struct _ze_context_handle_t *c;
  NEED_INIT();
  NEED(hDriver, M_DRIVER);
  if (desc == NULL || phContext == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_CONTEXT_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  c = calloc(1, sizeof *c);
  if (c == NULL) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  c->magic = M_CONTEXT;
  c->driver = hDriver->index;
  *phContext = c;
  live(1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeContextDestroy(ze_context_handle_t hContext) {
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  hContext->magic = 0;
  free(hContext);
  live(-1);
  return ZE_RESULT_SUCCESS;
}

/* ---- memory ------------------------------------------------------------ */

/* Memory belongs to its context: freeing it through another one fails. */
static ze_result_t track(struct _ze_context_handle_t *ctx, size_t size, size_t alignment,
                         int host, void **out) {
  switch (fake_track(size, alignment, (intptr_t)ctx, 0, host, out)) {
    case FAKE_OK:
      return ZE_RESULT_SUCCESS;
    case FAKE_BAD_SIZE:
      return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    case FAKE_BAD_ALIGNMENT:
      return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
    default:
      return size >= FAKE_OOM_BYTES && !host ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY
                                             : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
}

ze_result_t ZE_APICALL zeMemAllocDevice(ze_context_handle_t hContext,
                                        const ze_device_mem_alloc_desc_t *desc, size_t size,
                                        size_t alignment, ze_device_handle_t hDevice,
                                        void **pptr) {
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  NEED(hDevice, M_DEVICE);
  if (desc == NULL || pptr == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (hDevice->driver != hContext->driver) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return track(hContext, size, alignment, 0, pptr);
}

ze_result_t ZE_APICALL zeMemAllocHost(ze_context_handle_t hContext,
                                      const ze_host_mem_alloc_desc_t *desc, size_t size,
                                      size_t alignment, void **pptr) {
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  if (desc == NULL || pptr == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return track(hContext, size, alignment, 1, pptr);
}

ze_result_t ZE_APICALL zeMemFree(ze_context_handle_t hContext, void *ptr) {
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  return fake_untrack(ptr, 0, FAKE_ANY_KIND, (intptr_t)hContext) ? ZE_RESULT_SUCCESS
                                                                 : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

/* A pointer that starts in a device allocation must stay inside it. */
static int range_ok(uintptr_t p, size_t n) { return fake_range_ok(p, n); }

/* ---- command lists ------------------------------------------------------- */

ze_result_t ZE_APICALL zeCommandListCreateImmediate(ze_context_handle_t hContext,
                                                    ze_device_handle_t hDevice,
                                                    const ze_command_queue_desc_t *desc,
                                                    ze_command_list_handle_t *phList) {
  struct _ze_command_list_handle_t *l;
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  NEED(hDevice, M_DEVICE);
  if (desc == NULL || phList == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (hDevice->driver != hContext->driver) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  /* The plugin must pick the compute group (1), not the copy-only one. */
  if (desc->ordinal != 1 || desc->index != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  l = calloc(1, sizeof *l);
  if (l == NULL) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  l->magic = M_LIST;
  l->ctx = hContext;
  *phList = l;
  live(1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeCommandListDestroy(ze_command_list_handle_t hList) {
  NEED_INIT();
  NEED(hList, M_LIST);
  hList->magic = 0;
  free(hList);
  live(-1);
  return ZE_RESULT_SUCCESS;
}

static ze_result_t check_waits(uint32_t n, ze_event_handle_t *events) {
  if (n > 0 && events == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (uint32_t i = 0; i < n; i++) NEED(events[i], M_EVENT);
  return ZE_RESULT_SUCCESS;
}

static ze_result_t check_signal(ze_command_list_handle_t l, ze_event_handle_t e) {
  if (e == NULL) return ZE_RESULT_SUCCESS;
  NEED(e, M_EVENT);
  if (e->pool->ctx != l->ctx) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeCommandListAppendMemoryCopy(ze_command_list_handle_t hList, void *dst,
                                                     const void *src, size_t size,
                                                     ze_event_handle_t hSignal, uint32_t nWait,
                                                     ze_event_handle_t *phWait) {
  ze_result_t r;
  NEED_INIT();
  NEED(hList, M_LIST);
  if ((r = check_waits(nWait, phWait)) != ZE_RESULT_SUCCESS) return r;
  if ((r = check_signal(hList, hSignal)) != ZE_RESULT_SUCCESS) return r;
  if (dst == NULL || src == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (!range_ok((uintptr_t)dst, size) || !range_ok((uintptr_t)src, size))
    return ZE_RESULT_ERROR_INVALID_SIZE;
  memmove(dst, src, size);
  if (hSignal) hSignal->signaled = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeCommandListAppendBarrier(ze_command_list_handle_t hList,
                                                  ze_event_handle_t hSignal, uint32_t nWait,
                                                  ze_event_handle_t *phWait) {
  ze_result_t r;
  NEED_INIT();
  NEED(hList, M_LIST);
  if ((r = check_waits(nWait, phWait)) != ZE_RESULT_SUCCESS) return r;
  if ((r = check_signal(hList, hSignal)) != ZE_RESULT_SUCCESS) return r;
  if (hSignal) hSignal->signaled = 1;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeCommandListAppendWaitOnEvents(ze_command_list_handle_t hList,
                                                       uint32_t n, ze_event_handle_t *phEvents) {
  NEED_INIT();
  NEED(hList, M_LIST);
  if (n == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  return check_waits(n, phEvents);
}

/* ---- events ----------------------------------------------------------------- */

ze_result_t ZE_APICALL zeEventPoolCreate(ze_context_handle_t hContext,
                                         const ze_event_pool_desc_t *desc, uint32_t nDevices,
                                         ze_device_handle_t *phDevices,
                                         ze_event_pool_handle_t *phPool) {
  struct _ze_event_pool_handle_t *p;
  NEED_INIT();
  NEED(hContext, M_CONTEXT);
  if (desc == NULL || phPool == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_EVENT_POOL_DESC || desc->count == 0)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (nDevices > 0 && phDevices == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p = calloc(1, sizeof *p);
  if (p == NULL) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  p->used = calloc(desc->count, 1);
  if (p->used == NULL) {
    free(p);
    return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  }
  p->magic = M_POOL;
  p->ctx = hContext;
  p->count = desc->count;
  p->host_visible = (desc->flags & ZE_EVENT_POOL_FLAG_HOST_VISIBLE) != 0;
  *phPool = p;
  live(1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeEventPoolDestroy(ze_event_pool_handle_t hPool) {
  NEED_INIT();
  NEED(hPool, M_POOL);
  if (hPool->live != 0) return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
  hPool->magic = 0;
  free(hPool->used);
  free(hPool);
  live(-1);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeEventCreate(ze_event_pool_handle_t hPool, const ze_event_desc_t *desc,
                                     ze_event_handle_t *phEvent) {
  struct _ze_event_handle_t *e;
  ze_result_t r = ZE_RESULT_SUCCESS;
  NEED_INIT();
  NEED(hPool, M_POOL);
  if (desc == NULL || phEvent == NULL) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (desc->stype != ZE_STRUCTURE_TYPE_EVENT_DESC || desc->index >= hPool->count)
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  e = calloc(1, sizeof *e);
  if (e == NULL) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  pthread_mutex_lock(&g_lock);
  if (hPool->used[desc->index])
    r = ZE_RESULT_ERROR_INVALID_ARGUMENT; /* index already has a live event */
  else {
    hPool->used[desc->index] = 1;
    hPool->live++;
  }
  pthread_mutex_unlock(&g_lock);
  if (r != ZE_RESULT_SUCCESS) {
    free(e);
    return r;
  }
  live(1);
  e->magic = M_EVENT;
  e->pool = hPool;
  e->index = desc->index;
  *phEvent = e;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeEventDestroy(ze_event_handle_t hEvent) {
  NEED_INIT();
  NEED(hEvent, M_EVENT);
  pthread_mutex_lock(&g_lock);
  hEvent->pool->used[hEvent->index] = 0;
  hEvent->pool->live--;
  pthread_mutex_unlock(&g_lock);
  live(-1);
  hEvent->magic = 0;
  free(hEvent);
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL zeEventHostSynchronize(ze_event_handle_t hEvent, uint64_t timeout) {
  NEED_INIT();
  NEED(hEvent, M_EVENT);
  (void)timeout;
  if (!hEvent->pool->host_visible) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  /* Work runs when appended: an unsignalled event would never fire. */
  return hEvent->signaled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t ZE_APICALL zeEventQueryStatus(ze_event_handle_t hEvent) {
  NEED_INIT();
  NEED(hEvent, M_EVENT);
  return hEvent->signaled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

ze_result_t ZE_APICALL zeEventHostReset(ze_event_handle_t hEvent) {
  NEED_INIT();
  NEED(hEvent, M_EVENT);
  hEvent->signaled = 0;
  return ZE_RESULT_SUCCESS;
}
