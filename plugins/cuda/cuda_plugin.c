/* devbuf.cuda: NVIDIA GPUs through the CUDA driver API.
 *
 * libcuda.so.1 is dlopen'd at the first call that needs a device (never in
 * the entry symbol or init), so the plugin builds wherever cuda.h is and loads
 * on machines without a driver. cuda.h is used only for types, constants and
 * the names of the versioned entry points (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2 and so on; the X-macros below resolve exactly the symbol a
 * program compiled against the same header would link).
 *
 * Each device uses its primary context, retained at the first use of that
 * device and made current around every driver call (and restored after), so
 * any thread may call any slot. Allocation is stream-ordered from a pool the
 * plugin creates per device when the driver supports memory pools, with a
 * release threshold that keeps freed memory in the pool; otherwise it falls
 * back to cuMemAlloc/cuMemFree. See docs/devices/cuda.md. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"
#include "gpu_common.h"

#define CUDA_PLUGIN_VERSION "0.1.0"
#define CUDA_IDENTIFIER "devbuf.cuda"
/* cuMemAlloc and the pool allocator return at least 256-byte aligned memory. */
#define CUDA_NATIVE_ALIGNMENT 256u

/* Entry points the plugin cannot work without. */
#define CUDA_REQUIRED(X)          \
  X(cuInit)                       \
  X(cuDriverGetVersion)           \
  X(cuGetErrorName)               \
  X(cuGetErrorString)             \
  X(cuDeviceGetCount)             \
  X(cuDeviceGet)                  \
  X(cuDeviceGetName)              \
  X(cuDeviceTotalMem)             \
  X(cuDeviceGetAttribute)         \
  X(cuDevicePrimaryCtxRetain)     \
  X(cuDevicePrimaryCtxRelease)    \
  X(cuDevicePrimaryCtxGetState)   \
  X(cuCtxGetCurrent)              \
  X(cuCtxPushCurrent)             \
  X(cuCtxPopCurrent)              \
  X(cuMemGetInfo)                 \
  X(cuMemAlloc)                   \
  X(cuMemFree)                    \
  X(cuMemHostAlloc)               \
  X(cuMemFreeHost)                \
  X(cuMemcpyHtoDAsync)            \
  X(cuMemcpyDtoHAsync)            \
  X(cuMemcpyDtoDAsync)            \
  X(cuStreamCreate)               \
  X(cuStreamDestroy)              \
  X(cuStreamSynchronize)          \
  X(cuStreamWaitEvent)            \
  X(cuEventCreate)                \
  X(cuEventDestroy)               \
  X(cuEventRecord)                \
  X(cuEventQuery)                 \
  X(cuEventSynchronize)

/* Stream-ordered allocation (CUDA 11.2+): used when present and supported. */
#define CUDA_OPTIONAL(X)          \
  X(cuMemAllocFromPoolAsync)      \
  X(cuMemFreeAsync)               \
  X(cuMemPoolCreate)              \
  X(cuMemPoolDestroy)             \
  X(cuMemPoolSetAttribute)

/* One function pointer per entry point, typed from cuda.h's own declaration
 * (so a signature mismatch is a compile error). `p_##name` pastes the
 * unexpanded name; `&name` and GPU_STR(name) expand to the versioned symbol. */
#define CUDA_FIELD(name) __typeof__(&name) p_##name;
typedef struct cuda_api {
  CUDA_REQUIRED(CUDA_FIELD)
  CUDA_OPTIONAL(CUDA_FIELD)
} cuda_api;
#undef CUDA_FIELD

#define CUDA_SYMBOL(name) {GPU_STR(name), offsetof(cuda_api, p_##name)},
static const gpu_symbol cuda_required[] = {CUDA_REQUIRED(CUDA_SYMBOL)};
static const gpu_symbol cuda_optional[] = {CUDA_OPTIONAL(CUDA_SYMBOL)};
#undef CUDA_SYMBOL

typedef struct cuda_device {
  CUdevice dev;
  atomic_int ready;   /* 1 once ctx (and pool) are set up */
  CUcontext ctx;      /* retained primary context */
  CUmemoryPool pool;  /* the plugin's pool, or NULL: cuMemAlloc/cuMemFree */
} cuda_device;

typedef struct cuda_state {
  gpu_lazy lazy; /* first: the driver, tried once; lazy.count devices */
  cuda_api api;
  int have_pool_api;
  int driver_version;
  cuda_device *devs;
  gpu_align_table align; /* over-aligned allocations */
} cuda_state;

typedef CUresult cuda_result;

/* ---- errors ----------------------------------------------------------- */

static const gpu_status_map cuda_status[] = {
    {CUDA_ERROR_OUT_OF_MEMORY, DEVBUF_ENOMEM},   {CUDA_ERROR_NO_DEVICE, DEVBUF_ENODEV},
    {CUDA_ERROR_INVALID_DEVICE, DEVBUF_ENODEV},  {CUDA_ERROR_INVALID_VALUE, DEVBUF_EINVAL},
    {CUDA_ERROR_INVALID_HANDLE, DEVBUF_EINVAL},  {CUDA_ERROR_NOT_READY, DEVBUF_EBUSY},
    {CUDA_ERROR_NOT_SUPPORTED, DEVBUF_ENOTSUP},
};

/* "op: CUDA_ERROR_NAME: driver text (detail)" */
GPU_PRINTF(5, 6)
static int cuda_fail(const cuda_state *st, devbuf_error *err, CUresult r, const char *op,
                     const char *fmt, ...) {
  const char *name = NULL, *text = NULL;
  va_list ap;
  int code;
  if (st->api.p_cuGetErrorName == NULL || st->api.p_cuGetErrorName(r, &name) != CUDA_SUCCESS ||
      name == NULL)
    name = "CUDA_ERROR_UNKNOWN";
  if (st->api.p_cuGetErrorString == NULL ||
      st->api.p_cuGetErrorString(r, &text) != CUDA_SUCCESS || text == NULL)
    text = "unrecognized error code";
  va_start(ap, fmt);
  code = gpu_fail_v(err, gpu_status_lookup(cuda_status, sizeof cuda_status / sizeof *cuda_status, r),
                    (int)r, op, name, text, GPU_DETAIL_PAREN, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- lazy driver set-up ------------------------------------------------ */

/* A failed driver call during set-up: no device, and the driver's words. */
static int cuda_load_failed(cuda_state *st, CUresult r, const char *op) {
  devbuf_error e;
  cuda_fail(st, &e, r, op, NULL);
  return gpu_no_device_err(&st->lazy, &e);
}

static int cuda_load(gpu_lazy *lz) {
  static const char *const defaults[] = {"libcuda.so.1", NULL};
  cuda_state *st = (cuda_state *)lz;
  const char *libname = NULL;
  CUresult r;
  if (!gpu_dlopen(lz, "DEVBUF_CUDA_LIBRARY", defaults, &libname)) return lz->status;
  if (!gpu_dlsym_all(lz, libname, &st->api, sizeof st->api, cuda_required,
                     sizeof cuda_required / sizeof *cuda_required, cuda_optional,
                     sizeof cuda_optional / sizeof *cuda_optional,
                     "driver too old for this plugin"))
    return lz->status;
  st->have_pool_api = st->api.p_cuMemAllocFromPoolAsync && st->api.p_cuMemFreeAsync &&
                      st->api.p_cuMemPoolCreate && st->api.p_cuMemPoolDestroy &&
                      st->api.p_cuMemPoolSetAttribute;
  if ((r = st->api.p_cuInit(0)) != CUDA_SUCCESS) return cuda_load_failed(st, r, "cuInit");
  if (st->api.p_cuDriverGetVersion(&st->driver_version) != CUDA_SUCCESS) st->driver_version = 0;
  if ((r = st->api.p_cuDeviceGetCount(&lz->count)) != CUDA_SUCCESS)
    return cuda_load_failed(st, r, "cuDeviceGetCount");
  if (lz->count <= 0)
    return gpu_no_device(lz, DEVBUF_ENODEV, "cuDeviceGetCount: the driver reports 0 CUDA devices");
  st->devs = calloc((size_t)lz->count, sizeof *st->devs);
  if (st->devs == NULL)
    return gpu_no_device(lz, DEVBUF_ENOMEM, "cuda: out of host memory for the device table");
  for (int i = 0; i < lz->count; i++) {
    r = st->api.p_cuDeviceGet(&st->devs[i].dev, i);
    if (r != CUDA_SUCCESS) {
      devbuf_error e;
      cuda_fail(st, &e, r, "cuDeviceGet", "ordinal %d", i);
      free(st->devs);
      st->devs = NULL;
      return gpu_no_device_err(lz, &e);
    }
  }
  return DEVBUF_OK;
}

/* Set up the device's pool once its context is current. A pool that cannot
 * be made is not an error: allocation falls back to cuMemAlloc. */
static void cuda_make_pool(cuda_state *st, cuda_device *d) {
  int supported = 0;
  const char *off = getenv("DEVBUF_CUDA_NO_POOL");
  CUmemPoolProps props;
  cuuint64_t threshold = UINT64_MAX;
  d->pool = NULL;
  if (!st->have_pool_api || (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0)) return;
  if (st->api.p_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                     d->dev) != CUDA_SUCCESS ||
      !supported)
    return;
  /* A pool of our own rather than the device's default one, so that raising
   * the release threshold does not change how other libraries in the process
   * (CuPy, PyTorch, RMM) see the default pool. */
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = (int)d->dev;
  if (st->api.p_cuMemPoolCreate(&d->pool, &props) != CUDA_SUCCESS) {
    d->pool = NULL;
    return;
  }
  /* Keep freed memory in the pool across synchronizations: this is what
   * makes a pooled allocate+free pair cost a few hundred nanoseconds. */
  if (st->api.p_cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) !=
      CUDA_SUCCESS) {
    st->api.p_cuMemPoolDestroy(d->pool);
    d->pool = NULL;
  }
}

/* First use of a device (under the lazy lock): retain its primary context
 * and make its pool there. */
typedef struct cuda_setup {
  cuda_state *st;
  int device;
} cuda_setup;

static int cuda_device_setup(void *ctx, devbuf_error *err) {
  cuda_setup *a = ctx;
  cuda_state *st = a->st;
  cuda_device *d = &st->devs[a->device];
  CUcontext prev = NULL;
  CUresult r = st->api.p_cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS)
    return cuda_fail(st, err, r, "cuDevicePrimaryCtxRetain", "device %d", a->device);
  r = st->api.p_cuCtxPushCurrent(d->ctx);
  if (r != CUDA_SUCCESS) {
    st->api.p_cuDevicePrimaryCtxRelease(d->dev);
    return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", a->device);
  }
  cuda_make_pool(st, d);
  st->api.p_cuCtxPopCurrent(&prev);
  return DEVBUF_OK;
}

/* Make the device's context current for the duration of a call, restoring
 * the caller's afterwards. */
typedef struct cuda_scope {
  cuda_device *dev;
  int pushed;
} cuda_scope;

static int cuda_enter(cuda_state *st, int device, cuda_scope *scope, devbuf_error *err) {
  CUcontext cur = NULL;
  CUresult r;
  cuda_setup setup = {st, device};
  int rc = gpu_check_device(st ? &st->lazy : NULL, device, err);
  scope->pushed = 0;
  if (rc == DEVBUF_OK) rc = gpu_once(&st->lazy, &st->devs[device].ready, cuda_device_setup, &setup, err);
  if (rc != DEVBUF_OK) return rc;
  scope->dev = &st->devs[device];
  if (st->api.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == scope->dev->ctx) return DEVBUF_OK;
  r = st->api.p_cuCtxPushCurrent(scope->dev->ctx);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", device);
  scope->pushed = 1;
  return DEVBUF_OK;
}

static void cuda_leave(cuda_state *st, cuda_scope *scope) {
  if (scope->pushed) {
    CUcontext popped = NULL;
    st->api.p_cuCtxPopCurrent(&popped);
    scope->pushed = 0;
  }
}

/* ---- lifecycle --------------------------------------------------------- */

static int cuda_init(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no driver call. */
  cuda_state *st = calloc(1, sizeof *st);
  int rc;
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "devbuf.cuda init: out of memory");
  rc = gpu_lazy_init(&st->lazy, CUDA_IDENTIFIER, cuda_load, err);
  if (rc == DEVBUF_OK && !gpu_align_init(&st->align)) {
    gpu_lazy_destroy(&st->lazy);
    rc = devbuf_error_set(err, DEVBUF_EINIT, "devbuf.cuda init: pthread_mutex_init failed");
  }
  if (rc != DEVBUF_OK) {
    free(st);
    return rc;
  }
  *state = st;
  return DEVBUF_OK;
}

static void cuda_shutdown(void *state) {
  cuda_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->lazy.count; i++) {
    cuda_device *d = &st->devs[i];
    if (!atomic_load(&d->ready)) continue;
    if (d->pool != NULL && st->api.p_cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
      CUcontext prev = NULL;
      /* Memory still allocated from the pool keeps it alive in the driver. */
      st->api.p_cuMemPoolDestroy(d->pool);
      st->api.p_cuCtxPopCurrent(&prev);
    }
    st->api.p_cuDevicePrimaryCtxRelease(d->dev);
  }
  free(st->devs);
  gpu_align_destroy(&st->align);
  gpu_lazy_destroy(&st->lazy);
  free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int cuda_device_props(void *state, int device, devbuf_device_props *props,
                             devbuf_error *err) {
  cuda_state *st = state;
  devbuf_device_props p;
  size_t total = 0;
  int pageable = 0, rc, ctx_active = 0;
  unsigned int ctx_flags = 0;
  CUresult r;
  cuda_device *d;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = gpu_check_device(st ? &st->lazy : NULL, device, err);
  if (rc != DEVBUF_OK) return rc;
  d = &st->devs[device];
  memset(&p, 0, sizeof p);
  r = st->api.p_cuDeviceGetName(p.name, (int)sizeof p.name, d->dev);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuDeviceGetName", "device %d", device);
  p.name[sizeof p.name - 1] = '\0';
  r = st->api.p_cuDeviceTotalMem(&total, d->dev);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuDeviceTotalMem", "device %d", device);
  snprintf(p.vendor, sizeof p.vendor, "NVIDIA");
  p.total_memory = total;
  p.flags = DEVBUF_DEVICE_ASYNC;
  if (st->api.p_cuDeviceGetAttribute(&pageable, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
                                     d->dev) == CUDA_SUCCESS &&
      pageable)
    p.flags |= DEVBUF_DEVICE_UNIFIED;
  p.alloc_alignment = CUDA_NATIVE_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_CUDA;
  p.dlpack_device_id = device;
  /* Free memory needs a context. Listing devices must not create one (a
   * primary context costs hundreds of MB per GPU), so it is only reported
   * when the context is already active, in this plugin or elsewhere. */
  if (st->api.p_cuDevicePrimaryCtxGetState(d->dev, &ctx_flags, &ctx_active) == CUDA_SUCCESS &&
      ctx_active) {
    cuda_scope scope;
    if (cuda_enter(st, device, &scope, NULL) == DEVBUF_OK) {
      size_t free_b = 0, total_b = 0;
      if (st->api.p_cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) p.free_memory = free_b;
      cuda_leave(st, &scope);
    }
  }
  return gpu_props_copy_out(props, &p, err);
}

/* ---- memory ------------------------------------------------------------ */

static CUresult cuda_raw_alloc(cuda_state *st, cuda_device *d, CUdeviceptr *p, size_t size,
                               CUstream stream, const char **op) {
  if (d->pool != NULL) {
    *op = "cuMemAllocFromPoolAsync";
    return st->api.p_cuMemAllocFromPoolAsync(p, size, d->pool, stream);
  }
  *op = "cuMemAlloc";
  return st->api.p_cuMemAlloc(p, size);
}

static CUresult cuda_raw_free(cuda_state *st, cuda_device *d, CUdeviceptr p, CUstream stream,
                              const char **op) {
  if (d->pool != NULL) {
    *op = "cuMemFreeAsync";
    return st->api.p_cuMemFreeAsync(p, stream);
  }
  *op = "cuMemFree";
  return st->api.p_cuMemFree(p);
}

static int cuda_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                          void **ptr, devbuf_error *err) {
  cuda_state *st = state;
  cuda_scope scope;
  CUdeviceptr base = 0;
  uintptr_t aligned;
  size_t request;
  const char *op;
  CUresult r;
  int rc = gpu_alloc_request(ptr, size, alignment, CUDA_NATIVE_ALIGNMENT, &request, err);
  if (rc == DEVBUF_OK) rc = cuda_enter(st, device, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = cuda_raw_alloc(st, scope.dev, &base, request, (CUstream)stream, &op);
  if (r != CUDA_SUCCESS) {
    cuda_leave(st, &scope);
    return cuda_fail(st, err, r, op, "%zu bytes on device %d", size, device);
  }
  aligned = gpu_align_up((uintptr_t)base, alignment, CUDA_NATIVE_ALIGNMENT);
  if (aligned != (uintptr_t)base && !gpu_align_remember(&st->align, aligned, (uintptr_t)base)) {
    cuda_raw_free(st, scope.dev, base, (CUstream)stream, &op);
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
  }
  cuda_leave(st, &scope);
  *ptr = (void *)aligned;
  return DEVBUF_OK;
}

static int cuda_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  const char *op = "cuMemFree";
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, ptr != NULL, "mem_free: NULL pointer");
  r = cuda_raw_free(st, scope.dev, gpu_align_forget(&st->align, (uintptr_t)ptr), (CUstream)stream,
                    &op);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, op);
}

static int cuda_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  void *p = NULL;
  if (gpu_check_out(ptr, "host_alloc", "ptr", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(cuda);
  /* PORTABLE: pinned for every context, so any device may use it. */
  r = st->api.p_cuMemHostAlloc(&p, size ? size : 1, CU_MEMHOSTALLOC_PORTABLE);
  if (r == CUDA_SUCCESS) *ptr = p;
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuMemHostAlloc");
}

static int cuda_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, ptr != NULL, "host_free: NULL pointer");
  r = st->api.p_cuMemFreeHost(ptr);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuMemFreeHost");
}

/* ---- copies -------------------------------------------------------------- */

enum { CUDA_H2D, CUDA_D2H, CUDA_D2D };

/* All three directions: the checks are shared, only the driver call differs. */
static int cuda_copy(void *state, int device, int kind, void *dst, size_t dst_offset,
                     const void *src, size_t src_offset, size_t nbytes, void *stream,
                     devbuf_error *err) {
  static const char *const what[] = {"copy_h2d", "copy_d2h", "copy_d2d"};
  static const char *const ops[] = {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                                    "cuMemcpyDtoDAsync"};
  uintptr_t to = 0, from = 0;
  int nothing = 0;
  GPU_SCOPE_BEGIN(cuda);
  rc = gpu_check_copy(what[kind], dst, dst_offset, src, src_offset, nbytes, &to, &from, &nothing,
                      err);
  if (rc != DEVBUF_OK || nothing) {
    cuda_leave(st, &scope);
    return rc;
  }
  if (kind == CUDA_H2D)
    r = st->api.p_cuMemcpyHtoDAsync((CUdeviceptr)to, (const void *)from, nbytes, (CUstream)stream);
  else if (kind == CUDA_D2H)
    r = st->api.p_cuMemcpyDtoHAsync((void *)to, (CUdeviceptr)from, nbytes, (CUstream)stream);
  else
    r = st->api.p_cuMemcpyDtoDAsync((CUdeviceptr)to, (CUdeviceptr)from, nbytes, (CUstream)stream);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, ops[kind]);
}

static int cuda_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                         size_t nbytes, void *stream, devbuf_error *err) {
  return cuda_copy(state, device, CUDA_H2D, dst, dst_offset, src, 0, nbytes, stream, err);
}

static int cuda_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                         size_t nbytes, void *stream, devbuf_error *err) {
  return cuda_copy(state, device, CUDA_D2H, dst, 0, src, src_offset, nbytes, stream, err);
}

static int cuda_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                         size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  return cuda_copy(state, device, CUDA_D2D, dst, dst_offset, src, src_offset, nbytes, stream, err);
}

/* ---- streams ---------------------------------------------------------- */

static int cuda_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  CUstream s = NULL;
  if (gpu_check_out(stream, "stream_create", "stream", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(cuda);
  /* Non-blocking: does not serialise with the legacy default stream, which
   * other libraries' synchronous calls use. */
  r = st->api.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) *stream = s;
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuStreamCreate");
}

static int cuda_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  /* The default stream was never created, so cannot be destroyed. */
  GPU_SCOPE_NEED(cuda, stream != NULL, "stream_destroy: NULL is the default stream");
  r = st->api.p_cuStreamDestroy((CUstream)stream);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuStreamDestroy");
}

static int cuda_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  r = st->api.p_cuStreamSynchronize((CUstream)stream);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuStreamSynchronize");
}

/* ---- events --------------------------------------------------------- */

static int cuda_event_create(void *state, int device, void **event, devbuf_error *err) {
  CUevent e = NULL;
  if (gpu_check_out(event, "event_create", "event", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(cuda);
  /* Timing costs a timestamp write per record; sync events never need it. */
  r = st->api.p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) *event = e;
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuEventCreate");
}

static int cuda_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, event != NULL, "event_destroy: NULL event");
  r = st->api.p_cuEventDestroy((CUevent)event);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuEventDestroy");
}

static int cuda_event_record(void *state, int device, void *event, void *stream,
                             devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, event != NULL, "event_record: NULL event");
  r = st->api.p_cuEventRecord((CUevent)event, (CUstream)stream);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuEventRecord");
}

static int cuda_stream_wait_event(void *state, int device, void *stream, void *event,
                                  devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, event != NULL, "stream_wait_event: NULL event");
  r = st->api.p_cuStreamWaitEvent((CUstream)stream, (CUevent)event, 0);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuStreamWaitEvent");
}

static int cuda_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, event != NULL, "event_synchronize: NULL event");
  r = st->api.p_cuEventSynchronize((CUevent)event);
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuEventSynchronize");
}

static int cuda_event_query(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(cuda);
  GPU_SCOPE_NEED(cuda, event != NULL, "event_query: NULL event");
  r = st->api.p_cuEventQuery((CUevent)event);
  if (r == CUDA_ERROR_NOT_READY) { /* not an error: just not yet */
    cuda_leave(st, &scope);
    return DEVBUF_EBUSY;
  }
  GPU_SCOPE_END(cuda, CUDA_SUCCESS, "cuEventQuery");
}

/* ---- device_info ------------------------------------------------------ */

static int cuda_device_info_export(void *state, const char *identifier, int device, void *event,
                                   void *stream, uint32_t flags, void *out, size_t capacity,
                                   size_t *size, devbuf_error *err) {
  int rc = gpu_info_export_check(state, identifier, device, flags, out, capacity, size, err);
  if (rc != DEVBUF_OK) return rc;
  /* event: a CUevent; stream: a CUstream */
  devbuf_device_info_write(out, size, device, flags, event, stream);
  return DEVBUF_OK;
}

/* ---- the table --------------------------------------------------------- */

static const char *const cuda_identifiers[] = {CUDA_IDENTIFIER, NULL};

static const devbuf_plugin_table cuda_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "cuda",
    .version = CUDA_PLUGIN_VERSION,
    .description = "NVIDIA GPUs through the CUDA driver API (libcuda.so.1, loaded at first use)",
    .identifiers = cuda_identifiers,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .device_count = gpu_device_count,
    .device_props = cuda_device_props,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .device_info_export = cuda_device_info_export,
    .device_info_import = gpu_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &cuda_table; }
