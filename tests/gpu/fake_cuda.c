/* A fake CUDA driver (the subset of libcuda.so.1 that devbuf.cuda uses), so
 * that the plugin's code paths run on machines without a GPU:
 *
 *     DEVBUF_CUDA_LIBRARY=.../libdevbuf_fake_cuda.so
 *
 * "Device" memory is host memory, copies run synchronously. The fake is
 * strict where the real driver is strict and the plugin could get it wrong:
 *  - calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT unless
 *    one is current on the calling thread (the plugin must push its own);
 *  - copies must stay inside one live allocation (offset bugs fail loudly);
 *  - streams, events and pools carry a magic number (stale handles fail);
 *  - memory from the pool must be freed with cuMemFreeAsync, memory from
 *    cuMemAlloc with cuMemFree.
 * Knobs (environment, read by cuInit): FAKE_CUDA_DEVICES (default 2),
 * FAKE_CUDA_INIT_ERROR (a CUresult cuInit returns), FAKE_CUDA_NO_POOLS=1 (read
 * whenever the plugin asks).
 * Inspection for tests: fake_cuda_live_allocations(), fake_cuda_ctx_depth(),
 * fake_cuda_pool_allocations(). */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_common.h"

#define FAKE_MAX_DEVICES 8
#define FAKE_TOTAL_MEM ((size_t)16 << 30)
#define FAKE_MAGIC_STREAM 0x57524541u
#define FAKE_MAGIC_EVENT 0x45564e54u
#define FAKE_MAGIC_POOL 0x504f4f4cu

struct CUctx_st {
  int device;
  int refs;
};
struct CUstream_st {
  fake_handle h;
};
struct CUevent_st {
  fake_handle h;
};
struct CUmemPoolHandle_st {
  fake_handle h;
  uint64_t release_threshold;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_devices = 2;
static struct CUctx_st g_ctx[FAKE_MAX_DEVICES];

static _Thread_local CUcontext t_stack[16];
static _Thread_local int t_depth;

FAKE_EXPORT long fake_cuda_live_allocations(void);
FAKE_EXPORT long fake_cuda_pool_allocations(void);
FAKE_EXPORT int fake_cuda_ctx_depth(void);

long fake_cuda_live_allocations(void) { return fake_live_count(); }
long fake_cuda_pool_allocations(void) { return fake_pool_count(); }
int fake_cuda_ctx_depth(void) { return t_depth; }

static CUcontext current(void) { return t_depth > 0 ? t_stack[t_depth - 1] : NULL; }

#define NEED_INIT() \
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CTX()                                         \
  NEED_INIT();                                             \
  if (current() == NULL) return CUDA_ERROR_INVALID_CONTEXT

/* ---- errors ------------------------------------------------------------ */

static const fake_error g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

/* Unknown codes: NULL and CUDA_ERROR_INVALID_VALUE, as the driver does. */
static CUresult error_entry(CUresult error, int text, const char **pStr) {
  const fake_error *e = fake_error_find(g_errors, sizeof g_errors / sizeof *g_errors, error);
  *pStr = e == NULL ? NULL : text ? e->text : e->name;
  return e == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  return error_entry(error, 0, pStr);
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
  return error_entry(error, 1, pStr);
}

/* ---- init and devices ---------------------------------------------------- */

CUresult CUDAAPI cuInit(unsigned int Flags) {
  const char *e = getenv("FAKE_CUDA_INIT_ERROR");
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (e != NULL && e[0]) return (CUresult)atoi(e);
  pthread_mutex_lock(&g_lock);
  if (!g_initialized) {
    const char *n = getenv("FAKE_CUDA_DEVICES");
    g_devices = n && n[0] ? atoi(n) : 2;
    if (g_devices < 0) g_devices = 0;
    if (g_devices > FAKE_MAX_DEVICES) g_devices = FAKE_MAX_DEVICES;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) g_ctx[i].device = i;
    g_initialized = 1;
  }
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  NEED_INIT();
  *count = g_devices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  NEED_INIT();
  if (ordinal < 0 || ordinal >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

#define NEED_DEV(d) \
  if ((d) < 0 || (d) >= g_devices) return CUDA_ERROR_INVALID_DEVICE

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
  NEED_INIT();
  NEED_DEV(dev);
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  strncpy(name, "Fake CUDA Device", (size_t)len - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
  NEED_INIT();
  NEED_DEV(dev);
  *bytes = FAKE_TOTAL_MEM;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  NEED_INIT();
  NEED_DEV(dev);
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: {
      /* Read on every call: a test may flip it between plugin states. */
      const char *np = getenv("FAKE_CUDA_NO_POOLS");
      *pi = !(np && np[0] == '1');
      return CUDA_SUCCESS;
    }
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      *pi = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

/* ---- contexts ------------------------------------------------------------ */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  NEED_INIT();
  NEED_DEV(dev);
  pthread_mutex_lock(&g_lock);
  g_ctx[dev].refs++;
  pthread_mutex_unlock(&g_lock);
  *pctx = &g_ctx[dev];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  CUresult r = CUDA_SUCCESS;
  NEED_INIT();
  NEED_DEV(dev);
  pthread_mutex_lock(&g_lock);
  if (g_ctx[dev].refs <= 0)
    r = CUDA_ERROR_INVALID_CONTEXT;
  else
    g_ctx[dev].refs--;
  pthread_mutex_unlock(&g_lock);
  return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  NEED_INIT();
  NEED_DEV(dev);
  pthread_mutex_lock(&g_lock);
  *active = g_ctx[dev].refs > 0;
  pthread_mutex_unlock(&g_lock);
  *flags = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  NEED_INIT();
  *pctx = current();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  NEED_INIT();
  if (ctx == NULL || ctx < &g_ctx[0] || ctx >= &g_ctx[FAKE_MAX_DEVICES] || ctx->refs <= 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (t_depth == (int)(sizeof t_stack / sizeof t_stack[0])) return CUDA_ERROR_INVALID_VALUE;
  t_stack[t_depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) {
  NEED_INIT();
  if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_depth--;
  if (pctx) *pctx = t_stack[t_depth];
  return CUDA_SUCCESS;
}

/* ---- memory -------------------------------------------------------------- */

/* The driver aligns to at least 256 bytes; so must the fake. Host memory
 * belongs to no device (-1). */
static CUresult track(size_t size, int pooled, int host, uintptr_t *out) {
  void *p = NULL;
  int why = fake_track(size, 256, host ? -1 : current()->device, pooled, host, &p);
  *out = (uintptr_t)p;
  return why == FAKE_OK ? CUDA_SUCCESS
         : why == FAKE_NO_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

static CUresult untrack(uintptr_t base, int pooled, int host) {
  return fake_untrack((void *)base, pooled, host, FAKE_ANY_OWNER) ? CUDA_SUCCESS
                                                                  : CUDA_ERROR_INVALID_VALUE;
}

/* Is [p, p+n) inside one live allocation (device or host)? */
static int inside(uintptr_t p, size_t n, int host) {
  return fake_inside(p, n, host, FAKE_ANY_OWNER);
}

CUresult CUDAAPI cuMemGetInfo(size_t *free_b, size_t *total) {
  NEED_CTX();
  *total = FAKE_TOTAL_MEM;
  *free_b = FAKE_TOTAL_MEM / 2;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  uintptr_t p;
  CUresult r;
  NEED_CTX();
  r = track(bytesize, 0, 0, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  NEED_CTX();
  return untrack((uintptr_t)dptr, 0, 0);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  uintptr_t p;
  CUresult r;
  NEED_CTX();
  if (Flags & ~0x7u) return CUDA_ERROR_INVALID_VALUE;
  r = track(bytesize, 0, 1, &p);
  if (r == CUDA_SUCCESS) *pp = (void *)p;
  return r;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
  NEED_CTX();
  return untrack((uintptr_t)p, 0, 1);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  struct CUmemPoolHandle_st *p;
  NEED_INIT();
  if (props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
      props->location.id >= g_devices)
    return CUDA_ERROR_INVALID_VALUE;
  p = fake_handle_new(sizeof *p, FAKE_MAGIC_POOL, props->location.id);
  if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *pool = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  NEED_INIT();
  if (!fake_handle_is(pool, FAKE_MAGIC_POOL)) return CUDA_ERROR_INVALID_VALUE;
  fake_handle_free(pool);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  NEED_INIT();
  if (!fake_handle_is(pool, FAKE_MAGIC_POOL)) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
  pool->release_threshold = *(cuuint64_t *)value;
  return CUDA_SUCCESS;
}

static CUresult check_stream(CUstream s) {
  /* The real driver's special handles (DLPack's stream 2 is the per-thread
   * one): accepted, never dereferenced. */
  if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
  if (!fake_handle_is(s, FAKE_MAGIC_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
  if (current() == NULL || s->h.device != current()->device) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream) {
  uintptr_t p;
  CUresult r;
  NEED_CTX();
  if (!fake_handle_is(pool, FAKE_MAGIC_POOL)) return CUDA_ERROR_INVALID_VALUE;
  if ((r = check_stream(hStream)) != CUDA_SUCCESS) return r;
  r = track(bytesize, 1, 0, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

/* Not used by the plugin: bench_cuda's raw baseline (the device's default
 * pool), so that `scripts/gpu-check.sh --fake` runs every path of it. */
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  uintptr_t p;
  CUresult r;
  const char *np = getenv("FAKE_CUDA_NO_POOLS");
  NEED_CTX();
  if (np != NULL && strcmp(np, "1") == 0) return CUDA_ERROR_NOT_SUPPORTED;
  if ((r = check_stream(hStream)) != CUDA_SUCCESS) return r;
  r = track(bytesize, 1, 0, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  CUresult r;
  NEED_CTX();
  if ((r = check_stream(hStream)) != CUDA_SUCCESS) return r;
  return untrack((uintptr_t)dptr, 1, 0);
}

/* ---- copies (synchronous) -------------------------------------------------- */

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  CUresult r;
  NEED_CTX();
  if ((r = check_stream(s)) != CUDA_SUCCESS) return r;
  if (!inside((uintptr_t)dst, n, 0)) return CUDA_ERROR_INVALID_VALUE;
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  CUresult r;
  NEED_CTX();
  if ((r = check_stream(s)) != CUDA_SUCCESS) return r;
  if (!inside((uintptr_t)src, n, 0)) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  CUresult r;
  NEED_CTX();
  if ((r = check_stream(s)) != CUDA_SUCCESS) return r;
  if (!inside((uintptr_t)src, n, 0) || !inside((uintptr_t)dst, n, 0))
    return CUDA_ERROR_INVALID_VALUE;
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  return cuMemcpyDtoHAsync(dst, src, n, NULL);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  return cuMemcpyHtoDAsync(dst, src, n, NULL);
}

/* ---- streams and events ------------------------------------------------------ */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  struct CUstream_st *s;
  NEED_CTX();
  if (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  s = fake_handle_new(sizeof *s, FAKE_MAGIC_STREAM, current()->device);
  if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *phStream = s;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  NEED_CTX();
  if (hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
      !fake_handle_is(hStream, FAKE_MAGIC_STREAM))
    return CUDA_ERROR_INVALID_HANDLE;
  fake_handle_free(hStream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  NEED_CTX();
  return check_stream(hStream);
}

static CUresult check_event(CUevent e) {
  if (!fake_handle_is(e, FAKE_MAGIC_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  CUresult r;
  NEED_CTX();
  if ((r = check_stream(hStream)) != CUDA_SUCCESS) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return check_event(hEvent);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  struct CUevent_st *e;
  NEED_CTX();
  if (Flags & ~0xfu) return CUDA_ERROR_INVALID_VALUE;
  e = fake_handle_new(sizeof *e, FAKE_MAGIC_EVENT, current()->device);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *phEvent = e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  CUresult r;
  NEED_INIT();
  if ((r = check_event(hEvent)) != CUDA_SUCCESS) return r;
  fake_handle_free(hEvent);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  CUresult r;
  NEED_CTX();
  if ((r = check_event(hEvent)) != CUDA_SUCCESS) return r;
  if ((r = check_stream(hStream)) != CUDA_SUCCESS) return r;
  return hEvent->h.device == current()->device ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  NEED_INIT();
  return check_event(hEvent);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  NEED_INIT();
  return check_event(hEvent);
}
