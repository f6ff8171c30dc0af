/* A fake HIP runtime (the subset of libamdhip64 that devbuf.hip uses), so
 * that the plugin's device paths run on machines without an AMD GPU:
 *
 *     DEVBUF_HIP_LIBRARY=.../libdevbuf_fake_hip.so
 *
 * Two devices; memory in host RAM; copies run synchronously. Strict where
 * the plugin could be wrong: the current device is per thread and every
 * stream, event and allocation remembers the device that was current when it
 * was made; using a stream while another device is current fails
 * (hipErrorInvalidHandle), so a missing hipSetDevice shows. Copies must stay
 * inside one live allocation; handles carry magic numbers; pooled memory
 * must be freed with hipFreeAsync. Inspection for tests:
 * fake_hip_live_allocations(), fake_hip_pool_allocations(),
 * fake_hip_current_device(). FAKE_HIP_NO_POOLS=1 turns pool support off. */
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_common.h"

#define FAKE_DEVICES 2
#define FAKE_TOTAL_MEM ((size_t)32 << 30)
#define M_STREAM 0x5354524du
#define M_EVENT 0x4556454eu
#define M_POOL 0x504f4f4cu

struct ihipStream_t {
  fake_handle h;
};
struct ihipEvent_t {
  fake_handle h;
};
struct ihipMemPoolHandle_t {
  fake_handle h;
  uint64_t threshold;
};

static int g_init;
static _Thread_local int t_device; /* HIP's default: device 0 */

FAKE_EXPORT long fake_hip_live_allocations(void);
FAKE_EXPORT long fake_hip_pool_allocations(void);
FAKE_EXPORT int fake_hip_current_device(void);
long fake_hip_live_allocations(void) { return fake_live_count(); }
long fake_hip_pool_allocations(void) { return fake_pool_count(); }
int fake_hip_current_device(void) { return t_device; }

#define NEED_INIT() \
  if (!g_init) return hipErrorNotInitialized

static const fake_error g_errors[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorNotReady, "hipErrorNotReady", "device not ready"},
};

/* HIP answers unknown codes with a string, never NULL. */
const char *hipGetErrorName(hipError_t e) {
  const fake_error *f = fake_error_find(g_errors, sizeof g_errors / sizeof *g_errors, e);
  return f ? f->name : "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t e) {
  const fake_error *f = fake_error_find(g_errors, sizeof g_errors / sizeof *g_errors, e);
  return f ? f->text : "unknown error";
}

hipError_t hipInit(unsigned int flags) {
  if (flags != 0) return hipErrorInvalidValue;
  g_init = 1;
  return hipSuccess;
}

hipError_t hipDriverGetVersion(int *v) {
  *v = 50221153;
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int *count) {
  NEED_INIT();
  *count = FAKE_DEVICES;
  return hipSuccess;
}

hipError_t hipGetDevice(int *d) {
  NEED_INIT();
  *d = t_device;
  return hipSuccess;
}

hipError_t hipSetDevice(int d) {
  NEED_INIT();
  if (d < 0 || d >= FAKE_DEVICES) return hipErrorInvalidDevice;
  t_device = d;
  return hipSuccess;
}

hipError_t hipDeviceGet(hipDevice_t *device, int ordinal) {
  NEED_INIT();
  if (ordinal < 0 || ordinal >= FAKE_DEVICES) return hipErrorInvalidDevice;
  *device = ordinal;
  return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device) {
  NEED_INIT();
  if (device < 0 || device >= FAKE_DEVICES) return hipErrorInvalidDevice;
  if (name == NULL || len <= 0) return hipErrorInvalidValue;
  strncpy(name, "Fake HIP Device", (size_t)len - 1);
  name[len - 1] = '\0';
  return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t device) {
  NEED_INIT();
  if (device < 0 || device >= FAKE_DEVICES) return hipErrorInvalidDevice;
  *bytes = FAKE_TOTAL_MEM;
  return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int device) {
  NEED_INIT();
  if (device < 0 || device >= FAKE_DEVICES) return hipErrorInvalidDevice;
  if (attr == hipDeviceAttributeMemoryPoolsSupported) {
    const char *np = getenv("FAKE_HIP_NO_POOLS");
    *pi = !(np && np[0] == '1');
    return hipSuccess;
  }
  if (attr == hipDeviceAttributePageableMemoryAccess) {
    *pi = 0;
    return hipSuccess;
  }
  return hipErrorInvalidValue;
}

hipError_t hipMemGetInfo(size_t *free_b, size_t *total) {
  NEED_INIT();
  *free_b = FAKE_TOTAL_MEM / 4 * (size_t)(t_device + 1); /* tells the devices apart */
  *total = FAKE_TOTAL_MEM;
  return hipSuccess;
}

/* ---- memory -------------------------------------------------------------- */

/* Device memory belongs to the device current when it was made, and must
 * be freed and copied with that device current; host memory to none (-1). */
static hipError_t track(size_t size, int pooled, int host, void **out) {
  int why = fake_track(size, 256, host ? -1 : t_device, pooled, host, out);
  return why == FAKE_OK ? hipSuccess
         : why == FAKE_NO_MEMORY ? hipErrorOutOfMemory : hipErrorInvalidValue;
}

static hipError_t untrack(void *p, int pooled, int host) {
  return fake_untrack(p, pooled, host, host ? -1 : t_device) ? hipSuccess : hipErrorInvalidValue;
}

static int inside(uintptr_t p, size_t n) { return fake_inside(p, n, 0, t_device); }

static hipError_t check_stream(hipStream_t s) {
  if (s == NULL) return hipSuccess;
  if (!fake_handle_is(s, M_STREAM) || s->h.device != t_device) return hipErrorInvalidHandle;
  return hipSuccess;
}

hipError_t hipMalloc(void **ptr, size_t size) {
  NEED_INIT();
  return track(size, 0, 0, ptr);
}

hipError_t hipFree(void *ptr) {
  NEED_INIT();
  return untrack(ptr, 0, 0);
}

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
  NEED_INIT();
  if (flags & ~0xfu) return hipErrorInvalidValue;
  return track(size, 0, 1, ptr);
}

hipError_t hipHostFree(void *ptr) {
  NEED_INIT();
  return untrack(ptr, 0, 1);
}

hipError_t hipMemPoolCreate(hipMemPool_t *pool, const hipMemPoolProps *props) {
  struct ihipMemPoolHandle_t *p;
  NEED_INIT();
  if (props == NULL || props->allocType != hipMemAllocationTypePinned ||
      props->location.type != hipMemLocationTypeDevice || props->location.id < 0 ||
      props->location.id >= FAKE_DEVICES)
    return hipErrorInvalidValue;
  p = fake_handle_new(sizeof *p, M_POOL, props->location.id);
  if (p == NULL) return hipErrorOutOfMemory;
  *pool = p;
  return hipSuccess;
}

hipError_t hipMemPoolDestroy(hipMemPool_t pool) {
  NEED_INIT();
  if (!fake_handle_is(pool, M_POOL)) return hipErrorInvalidValue;
  fake_handle_free(pool);
  return hipSuccess;
}

hipError_t hipMemPoolSetAttribute(hipMemPool_t pool, hipMemPoolAttr attr, void *value) {
  NEED_INIT();
  if (!fake_handle_is(pool, M_POOL)) return hipErrorInvalidValue;
  if (attr != hipMemPoolAttrReleaseThreshold) return hipErrorInvalidValue;
  pool->threshold = *(uint64_t *)value;
  return hipSuccess;
}

hipError_t hipMallocFromPoolAsync(void **dev_ptr, size_t size, hipMemPool_t pool,
                                  hipStream_t stream) {
  hipError_t r;
  NEED_INIT();
  if (!fake_handle_is(pool, M_POOL) || pool->h.device != t_device)
    return hipErrorInvalidValue;
  if ((r = check_stream(stream)) != hipSuccess) return r;
  return track(size, 1, 0, dev_ptr);
}

hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_stream(stream)) != hipSuccess) return r;
  return untrack(dev_ptr, 1, 0);
}

/* ---- copies ---------------------------------------------------------------- */

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t n, hipStream_t s) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_stream(s)) != hipSuccess) return r;
  if (!inside((uintptr_t)dst, n)) return hipErrorInvalidValue;
  memcpy(dst, src, n);
  return hipSuccess;
}

hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t n, hipStream_t s) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_stream(s)) != hipSuccess) return r;
  if (!inside((uintptr_t)src, n)) return hipErrorInvalidValue;
  memcpy(dst, src, n);
  return hipSuccess;
}

hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n, hipStream_t s) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_stream(s)) != hipSuccess) return r;
  if (!inside((uintptr_t)dst, n) || !inside((uintptr_t)src, n)) return hipErrorInvalidValue;
  memmove(dst, src, n);
  return hipSuccess;
}

/* ---- streams and events ------------------------------------------------------ */

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
  struct ihipStream_t *s;
  NEED_INIT();
  if (flags & ~(unsigned)hipStreamNonBlocking) return hipErrorInvalidValue;
  s = fake_handle_new(sizeof *s, M_STREAM, t_device);
  if (s == NULL) return hipErrorOutOfMemory;
  *stream = s;
  return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  NEED_INIT();
  if (!fake_handle_is(stream, M_STREAM)) return hipErrorInvalidHandle;
  fake_handle_free(stream);
  return hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  NEED_INIT();
  return check_stream(stream);
}

static hipError_t check_event(hipEvent_t e) {
  if (!fake_handle_is(e, M_EVENT)) return hipErrorInvalidHandle;
  return hipSuccess;
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
  hipError_t r;
  NEED_INIT();
  if (flags != 0) return hipErrorInvalidValue;
  if ((r = check_stream(stream)) != hipSuccess) return r;
  return check_event(event);
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags) {
  struct ihipEvent_t *e;
  NEED_INIT();
  if (flags & ~0xfu) return hipErrorInvalidValue;
  e = fake_handle_new(sizeof *e, M_EVENT, t_device);
  if (e == NULL) return hipErrorOutOfMemory;
  *event = e;
  return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t event) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_event(event)) != hipSuccess) return r;
  fake_handle_free(event);
  return hipSuccess;
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  hipError_t r;
  NEED_INIT();
  if ((r = check_event(event)) != hipSuccess) return r;
  if ((r = check_stream(stream)) != hipSuccess) return r;
  return event->h.device == t_device ? hipSuccess : hipErrorInvalidHandle;
}

hipError_t hipEventQuery(hipEvent_t event) {
  NEED_INIT();
  return check_event(event);
}

hipError_t hipEventSynchronize(hipEvent_t event) {
  NEED_INIT();
  return check_event(event);
}
